"""Cohere Compass: Qwen2-VL's image blocks, images only.

Prompt layout: ``<|VISION_START|> <|IMAGE_PAD|>*N <|VISION_END|>``, start
and end being text. vLLM 0.33 serves images only. The ids sit at the top
level, the merge size in `vision_config`.
"""

from ._spec import Family
from .qwen2_vl import read_qwen_images

FAMILY = Family(
    name="cohere_compass",
    model_types={"cohere_compass": ""},
    # transformers 5's CohereCompassConfig defaults
    defaults={
        "image_token_id": 255031,
        "vision_start_token_id": 255028,
        "vision_end_token_id": 255029,
        "spatial_merge_size": 2,
    },
    read_config=read_qwen_images,
)
