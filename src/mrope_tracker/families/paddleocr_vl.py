"""PaddleOCR-VL: Qwen2-VL's image blocks, images only.

Prompt layout: ``<|IMAGE_START|> <|IMAGE_PLACEHOLDER|>*N <|IMAGE_END|>``,
start and end being text. vLLM 0.33's processor registers images only (its
position code has a time-scaled video branch nothing reaches), so a video
is refused. The ids sit at the top level, the merge size in `vision_config`.
"""

from ._spec import Family
from .qwen2_vl import TRANSFORMERS_VL_BATCH, read_qwen_images


def config_dict(config) -> dict:
    return {
        "model_type": "paddleocr_vl",
        "image_token_id": config.image_token_id,
        "vision_start_token_id": config.vision_start_token_id,
        "vision_end_token_id": config.vision_end_token_id,
        "vision_config": {"spatial_merge_size": config.spatial_merge_size},
    }


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
    # SGLang 0.5 positions it with Qwen2-VL's scan, which finds images by the token after vision_start (D13)
    presets={"sglang-0.5": frozenset({"items_after_vision_start"})},
    # transformers 5.24's get_rope_index is Qwen2-VL's (R-hw), which equals R-max on images
    transformers_batch={"transformers-5": TRANSFORMERS_VL_BATCH["transformers-5"]},
    transformers_classes={"paddleocr_vl": ("paddleocr_vl", "PaddleOCRVLModel", "PaddleOCRVLConfig")},
    config_dict=config_dict,
)
