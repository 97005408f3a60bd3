"""What a model family is, as one record: `Family` (and `BatchRules`).

Each family module (qwen2_vl.py, glm4v.py, ...) builds one `Family`, which
checks its own fields when the module is imported. It holds what the
package needs to know about the family:
- which model types it serves, where their ids sit in a published config
  (`read_config`) and the defaults a config may leave out;
- how its videos appear in the prompt (one block, or one block per frame,
  possibly inside begin/end-of-video brackets) and whether frames are
  time-scaled;
- its audio token count and, for Omni families, how an audio-in-video block
  is laid out (bos/eos pairs, the processors' interleaves);
- which switches each semantics preset turns on (`PRESET_SWITCHES`);
- what transformers' own ``get_rope_index`` does with it (`BatchRules` per
  batch convention, float32 positions, its classes and config layout), for
  `mrope_tracker.hf`.

`MRopeConfig` packs the record and the preset into `kernel_params`, and the
fast path (config, input normalisation, layout builders, kernels) and
`mrope_tracker.hf` read these fields, never a family's name. The plain torch
reference (`mrope_tracker.reference`) is the exception by design: it states
each family's rules itself, independently of this record, so the fast path
can be tested against it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs
import numpy as np

# What a semantics preset can switch, per family (docs/semantics.md, "Presets"):
PRESET_SWITCHES = frozenset(
    {
        "tau_f64",  # temporal products in float64 from the float32 sp (vLLM 0.33, D3)
        "tau_rate_first",  # f * float32(sp * r): transformers 5's order of the float32 products
        "int_sp",  # second_per_grid_ts truncated to an integer first (transformers 4.57, D2)
        "next_hw",  # after a vision block, text resumes at s + max(h', w') (transformers 5, D1)
        "av_shift",  # Qwen2.5-Omni audio-in-video positions one token early (vLLM 0.33, D5)
        "av_eos_block",  # audio-in-video eos after the whole block's maximum (vLLM 0.33, D8)
        # Qwen3-Omni audio-in-video positions merged on truncated tau, whatever the layout (vLLM 0.33, D8)
        "av_merge_tau",
        # MiniCPM-V 4.7's canvas only where the config sets uses_mrope_canvas (else sequential; vLLM 0.33)
        "canvas_flag",
        # Qwen3-Omni positions computed in float32 with unrounded times, each then truncated (SGLang 0.5, S1)
        "float_carry",
        # every image and video run (Qwen3-VL: every frame) right after vision_start, else refused: transformers
        # 4.57 and SGLang 0.5 find items by the token after vision_start and position a run without one as
        # text, or shift the items after it (D13)
        "items_after_vision_start",
    }
)

# An interleave is a run-length list of (kind, count): kind 0 video, 1 audio.
RUN_VIDEO = 0
RUN_AUDIO = 1

# The semantics presets (docs/semantics.md); "reference" is the default.
SEMANTICS = ("reference", "vllm-0.33", "transformers-4.57", "transformers-5", "sglang-0.5")

# How transformers packs a padded batch: one convention per transformers line (mrope_tracker.hf).
CONVENTIONS = ("transformers-4", "transformers-5")


def get(obj: Any, key: str, default: Any = None) -> Any:
    """`key` of a dict or an attribute-style config object (None-safe)."""
    if obj is None:
        return default
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


def first(objs, keys: tuple[str, ...], default: Any = None) -> Any:
    """The first key present (not None) in the first object that has it:
    published configs put ids at the top level or in `text_config`."""
    for obj in objs:
        for key in keys:
            value = get(obj, key)
            if value is not None:
                return value
    return default


def plain_number(value):
    """`value` as a published config.json writes it: whole numbers as ints."""
    return int(value) if value is not None and float(value).is_integer() else value


# --------------------------------------------------------------------------
# Validators: a misspelt record fails when its family module is imported,
# naming the field, what it expects and what came.
# --------------------------------------------------------------------------


def _where(instance, attribute) -> str:
    name = getattr(instance, "name", None)
    owner = f"Family {name!r}" if isinstance(instance, Family) else type(instance).__name__
    return f"{owner}: {attribute.name}"


def _one_of(*allowed):
    def check(instance, attribute, value):
        if not any(value is a or (type(value) is type(a) and value == a) for a in allowed):
            raise ValueError(
                f"{_where(instance, attribute)}: expected one of {', '.join(map(repr, allowed))}, got {value!r}"
            )

    return check


def _of_type(*types, what: str):
    def check(instance, attribute, value):
        if not isinstance(value, types) or (bool not in types and isinstance(value, bool)):
            raise TypeError(f"{_where(instance, attribute)}: expected {what}, got {type(value).__name__} {value!r}")

    return check


def _callable(instance, attribute, value):
    if not callable(value):
        raise TypeError(f"{_where(instance, attribute)}: expected a callable, got {type(value).__name__} {value!r}")


def _callable_or_none(instance, attribute, value):
    if value is not None:
        _callable(instance, attribute, value)


def _mapping(key_check, value_check, *, what: str, non_empty: bool = False):
    """A Mapping whose keys and values pass `key_check(key, where)` and
    `value_check(value, where)` (each raises naming `where`)."""

    def check(instance, attribute, value):
        where = _where(instance, attribute)
        if not isinstance(value, Mapping):
            raise TypeError(f"{where}: expected a mapping of {what}, got {type(value).__name__} {value!r}")
        if non_empty and not value:
            raise ValueError(f"{where}: expected at least one entry ({what}), got none")
        for key, item in value.items():
            key_check(key, where)
            value_check(item, f"{where}[{key!r}]")

    return check


def _str(value, where: str) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{where}: expected a str, got {type(value).__name__} {value!r}")


def _anything(value, where: str) -> None:
    pass


def _in(allowed: tuple):
    def check(value, where: str) -> None:
        if not isinstance(value, str) or value not in allowed:
            raise ValueError(f"{where}: expected keys from {', '.join(allowed)}, got {value!r}")

    return check


def _switches(value, where: str) -> None:
    if not isinstance(value, frozenset):
        raise TypeError(f"{where}: expected a frozenset of switches, got {type(value).__name__} {value!r}")
    unknown = sorted(map(repr, value - PRESET_SWITCHES))
    if unknown:
        allowed = ", ".join(sorted(PRESET_SWITCHES))
        raise ValueError(f"{where}: expected switches from {allowed}, got {', '.join(unknown)}")


def _classes(value, where: str) -> None:
    if not (isinstance(value, tuple) and len(value) == 3 and all(isinstance(v, str) and v for v in value)):
        raise TypeError(f"{where}: expected (module, model class, config class) names, got {value!r}")


def _a_callable(value, where: str) -> None:
    if not callable(value):
        raise TypeError(f"{where}: expected a callable, got {type(value).__name__} {value!r}")


def _batch_rules(value, where: str) -> None:
    if not isinstance(value, BatchRules):
        raise TypeError(f"{where}: expected a BatchRules, got {type(value).__name__} {value!r}")


def _positive(instance, attribute, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise ValueError(f"{_where(instance, attribute)}: expected a positive number, got {value!r}")


def _semantics_set(instance, attribute, value):
    if not isinstance(value, frozenset):
        raise TypeError(f"{_where(instance, attribute)}: expected a frozenset of presets, got {type(value).__name__}")
    unknown = sorted(map(repr, value - set(SEMANTICS)))
    if unknown:
        raise ValueError(
            f"{_where(instance, attribute)}: expected presets from {', '.join(SEMANTICS)}, got {', '.join(unknown)}"
        )


@attrs.frozen(kw_only=True)
class BatchRules:
    """How one transformers line's ``get_rope_index`` packs a padded batch of
    a family, which `mrope_tracker.hf.get_rope_index` reproduces."""

    # the kept tokens: "one" (attention_mask == 1) or "nonzero" (attention_mask != 0)
    keep: str = attrs.field(validator=_one_of("one", "nonzero"))
    # the position written at every token that is not kept
    pad: int = attrs.field(validator=_of_type(int, what="an int"))
    # delta = max + 1 - the padded row length (D10), instead of - the row's kept tokens
    padded_delta: bool = attrs.field(validator=_of_type(bool, what="a bool"))
    # a batch with no grids at all: "rows" (the per-row path, as with grids),
    # "cumsum" (positions from the attention mask's cumsum; no mask: every
    # token kept) or "cumsum_or_arange" (the same, but with no mask an arange
    # and zero deltas in input_ids' dtype)
    text_only: str = attrs.field(validator=_one_of("rows", "cumsum", "cumsum_or_arange"))
    # mm_token_type_ids, when given, must be the processor's types of the ids
    # (the model groups tokens by them); else they are ignored
    type_ids: bool = attrs.field(validator=_of_type(bool, what="a bool"))


_BOOL = _of_type(bool, what="a bool")


@attrs.frozen
class Family:
    """Everything that makes one family's positions its own. Every field is
    checked when the record is built (ValueError or TypeError naming it)."""

    name: str = attrs.field(validator=_of_type(str, what="a str"))
    # model_type -> key of the nested config that holds the ids ("" for the config itself)
    model_types: Mapping[str, str] = attrs.field(
        validator=_mapping(_str, _str, what="model_type -> nested config key", non_empty=True)
    )
    # MRopeConfig field -> default, for every field the family uses; fields
    # it does not list must stay None
    defaults: Mapping[str, Any] = attrs.field(validator=_mapping(_str, _anything, what="MRopeConfig field -> default"))
    # (config scopes, in lookup order; semantics) -> MRopeConfig keyword arguments (None: default)
    read_config: Callable[[tuple, str], dict] = attrs.field(validator=_callable)
    # videos: "block" (one grid block), or "frames" (each frame its own tau = 0 block)
    video_blocks: str = attrs.field(default="block", validator=_one_of("block", "frames"))
    # videos sit inside video_start ... video_end, where the image token is
    # the video's (GLM's frames; ERNIE's whole block, whose own video token,
    # when its config has one, marks a video anywhere)
    video_brackets: bool = attrs.field(default=False, validator=_BOOL)
    # video frames are time-scaled by tokens_per_second (else tau(f) = f)
    scaled_time: bool = attrs.field(default=False, validator=_BOOL)
    # audio: mel frames -> tokens (numpy int64 array in, array out), or None
    audio_tokens: Callable[[np.ndarray, Any], np.ndarray] | None = attrs.field(
        default=None, validator=_callable_or_none
    )
    # audio-in-video: bos/eos pairs "shared" (both at one position) or "consecutive"
    av_pair: str | None = attrs.field(default=None, validator=_one_of(None, "shared", "consecutive"))
    # audio-in-video interleave conventions: name -> (t, h, w, sp float64, n_audio, config) -> [(kind, count)]
    interleaves: Mapping[str, Callable] = attrs.field(
        factory=dict, validator=_mapping(_str, _a_callable, what="convention name -> callable")
    )
    # per-frame videos: text tokens between consecutive frames inside a video's
    # placeholder range, where no is_embed mask locates the frames (openPangu: 2)
    frame_gap: int = attrs.field(default=0, validator=_of_type(int, what="an int"))
    # a video item's grid field holds (n, 3) rows, each a group of frames of
    # its own size (Keye-VL-1.5: one [1, h, w] row per frame); the vLLM
    # adapter splits such a video into one video per row
    per_frame_grids: bool = attrs.field(default=False, validator=_BOOL)
    # images at (s, i, j): H and W are the raw row and column without the
    # base, and text after the last item resumes at its T + 1 (Isaac)
    raw_spatial: bool = attrs.field(default=False, validator=_BOOL)
    # images as HunYuan-VL lays them out: an extra token, h' rows of w' + 1
    # tokens (a newline column ends each), an extra token; every token keeps
    # its sequence position on the leading axes, and a grid token's last
    # three axes are its column, its row and the image's ordinal (XD-RoPE)
    xd_images: bool = attrs.field(default=False, validator=_BOOL)
    # MiniCPM-V 4.7's canvas rule: crops from the marker tokens and per-crop
    # sizes (`mrope_tracker.canvas`), not grids of (t, h, w) items
    canvas: bool = attrs.field(default=False, validator=_BOOL)
    # position axes: 3 (T, H, W) for M-RoPE; HunYuan-VL's XD-RoPE has 4.
    # Every output (prompt_positions, layouts, the tracker's buffer, the
    # transformers drop-in) has this many rows
    num_dims: int = attrs.field(default=3, validator=_of_type(int, what="an int"))
    default_second_per_grid_ts: float = attrs.field(default=1.0, validator=_positive)
    # semantics preset -> the switches it turns on for this family (see
    # PRESET_SWITCHES); "reference" turns on none
    presets: Mapping[str, frozenset] = attrs.field(
        factory=dict, validator=_mapping(_in(SEMANTICS), _switches, what="preset -> frozenset of switches")
    )
    # transformers' own get_rope_index for the family, per batch convention
    # (CONVENTIONS); a convention it lacks is refused by mrope_tracker.hf
    transformers_batch: Mapping[str, BatchRules] = attrs.field(
        factory=dict,
        validator=_mapping(_in(CONVENTIONS), _batch_rules, what="convention -> BatchRules"),
    )
    # transformers returns positions and deltas as float32, whole or not (Qwen3-Omni)
    float_positions: bool = attrs.field(default=False, validator=_BOOL)
    # the presets under which the video times stay unrounded float32 (D8)
    float_times: frozenset = attrs.field(default=frozenset(), validator=_semantics_set)
    # model_type -> (module under transformers.models, the class owning
    # get_rope_index, its config class): where transformers implements it
    transformers_classes: Mapping[str, tuple[str, str, str]] = attrs.field(
        factory=dict, validator=_mapping(_str, _classes, what="model_type -> class names")
    )
    # an MRopeConfig -> its values as a published config.json holds them (for
    # running transformers' own code on it), or None
    config_dict: Callable[[Any], dict] | None = attrs.field(default=None, validator=_callable_or_none)
    # MRopeConfig field -> what to add to the warning `MRopeConfig.from_hf_config`
    # gives when a config leaves the field out (where configs keep it, what
    # the published checkpoints set when that differs from the default)
    fallback_notes: Mapping[str, str] = attrs.field(
        factory=dict, validator=_mapping(_str, _str, what="MRopeConfig field -> note")
    )

    def __attrs_post_init__(self) -> None:
        if not self.name:
            raise ValueError("Family: name: expected a non-empty str, got ''")
        where = f"Family {self.name!r}"
        unknown = sorted(set(self.transformers_classes) - set(self.model_types))
        if unknown:
            raise ValueError(
                f"{where}: transformers_classes: expected keys from model_types "
                f"({', '.join(self.model_types)}), got {', '.join(unknown)}"
            )
        if self.audio_tokens is None and (self.av_pair is not None or self.interleaves):
            raise ValueError(f"{where}: av_pair, interleaves: expected None and {{}} for a family without audio_tokens")
        unknown = sorted(set(self.fallback_notes) - set(self.defaults))
        if unknown:
            raise ValueError(
                f"{where}: fallback_notes: expected keys from defaults ({', '.join(self.defaults)}), "
                f"got {', '.join(unknown)}"
            )
        if self.frame_gap < 0 or (self.frame_gap and self.video_blocks != "frames"):
            raise ValueError(f"{where}: frame_gap: expected 0, or a positive int with video_blocks 'frames'")
        if self.per_frame_grids and self.video_blocks != "frames":
            raise ValueError(f"{where}: per_frame_grids: expected False unless video_blocks is 'frames'")
        if self.num_dims < 3:
            raise ValueError(f"{where}: num_dims: expected an int >= 3, got {self.num_dims}")
        if self.num_dims != 3 and not self.xd_images:
            raise ValueError(f"{where}: num_dims: expected 3 unless xd_images (the only rule with more axes)")
        if self.xd_images and (self.raw_spatial or "video_token_id" in self.defaults or self.audio_tokens):
            raise ValueError(f"{where}: xd_images: expected a family of images only, without raw_spatial")
        if self.canvas and (self.xd_images or self.raw_spatial or self.audio_tokens or self.num_dims != 3):
            raise ValueError(f"{where}: canvas: expected a 3-axis family without audio, xd_images or raw_spatial")
        if self.float_times and not self.float_positions:
            raise ValueError(f"{where}: float_times: expected an empty set unless float_positions is True")

    @property
    def has_audio(self) -> bool:
        return self.audio_tokens is not None
