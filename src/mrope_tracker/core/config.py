"""Model configuration: the handful of values that decide M-RoPE positions.

`MRopeConfig` is an immutable record built from a Hugging Face ``config.json``
(a path, a model folder, a dict or a transformers config object) by
`MRopeConfig.from_hf_config`. What is particular to a model family (where
its ids sit, its defaults, its switches) lives in `mrope_tracker.families`;
this module only validates and packs it, and warns when a config leaves a
value that changes positions to the family's default. It also owns the packed scalar
array that the numba kernels read, so the hot path never touches Python
attributes.
"""

from __future__ import annotations

import functools
import json
import math
import os
import warnings
from typing import Any

import attrs
import numpy as np

from ..families import FAMILIES, MODEL_TYPES, SEMANTICS, Family, get
from ..kernels import layout_codes as codes

__all__ = ["ConfigDefaultWarning", "MRopeConfig", "SUPPORTED_MODEL_TYPES", "SEMANTICS"]

# model_type -> family name, for every model type from_hf_config reads.
SUPPORTED_MODEL_TYPES: dict[str, str] = {model_type: family for model_type, (family, _) in MODEL_TYPES.items()}

_ID_FIELDS = (
    "image_token_id",
    "video_token_id",
    "vision_start_token_id",
    "vision_end_token_id",
    "audio_token_id",
    "audio_start_token_id",
    "audio_end_token_id",
    "video_start_token_id",
    "video_end_token_id",
    "slice_start_token_id",
    "slice_end_token_id",
    "newline_token_id",
)
_MAX_SCALE = 1e6  # time scales and chunk lengths far past any checkpoint's, still exact in float32 products


class ConfigDefaultWarning(UserWarning):
    """A config left out a value that changes positions, and the family's
    default stands in for it (`MRopeConfig.from_hf_config`)."""


# (model_type, field) pairs already warned about: once per process each
_WARNED_DEFAULTS: set[tuple[str, str]] = set()


def _warn_default(model_type: str, spec: Family, name: str) -> None:
    if (model_type, name) in _WARNED_DEFAULTS or spec.defaults[name] is None:
        # (no default: an id nobody published; the token form refuses, naming it)
        return
    note = spec.fallback_notes.get(name)
    warnings.warn(
        f"config ({model_type}): no {name}; using the {spec.name} default {spec.defaults[name]!r}"
        f"{f' ({note})' if note else ''}. Positions depend on it: set it in the config if the model differs.",
        ConfigDefaultWarning,
        stacklevel=3,  # the caller of from_hf_config
    )
    _WARNED_DEFAULTS.add((model_type, name))  # after warn: an "error" filter raises every time, as Python's own


def _check_token_id(name: str, value) -> None:
    # below 2**53: the kernels carry ids in a float64 array (exact there)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value < 2**53:
        raise ValueError(f"{name}: expected an int token id in [0, 2**53), got {value!r}")


def positive_number(name: str, value) -> float:
    """A positive real number up to 1e6 (ints and floats; not bools or strings)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name}: expected a positive number, got {type(value).__name__} {value!r}")
    try:
        value = float(value)
    except OverflowError:
        value = math.inf
    if not math.isfinite(value) or not 0 < value <= _MAX_SCALE:
        raise ValueError(f"{name}: expected a number in (0, {_MAX_SCALE:g}], got {value!r}")
    return value


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name}: expected a positive int, got {value!r}")
    return int(value)


# ------------------------------------------------------------------ attrs converters and validators
# Converters only fill in and normalise (a family default for None, numpy scalars as Python
# ones) and never raise; the validators, run once every field is set, refuse.


def _family_default(value, self: MRopeConfig, field: attrs.Attribute):
    """None: the family's default for the field (None where the family does not use it)."""
    if value is None:
        spec = FAMILIES.get(self.family) if isinstance(self.family, str) else None
        return None if spec is None else spec.defaults.get(field.name)
    return value


def _as_int_field(value, self: MRopeConfig, field: attrs.Attribute):
    value = _family_default(value, self, field)
    return int(value) if isinstance(value, np.integer) else value


def _as_float_field(value, self: MRopeConfig, field: attrs.Attribute):
    value = _family_default(value, self, field)
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_)):
        try:
            return float(value)
        except OverflowError:  # an int past float's range: the validator refuses it
            return value
    return value


def _as_flag_field(value, self: MRopeConfig, field: attrs.Attribute):
    value = _family_default(value, self, field)
    return bool(value) if isinstance(value, np.bool_) else value


_INT = attrs.Converter(_as_int_field, takes_self=True, takes_field=True)
_FLOAT = attrs.Converter(_as_float_field, takes_self=True, takes_field=True)
_FLAG = attrs.Converter(_as_flag_field, takes_self=True, takes_field=True)


def _check_family(self: MRopeConfig, field: attrs.Attribute, value) -> None:
    if not isinstance(value, str) or value not in FAMILIES:
        raise ValueError(f"family: expected one of {', '.join(FAMILIES)}, got {value!r}")


def _check_model_type(self: MRopeConfig, field: attrs.Attribute, value) -> None:
    """The model type must be one the family reads (`SUPPORTED_MODEL_TYPES`), or the family's own name."""
    if isinstance(value, str) and (value == self.family or SUPPORTED_MODEL_TYPES.get(value) == self.family):
        return
    known = [self.family, *(m for m, family in SUPPORTED_MODEL_TYPES.items() if family == self.family)]
    raise ValueError(
        f"model_type: expected a model type of the {self.family} family ({', '.join(dict.fromkeys(known))}), "
        f"got {value!r}"
        + (
            f" (a {SUPPORTED_MODEL_TYPES[value]} model type)"
            if isinstance(value, str) and value in SUPPORTED_MODEL_TYPES
            else ""
        )
    )


def _check_semantics(self: MRopeConfig, field: attrs.Attribute, value) -> None:
    if not isinstance(value, str) or value not in SEMANTICS:
        raise ValueError(f"semantics: expected one of {', '.join(SEMANTICS)}, got {value!r}")


def _check_used(self: MRopeConfig, field: attrs.Attribute, value) -> bool:
    """Whether the family uses the field; a value for one it does not use is refused."""
    if field.name in FAMILIES[self.family].defaults:
        return True
    if value is not None:
        raise ValueError(f"{field.name}: {self.family} does not use it; expected None, got {value!r}")
    return False


def _check_id(self: MRopeConfig, field: attrs.Attribute, value) -> None:
    if _check_used(self, field, value) and value is not None:
        _check_token_id(field.name, value)


def _check_count(self: MRopeConfig, field: attrs.Attribute, value) -> None:
    if _check_used(self, field, value) and (value is not None or field.name == "spatial_merge_size"):
        _positive_int(field.name, value)


def _check_scale(self: MRopeConfig, field: attrs.Attribute, value) -> None:
    if not _check_used(self, field, value) or value is None:
        return
    positive_number(field.name, value)
    if field.name == "seconds_per_chunk" and int(self.tokens_per_second * value) < 1:
        raise ValueError(
            "seconds_per_chunk: expected a positive number whose product with the temporal scale "
            f"({self.tokens_per_second}) is at least 1, got {value!r}"
        )


def _check_flag(self: MRopeConfig, field: attrs.Attribute, value) -> None:
    if _check_used(self, field, value) and value is not None and not isinstance(value, bool):
        raise ValueError(f"{field.name}: expected a bool, got {value!r}")


def _id_field():
    return attrs.field(default=None, converter=_INT, validator=_check_id)


def _count_field():
    return attrs.field(default=None, converter=_INT, validator=_check_count)


def _scale_field():
    return attrs.field(default=None, converter=_FLOAT, validator=_check_scale)


@attrs.frozen(kw_only=True)
class MRopeConfig:
    """What decides a model's M-RoPE positions.

    `family` names the rules (see `mrope_tracker.families`) and `semantics`
    the preset: "reference" (transformers 4.x / vLLM mid-2025 rules, the
    default), "vllm-0.33", "transformers-4.57", "transformers-5" or
    "sglang-0.5", each reproducing that stack's known divergences
    (docs/semantics.md). Fields a
    family does not use stay None; those it uses default to its published
    values. `model_type` is one of the family's model types (default: the
    family's name). `tokens_per_second` is the temporal scale r of video positions
    (Qwen2.5-VL's ``vision_config.tokens_per_second``, an Omni thinker's
    ``position_id_per_seconds``). `temporal_merge_size` divides a video's
    frame count t (ERNIE-4.5-VL's ``temporal_conv_size``); families that
    leave it None take t as it comes.

    An attrs record: converters fill in the family's defaults, validators
    refuse (ValueError or TypeError naming the field), and what the kernels
    read is derived once, on first use.
    """

    family: str = attrs.field(validator=_check_family)
    model_type: str | None = attrs.field(
        default=None,
        converter=attrs.Converter(lambda value, self: self.family if value is None else value, takes_self=True),
        validator=_check_model_type,
    )
    semantics: str = attrs.field(default="reference", validator=_check_semantics)
    spatial_merge_size: int | None = _count_field()
    temporal_merge_size: int | None = _count_field()
    image_token_id: int | None = _id_field()
    video_token_id: int | None = _id_field()
    vision_start_token_id: int | None = _id_field()
    vision_end_token_id: int | None = _id_field()
    audio_token_id: int | None = _id_field()
    audio_start_token_id: int | None = _id_field()
    audio_end_token_id: int | None = _id_field()
    video_start_token_id: int | None = _id_field()
    video_end_token_id: int | None = _id_field()
    tokens_per_second: float | None = _scale_field()
    seconds_per_chunk: float | None = _scale_field()
    n_window: int | None = _count_field()
    # MiniCPM-V 4.7: <slice>, </slice> and newline (<image>, </image> are the
    # vision start and end), and the config's canvas flag (uses_mrope_canvas,
    # or an mrope_mode naming "canvas"), which vLLM 0.33 reads
    slice_start_token_id: int | None = _id_field()
    slice_end_token_id: int | None = _id_field()
    newline_token_id: int | None = _id_field()
    uses_mrope_canvas: bool | None = attrs.field(default=None, converter=_FLAG, validator=_check_flag)

    def __attrs_post_init__(self) -> None:
        # the one check across fields (each field's own ran as its validator)
        ids = {name: getattr(self, name) for name in _ID_FIELDS if getattr(self, name) is not None}
        if len(set(ids.values())) != len(ids):
            raise ValueError(f"token ids: expected distinct special token ids, got {ids}")

    @functools.cached_property
    def kernel_params(self) -> np.ndarray:
        """The packed scalars the numba kernels read (kernels/layout_codes.py, P_*)."""
        return self._pack(FAMILIES[self.family])

    @functools.cached_property
    def num_dims(self) -> int:
        """The family's position axes (rows of every output): 3, or 4 for HunYuan-VL."""
        return FAMILIES[self.family].num_dims

    @functools.cached_property
    def canvas(self) -> bool:
        """Whether MiniCPM-V 4.7's canvas rule places this config's prompts
        (`mrope_tracker.canvas`): always for its family, except under a preset
        with `canvas_flag` (vLLM 0.33) when the config's flag is off; then every
        token sits at its index, as for text. The grid entry points
        (prompt_positions, PromptLayout.from_tokens, ...) refuse such a config."""
        spec = FAMILIES[self.family]
        return spec.canvas and ("canvas_flag" not in self.switches or bool(self.uses_mrope_canvas))

    @functools.cached_property
    def float_carry(self) -> bool:
        """Whether positions follow SGLang 0.5's float32 rule (switch `float_carry`, Qwen3-Omni under
        "sglang-0.5"): the layout builders hand such prompts to core/float_carry.py (docs/semantics.md, S1)."""
        return "float_carry" in self.switches

    def _pack(self, spec: Family) -> np.ndarray:
        switches = self.switches
        params = np.full(codes.NUM_PARAMS, -1, dtype=np.float64)
        params[codes.P_MERGE] = self.spatial_merge_size
        # an id the family lacks, or whose value is unknown (None), stays -1: no token matches it;
        # per-frame videos that reuse the image token (GLM): the video token marks nothing
        frames_reuse_image = spec.video_brackets and spec.video_blocks == "frames"
        for slot, value in (
            (codes.P_IMAGE, self.image_token_id),
            (codes.P_VIDEO, None if frames_reuse_image else self.video_token_id),
            (codes.P_VISION_START, self.vision_start_token_id),
            (codes.P_VISION_END, self.vision_end_token_id),
            (codes.P_AUDIO, self.audio_token_id),
            (codes.P_AUDIO_START, self.audio_start_token_id),
            (codes.P_AUDIO_END, self.audio_end_token_id),
            (codes.P_VIDEO_OPEN, self.video_start_token_id if spec.video_brackets else None),
            (codes.P_VIDEO_CLOSE, self.video_end_token_id if spec.video_brackets else None),
        ):
            # the canvas family's markers mean nothing to the grid kernels: without
            # the canvas (vLLM 0.33, no flag) its prompt is text to them
            params[slot] = -1 if value is None or spec.canvas else value
        params[codes.P_FRAMES] = spec.video_blocks == "frames"
        if not spec.scaled_time:
            params[codes.P_TAU_MODE] = codes.TAU_FRAME
        else:
            if "tau_f64" in switches:
                params[codes.P_TAU_MODE] = codes.TAU_F64
            elif "tau_rate_first" in switches:
                params[codes.P_TAU_MODE] = codes.TAU_F32_RATE
            else:
                params[codes.P_TAU_MODE] = codes.TAU_F32
        # float32: the reference multiplies in float32 (docs/semantics.md)
        params[codes.P_SCALE_R] = np.float32(self.tokens_per_second or 1.0)
        params[codes.P_AV_PAIR] = spec.av_pair == "consecutive"
        params[codes.P_AV_EOS] = "av_eos_block" in switches
        params[codes.P_NEXT_RULE] = codes.NEXT_HW if "next_hw" in switches else codes.NEXT_MAX
        params[codes.P_AV_SHIFT] = "av_shift" in switches
        params[codes.P_CHUNK] = self.audio_chunk_positions or 0
        params[codes.P_AV_MERGE] = "av_merge_tau" in switches
        params[codes.P_SP_DEFAULT] = spec.default_second_per_grid_ts if spec.scaled_time else -1
        params[codes.P_SP_TRUNC] = "int_sp" in switches
        params[codes.P_RAW_SPATIAL] = spec.raw_spatial
        params[codes.P_VIDEO_T_MERGE] = self.temporal_merge_size or 1
        params[codes.P_XD_IMAGES] = spec.xd_images
        params[codes.P_ORDINAL_BASE] = 0
        params[codes.P_AFTER_START] = "items_after_vision_start" in switches
        params.setflags(write=True)  # writable on purpose: numba types read-only arrays apart
        return params

    @property
    def spec(self) -> Family:
        """The family's record (ids, defaults, switches, conventions)."""
        return FAMILIES[self.family]

    @property
    def switches(self) -> frozenset:
        """The behaviours the semantics preset turns on for this family."""
        return FAMILIES[self.family].presets.get(self.semantics, frozenset())

    @property
    def is_omni(self) -> bool:
        """Whether the family has audio (Qwen2.5-Omni, Qwen3-Omni)."""
        return FAMILIES[self.family].has_audio

    @property
    def audio_chunk_positions(self) -> int | None:
        """Qwen2.5-Omni's interleave chunk, in positions: int(tokens_per_second * seconds_per_chunk)."""
        if self.seconds_per_chunk is None:
            return None
        return int(self.tokens_per_second * self.seconds_per_chunk)

    @classmethod
    def from_hf_config(cls, source: Any, *, semantics: str | None = None) -> MRopeConfig:
        """Build from a ``config.json`` path, a model folder, a dict, or a transformers config object.

        `semantics`: "reference" (default), "vllm-0.33", "transformers-4.57",
        "transformers-5" or "sglang-0.5". An `MRopeConfig` passes through, switched to
        `semantics` when one is given. Ids may sit at the top level or in
        ``text_config``; Omni configs are read through ``thinker_config``.

        A value the family reads from configs but this one leaves out takes
        the family's default (`Family.defaults`), with one
        `ConfigDefaultWarning` per model type and field in the process:
        each changes positions. Building `MRopeConfig` directly never warns.
        """
        if isinstance(source, MRopeConfig):
            return (
                source
                if semantics is None or semantics == source.semantics
                else attrs.evolve(source, semantics=semantics)
            )
        semantics = "reference" if semantics is None else semantics
        if not isinstance(semantics, str) or semantics not in SEMANTICS:
            raise ValueError(f"semantics: expected one of {', '.join(SEMANTICS)}, got {semantics!r}")
        if isinstance(source, (str, os.PathLike)):
            source = _read_json(source)
        if source is None or isinstance(source, (int, float, bool, bytes, list, tuple)):
            raise TypeError(f"config: expected a path, a dict or a config object, got {type(source).__name__}")
        model_type = get(source, "model_type")
        if not isinstance(model_type, str) or model_type not in MODEL_TYPES:
            raise ValueError(f"config.model_type: expected one of {', '.join(MODEL_TYPES)}, got {model_type!r}")
        family_name, nested = MODEL_TYPES[model_type]
        scopes = (source,)
        if nested:
            inner = get(source, nested)
            if inner is None:
                raise ValueError(f"config.{nested}: expected the {model_type} sub-config that holds its ids, got None")
            scopes = (inner, source)
        spec = FAMILIES[family_name]
        kwargs = spec.read_config(scopes, semantics)
        for key, value in kwargs.items():
            if value is None and key in spec.defaults:
                _warn_default(model_type, spec, key)
        kwargs = {key: value for key, value in kwargs.items() if value is not None}
        return cls(family=family_name, model_type=model_type, semantics=semantics, **kwargs)


def _read_json(path) -> dict:
    """A config.json, or the config.json inside a model folder."""
    path = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as exc:
        raise ValueError(
            f"config: expected a readable config.json path or model folder, got {path!r} ({exc})"
        ) from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"config: expected valid JSON in {path!r}, got a parse error ({exc})") from None
