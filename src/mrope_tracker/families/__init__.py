"""Model families: one module each, collected here.

`FAMILIES` maps a family name to its `Family` record; `MODEL_TYPES` maps
every supported ``model_type`` to (family name, key of the nested config
that holds the ids). Adding a family is one new module plus a line below.
"""

from . import (
    bailing_moe_v3_vl,
    cohere_compass,
    ernie4_5_vl,
    glm4v,
    glm_ocr,
    hunyuan_vl,
    isaac,
    keye,
    keye_vl1_5,
    minicpmv4_7,
    openpangu_vl,
    paddleocr_vl,
    qwen2_5_omni,
    qwen2_5_vl,
    qwen2_vl,
    qwen3_omni,
    qwen3_vl,
    text_only,
)
from ._spec import CONVENTIONS, RUN_AUDIO, RUN_VIDEO, SEMANTICS, BatchRules, Family, get

FAMILIES: dict[str, Family] = {
    module.FAMILY.name: module.FAMILY
    for module in (
        qwen2_vl,
        qwen2_5_vl,
        qwen2_5_omni,
        qwen3_vl,
        glm4v,
        qwen3_omni,
        paddleocr_vl,
        ernie4_5_vl,
        glm_ocr,
        bailing_moe_v3_vl,
        cohere_compass,
        text_only,
        # transformers 5.24's rules only (vLLM 0.33 runs transformers' own code)
        hunyuan_vl,
        # transformers 5.24's rule; vLLM 0.33's only with the config's canvas flag
        minicpmv4_7,
        # vLLM 0.33's rules only
        keye,
        keye_vl1_5,
        isaac,
        openpangu_vl,
    )
}

MODEL_TYPES: dict[str, tuple[str, str]] = {
    model_type: (family.name, nested)
    for family in FAMILIES.values()
    for model_type, nested in family.model_types.items()
}
if len(MODEL_TYPES) != sum(len(family.model_types) for family in FAMILIES.values()):
    _served = {name: sorted(family.model_types) for name, family in FAMILIES.items()}
    raise ValueError(f"FAMILIES: expected each model_type in one family only, got {_served}")

__all__ = [
    "BatchRules",
    "CONVENTIONS",
    "FAMILIES",
    "MODEL_TYPES",
    "SEMANTICS",
    "Family",
    "RUN_AUDIO",
    "RUN_VIDEO",
    "get",
]
