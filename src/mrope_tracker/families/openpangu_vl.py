"""openPangu-VL (Huawei): Qwen2-VL images, and every video frame its own tau = 0
block, frames separated by an end/start pair that is text.

Image: ``I*(h'w')`` (the processor's brackets around it are text). Video:
``[vs] V*(h'w') ([ve] [vs] V*(h'w'))*(t-1) [ve]``; vLLM's placeholder range
covers everything between the outer pair, the inner pairs included
(is_embed false there), so `frame_gap` is 2. vLLM 0.33 moves the running
position by max(h', w') per frame and puts the inner pair at the next two
positions: exactly text between per-frame blocks. It ignores the
second_per_grid_ts the processor sends. No transformers implementation: the
reference follows vLLM.

The ids of ``[unused18]`` (vision start), ``[unused19]`` (image),
``[unused20]`` (vision end) and ``[unused32]`` (video) in openPangu's
vocabulary were not found, so nothing defaults them: the range form and the
vLLM adapter need none, and the token form refuses, naming the missing id,
unless the config (or `MRopeConfig`) gives it.
"""

from ._spec import Family, first, get


def read_config(scopes, semantics=None) -> dict:
    text = tuple(get(s, "text_config") for s in scopes)
    where = (*scopes, *text)
    return {
        "image_token_id": first(where, ("image_token_id",)),
        "video_token_id": first(where, ("video_token_id",)),
        "vision_start_token_id": first(where, ("vision_start_token_id",)),
        "vision_end_token_id": first(where, ("vision_end_token_id",)),
        "spatial_merge_size": get(first(scopes, ("vision_config",)), "spatial_merge_size"),
    }


FAMILY = Family(
    name="openpangu_vl",
    model_types={"openpangu_vl": ""},
    defaults={
        "image_token_id": None,
        "video_token_id": None,
        "vision_start_token_id": None,
        "vision_end_token_id": None,
        "spatial_merge_size": 2,
    },
    read_config=read_config,
    video_blocks="frames",
    frame_gap=2,
)
