"""Public one-shot entry points: a prompt's positions, and decode positions.

`prompt_positions` is the fast path of the position rules (docs/semantics.md),
one route for every input form: `as_token_ids` and `normalize_items`
(core/inputs.py) bring each argument to the kernels' canonical form once,
then one numba call, the layout builder itself with a zero-row table
(kernels/layout_build.py), scans the tokens and writes the (num_dims, L)
output. The canonical forms are tested inline first, by exact type (on a
small prompt a function call is a good part of the time); a read-only array
takes one copy, like a strided one (the builder has one signature, for
writable arrays). What it reads of the config is kept for the last config
seen (`_last_config`).
`next_positions` is the in-place decode rule (index + delta), the seed PR's
`get_next_input_positions`.
"""

from __future__ import annotations

import numpy as np
import torch

from ..kernels.layout_build import FAILED, SCRATCH, build_from_tokens, error_of
from ..kernels.layout_emit import NUM_STATE
from ..kernels.layout_fill import fill_positions
from ..kernels.next_positions import next_positions_kernel
from . import float_carry
from .config import MRopeConfig
from .errors import layout_error
from .inputs import (
    EMPTY_FLOAT,
    EMPTY_GRID,
    EMPTY_INT,
    NO_ROWS,
    NO_SCALES,
    READY_FLAGS,
    Items,
    as_config,
    as_grid,
    as_index,
    as_second_per_grid_ts,
    as_token_ids,
    canvas_error,
    normalize_items,
)
from .layout import build_rows_from_tokens

__all__ = ["prompt_positions", "next_positions"]

_INT64 = np.dtype(np.int64)
_NDARRAY = np.ndarray
_empty = np.empty
# What the one route reads of the last config it ran: (config, its kernel
# params, num_dims, its route), swapped whole (one tuple: safe between
# threads). An engine passes one config on every call, and one identity test
# costs less than the half dozen attribute reads it replaces.
_ROUTE_ITEMS = 0  # items of any kind, through normalize_items
_ROUTE_INLINE = 1  # also serves images and videos: text or images alone take the inline tests
_ROUTE_FLOAT_CARRY = 2  # SGLang 0.5's Qwen3-Omni rule (core/float_carry.py)
_last_config: tuple = (object(), None, 0, _ROUTE_ITEMS)  # (a first entry no caller's config is: not None)


def _config_entry(config) -> tuple:
    """`_last_config`'s entry for `config` (an MRopeConfig is remembered;
    anything else is converted on every call, as it may change)."""
    global _last_config
    if type(config) is not MRopeConfig:
        return _config_entry_of(as_config(config))
    entry = _config_entry_of(config)
    _last_config = entry
    return entry


def _config_entry_of(config: MRopeConfig) -> tuple:
    if config.canvas:
        raise canvas_error(config)
    if config.float_carry:
        route = _ROUTE_FLOAT_CARRY
    elif config.image_token_id is not None and config.video_token_id is not None:
        route = _ROUTE_INLINE
    else:  # normalize_items checks the modalities such a family serves
        route = _ROUTE_ITEMS
    return config, config.kernel_params, config.num_dims, route


def prompt_positions(
    config: MRopeConfig,
    token_ids,
    *,
    image_grid_thw=None,
    video_grid_thw=None,
    second_per_grid_ts=None,
    audio_feature_lengths=None,
    use_audio_in_video: bool = False,
) -> tuple[np.ndarray, int]:
    """M-RoPE positions of a whole prompt.

    Returns ``(positions, delta)``: an int64 array of shape (num_dims, L)
    (``config.num_dims``: rows T, H, W for M-RoPE; HunYuan-VL's four XD-RoPE
    axes) and ``max(positions) + 1 - L``, the offset of every later token
    (``index + delta`` on all rows).

    `token_ids` is 1-D and integer (list, numpy array or torch tensor), with
    each multimodal item expanded to its placeholder tokens. Grids are
    (n, 3) ``(t, h, w)`` before spatial merging, one row per item in prompt
    order. `second_per_grid_ts` holds one value per video (default: the
    family's). `audio_feature_lengths` holds the mel-frame count of every
    audio track in prompt order: audio clips, and with `use_audio_in_video`
    the tracks of the videos too. Bad input raises ValueError or TypeError.
    """
    entry = _last_config
    if entry[0] is not config:
        entry = _config_entry(config)  # (raises for a canvas config)
        config = entry[0]
    params, num_dims, route = entry[1], entry[2], entry[3]
    if route == _ROUTE_FLOAT_CARRY:  # SGLang 0.5's Qwen3-Omni rule: through its layout rows (core/float_carry.py)
        items = (image_grid_thw, video_grid_thw, second_per_grid_ts, audio_feature_lengths, use_audio_in_video)
        return _float_carry_positions(config, token_ids, *items)
    # as_token_ids' own tests, inline (a call costs a good part of a small prompt's); an empty array too (the
    # checked path refuses it)
    ids = token_ids
    if type(ids) is not _NDARRAY or ids.dtype is not _INT64 or ids.ndim != 1:
        ids = as_token_ids(token_ids)
    elif ids.flags.num & READY_FLAGS != READY_FLAGS:
        ids = ids.copy()  # strided, misaligned or read-only: as_token_ids' one copy
    length = ids.shape[0]
    if route == _ROUTE_INLINE and audio_feature_lengths is None and use_audio_in_video is False:
        # vision items of a family that serves both (the commonest calls): normalize_items' work, with its
        # test of a canonical grid inline (a call costs a good part of a small prompt's)
        image_grid = image_grid_thw
        if image_grid is None:
            image_grid = EMPTY_GRID
        elif not (
            type(image_grid) is _NDARRAY
            and image_grid.dtype is _INT64
            and image_grid.ndim == 2
            and image_grid.shape[1] == 3
        ):
            image_grid = as_grid(image_grid, "image_grid_thw")
        elif image_grid.flags.num & READY_FLAGS != READY_FLAGS:
            image_grid = image_grid.copy()  # strided, misaligned or read-only: as_grid's one copy
        if video_grid_thw is None and second_per_grid_ts is None:
            video_grid, video_sp = EMPTY_GRID, EMPTY_FLOAT
        else:
            video_grid, video_sp = _videos(config, video_grid_thw, second_per_grid_ts)
        out = _empty((num_dims, length), _INT64)
        delta = build_from_tokens(
            NO_ROWS, NO_SCALES, SCRATCH, out, ids, params, image_grid, video_grid, video_sp, EMPTY_INT, False
        )
    else:
        items, _ = normalize_items(
            config, image_grid_thw, video_grid_thw, second_per_grid_ts, audio_feature_lengths, use_audio_in_video
        )
        out = _empty((num_dims, length), _INT64)
        delta = build_from_tokens(NO_ROWS, NO_SCALES, SCRATCH, out, ids, params, *items)
    if delta == FAILED or not length:  # the builder found an error (or no token came): the checked path explains
        return checked_prompt_positions(
            config, ids, image_grid_thw, video_grid_thw, second_per_grid_ts, audio_feature_lengths, use_audio_in_video
        )
    return out, delta


def _videos(config, video_grid_thw, second_per_grid_ts) -> tuple[np.ndarray, np.ndarray]:
    """normalize_items' video grid and times, a canonical grid tested inline."""
    grid = video_grid_thw
    if grid is None:
        return EMPTY_GRID, as_second_per_grid_ts(second_per_grid_ts, 0, config)  # (times refused unless empty)
    if not (type(grid) is _NDARRAY and grid.dtype is _INT64 and grid.ndim == 2 and grid.shape[1] == 3):
        grid = as_grid(grid, "video_grid_thw")
    elif grid.flags.num & READY_FLAGS != READY_FLAGS:
        grid = grid.copy()  # strided, misaligned or read-only: as_grid's one copy
    return grid, as_second_per_grid_ts(second_per_grid_ts, grid.shape[0], config)


def _float_carry_positions(config, token_ids, images, videos, times, audio_lengths, use_audio_in_video):
    """prompt_positions under the `float_carry` switch (SGLang 0.5's Qwen3-Omni
    rule): the kernels' integer positions where they are the rule's (no
    fractional time, no audio in video), else the layout's rows, filled."""
    ids = as_token_ids(token_ids)
    items = Items.normalize(config, images, videos, times, audio_lengths, use_audio_in_video)
    out = _empty((config.num_dims, len(ids)), _INT64)
    if not float_carry.needs_rows(items, config.tokens_per_second, len(ids)):
        delta = build_from_tokens(NO_ROWS, NO_SCALES, SCRATCH, out, ids, config.kernel_params, *items.kernel_args)
        if delta == FAILED:  # the long way raises the error
            checked_prompt_positions(config, ids, images, videos, times, audio_lengths, use_audio_in_video)
        if delta + len(ids) <= float_carry.INTEGER_LIMIT:
            float_carry.check_brackets(config, ids, items)
            return out, delta
    rows, scales, n, top = build_rows_from_tokens(config, ids, items)
    fill_positions(out, 0, rows, scales, 0, n, 0, len(ids))
    return out, top + 1 - len(ids)


def checked_prompt_positions(
    config, ids, image_grid_thw, video_grid_thw, second_per_grid_ts, audio_feature_lengths, use_audio_in_video
) -> tuple[np.ndarray, int]:
    """`prompt_positions` through the general input checks and the builder on
    a state of its own: the route that names a refused call's error, and the
    tests' second opinion on the fast path's results."""
    ids = as_token_ids(ids)
    items, audio_lengths = normalize_items(
        config, image_grid_thw, video_grid_thw, second_per_grid_ts, audio_feature_lengths, use_audio_in_video
    )
    return _build_checked(config, ids, items, audio_lengths)


def _build_checked(config, ids, items, audio_lengths) -> tuple[np.ndarray, int]:
    """The builder on a state of its own, its error code turned into a
    message naming the argument."""
    out = np.empty((config.num_dims, ids.shape[0]), _INT64)
    state = np.empty(NUM_STATE, _INT64)
    delta = build_from_tokens(NO_ROWS, NO_SCALES, state, out, ids, config.kernel_params, *items)
    if delta == FAILED:
        raise layout_error(*error_of(state), config, Items(items, audio_lengths), ids=ids)
    return out, int(delta)


def next_positions(out, out_offset: int, delta: int, context_len: int, num_new_tokens: int) -> None:
    """Write ``context_len + delta + n`` into every row of ``out[:, out_offset + n]``
    for ``n < num_new_tokens``, in place: the positions of tokens
    past the prompt.

    `out` is a writable 2-D int64 numpy array (or CPU tensor) with at least 3
    rows, e.g. a runner's (3, max_num_tokens + 1) staging buffer or a column
    slice of one; every row is written. The work is one jitted call; the
    checks before it are attribute reads, since engines call this per request.
    """
    if (
        type(out) is not np.ndarray
        or out.dtype is not _INT64
        or out.ndim != 2
        or out.shape[0] < 3
        or not out.flags.writeable
    ):
        out = _as_out(out)  # (any layout is fine: a column slice of a buffer is written through)
    if (
        not (
            type(out_offset) is int and type(delta) is int and type(context_len) is int and type(num_new_tokens) is int
        )
        or (out_offset | context_len | num_new_tokens) >> 62  # negative, or past 2**62 (numba cannot type 2**64)
        or not -(2**62) <= delta <= 2**62
    ):
        # numpy integers and the like, and plain ints out of range: checked, then as plain ints
        out_offset = as_index(out_offset, "out_offset")
        num_new_tokens = as_index(num_new_tokens, "num_new_tokens")
        context_len = as_index(context_len, "context_len")
        delta = as_index(delta, "delta", minimum=-(2**62))
    try:
        code = next_positions_kernel(out, out_offset, delta, context_len, num_new_tokens)
    except OverflowError:  # a Python int past int64: reported below
        code = 1
    if code:
        _next_positions_error(out, out_offset, delta, context_len, num_new_tokens)


def _as_out(out) -> np.ndarray:
    if isinstance(out, torch.Tensor):
        if out.device.type != "cpu":
            raise ValueError(f"out: expected a CPU tensor or numpy array, got a tensor on {out.device}")
        out = out.numpy()
    if not isinstance(out, np.ndarray) or out.dtype != _INT64 or out.ndim != 2:
        raise TypeError(f"out: expected a 2-D int64 array, got {_what(out)}")
    if out.shape[0] < 3:
        raise ValueError(f"out: expected at least 3 rows (T, H, W), got shape {out.shape}")
    if not out.flags.writeable:
        raise ValueError("out: expected a writable array (it is written in place)")
    if out.dtype is not _INT64:  # a non-native int64 dtype object
        raise TypeError(f"out: expected native-endian int64, got {out.dtype}")
    return out


def _next_positions_error(out, out_offset, delta, context_len, num_new_tokens) -> None:
    """Raise the error for a call the kernel refused (or could not be given)."""
    out_offset = as_index(out_offset, "out_offset")
    num_new_tokens = as_index(num_new_tokens, "num_new_tokens")
    context_len = as_index(context_len, "context_len")
    as_index(delta, "delta", minimum=-(2**62))
    if out_offset + num_new_tokens > out.shape[1]:
        raise ValueError(
            f"num_new_tokens: expected out_offset + num_new_tokens <= out.shape[1] ({out.shape[1]}), "
            f"got {out_offset} + {num_new_tokens}"
        )
    if context_len + delta < 0:
        raise ValueError(f"delta: expected non-negative positions, got context_len {context_len} + delta {delta}")
    if context_len + delta + num_new_tokens > 2**62:
        raise ValueError(
            f"context_len: expected positions below 2**62, got context_len {context_len} + delta {delta} "
            f"+ {num_new_tokens} new tokens"
        )
    raise AssertionError("next_positions: the kernel refused valid arguments")  # internal invariant


def _what(value) -> str:
    if isinstance(value, np.ndarray):
        return f"array of dtype {value.dtype} and shape {value.shape}"
    return type(value).__name__
