"""Qwen2-VL: one grid block per image or video, frames numbered 0, 1, 2, ...

Prompt layout: ``vision_start PAD*N vision_end``; `vision_start` and
`vision_end` are ordinary text. No temporal scale (vLLM and transformers both
treat the frame index as tau).
"""

from ._spec import BatchRules, Family, first, get

QWEN_VISION_IDS = {
    "image_token_id": 151655,
    "video_token_id": 151656,
    "vision_start_token_id": 151652,
    "vision_end_token_id": 151653,
}


# transformers' VL models: 4.x keeps `attention_mask == 1`, pads with 1 and
# takes deltas against the padded row (D10); 5.x keeps `!= 0`, pads with 0,
# takes the kept tokens and runs a text-only batch through its per-row path.
TRANSFORMERS_VL_BATCH = {
    "transformers-4": BatchRules(keep="one", pad=1, padded_delta=True, text_only="cumsum_or_arange", type_ids=True),
    "transformers-5": BatchRules(keep="nonzero", pad=0, padded_delta=False, text_only="rows", type_ids=True),
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


def read_qwen_images(scopes, semantics=None) -> dict:
    """`read_qwen_vision` without the video token, for the families vLLM serves
    with images only (their configs may still name one)."""
    kwargs = read_qwen_vision(scopes)
    del kwargs["video_token_id"]
    return kwargs


def qwen_vision_ids(config) -> dict:
    """A Qwen config's ids, as published configs name them."""
    return {
        "image_token_id": config.image_token_id,
        "video_token_id": config.video_token_id,
        "vision_start_token_id": config.vision_start_token_id,
        "vision_end_token_id": config.vision_end_token_id,
    }


def config_dict(config) -> dict:
    return {
        "model_type": "qwen2_vl",
        **qwen_vision_ids(config),
        "vision_config": {"spatial_merge_size": config.spatial_merge_size},
    }


FAMILY = Family(
    name="qwen2_vl",
    model_types={"qwen2_vl": ""},
    defaults={**QWEN_VISION_IDS, "spatial_merge_size": 2},
    read_config=read_qwen_vision,
    presets={
        "transformers-4.57": frozenset({"items_after_vision_start"}),
        "transformers-5": frozenset({"next_hw"}),
        "sglang-0.5": frozenset({"items_after_vision_start"}),
    },
    transformers_batch=TRANSFORMERS_VL_BATCH,
    transformers_classes={"qwen2_vl": ("qwen2_vl", "Qwen2VLModel", "Qwen2VLConfig")},
    config_dict=config_dict,
)
