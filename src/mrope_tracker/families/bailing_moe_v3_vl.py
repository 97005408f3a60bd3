"""Bailing-MoE-V3-VL (Ling/Ring VL): Qwen2-VL's image blocks, images only.

Prompt layout: ``<|vision_start|> <|image_pad|>*N <|vision_end|>`` and a
newline that vLLM 0.33's processor adds after every image (it decodes the
prompt, appends ``\\n`` and encodes again); the newline is text. Qwen ids,
the merge size in `vision_config`.
"""

from ._spec import Family
from .qwen2_vl import QWEN_VISION_IDS, read_qwen_images

FAMILY = Family(
    name="bailing_moe_v3_vl",
    model_types={"bailing_moe_v3_vl": ""},
    defaults={**{k: v for k, v in QWEN_VISION_IDS.items() if k != "video_token_id"}, "spatial_merge_size": 2},
    read_config=read_qwen_images,
)
