"""Cohere Compass: Qwen2-VL's image blocks, images only.

Prompt layout: ``<|VISION_START|> <|IMAGE_PAD|>*N <|VISION_END|>``, start
and end being text. vLLM 0.33 serves images only. The ids sit at the top
level, the merge size in `vision_config`.
"""

from ._spec import Family
from .qwen2_vl import TRANSFORMERS_VL_BATCH, read_qwen_images


def config_dict(config) -> dict:
    return {
        "model_type": "cohere_compass",
        "image_token_id": config.image_token_id,
        "vision_start_token_id": config.vision_start_token_id,
        "vision_end_token_id": config.vision_end_token_id,
        "vision_config": {"spatial_merge_size": config.spatial_merge_size},
    }


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
    # transformers 5.24's get_rope_index is Qwen3-VL's (R-hw), which equals R-max on images
    transformers_batch={"transformers-5": TRANSFORMERS_VL_BATCH["transformers-5"]},
    transformers_classes={"cohere_compass": ("cohere_compass", "CohereCompassModel", "CohereCompassConfig")},
    config_dict=config_dict,
)
