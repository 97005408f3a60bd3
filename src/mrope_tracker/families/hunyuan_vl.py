"""HunYuan-VL (HunyuanOCR): XD-RoPE, four position axes, images only.

Prompt layout: ``<image_start> <image>*(h'(w' + 1) + 2) <image_end>``: the
processor writes h' rows of w' + 1 image tokens (the vision merger ends each
row with a newline embedding) and one more image token on either side.
Every token sits at its index on the first axis; on the other three, text
and the two extra tokens sit at their index too, and grid token (i, j) of
image k at (j, i, k): the raw column, the raw row and the image's ordinal.
The positions never run past the index, so delta is 0.

transformers 5.24 implements it (``HunYuanVLModel.get_rope_index``) and
numbers images across the whole batch (a row's fourth axis depends on the
rows before it); vLLM 0.33 serves it through its transformers backend, one
request at a time, so a request's images count from 0, as ours do
(docs/semantics.md, "HunYuan-VL").
"""

from ._spec import BatchRules, Family, first, get

NUM_AXES = 4


def _section(scopes):
    """The rotary sections, wherever a config keeps them: ``rope_parameters`` or
    the legacy ``rope_scaling``, in ``text_config`` or at the top level (the
    flat published checkpoints), as ``mrope_section`` or ``xdrope_section``."""
    text = tuple(("text_config.", get(s, "text_config")) for s in scopes)
    for prefix, scope in (*text, *(("", s) for s in scopes)):
        for key in ("rope_parameters", "rope_scaling"):
            params = get(scope, key)
            for name in ("mrope_section", "xdrope_section"):
                section = get(params, name)
                if section is not None:
                    return f"{prefix}{key}.{name}", section
    return None, None


def read_config(scopes, semantics=None) -> dict:
    where, section = _section(scopes)
    if section is not None and (not isinstance(section, (list, tuple)) or len(section) != NUM_AXES):
        raise ValueError(
            f"config.{where}: expected {NUM_AXES} sections (HunYuan-VL's XD-RoPE axes: position, "
            f"width, height, image index), got {section!r}"
        )
    vision = first(scopes, ("vision_config",))
    return {
        "image_token_id": first(scopes, ("image_token_id",)),
        # <image_start> and <image_end>: text to the positions (samples and docs name them)
        "vision_start_token_id": first(scopes, ("im_start_id",)),
        "vision_end_token_id": first(scopes, ("im_end_id",)),
        "spatial_merge_size": get(vision, "spatial_merge_size"),
    }


def config_dict(config) -> dict:
    return {
        "model_type": "hunyuan_vl",
        "image_token_id": config.image_token_id,
        "im_start_id": config.vision_start_token_id,
        "im_end_id": config.vision_end_token_id,
        "vision_config": {"spatial_merge_size": config.spatial_merge_size},
        # a small text model: only the sections matter (they must sum to head_dim // 2)
        "text_config": {
            "hidden_size": 64,
            "num_attention_heads": 4,
            "num_hidden_layers": 1,
            "intermediate_size": 64,
            "vocab_size": 256,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 2, 2, 2]},
        },
    }


FAMILY = Family(
    name="hunyuan_vl",
    model_types={"hunyuan_vl": ""},
    # transformers 5.24's HunYuanVLConfig and HunYuanVLVisionConfig defaults (tencent/HunyuanOCR)
    defaults={
        "image_token_id": 120120,
        "vision_start_token_id": 120118,
        "vision_end_token_id": 120119,
        "spatial_merge_size": 2,
    },
    read_config=read_config,
    xd_images=True,
    num_dims=NUM_AXES,
    # transformers 5.24: the kept tokens are attention_mask != 0, padding 0,
    # deltas against the kept tokens; without grids every row is its index
    transformers_batch={
        "transformers-5": BatchRules(keep="nonzero", pad=0, padded_delta=False, text_only="rows", type_ids=True)
    },
    transformers_classes={"hunyuan_vl": ("hunyuan_vl", "HunYuanVLModel", "HunYuanVLConfig")},
    config_dict=config_dict,
)
