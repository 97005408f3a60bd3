"""GLM-OCR: GLM-4.1V's rules and layout (`glm4v`) under ids of its own.

vLLM 0.33 runs it through the Glm4v processor and position code unchanged;
only the ids and the model type differ.
"""

from ._spec import Family
from .glm4v import config_dict as glm4v_config_dict
from .glm4v import read_config
from .qwen2_vl import TRANSFORMERS_VL_BATCH


def config_dict(config) -> dict:
    return {**glm4v_config_dict(config), "model_type": "glm_ocr"}


FAMILY = Family(
    name="glm_ocr",
    model_types={"glm_ocr": ""},
    # transformers 5's GlmOcrConfig defaults
    defaults={
        "image_token_id": 59280,
        "video_token_id": 59281,
        "vision_start_token_id": 59256,
        "vision_end_token_id": 59257,
        "video_start_token_id": 59258,
        "video_end_token_id": 59259,
        "spatial_merge_size": 2,
    },
    read_config=read_config,
    video_blocks="frames",
    video_brackets=True,
    # transformers 5.24's get_rope_index is GLM-4.1V's
    transformers_batch={"transformers-5": TRANSFORMERS_VL_BATCH["transformers-5"]},
    transformers_classes={"glm_ocr": ("glm_ocr", "GlmOcrModel", "GlmOcrConfig")},
    config_dict=config_dict,
)
