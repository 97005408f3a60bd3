"""PaddleOCR-VL: Qwen2-VL's image blocks, images only.

Prompt layout: ``<|IMAGE_START|> <|IMAGE_PLACEHOLDER|>*N <|IMAGE_END|>``,
start and end being text. vLLM 0.33's processor registers images only (its
position code has a time-scaled video branch nothing reaches), so a video
is refused. The ids sit at the top level, the merge size in `vision_config`.
"""

from ._spec import Family
from .qwen2_vl import read_qwen_images

FAMILY = Family(
    name="paddleocr_vl",
    model_types={"paddleocr_vl": ""},
    # transformers 5's PaddleOCRVLConfig defaults (from PaddlePaddle/PaddleOCR-VL)
    defaults={
        "image_token_id": 100295,
        "vision_start_token_id": 101305,
        "vision_end_token_id": 101306,
        "spatial_merge_size": 2,
    },
    read_config=read_qwen_images,
)
