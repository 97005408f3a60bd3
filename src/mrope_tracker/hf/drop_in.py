"""Training parity: a drop-in for transformers' ``get_rope_index``.

`get_rope_index` returns what the installed transformers' own
``get_rope_index`` returns for a padded batch: the same ``(num_dims, B, L)``
positions and ``(B, 1)`` deltas, with the same dtypes and the same values,
padding included. One jitted call computes the whole batch; transformers
loops in Python over every row and every item.

What differs between transformers lines, besides the position rules
themselves (the `semantics` presets, docs/semantics.md), is how a batch is
packed (the batch "convention"):

================  ==========================  ============================
                  transformers 4.x (4.57)     transformers 5.x (5.24)
================  ==========================  ============================
kept tokens       ``attention_mask == 1``     VL: ``attention_mask != 0``;
                                              Omni: ``== 1``
padding value     1; Qwen3-Omni 0             VL 0; Qwen2.5-Omni 1;
                                              Qwen3-Omni 0
delta length      VL: the padded row (D10);   the row's kept tokens
                  Omni: the kept tokens
no grids at all   ``attention_mask`` cumsum   VL: the per-row path (text);
                  (or arange, VL only)        Omni: the cumsum, as 4.x
================  ==========================  ============================

Qwen3-Omni positions are float32 (its video times are not truncated), and
so are its deltas. The Omni thinkers of both lines need ``attention_mask``;
here None means every token is kept.

This module holds no family's facts: each family's record
(`mrope_tracker.families`) says how transformers packs its batches under
each convention (`Family.transformers_batch`, a `BatchRules`) and whether
its positions are float32 (`float_positions`, `float_times`).
"""

from __future__ import annotations

import functools

import attrs
import numpy as np
import torch

from ..core.config import MRopeConfig
from ..core.config_cache import parsed_config
from ..core.errors import check_all_used
from ..core.inputs import (
    EMPTY_FLOAT,
    EMPTY_GRID,
    EMPTY_INT,
    as_audio_lengths,
    as_grid,
    as_second_per_grid_ts,
    audio_token_counts,
    plain_ndarray,
    tensor_values,
)
from ..core.positions import prompt_positions
from ..families import FAMILIES, SEMANTICS, BatchRules
from ..kernels.hf_batch import (
    ERR_EMPTY_ROW,
    ERR_FLOAT_LAYOUT,
    KEEP_ALL,
    KEEP_NONZERO,
    KEEP_ONE,
    WRITE_FLOAT,
    WRITE_INT,
    batch_kernel,
)
from .canvas_batch import canvas_rope_index
from .versions import CONVENTIONS, default_convention, default_semantics

__all__ = ["get_rope_index", "mm_token_type_ids", "warmup"]

_NO_OUT = np.zeros((3, 0, 0), np.int64)  # "write no positions" for the batch kernel
_NO_FLOAT_OUT = np.zeros((3, 0, 0), np.float32)
_CPU = torch.device("cpu")


# --------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------


def _describe(value) -> str:
    if isinstance(value, (np.ndarray, torch.Tensor)):
        return f"{type(value).__name__} of dtype {value.dtype} and shape {tuple(value.shape)}"
    return f"{type(value).__name__} {value!r}"[:200]


def _numpy(value, name: str) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return tensor_values(value, name)
    if isinstance(value, np.ndarray):
        return plain_ndarray(value, name)
    if isinstance(value, (list, tuple)):
        try:
            return np.array(value)
        except (ValueError, TypeError) as exc:
            raise ValueError(
                f"{name}: expected a rectangular (batch, length) array, got {_describe(value)} ({exc})"
            ) from None
    raise TypeError(f"{name}: expected a torch tensor, numpy array or list of rows, got {_describe(value)}")


def _input_ids(input_ids) -> tuple[np.ndarray, torch.dtype, torch.device]:
    """(int64 (B, L) array, the dtype positions take, the device results go to)."""
    if type(input_ids) is torch.Tensor and input_ids.dtype is torch.int64 and input_ids.dim() == 2:
        if input_ids.device.type == "cpu" and input_ids.is_contiguous():  # what a training step passes
            return input_ids.numpy(), torch.int64, _CPU
    arr = _numpy(input_ids, "input_ids")
    if arr.ndim != 2:
        raise ValueError(f"input_ids: expected shape (batch, length), got {_describe(input_ids)}")
    if arr.dtype.kind not in "iu" or arr.dtype == np.bool_:
        raise TypeError(f"input_ids: expected integer token ids, got {_describe(input_ids)}")
    if isinstance(input_ids, torch.Tensor):
        dtype, device = input_ids.dtype, input_ids.device
    else:
        dtype, device = torch.int64, torch.device("cpu")
    return np.ascontiguousarray(arr, dtype=np.int64), dtype, device


def _mask(attention_mask, shape) -> np.ndarray | None:
    if attention_mask is None:
        return None
    if type(attention_mask) is torch.Tensor and attention_mask.dtype is torch.int64 and attention_mask.shape == shape:
        if attention_mask.device.type == "cpu" and attention_mask.is_contiguous():
            return attention_mask.numpy()
    arr = _numpy(attention_mask, "attention_mask")
    if arr.shape != shape:
        raise ValueError(f"attention_mask: expected shape {shape} (that of input_ids), got {_describe(attention_mask)}")
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"attention_mask: expected 0/1 numbers or bools, got {_describe(attention_mask)}")
    return arr


def _grid_or_none(value, name: str):
    """None stays None (transformers tells "no grids" from an empty tensor)."""
    return None if value is None else as_grid(value, name)


def mm_token_type_ids(config, input_ids) -> torch.Tensor:
    """The ``mm_token_type_ids`` transformers 5.x processors return with the
    ids: 0 text, 1 image, 2 video (GLM: an image token inside
    begin/end_of_video is a video frame; ERNIE-4.5-VL: its video token, or
    the image token between its video brackets), 3 audio (Omni); start and
    end markers are text. (B, L) int64."""
    cfg = config if type(config) is MRopeConfig else MRopeConfig.from_hf_config(config)
    ids, _, device = _input_ids(input_ids)
    return torch.from_numpy(_type_ids(cfg, ids)).to(device)


def _type_ids(cfg: MRopeConfig, ids: np.ndarray) -> np.ndarray:
    types = np.zeros(ids.shape, np.int64)
    image = ids == cfg.image_token_id
    if cfg.spec.video_brackets:
        inside = np.cumsum(ids == cfg.video_start_token_id, axis=1) > np.cumsum(ids == cfg.video_end_token_id, axis=1)
        types[image & ~inside] = 1
        types[image & inside] = 2
        # ERNIE's transformers 5 form has a video token of its own; GLM's frames reuse the image token
        if cfg.spec.video_blocks == "block" and cfg.video_token_id is not None:
            types[ids == cfg.video_token_id] = 2
    else:
        types[image] = 1
        types[ids == cfg.video_token_id] = 2
    if cfg.audio_token_id is not None:
        types[ids == cfg.audio_token_id] = 3
    return types


def _check_types(cfg: MRopeConfig, ids: np.ndarray, keep: np.ndarray, given) -> None:
    """transformers 5.x groups tokens by ``mm_token_type_ids``; we read the
    ids. They agree when the types are the processor's: refuse others."""
    arr = _numpy(given, "mm_token_type_ids")
    if arr.shape != ids.shape:
        raise ValueError(f"mm_token_type_ids: expected shape {ids.shape} (that of input_ids), got {_describe(given)}")
    expected = _type_ids(cfg, ids)
    bad = (arr != expected) & keep
    if bad.any():
        b, j = (int(v) for v in np.argwhere(bad)[0])
        raise ValueError(
            f"mm_token_type_ids: expected the processor's types (0 text, 1 image, 2 video) of input_ids, "
            f"got {int(arr[b, j])} at row {b}, token {j} (id {int(ids[b, j])}, type {int(expected[b, j])})"
        )


# --------------------------------------------------------------------------
# The drop-in
# --------------------------------------------------------------------------


def _config(config, semantics: str | None) -> MRopeConfig:
    if semantics is not None and semantics not in SEMANTICS:
        raise ValueError(f"semantics: expected one of {', '.join(SEMANTICS)}, got {semantics!r}")
    if type(config) is MRopeConfig:
        if semantics is None or semantics == config.semantics:
            return config
        return _with_semantics(config, semantics)
    # a config object (model.config, every forward pass): parsed once while it reads the same
    return parsed_config(config, default_semantics() if semantics is None else semantics)


@functools.lru_cache(maxsize=64)
def _with_semantics(config: MRopeConfig, semantics: str) -> MRopeConfig:
    """The config under another preset (cached: building one costs more than a small batch)."""
    return attrs.evolve(config, semantics=semantics)


def get_rope_index(
    config,
    input_ids,
    image_grid_thw=None,
    video_grid_thw=None,
    attention_mask=None,
    *,
    second_per_grid_ts=None,
    audio_feature_lengths=None,
    use_audio_in_video: bool = False,
    video_timestamps=None,
    mm_token_type_ids=None,
    semantics: str | None = None,
    convention: str | None = None,
    target_sizes=None,
    target_sizes_videos=None,
    downsample_mode: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' ``get_rope_index`` for a padded batch:
    ``(position_ids (num_dims, B, L), mrope_position_deltas (B, 1))``, num_dims
    the family's axes (3; HunYuan-VL's 4, whose last axis numbers images
    across the whole batch, as transformers does).

    `config`: anything `MRopeConfig.from_hf_config` reads (a config.json
    path, a model folder, a dict, a transformers config) or an
    `MRopeConfig`. `input_ids` (B, L), left- or right-padded or not;
    `attention_mask` (B, L) or None. Grids are (t, h, w) before merging,
    concatenated over the rows in row order, as transformers takes them (one
    row per image and per video); `second_per_grid_ts` one value per video;
    `audio_feature_lengths` (Omni) one mel-frame count per audio track,
    video tracks included, in batch order. `video_timestamps` is accepted
    and unused (Qwen3-VL and GLM tell time in the text).
    `mm_token_type_ids` (transformers 5.x), when given, must be the
    processor's types of `input_ids`.

    MiniCPM-V 4.7 (its canvas, `hf.canvas_batch`) takes no grids but
    `mm_token_type_ids` (0 text, 1 image, 2 video), the (n, 2) patch grids
    `target_sizes` and `target_sizes_videos` of every crop in batch order,
    and optionally `downsample_mode` ("16x" or "4x"), as transformers 5.24's
    ``MiniCPMV4_7Model.get_rope_index``.

    `semantics`: the position rules (default: the installed transformers'
    preset, `default_semantics()`). `convention`: how the batch is packed,
    "transformers-4" or "transformers-5" (default: that of a transformers
    preset, else of the installed line); see the module docstring.
    Positions are int64 (the dtype of `input_ids` when it is a tensor), and
    float32 for Qwen3-Omni, as transformers returns them; results are on
    `input_ids`' device.
    """
    cfg = _config(config, semantics)
    convention = _convention(cfg, convention)
    del video_timestamps  # time is text for Qwen3-VL and GLM
    if not isinstance(use_audio_in_video, (bool, np.bool_)):
        raise TypeError(f"use_audio_in_video: expected a bool, got {_describe(use_audio_in_video)}")
    ids, dtype, device = _input_ids(input_ids)
    mask = _mask(attention_mask, ids.shape)
    canvas_args = (target_sizes, target_sizes_videos, downsample_mode)
    if cfg.spec.canvas:
        if image_grid_thw is not None or video_grid_thw is not None:
            raise ValueError(
                f"image_grid_thw, video_grid_thw: expected None for {cfg.family} (a canvas: its crops' sizes go in "
                "target_sizes and target_sizes_videos)"
            )
        positions, deltas = canvas_rope_index(cfg, ids, mask, mm_token_type_ids, *canvas_args)
        return positions.to(device), deltas.to(device)
    rules = _batch_rules(cfg, convention, canvas_args)
    images = _grid_or_none(image_grid_thw, "image_grid_thw")
    videos = _grid_or_none(video_grid_thw, "video_grid_thw")
    if images is None and videos is None and rules.text_only != "rows":
        return _fallback(cfg, rules, ids, mask, dtype, device)
    mask, rule = _kept_mask(mask, ids, rules)
    if mm_token_type_ids is not None and rules.type_ids:
        _check_types(cfg, ids, _keep(mask, rule), mm_token_type_ids)
    items = _items(cfg, images, videos, second_per_grid_ts, audio_feature_lengths)
    return _batch(cfg, rules, ids, mask, rule, items, bool(use_audio_in_video), dtype, device)


def _convention(cfg: MRopeConfig, convention: str | None) -> str:
    """`convention`, checked, or the default for the config's preset."""
    if convention is None:
        return default_convention(cfg.semantics)
    if convention not in CONVENTIONS:
        raise ValueError(f"convention: expected one of {', '.join(CONVENTIONS)}, got {convention!r}")
    return convention


def _batch_rules(cfg: MRopeConfig, convention: str, canvas_args) -> BatchRules:
    """The family's batch rules under `convention`; a family without a canvas takes no canvas argument."""
    for name, value in zip(("target_sizes", "target_sizes_videos", "downsample_mode"), canvas_args):
        if value is not None:
            raise ValueError(f"{name}: expected None for {cfg.family} (only MiniCPM-V 4.7's canvas reads it)")
    rules = cfg.spec.transformers_batch.get(convention)
    if rules is None:
        raise ValueError(
            f"convention: expected one of {', '.join(cfg.spec.transformers_batch) or 'none'} for {cfg.family} "
            f"(those transformers has a get_rope_index for), got {convention!r}"
        )
    return rules


def _items(cfg: MRopeConfig, images, videos, second_per_grid_ts, audio_feature_lengths) -> tuple:
    """(images, videos, seconds per grid, audio lengths, audio tokens) in the batch kernel's form."""
    images = EMPTY_GRID if images is None else images
    videos = EMPTY_GRID if videos is None else videos
    if second_per_grid_ts is None and videos.shape[0] == 0:
        sp = EMPTY_FLOAT
    else:
        sp = as_second_per_grid_ts(second_per_grid_ts, videos.shape[0], cfg)
    lengths = EMPTY_INT if audio_feature_lengths is None else as_audio_lengths(audio_feature_lengths, cfg)
    return images, videos, sp, lengths, audio_token_counts(cfg, lengths)


def _kept_mask(mask: np.ndarray | None, ids: np.ndarray, rules: BatchRules) -> tuple[np.ndarray, int]:
    """The attention mask in the batch kernel's form, and its KEEP_* rule."""
    if mask is None:
        return ids, KEEP_ALL  # (the kernel never reads it)
    rule = KEEP_NONZERO if rules.keep == "nonzero" else KEEP_ONE
    if mask.dtype.kind == "f":  # the rule on the floats, as transformers applies it
        return (mask != 0 if rule == KEEP_NONZERO else mask == 1).astype(np.int64), KEEP_NONZERO
    if mask.dtype != np.int64 or not mask.flags.c_contiguous:
        mask = np.ascontiguousarray(mask, dtype=np.int64)
    return mask, rule


def _batch(cfg: MRopeConfig, rules: BatchRules, ids, mask, rule: int, items, use_av: bool, dtype, device):
    """Every row positioned by one batch_kernel call, as `get_rope_index` returns them
    (`items`: the images, videos, their seconds per grid, audio lengths and audio tokens)."""
    images, videos, sp, lengths, audio = items
    num_rows, width = ids.shape
    # times transformers keeps unrounded under this preset (Qwen3-Omni; the others truncate them, D8),
    # or SGLang 0.5 computes unrounded and then truncates every position (`float_carry`, S1)
    floats = cfg.semantics in cfg.spec.float_times or cfg.float_carry
    out = _NO_OUT if floats else np.empty((cfg.num_dims, num_rows, width), np.int64)
    float_out = np.empty((3, num_rows, width), np.float32) if floats else _NO_FLOAT_OUT
    deltas = np.empty(num_rows, np.int64)
    float_deltas = np.empty(num_rows if floats else 0, np.float32)
    kept = np.empty(num_rows, np.int64)
    starts = np.zeros((num_rows + 1, 3), np.int64)
    row, code, a, b, c, d = batch_kernel(
        out, deltas, float_out, float_deltas, kept, starts, ids, mask, rule, rules.pad, rules.padded_delta,
        cfg.kernel_params, images, videos, sp, audio, use_av, WRITE_FLOAT if floats else WRITE_INT,
    )  # fmt: skip
    if row < num_rows:
        keep = _keep(mask, rule)
        if code == ERR_FLOAT_LAYOUT:
            _float_error(cfg, row, ids, keep, images, videos, sp, lengths, starts, use_av)
        _row_error(cfg, row, code, ids, keep, images, videos, sp, lengths, starts, use_av)
    check_all_used(starts[num_rows], images, videos, audio)
    if cfg.float_carry:
        out, deltas = _truncated(float_out, _keep(mask, rule), kept, rules)
    elif floats:
        return _result(float_out, float_deltas, device)
    if cfg.spec.float_positions:  # truncated times, as float32 (the dtype transformers' model code expects)
        return _result(out.astype(np.float32), deltas.astype(np.float32), device)
    return _result(out, deltas, device, dtype)


def _truncated(float_out: np.ndarray, keep: np.ndarray, kept: np.ndarray, rules: BatchRules):
    """SGLang 0.5's Qwen3-Omni positions from the float32 ones: truncated, and
    each row's delta from its largest kept position (docs/semantics.md, S1)."""
    out = float_out.astype(np.int64)
    top = np.where(keep[None], out, -1).max(axis=(0, 2))
    length = keep.shape[1] if rules.padded_delta else kept
    return out, top + 1 - length


def _result(positions: np.ndarray, deltas: np.ndarray, device, dtype=None):
    """(positions, deltas as (B, 1)) as tensors on `device` (positions in `dtype`)."""
    positions = torch.from_numpy(positions)
    if dtype is not None and dtype is not positions.dtype:
        positions = positions.to(dtype)
    deltas = torch.from_numpy(deltas.reshape(-1, 1))
    if device.type != "cpu":
        return positions.to(device), deltas.to(device)
    return positions, deltas


def _keep(mask: np.ndarray, rule: int) -> np.ndarray:
    """The kept tokens as a (B, L) bool array."""
    if rule == KEEP_ALL:
        return np.ones(mask.shape, np.bool_)
    return mask == 1 if rule == KEEP_ONE else mask != 0


def _fallback(cfg: MRopeConfig, rules: BatchRules, ids, mask, dtype, device):
    """transformers' path without grids: positions from the attention mask's
    cumsum (pads 1, whatever `rules.pad` says for the grid path), or an
    arange when there is no mask and `rules.text_only` says so."""
    num_rows, width = ids.shape
    if rules.text_only == "cumsum_or_arange" and mask is None:
        positions = torch.arange(width, dtype=torch.int64).view(1, 1, -1).expand(cfg.num_dims, num_rows, -1)
        return positions.to(device), torch.zeros((num_rows, 1), dtype=dtype, device=device)
    if mask is None:  # (transformers' model code always passes one here)
        mask = np.ones(ids.shape, np.int64)
    as_float = cfg.spec.float_positions
    values = mask.astype(np.float32 if as_float else np.int64)
    pos = np.cumsum(values, axis=-1, dtype=values.dtype) - values.dtype.type(1)
    pos[mask == 0] = 1
    top = pos.max(axis=-1, keepdims=True)
    if rules.padded_delta:
        deltas = top + 1 - width
    else:
        deltas = top + values.dtype.type(1) - mask.astype(np.int64).sum(axis=-1, keepdims=True).astype(values.dtype)
    positions = torch.from_numpy(np.ascontiguousarray(np.broadcast_to(pos, (cfg.num_dims, num_rows, width))))
    return positions.to(device), torch.from_numpy(np.ascontiguousarray(deltas)).to(device)


def _row_items(starts, row, images, videos, sp, lengths, end: bool):
    """The items of `row` (end) or every item from its first one on."""
    lo = starts[row]
    hi = starts[row + 1] if end else (images.shape[0], videos.shape[0], lengths.shape[0])
    return {
        "image_grid_thw": images[lo[0] : hi[0]],
        "video_grid_thw": videos[lo[1] : hi[1]],
        "second_per_grid_ts": sp[lo[1] : hi[1]] if sp.shape[0] else None,
        "audio_feature_lengths": lengths[lo[2] : hi[2]],
    }


def _row_error(cfg, row, code, ids, keep, images, videos, sp, lengths, starts, use_av) -> None:
    """Raise the error of a row the batch kernel refused, with the message
    `prompt_positions` gives for it (the row's items counted from its first)."""
    if code == ERR_EMPTY_ROW:
        raise ValueError(f"attention_mask: expected at least one kept token in every row, got none in row {row}")
    items = _row_items(starts, row, images, videos, sp, lengths, end=False)
    try:  # (a truncated second_per_grid_ts truncates to itself)
        prompt_positions(cfg, ids[row][keep[row]], use_audio_in_video=use_av, **items)
    except (ValueError, TypeError) as exc:
        raise type(exc)(f"input_ids row {row} (items counted from its first): {exc}") from None
    raise AssertionError(
        f"get_rope_index: the batch kernel refused row {row} (code {code}) that prompt_positions accepts"
    )


def _float_error(cfg, row, ids, keep, images, videos, sp, lengths, starts, use_av) -> None:
    """Raise why the float32 path could not follow a row (the torch
    reference's message: a missing bracket, usually)."""
    from .. import reference

    items = _row_items(starts, row, images, videos, sp, lengths, end=True)
    try:
        reference.prompt_positions(cfg, ids[row][keep[row]], use_audio_in_video=use_av, float_positions=True, **items)
    except (ValueError, TypeError) as exc:
        raise type(exc)(f"input_ids row {row}: {exc}") from None
    raise AssertionError(f"get_rope_index: row {row}: the float path refused what the reference accepts")


def warmup() -> None:
    """Compile (or load from numba's cache) the batch kernels: integer
    positions, and the float32 ones of a family that keeps times unrounded."""
    floats = [MRopeConfig(family=s.name, semantics=min(s.float_times)) for s in FAMILIES.values() if s.float_times]
    for cfg in [MRopeConfig(family=next(iter(FAMILIES))), *floats[:1]]:
        image = [cfg.image_token_id] * (4 // cfg.spatial_merge_size) ** 2  # one image of grid (1, 4, 4)
        ids = np.array([[7, cfg.vision_start_token_id, *image, cfg.vision_end_token_id, 8]], np.int64)
        get_rope_index(cfg, ids, [[1, 4, 4]], attention_mask=np.ones_like(ids))
