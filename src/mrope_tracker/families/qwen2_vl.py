"""Qwen2-VL: one grid block per image or video, frames numbered 0, 1, 2, ...

Prompt layout: ``vision_start PAD*N vision_end``; `vision_start` and
`vision_end` are ordinary text. No temporal scale (vLLM and transformers both
treat the frame index as tau).
"""

from ._spec import Family, first, get

QWEN_VISION_IDS = {
    "image_token_id": 151655,
    "video_token_id": 151656,
    "vision_start_token_id": 151652,
    "vision_end_token_id": 151653,
}


def read_qwen_vision(scopes, semantics=None) -> dict:
    """Ids and merge size as Qwen configs publish them (top level, `text_config`
    or the thinker; older files spell ids `*_token_index`)."""
    text = tuple(get(s, "text_config") for s in scopes)
    where = (*scopes, *text)
    vision = first(scopes, ("vision_config",))
    return {
        "image_token_id": first(where, ("image_token_id", "image_token_index")),
        "video_token_id": first(where, ("video_token_id", "video_token_index")),
        "vision_start_token_id": first(where, ("vision_start_token_id",)),
        "vision_end_token_id": first(where, ("vision_end_token_id",)),
        "spatial_merge_size": get(vision, "spatial_merge_size"),
    }


FAMILY = Family(
    name="qwen2_vl",
    model_types={"qwen2_vl": ""},
    defaults={**QWEN_VISION_IDS, "spatial_merge_size": 2},
    read_config=read_qwen_vision,
    presets={"transformers-5": frozenset({"next_hw"})},
)
