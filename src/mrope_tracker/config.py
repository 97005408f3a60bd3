"""Model configuration: the handful of values that decide M-RoPE positions.

`MRopeConfig` is an immutable record built from a Hugging Face ``config.json``
(a path, a dict or a transformers config object) by `MRopeConfig.from_hf_config`.
It also owns the packed scalar arrays that the numba kernels read, so the hot
path never touches Python attributes.

Defaults for missing keys follow the transformers config classes (spec §2.1-§2.3).
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

import attrs
import numpy as np

from .kernels import layout_codes as codes

__all__ = ["MRopeConfig", "SUPPORTED_MODEL_TYPES"]

# model_type -> family. The full Omni config carries its thinker in
# `thinker_config`; the thinker's own config can be passed directly too.
SUPPORTED_MODEL_TYPES: dict[str, str] = {
    "qwen2_vl": "qwen2_vl",
    "qwen2_5_vl": "qwen2_5_vl",
    "qwen2_5_omni": "qwen2_5_omni",
    "qwen2_5_omni_thinker": "qwen2_5_omni",
}

_FAMILY_CODES = {
    "qwen2_vl": codes.FAMILY_QWEN2_VL,
    "qwen2_5_vl": codes.FAMILY_QWEN2_5_VL,
    "qwen2_5_omni": codes.FAMILY_QWEN2_5_OMNI,
}

# Token ids published for every Qwen2/2.5 VL and Omni checkpoint; used only
# when a config omits them (the transformers config classes use the same).
_DEFAULT_IDS = {
    "image_token_id": 151655,
    "video_token_id": 151656,
    "vision_start_token_id": 151652,
    "vision_end_token_id": 151653,
    "audio_token_id": 151646,
    "audio_start_token_id": 151647,
    "audio_end_token_id": 151648,
}


def _get(obj: Any, key: str, default: Any = None) -> Any:
    """Read `key` from a dict or an attribute-style config object."""
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(key, default)
    return getattr(obj, key, default)


def _first(obj: Any, keys: tuple[str, ...], default: Any) -> Any:
    for key in keys:
        value = _get(obj, key)
        if value is not None:
            return value
    return default


def _check_token_id(name: str):
    def check(instance, attribute, value):
        if value is None:
            return
        # below 2**53: the kernels carry ids in a float64 array (exact there)
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value < 2**53:
            raise ValueError(f"{name}: expected an int token id in [0, 2**53), got {value!r}")

    return check


_MAX_SCALE = 1e6  # time scales and chunk lengths far past any checkpoint's, still exact in float32 products


def _positive_number(name: str, value) -> float:
    """A positive real number up to 1e6 (ints and floats; not bools or strings).
    The kernels use time scales as float32 and chunk lengths as int64."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name}: expected a positive number, got {type(value).__name__} {value!r}")
    value = float(value)
    if not math.isfinite(value) or not 0 < value <= _MAX_SCALE:
        raise ValueError(f"{name}: expected a number in (0, {_MAX_SCALE:g}], got {value!r}")
    return value


def _to_int_or_none(value):
    return None if value is None else int(value) if isinstance(value, (int, np.integer)) and not isinstance(value, bool) else value


@attrs.frozen(kw_only=True)
class MRopeConfig:
    """What decides a model's M-RoPE positions.

    `tokens_per_second` is the temporal scale `r` of video positions:
    Qwen2.5-VL's ``vision_config.tokens_per_second``, Qwen2.5-Omni's thinker
    ``position_id_per_seconds`` (spec D7: we follow transformers, not vLLM's
    ``vision_config.tokens_per_second``), and None for Qwen2-VL, whose frames
    are numbered 0, 1, 2, ... (spec §2.1).
    """

    family: str = attrs.field()
    model_type: str = attrs.field(default=None)
    spatial_merge_size: int = attrs.field(default=2)
    image_token_id: int = attrs.field(default=_DEFAULT_IDS["image_token_id"], validator=_check_token_id("image_token_id"))
    video_token_id: int = attrs.field(default=_DEFAULT_IDS["video_token_id"], validator=_check_token_id("video_token_id"))
    vision_start_token_id: int = attrs.field(
        default=_DEFAULT_IDS["vision_start_token_id"], validator=_check_token_id("vision_start_token_id")
    )
    vision_end_token_id: int = attrs.field(
        default=_DEFAULT_IDS["vision_end_token_id"], validator=_check_token_id("vision_end_token_id")
    )
    audio_token_id: int | None = attrs.field(default=None, validator=_check_token_id("audio_token_id"))
    audio_start_token_id: int | None = attrs.field(default=None, validator=_check_token_id("audio_start_token_id"))
    audio_end_token_id: int | None = attrs.field(default=None, validator=_check_token_id("audio_end_token_id"))
    tokens_per_second: float | None = attrs.field(default=None)
    seconds_per_chunk: float | None = attrs.field(default=None)
    # Packed copies for the kernels, derived in __attrs_post_init__.
    kernel_params: np.ndarray = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        if self.family not in _FAMILY_CODES:
            raise ValueError(
                f"family: expected one of {sorted(_FAMILY_CODES)}, got {self.family!r}"
            )
        if self.model_type is None:
            object.__setattr__(self, "model_type", self.family)
        merge = self.spatial_merge_size
        if isinstance(merge, bool) or not isinstance(merge, (int, np.integer)) or merge < 1:
            raise ValueError(f"spatial_merge_size: expected a positive int, got {merge!r}")
        is_omni = self.family == "qwen2_5_omni"
        if is_omni:
            for name in ("audio_token_id", "audio_start_token_id", "audio_end_token_id"):
                if getattr(self, name) is None:
                    object.__setattr__(self, name, _DEFAULT_IDS[name])
            if self.seconds_per_chunk is None:
                object.__setattr__(self, "seconds_per_chunk", 2.0)
            if self.tokens_per_second is None:
                object.__setattr__(self, "tokens_per_second", 25.0)
        else:
            for name in ("audio_token_id", "audio_start_token_id", "audio_end_token_id", "seconds_per_chunk"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name}: only Qwen2.5-Omni uses it, got {getattr(self, name)!r} for {self.family}")
            if self.family == "qwen2_5_vl" and self.tokens_per_second is None:
                # transformers' Qwen2_5_VLVisionConfig default (spec §2.2).
                object.__setattr__(self, "tokens_per_second", 4.0)
            if self.family == "qwen2_vl" and self.tokens_per_second is not None:
                raise ValueError(
                    f"tokens_per_second: Qwen2-VL numbers frames 0, 1, 2, ... and takes no temporal scale, "
                    f"got {self.tokens_per_second!r}"
                )
        r = self.tokens_per_second
        if r is not None:
            r = _positive_number("tokens_per_second", r)
            object.__setattr__(self, "tokens_per_second", r)
        chunk = 0
        if is_omni:
            spc = _positive_number("seconds_per_chunk", self.seconds_per_chunk)
            chunk = int(r * spc)
            if chunk < 1:
                raise ValueError(
                    "seconds_per_chunk: expected a positive number whose product with the temporal scale "
                    f"({r}) is at least 1, got {self.seconds_per_chunk!r}"
                )
            object.__setattr__(self, "seconds_per_chunk", spc)
        ids = {
            name: getattr(self, name)
            for name in (
                "image_token_id",
                "video_token_id",
                "vision_start_token_id",
                "vision_end_token_id",
                "audio_token_id",
                "audio_start_token_id",
                "audio_end_token_id",
            )
            if getattr(self, name) is not None
        }
        if len(set(ids.values())) != len(ids):
            raise ValueError(f"token ids: expected distinct special token ids, got {ids}")
        params = np.full(codes.NUM_PARAMS, -1, dtype=np.float64)
        params[codes.P_FAMILY] = _FAMILY_CODES[self.family]
        params[codes.P_MERGE] = merge
        params[codes.P_IMAGE] = self.image_token_id
        params[codes.P_VIDEO] = self.video_token_id
        params[codes.P_VISION_START] = self.vision_start_token_id
        params[codes.P_VISION_END] = self.vision_end_token_id
        if is_omni:
            params[codes.P_AUDIO] = self.audio_token_id
            params[codes.P_AUDIO_START] = self.audio_start_token_id
            params[codes.P_AUDIO_END] = self.audio_end_token_id
        params[codes.P_CHUNK] = chunk
        params[codes.P_SCALED] = 0 if r is None else 1
        # float32: the reference multiplies in float32 (spec §2.2, D3).
        params[codes.P_SCALE_R] = np.float32(1.0 if r is None else r)
        # Writable on purpose (numba types read-only arrays apart); never written.
        object.__setattr__(self, "kernel_params", params)

    @property
    def is_omni(self) -> bool:
        return self.family == "qwen2_5_omni"

    @property
    def audio_chunk_positions(self) -> int | None:
        """Omni's interleave chunk, in positions: int(tokens_per_second * seconds_per_chunk)."""
        return int(self.kernel_params[codes.P_CHUNK]) if self.is_omni else None

    @classmethod
    def from_hf_config(cls, config: Any) -> "MRopeConfig":
        """Build from a ``config.json`` path, a dict, or a transformers config object.

        Supported model types: qwen2_vl, qwen2_5_vl, qwen2_5_omni (full config,
        read through its ``thinker_config``) and qwen2_5_omni_thinker.
        """
        if isinstance(config, MRopeConfig):
            return config
        if isinstance(config, (str, os.PathLike)):
            try:
                with open(config, encoding="utf-8") as f:
                    config = json.load(f)
            except OSError as exc:
                raise ValueError(f"config: expected a readable config.json path, got {os.fspath(config)!r} ({exc})") from None
            except json.JSONDecodeError as exc:
                raise ValueError(f"config: expected valid JSON in {os.fspath(config)!r}, got a parse error ({exc})") from None
        if config is None or isinstance(config, (int, float, bool, bytes, list, tuple)):
            raise TypeError(
                f"config: expected a path, a dict or a config object, got {type(config).__name__}"
            )
        model_type = _get(config, "model_type")
        supported = ", ".join(SUPPORTED_MODEL_TYPES)
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise ValueError(f"config.model_type: expected one of {supported}, got {model_type!r}")
        family = SUPPORTED_MODEL_TYPES[model_type]
        source = config
        if model_type == "qwen2_5_omni":
            source = _get(config, "thinker_config")
            if source is None:
                raise ValueError("config.thinker_config: expected the Omni thinker's config, got None")
        vision = _get(source, "vision_config")
        kwargs: dict[str, Any] = dict(
            family=family,
            model_type=model_type,
            spatial_merge_size=_to_int_or_none(_get(vision, "spatial_merge_size", 2)),
            image_token_id=_first(source, ("image_token_id", "image_token_index"), _DEFAULT_IDS["image_token_id"]),
            video_token_id=_first(source, ("video_token_id", "video_token_index"), _DEFAULT_IDS["video_token_id"]),
            vision_start_token_id=_first(source, ("vision_start_token_id",), _DEFAULT_IDS["vision_start_token_id"]),
            vision_end_token_id=_first(source, ("vision_end_token_id",), _DEFAULT_IDS["vision_end_token_id"]),
        )
        if family == "qwen2_5_vl":
            kwargs["tokens_per_second"] = _get(vision, "tokens_per_second", 4.0)
        elif family == "qwen2_5_omni":
            kwargs.update(
                audio_token_id=_first(source, ("audio_token_id", "audio_token_index"), _DEFAULT_IDS["audio_token_id"]),
                audio_start_token_id=_first(source, ("audio_start_token_id",), _DEFAULT_IDS["audio_start_token_id"]),
                audio_end_token_id=_first(source, ("audio_end_token_id",), _DEFAULT_IDS["audio_end_token_id"]),
                tokens_per_second=_get(source, "position_id_per_seconds", 25.0),
                seconds_per_chunk=_get(source, "seconds_per_chunk", 2.0),
            )
        return cls(**kwargs)
