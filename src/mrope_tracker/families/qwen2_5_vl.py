"""Qwen2.5-VL: Qwen2-VL's blocks with time-scaled video frames.

vLLM 0.33 serves two more model types with these rules: OpenCUA (``opencua``,
images only, its placeholder ``media_placeholder_token_id``) and EXAONE-4.5
(``exaone4_5``, ids at the top level; its vision config has no
``tokens_per_second``, for which vLLM takes 1.0).

tau(f) = trunc(f * second_per_grid_ts * tokens_per_second), the products
rounded to float32 as torch computes them (transformers 4.51, vLLM 0.8-0.9).
`tokens_per_second` sits in `vision_config` (2 in the published checkpoints;
transformers' config class defaults to 4).
"""

from ._spec import Family, first, get, plain_number
from .qwen2_vl import QWEN_VISION_IDS, TRANSFORMERS_VL_BATCH, qwen_vision_ids, read_qwen_vision


def read_config(scopes, semantics=None) -> dict:
    kwargs = read_qwen_vision(scopes)
    if kwargs["image_token_id"] is None:  # OpenCUA names its image placeholder so
        text = tuple(get(s, "text_config") for s in scopes)
        kwargs["image_token_id"] = first((*scopes, *text), ("media_placeholder_token_id",))
    kwargs["tokens_per_second"] = get(first(scopes, ("vision_config",)), "tokens_per_second")
    if kwargs["tokens_per_second"] is None and get(scopes[-1], "model_type") == "exaone4_5":
        # EXAONE-4.5's vision config class has no tokens_per_second, and vLLM 0.33's
        # Qwen2.5-VL position code then takes 1.0 (its getattr default)
        kwargs["tokens_per_second"] = 1.0
    return kwargs


def config_dict(config) -> dict:
    vision = {
        "spatial_merge_size": config.spatial_merge_size,
        "tokens_per_second": plain_number(config.tokens_per_second),
    }
    return {"model_type": "qwen2_5_vl", **qwen_vision_ids(config), "vision_config": vision}


FAMILY = Family(
    name="qwen2_5_vl",
    model_types={"qwen2_5_vl": "", "opencua": "", "exaone4_5": ""},
    defaults={**QWEN_VISION_IDS, "spatial_merge_size": 2, "tokens_per_second": 4.0},
    read_config=read_config,
    scaled_time=True,
    presets={
        "vllm-0.33": frozenset({"tau_f64"}),
        "transformers-4.57": frozenset({"int_sp", "items_after_vision_start"}),
        "transformers-5": frozenset({"next_hw", "tau_rate_first"}),
        "sglang-0.5": frozenset({"items_after_vision_start"}),
    },
    transformers_batch=TRANSFORMERS_VL_BATCH,
    transformers_classes={"qwen2_5_vl": ("qwen2_5_vl", "Qwen2_5_VLModel", "Qwen2_5_VLConfig")},
    config_dict=config_dict,
    fallback_notes={
        "tokens_per_second": "read from vision_config.tokens_per_second; the published Qwen2.5-VL checkpoints set 2"
    },
)
