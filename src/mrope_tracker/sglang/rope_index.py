"""Drop-ins for SGLang 0.5's ``get_rope_index*`` functions.

SGLang's multimodal processors call four functions of
``sglang/srt/layers/rotary_embedding/mrope_rope_index.py`` (through static
methods of ``MRotaryEmbedding``) on every whole prompt:

- ``get_rope_index(spatial_merge_size, image_token_id, video_token_id,
  vision_start_token_id, model_type, tokens_per_second, input_ids,
  image_grid_thw, video_grid_thw, second_per_grid_ts, **kwargs)``: the
  Qwen2-VL, Qwen2.5-VL, PaddleOCR-VL and Qwen3-VL lines; it hands
  ``qwen3_omni_moe`` on to
- ``get_rope_index_qwen3_omni(...)``: the same arguments, and in ``kwargs``
  ``audio_token_id``, ``audio_start_token_id``, ``position_id_per_seconds``,
  ``use_audio_in_video`` and ``audio_seqlens`` (mel frames per track);
- ``get_rope_index_glm4v(input_ids, hf_config, image_grid_thw,
  video_grid_thw, attention_mask)`` and
- ``get_rope_index_ernie45(input_ids, hf_config, image_grid_thw,
  video_grid_thw)``, which read the ids from the model's config.

Each returns ``(position_ids, mrope_position_deltas)``: positions of shape
(3, B, L) in ``input_ids``' dtype (float32 for Qwen3-Omni), deltas (B, 1).
A prompt without grids gets (3, 1, L) index positions (GLM: (3, B, L)).
The functions here take the same arguments and return the same shapes,
dtypes and devices, computed by `prompt_positions` (one jitted scan per
row) under the `semantics` preset instead of Python loops over tokens.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from ..core.config import MRopeConfig, positive_number
from ..core.config_cache import parsed_config
from ..core.errors import check_all_used
from ..core.inputs import normalize_items, tensor_values
from ..families import SEMANTICS
from ..kernels.hf_batch import KEEP_ALL, KEEP_NONZERO, WRITE_INT, batch_kernel
from .rope_args import (
    as_result,
    check_time_dtype,
    counts_arg,
    flag_arg,
    floats_arg,
    grid_arg,
    input_ids_arg,
    one_prompt,
)
from .rope_fast import RopePlan

__all__ = [
    "get_rope_index",
    "get_rope_index_qwen3_omni",
    "get_rope_index_glm4v",
    "get_rope_index_ernie45",
    "default_semantics",
]

# model types SGLang's get_rope_index serves that this package knows under another name
_MODEL_TYPE_ALIASES = {"qwen4_exp": "qwen3_vl"}


def default_semantics() -> str:
    """ "sglang-0.5" where this package has that preset, else "reference"."""
    return "sglang-0.5" if "sglang-0.5" in SEMANTICS else "reference"


def check_semantics(semantics) -> str:
    if semantics is None:
        return default_semantics()
    if semantics not in SEMANTICS:
        raise ValueError(f"semantics: expected one of {', '.join(SEMANTICS)}, got {semantics!r}")
    return semantics


_CONFIGS: dict = {}
# the batch kernel's float outputs, unused here (the float_carry family takes one row)
_NO_FLOAT_OUT = np.zeros((3, 0, 0), np.float32)
_NO_FLOAT_DELTAS = np.zeros(0, np.float32)
# SGLang's call, by its arguments as they come: what the lean path needs of the config (rope_fast.py)
_PLANS: dict = {}


def _plan_of(key, config: MRopeConfig, omni_function: bool) -> None:
    """Keep the plan of a config the checked route has just read, under the call's own arguments."""
    if key is not None and key not in _PLANS:
        if len(_PLANS) > 256:
            _PLANS.clear()
        _PLANS[key] = RopePlan(config, omni_function)


_ID_TYPES = (int, type(None))


def _plain_extras(tokens_per_second, kwargs) -> bool:
    """Whether the values beside the four ids may stand in a cache key as they come: True == 1 and
    151675.0 == 151675 as keys, so a bool rate or a float id would find an earlier int call's entry
    (the checked route refuses them)."""
    get = kwargs.get
    return (
        type(tokens_per_second) is not bool
        and type(get("position_id_per_seconds")) is not bool
        and type(get("audio_token_id")) in _ID_TYPES
        and type(get("audio_start_token_id")) in _ID_TYPES
    )


def _usual_plan(key, spatial_merge_size, image_token_id, video_token_id, vision_start_token_id):
    """(the plan kept under `key` or None, `key` or None where it cannot be one): ids must be ints, since a float
    or bool id equals an int one as a key and would find the int call's plan (the checked route refuses it)."""
    if type(spatial_merge_size) is type(image_token_id) is type(video_token_id) is type(vision_start_token_id) is int:
        try:
            return _PLANS.get(key), key
        except TypeError:  # an unhashable argument: the checked route says what is wrong
            pass
    return None, None


def _cached_config(key, build) -> MRopeConfig:
    """Configs cost more to build than a short prompt's positions: one per argument set."""
    config = _CONFIGS.get(key)
    if config is None:
        with warnings.catch_warnings():
            # SGLang passes no vision_end id; the family default stands in (it places no token)
            warnings.filterwarnings("ignore", message=r"config \(.*\): no (vision_end|audio_end)_token_id")
            config = build()
        if len(_CONFIGS) > 256:
            _CONFIGS.clear()
        _CONFIGS[key] = config
    return config


def qwen_config(
    spatial_merge_size,
    image_token_id,
    video_token_id,
    vision_start_token_id,
    model_type,
    tokens_per_second,
    kwargs,
    semantics,
) -> MRopeConfig:
    """The `MRopeConfig` of `get_rope_index`'s arguments."""
    # the arguments as they come are the cache key of the common call (a few hundred ns)
    fast = (spatial_merge_size, image_token_id, video_token_id, vision_start_token_id, model_type, tokens_per_second)
    fast += (semantics, kwargs.get("audio_token_id"), kwargs.get("audio_start_token_id"))
    fast += (kwargs.get("position_id_per_seconds"),)
    ints = type(spatial_merge_size) is type(image_token_id) is type(video_token_id) is int
    if ints and type(vision_start_token_id) is int and _plain_extras(tokens_per_second, kwargs):
        try:
            config = _CONFIGS.get(fast)
        except TypeError:  # an unhashable argument: the checked way below says what is wrong
            fast, config = None, None
    else:  # (2.0 == 2 as a key: a float id would find an int config, and be accepted or not by the cache's state)
        fast, config = None, None
    if config is not None:
        return config
    if not isinstance(model_type, str):
        raise TypeError(f"model_type: expected a str, got {type(model_type).__name__}")
    named = {"spatial_merge_size": spatial_merge_size, "image_token_id": image_token_id}
    named.update(video_token_id=video_token_id, vision_start_token_id=vision_start_token_id)
    if model_type == "qwen3_omni_moe":  # (its audio ids too: 151675.0 == 151675 as a key)
        named.update({name: kwargs.get(name) for name in ("audio_token_id", "audio_start_token_id")})
    for name, value in named.items():  # (before any cache key: 2.0 == 2 there)
        if value is not None and (not isinstance(value, (int, np.integer)) or isinstance(value, bool)):
            raise TypeError(f"{name}: expected an int, got {value!r}")
    if tokens_per_second is not None and (
        not isinstance(tokens_per_second, (int, float, np.integer, np.floating)) or isinstance(tokens_per_second, bool)
    ):
        raise TypeError(f"tokens_per_second: expected a number or None, got {tokens_per_second!r}")
    model_type = _MODEL_TYPE_ALIASES.get(model_type, model_type)
    ids = {"image_token_id": image_token_id, "video_token_id": video_token_id}
    ids["vision_start_token_id"] = vision_start_token_id
    vision = {"spatial_merge_size": spatial_merge_size}
    omni = type(model_type) is str and model_type == "qwen3_omni_moe"  # (any other type: the checked route names it)
    if omni:
        for name in ("audio_token_id", "audio_start_token_id", "position_id_per_seconds"):
            if name not in kwargs:
                raise TypeError(f"{name}: expected it among the keyword arguments for qwen3_omni_moe, got none")
            ids[name] = kwargs[name]
        rate = kwargs["position_id_per_seconds"]
        if rate is not None:  # (checked under its own name: the config's field is tokens_per_second)
            positive_number("position_id_per_seconds", rate)
    elif tokens_per_second is not None:
        vision["tokens_per_second"] = tokens_per_second
    ids = {name: value for name, value in ids.items() if value is not None}
    key = ("qwen", model_type, tuple(sorted(ids.items())), tuple(sorted(vision.items())), semantics)

    def build():
        fields = {**ids, "vision_config": vision}
        source = {"model_type": model_type, "thinker_config": fields} if omni else {"model_type": model_type, **fields}
        return MRopeConfig.from_hf_config(source, semantics=semantics)

    config = _cached_config(key, build)
    if fast is not None:
        _CONFIGS[fast] = config
    return config


def hf_config_of(hf_config, semantics: str) -> MRopeConfig:
    """The `MRopeConfig` of a model config object (GLM, ERNIE), kept while the
    object reads the same (core/config_cache.py: a field changed in place is
    read again, never served from the old parse)."""
    return parsed_config(hf_config, semantics)


def _index_result(input_ids: torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """No grids: index positions, (3, 1, L) int64, and a (1, 1) zero delta, as
    SGLang returns them (made in numpy: a torch op costs more than the values)."""
    positions = np.empty((3, 1, length), np.int64)
    positions[:] = np.arange(length)
    return as_result(positions, np.zeros((1, 1), np.int64), input_ids, torch.int64)


def _batch(config, ids, images, videos, times, audio=None, use_av=False, mask=None):
    """Positions (3, B, L) int64 and deltas (B,) for every row of `ids` (B, L), each row its own prompt."""
    rows, length = ids.shape
    if rows == 1 and mask is None:  # SGLang's call: one prompt, its positions used as they come
        positions, delta = one_prompt(config, ids[0], images, videos, times, audio, use_av)
        return positions.reshape(3, 1, length), np.array([delta], np.int64)
    # Rows share the items in batch order (SGLang's counters run across rows), and only the family's own scan
    # knows how many of them a row holds (GLM's frames are images inside video brackets, ERNIE's videos have
    # no vision_start): the transformers drop-in's batch kernel positions every row, taking items as it goes.
    items, _ = normalize_items(config, images, videos, times, audio, use_av)
    if mask is None:
        keep, rule = ids, KEEP_ALL  # (the kernel never reads it)
    else:
        keep, rule = mask.astype(np.int64), KEEP_NONZERO
    out = np.empty((3, rows, length), np.int64)
    deltas = np.empty(rows, np.int64)
    starts = np.zeros((rows + 1, 3), np.int64)
    row, code, a, b, c, d = batch_kernel(
        out, deltas, _NO_FLOAT_OUT, _NO_FLOAT_DELTAS, np.empty(rows, np.int64), starts, ids, keep, rule, 1, True,
        config.kernel_params, *items, WRITE_INT,
    )  # fmt: skip
    if row < rows:  # the row's own scan, with the items left to it, names what is wrong
        first_image, first_video, first_audio = (int(k) for k in starts[row])
        row_ids = ids[row] if mask is None else ids[row][mask[row]]
        try:
            one_prompt(
                config, row_ids, items[0][first_image:], items[1][first_video:],
                None if times is None else items[2][first_video:],
                None if audio is None else np.asarray(audio)[first_audio:], use_av,
            )  # fmt: skip
        except ValueError as exc:
            raise ValueError(f"input_ids row {row}, with the items rows before it left: {exc}") from None
        raise ValueError(f"input_ids row {row}: cannot be positioned (code {code})")  # (the scan raises first)
    check_all_used(starts[rows], items[0], items[1], items[3])
    return out, deltas


def prepared(input_ids, image_grid_thw, video_grid_thw) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """The arguments every drop-in takes, in the kernels' form: ``input_ids`` (B, L) and the grids."""
    ids = input_ids_arg(input_ids)
    return ids, grid_arg(image_grid_thw, "image_grid_thw"), grid_arg(video_grid_thw, "video_grid_thw")


def _result(config, input_ids, ids, images, videos, times=None, audio=None, use_av=False, mask=None, floats=False):
    """What every drop-in returns: positions (3, B, L) in ``input_ids``' dtype
    (float32 for Qwen3-Omni), deltas (B, 1) int64 (float32 for Qwen3-Omni)."""
    if images is None and videos is None:
        return _index_result(input_ids, ids.shape[1])
    if config.spec.scaled_time:
        check_time_dtype(config, times, videos)
        times = floats_arg(times)
    else:
        times = None  # SGLang reads no time scale for the others
    positions, deltas = _batch(config, ids, images, videos, times, audio, use_av, mask)
    if floats:
        return as_result(positions, deltas, input_ids, torch.float32, torch.float32)
    return as_result(positions, deltas, input_ids, input_ids.dtype)


def get_rope_index(
    spatial_merge_size,
    image_token_id,
    video_token_id,
    vision_start_token_id,
    model_type,
    tokens_per_second=None,
    input_ids=None,
    image_grid_thw=None,
    video_grid_thw=None,
    second_per_grid_ts=None,
    *,
    semantics: str | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """SGLang 0.5's ``get_rope_index``: ``(positions (3, B, L), deltas (B, 1))``.

    `semantics` (ours, keyword only): the preset (default `default_semantics()`)."""
    omni = type(model_type) is str and model_type == "qwen3_omni_moe"  # (any other type: the checked route names it)
    if omni:  # (the key of get_rope_index_qwen3_omni's plans, which this call shares)
        get = kwargs.get
        key = (
            spatial_merge_size, image_token_id, video_token_id, vision_start_token_id, tokens_per_second, semantics,
            get("audio_token_id"), get("audio_start_token_id"), get("position_id_per_seconds"),
        )  # fmt: skip
        if not _plain_extras(tokens_per_second, kwargs):
            key = None
    else:
        key = (
            spatial_merge_size, image_token_id, video_token_id, vision_start_token_id, model_type, tokens_per_second,
            semantics,
        )  # fmt: skip
        if type(tokens_per_second) is bool:  # (True == 1 as a key: it would find an int call's plan)
            key = None
    plan, key = _usual_plan(key, spatial_merge_size, image_token_id, video_token_id, vision_start_token_id)
    if plan is not None:
        result = plan.call(input_ids, image_grid_thw, video_grid_thw, second_per_grid_ts, kwargs)
        if result is not None:
            return result
    if omni:
        return get_rope_index_qwen3_omni(
            spatial_merge_size,
            image_token_id,
            video_token_id,
            vision_start_token_id,
            tokens_per_second,
            input_ids,
            image_grid_thw,
            video_grid_thw,
            second_per_grid_ts,
            semantics=semantics,
            **kwargs,
        )
    semantics = check_semantics(semantics)
    ids, images, videos = prepared(input_ids, image_grid_thw, video_grid_thw)
    config = qwen_config(
        spatial_merge_size, image_token_id, video_token_id, vision_start_token_id, model_type, tokens_per_second,
        kwargs, semantics,
    )  # fmt: skip
    _plan_of(key, config, omni_function=False)
    return _result(config, input_ids, ids, images, videos, second_per_grid_ts)


def get_rope_index_qwen3_omni(
    spatial_merge_size,
    image_token_id,
    video_token_id,
    vision_start_token_id,
    tokens_per_second=None,
    input_ids=None,
    image_grid_thw=None,
    video_grid_thw=None,
    second_per_grid_ts=None,
    *,
    semantics: str | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """SGLang 0.5's ``get_rope_index_qwen3_omni``: float32 positions (3, B, L)
    and float32 deltas (B, 1); ``audio_seqlens`` are mel frames per track."""
    get = kwargs.get
    key = (
        spatial_merge_size, image_token_id, video_token_id, vision_start_token_id, tokens_per_second, semantics,
        get("audio_token_id"), get("audio_start_token_id"), get("position_id_per_seconds"),
    )  # fmt: skip
    if not _plain_extras(tokens_per_second, kwargs):
        key = None
    plan, key = _usual_plan(key, spatial_merge_size, image_token_id, video_token_id, vision_start_token_id)
    if plan is not None:
        result = plan.call(input_ids, image_grid_thw, video_grid_thw, second_per_grid_ts, kwargs)
        if result is not None:
            return result
    semantics = check_semantics(semantics)
    ids, images, videos = prepared(input_ids, image_grid_thw, video_grid_thw)
    config = qwen_config(
        spatial_merge_size, image_token_id, video_token_id, vision_start_token_id, "qwen3_omni_moe",
        tokens_per_second, kwargs, semantics,
    )  # fmt: skip
    _plan_of(key, config, omni_function=True)
    if (images is not None or videos is not None) and ids.shape[0] != 1:
        raise ValueError(f"input_ids: expected one row for qwen3_omni_moe, got {ids.shape[0]}")
    audio = counts_arg(kwargs.get("audio_seqlens"))
    use_av = flag_arg(kwargs.get("use_audio_in_video", False))
    return _result(config, input_ids, ids, images, videos, second_per_grid_ts, audio, use_av, floats=True)


def get_rope_index_glm4v(
    input_ids, hf_config, image_grid_thw, video_grid_thw, attention_mask, *, semantics: str | None = None, **kwargs
) -> tuple[torch.Tensor, torch.Tensor]:
    """SGLang 0.5's ``get_rope_index_glm4v``: tokens where `attention_mask`
    is 1 get positions, the others 1; deltas count the padded row."""
    semantics = check_semantics(semantics)
    ids, images, videos = prepared(input_ids, image_grid_thw, video_grid_thw)
    config = hf_config_of(hf_config, semantics)
    rows, length = ids.shape
    if attention_mask is not None:
        _check_mask(attention_mask, rows, length)
    if images is None and videos is None:
        device = input_ids.device
        if attention_mask is None or not length:  # (SGLang's own amax fails on an empty row: no positions, delta 0)
            positions = torch.arange(length, device=device).view(1, 1, -1).expand(3, rows, length)
            return positions, torch.zeros((rows, 1), dtype=input_ids.dtype, device=device)
        positions = attention_mask.long().cumsum(-1) - 1
        positions.masked_fill_(attention_mask == 0, 1)
        positions = positions.unsqueeze(0).expand(3, -1, -1).to(attention_mask.device)
        return positions, positions.amax(dim=0).amax(-1, keepdim=True) + 1 - attention_mask.shape[-1]
    mask = None
    if attention_mask is not None:
        mask = tensor_values(attention_mask, "attention_mask", widen_bfloat16=True) == 1
        if mask.all():
            mask = None
    return _result(config, input_ids, ids, images, videos, mask=mask)


def _check_mask(attention_mask, rows: int, length: int) -> None:
    """GLM's attention_mask: a real-valued tensor of input_ids' shape (SGLang compares it with 0 and 1)."""
    if not isinstance(attention_mask, torch.Tensor):
        raise TypeError(
            f"attention_mask: expected a tensor of shape {(rows, length)}, got {type(attention_mask).__name__}"
        )
    if tuple(attention_mask.shape) != (rows, length):
        raise ValueError(
            f"attention_mask: expected shape {(rows, length)} (input_ids'), got {tuple(attention_mask.shape)}"
        )
    if attention_mask.dtype.is_complex or attention_mask.device.type == "meta":
        raise TypeError(
            f"attention_mask: expected a real-valued tensor that holds values, got {attention_mask.dtype} "
            f"on {attention_mask.device}"
        )


def get_rope_index_ernie45(
    input_ids, hf_config, image_grid_thw, video_grid_thw, *, semantics: str | None = None, **kwargs
) -> tuple[torch.Tensor, torch.Tensor]:
    """SGLang 0.5's ``get_rope_index_ernie45``."""
    semantics = check_semantics(semantics)
    ids, images, videos = prepared(input_ids, image_grid_thw, video_grid_thw)
    config = hf_config_of(hf_config, semantics)
    return _result(config, input_ids, ids, images, videos)
