"""Cohere Compass: Qwen2-VL's image blocks, and Qwen3-VL's per-frame videos.

Prompt layout: an image is ``<|VISION_START|> <|IMAGE_PAD|>*N <|VISION_END|>``,
start and end being text. transformers 5.24's processor lays a video out as
Qwen3-VL does: per frame ``<t seconds>`` text, then ``<|VISION_START|>
<|VIDEO_PAD|>*h'w' <|VISION_END|>``, each frame its own tau = 0 block.
vLLM 0.33's processor registers images only, so its vectors hold none. The
ids sit at the top level, the merge size in `vision_config`.
"""

from ._spec import Family
from .qwen2_vl import TRANSFORMERS_VL_BATCH, qwen_vision_ids, read_qwen_vision


def config_dict(config) -> dict:
    return {
        "model_type": "cohere_compass",
        **qwen_vision_ids(config),
        "vision_config": {"spatial_merge_size": config.spatial_merge_size},
    }


FAMILY = Family(
    name="cohere_compass",
    model_types={"cohere_compass": ""},
    # transformers 5's CohereCompassConfig defaults
    defaults={
        "image_token_id": 255031,
        "video_token_id": 255032,
        "vision_start_token_id": 255028,
        "vision_end_token_id": 255029,
        "spatial_merge_size": 2,
    },
    read_config=read_qwen_vision,
    video_blocks="frames",
    # transformers 5.24's get_rope_index is Qwen3-VL's (R-hw), which equals R-max on
    # images and single-frame blocks
    transformers_batch={"transformers-5": TRANSFORMERS_VL_BATCH["transformers-5"]},
    transformers_classes={"cohere_compass": ("cohere_compass", "CohereCompassModel", "CohereCompassConfig")},
    config_dict=config_dict,
)
