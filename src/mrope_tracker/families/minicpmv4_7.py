"""MiniCPM-V 4.7: the "canvas" rule (three axes), images and videos.

A picture is a thumbnail ``<image> I*n </image>`` and optionally rows of
slices ``<slice> I*n </slice>`` (rows joined by a newline); a video is its
frames back to back, each laid out like a picture. Each crop (thumbnail or
slice) has its own patch grid (h, w), sent as ``target_sizes`` (images) or
``target_sizes_videos``, and an LLM grid of (h // m, w // m): m = 4 for
``downsample_mode`` "16x" (the default), 2 for "4x", kept here as
`spatial_merge_size`. The rule (docs/semantics.md, "MiniCPM-V 4.7") places
each frame's crops on one canvas anchored on five marker tokens: ``<image>``
(`vision_start_token_id`), ``</image>`` (`vision_end_token_id`),
``<slice>``, ``</slice>`` and the newline.

transformers 5.24 (``MiniCPMV4_7Model.get_rope_index``) always applies it;
vLLM 0.33 only when the config sets ``uses_mrope_canvas`` or an
``mrope_mode`` naming "canvas", and otherwise numbers every token by its
index (delta 0): the "vllm-0.33" preset's `canvas_flag` switch. The five ids
of the published tokenizer were not found, so nothing defaults them: the
canvas entry points refuse a config without them, naming the missing id.
"""

from ._spec import BatchRules, Family, first, get

# downsample_mode -> the patch-to-token merge of each side of a crop
MERGE_OF_MODE = {"16x": 4, "4x": 2}


def read_config(scopes, semantics=None) -> dict:
    text = tuple(get(s, "text_config") for s in scopes)
    where = (*scopes, *text)
    mode = first(where, ("downsample_mode",))
    if mode is not None and mode not in MERGE_OF_MODE:
        raise ValueError(f"config.downsample_mode: expected one of {', '.join(MERGE_OF_MODE)}, got {mode!r}")
    flag = first(where, ("uses_mrope_canvas",))
    mrope_mode = first(where, ("mrope_mode",))
    if flag is not None and not isinstance(flag, bool):
        raise ValueError(f"config.uses_mrope_canvas: expected a bool, got {flag!r}")
    if mrope_mode is not None and not isinstance(mrope_mode, str):
        raise ValueError(f"config.mrope_mode: expected a str, got {mrope_mode!r}")
    return {
        # transformers 5.24 names them image_start_id ...; MiniCPM's tokenizer and vLLM im_start_id ...
        "vision_start_token_id": first(where, ("image_start_id", "im_start_id")),
        "vision_end_token_id": first(where, ("image_end_id", "im_end_id")),
        "slice_start_token_id": first(where, ("slice_start_id",)),
        "slice_end_token_id": first(where, ("slice_end_id",)),
        "newline_token_id": first(where, ("newline_id",)),
        "spatial_merge_size": None if mode is None else MERGE_OF_MODE[mode],
        # what vLLM 0.33 reads to switch the canvas on (transformers 5.24 reads neither)
        "uses_mrope_canvas": bool(flag) or "canvas" in (mrope_mode or ""),
    }


def config_dict(config) -> dict:
    return {
        "model_type": "minicpmv4_7",
        "image_start_id": config.vision_start_token_id,
        "image_end_id": config.vision_end_token_id,
        "slice_start_id": config.slice_start_token_id,
        "slice_end_id": config.slice_end_token_id,
        "newline_id": config.newline_token_id,
        "downsample_mode": {m: k for k, m in MERGE_OF_MODE.items()}[config.spatial_merge_size],
        "uses_mrope_canvas": config.uses_mrope_canvas,
    }


FAMILY = Family(
    name="minicpmv4_7",
    model_types={"minicpmv4_7": ""},
    defaults={
        "vision_start_token_id": None,
        "vision_end_token_id": None,
        "slice_start_token_id": None,
        "slice_end_token_id": None,
        "newline_token_id": None,
        "spatial_merge_size": 4,  # downsample_mode "16x", transformers 5.24's default
        "uses_mrope_canvas": False,
    },
    read_config=read_config,
    canvas=True,
    presets={"vllm-0.33": frozenset({"canvas_flag"})},
    # transformers 5.24 (hf.canvas_batch): kept tokens attention_mask != 0, padding 0, deltas against
    # the row's attention_mask sum; mm_token_type_ids drive the crops
    transformers_batch={
        "transformers-5": BatchRules(keep="nonzero", pad=0, padded_delta=False, text_only="rows", type_ids=True)
    },
    config_dict=config_dict,
    fallback_notes={"spatial_merge_size": "config.downsample_mode: '16x' merges 4 x 4 patches, '4x' 2 x 2"},
)
