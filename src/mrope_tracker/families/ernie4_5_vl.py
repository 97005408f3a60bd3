"""ERNIE-4.5-VL: Qwen2-VL's blocks, videos merged two frames to a temporal patch.

A video of t frames is one block of t / temporal_merge_size temporal patches,
numbered 0, 1, 2, ... (no time scale); an odd frame count is refused (vLLM
0.33 would lay out more tokens than its position grid covers). Images and
videos sit between ``<|IMAGE_START|> ... <|IMAGE_END|>`` and
``<|VIDEO_START|> ... <|VIDEO_END|>``, which are text.

Two config forms:
- ``ernie4_5_moe_vl``, the remote-code config vLLM 0.33 serves: one
  placeholder, ``im_patch_id``, for images and videos alike (a run between
  the video brackets is a video), and top-level ``spatial_conv_size`` and
  ``temporal_conv_size``;
- ``ernie4_5_vl_moe``, transformers 5's: ``image_token_id``, a video token of
  its own (``video_token_id``), and ``vision_config.spatial_merge_size`` and
  ``temporal_merge_size``.
Both layouts read the same under either form: the image token between the
brackets, or the video token anywhere, is a video.
"""

from ._spec import Family, first, get
from .qwen2_vl import TRANSFORMERS_VL_BATCH


def read_config(scopes, semantics=None) -> dict:
    text = tuple(get(s, "text_config") for s in scopes)
    where = (*scopes, *text)
    vision = first(scopes, ("vision_config",))
    kwargs = {
        "image_token_id": first(where, ("im_patch_id", "image_token_id")),
        "vision_start_token_id": first(where, ("image_start_token_id",)),
        "vision_end_token_id": first(where, ("image_end_token_id",)),
        "video_start_token_id": first(where, ("video_start_token_id",)),
        "video_end_token_id": first(where, ("video_end_token_id",)),
        "spatial_merge_size": first((*scopes, vision), ("spatial_conv_size", "spatial_merge_size")),
        "temporal_merge_size": first((*scopes, vision), ("temporal_conv_size", "temporal_merge_size")),
    }
    video = first(where, ("video_token_id",))
    if video is not None:  # the remote-code config has none: its videos use the image token
        kwargs["video_token_id"] = video
    return kwargs


def config_dict(config) -> dict:
    """transformers 5's form (the remote-code form has no transformers class)."""
    return {
        "model_type": "ernie4_5_vl_moe",
        "image_token_id": config.image_token_id,
        "video_token_id": config.video_token_id,
        "image_start_token_id": config.vision_start_token_id,
        "image_end_token_id": config.vision_end_token_id,
        "video_start_token_id": config.video_start_token_id,
        "video_end_token_id": config.video_end_token_id,
        "vision_config": {
            "spatial_merge_size": config.spatial_merge_size,
            "temporal_merge_size": config.temporal_merge_size,
        },
    }


FAMILY = Family(
    name="ernie4_5_moe_vl",
    model_types={"ernie4_5_moe_vl": "", "ernie4_5_vl_moe": ""},
    # transformers 5's Ernie4_5_VLMoeConfig defaults (the remote-code config's ids)
    defaults={
        "image_token_id": 100295,
        "video_token_id": 103367,
        "vision_start_token_id": 101304,
        "vision_end_token_id": 101305,
        "video_start_token_id": 101306,
        "video_end_token_id": 101307,
        "spatial_merge_size": 2,
        "temporal_merge_size": 2,
    },
    read_config=read_config,
    video_brackets=True,
    # transformers 5.24 resumes after a video at s + max(h', w') (D1)
    presets={"transformers-5": frozenset({"next_hw"})},
    transformers_batch={"transformers-5": TRANSFORMERS_VL_BATCH["transformers-5"]},
    transformers_classes={"ernie4_5_vl_moe": ("ernie4_5_vl_moe", "Ernie4_5_VLMoeModel", "Ernie4_5_VLMoeConfig")},
    config_dict=config_dict,
    fallback_notes={
        "spatial_merge_size": "read from spatial_conv_size or vision_config.spatial_merge_size",
        "temporal_merge_size": "read from temporal_conv_size or vision_config.temporal_merge_size",
    },
)
