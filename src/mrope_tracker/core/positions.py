"""Public one-shot entry points: a prompt's positions, and decode positions.

`prompt_positions` is the fast path of the position rules (docs/semantics.md):
Python brings every argument to the kernels' canonical form once, then one
numba call scans the tokens and writes the (num_dims, L) output (kernels/prompt.py).
`next_positions` is the in-place decode rule (index + delta), the seed PR's
`get_next_input_positions`.
"""

from __future__ import annotations

import marshal

import numpy as np
import torch

from ..kernels import layout_codes as C
from ..kernels.layout_build import build_from_tokens
from ..kernels.layout_emit import NUM_STATE, S_MAX
from ..kernels.layout_fill import fill_positions
from ..kernels.next_positions import next_positions_kernel
from ..kernels.prompt import FAILED, SCRATCH_SIZE, UNREADABLE, prompt_from_arrays, prompt_from_records
from ..kernels.records import MARSHAL_INTS
from . import float_carry
from .config import MRopeConfig
from .errors import layout_error
from .inputs import (
    EMPTY_FLOAT,
    EMPTY_GRID,
    Items,
    as_config,
    as_index,
    as_token_ids,
    canvas_error,
    normalize_items,
)
from .layout import build_rows_from_tokens

__all__ = ["prompt_positions", "next_positions"]

_INT64 = np.dtype(np.int64)
_NDARRAY = np.ndarray
_TENSOR = torch.Tensor
_empty = np.empty
_dumps = marshal.dumps
# Strides this exact imply the dimensions and C order of the kernels' one
# compiled layout (1-D ids), in one test; a grid needs its width
# checked too (a column slice of an (n, 3) array has the same strides).
_IDS_STRIDES = (_INT64.itemsize,)
_GRID_STRIDES = (3 * _INT64.itemsize, _INT64.itemsize)
# Lists and tuples of items go to the records kernel where marshal writes
# the records it decodes (every CPython we know of); elsewhere they are
# converted like any other form.
_SEQUENCES = (list, tuple) if MARSHAL_INTS else ()
_SEQUENCES_OR_NONE = (*_SEQUENCES, type(None))
# The builder's state and the records kernel's decoded items. Shared by
# every call: both kernels keep the GIL for their whole run, and call no
# Python. (A free-threaded CPython build, without a GIL, would need one
# buffer per thread; we support none yet.)
_SCRATCH = np.empty(SCRATCH_SIZE, np.int64)
_NO_IMAGES = marshal.dumps([], 2)  # the records of a text prompt


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
    # The commonest calls first, each test as cheap as Python allows: a
    # call is a few microseconds, and these tests are a good part of it.
    if type(config) is not MRopeConfig:
        config = as_config(config)
    if config.canvas:
        raise canvas_error(config)
    if config.float_carry:  # SGLang 0.5's Qwen3-Omni rule: through its layout rows (core/float_carry.py)
        return _float_carry_positions(
            config,
            token_ids,
            image_grid_thw,
            video_grid_thw,
            second_per_grid_ts,
            audio_feature_lengths,
            use_audio_in_video,
        )
    ids = token_ids
    if (
        type(ids) is not _NDARRAY
        or ids.dtype is not _INT64
        or ids.strides != _IDS_STRIDES
        or not ((flags := ids.flags).writeable and flags.aligned)  # (_usable, inline: a call costs as much)
    ):
        ids = as_token_ids(token_ids)
    params = config.kernel_params
    out = _empty((config.num_dims, len(ids)), _INT64)
    images = image_grid_thw
    if video_grid_thw is None and second_per_grid_ts is None and audio_feature_lengths is None:
        if use_audio_in_video is not False:
            delta = _other_forms(out, ids, config, images, None, None, None, use_audio_in_video)
        elif images is None:
            delta = prompt_from_records(out, ids, params, _NO_IMAGES, True, _SCRATCH)
        elif (
            type(images) is _NDARRAY
            and images.dtype is _INT64
            and images.strides == _GRID_STRIDES
            and images.shape[1] == 3
            and (flags := images.flags).writeable
            and flags.aligned
        ):
            delta = prompt_from_arrays(out, ids, params, images, EMPTY_GRID, EMPTY_FLOAT, _NO_AUDIO, False, _SCRATCH)
        elif type(images) in _SEQUENCES:
            try:
                delta = prompt_from_records(out, ids, params, _dumps(images, 2), True, _SCRATCH)
            except ValueError:  # objects marshal cannot write (tensors, named tuples, ...): converted below
                delta = UNREADABLE
        else:
            delta = UNREADABLE
        if delta == UNREADABLE:  # (records the kernel does not decode, or another form)
            delta = _other_forms(out, ids, config, images, None, None, None, False)
    elif type(video_grid_thw) is _NDARRAY and audio_feature_lengths is None and use_audio_in_video is False:
        items, _ = normalize_items(config, images, video_grid_thw, second_per_grid_ts, None, False)
        delta = prompt_from_arrays(out, ids, params, *items, _SCRATCH)
    else:
        delta = _other_forms(
            out, ids, config, images, video_grid_thw, second_per_grid_ts, audio_feature_lengths, use_audio_in_video
        )
    if delta == FAILED:  # the long way raises the error (or gives what the kernel refused)
        return checked_prompt_positions(
            config, ids, image_grid_thw, video_grid_thw, second_per_grid_ts, audio_feature_lengths, use_audio_in_video
        )
    return out, delta


def _float_carry_positions(config, token_ids, images, videos, times, audio_lengths, use_audio_in_video):
    """prompt_positions under the `float_carry` switch (SGLang 0.5's Qwen3-Omni
    rule): the kernels' integer positions where they are the rule's (no
    fractional time, no audio in video), else the layout's rows, filled."""
    ids = as_token_ids(token_ids)
    items = Items.normalize(config, images, videos, times, audio_lengths, use_audio_in_video)
    out = _empty((config.num_dims, len(ids)), _INT64)
    if not float_carry.needs_rows(items, config.tokens_per_second):
        delta = prompt_from_arrays(out, ids, config.kernel_params, *items.kernel_args, _SCRATCH)
        if delta == FAILED:  # the long way raises the error
            checked_prompt_positions(config, ids, images, videos, times, audio_lengths, use_audio_in_video)
        if delta + len(ids) <= float_carry.INTEGER_LIMIT:
            float_carry.check_brackets(config, ids, items)
            return out, delta
    rows, scales, n, top = build_rows_from_tokens(config, ids, items)
    fill_positions(out, 0, rows, scales, 0, n, 0, len(ids))
    return out, top + 1 - len(ids)


def _usable(array) -> bool:
    """Writable and aligned: numba compiles a specialisation of its own for
    read-only arrays, and (before 0.68) for misaligned ones."""
    flags = array.flags
    return flags.writeable and flags.aligned


def _other_forms(out, ids, config, images, videos, times, audio_feature_lengths, use_audio_in_video) -> int:
    """The kernel call for every other form of the items: tensors as their
    values, lists and tuples as their marshal records, arrays as canonical
    arrays (converted where they are not)."""
    params = config.kernel_params
    if audio_feature_lengths is None and use_audio_in_video is False:
        # (new names: a conversion below must describe the user's arguments)
        image_values, video_values, time_values = images, videos, times
        if type(images) is _TENSOR or type(videos) is _TENSOR or type(times) is _TENSOR:
            image_values, video_values, time_values = (
                _tensor_list(v) if type(v) is _TENSOR else v for v in (images, videos, times)
            )
        if (
            type(image_values) in _SEQUENCES_OR_NONE
            and type(video_values) in _SEQUENCES_OR_NONE
            and type(time_values) in _SEQUENCES_OR_NONE
        ):
            try:
                records = _dumps((image_values, video_values, time_values), 2)
            except ValueError:  # objects marshal cannot write (numpy scalars, ...): converted below
                pass
            else:
                delta = prompt_from_records(out, ids, params, records, False, _SCRATCH)
                if delta != UNREADABLE:
                    return delta
    # (ready arrays pass through the converters untouched)
    items, _ = normalize_items(config, images, videos, times, audio_feature_lengths, use_audio_in_video)
    return prompt_from_arrays(out, ids, params, *items, _SCRATCH)


_NO_AUDIO = np.zeros(0, np.int64)


def _numpy_reads(dtype) -> bool:
    try:
        torch.zeros(1, dtype=dtype).numpy()
    except (TypeError, RuntimeError):
        return False
    return True


# The dtypes whose tensors the converting path can read (through numpy());
# it refuses the others (bfloat16, the float8 types, ...), and so must the
# records path.
_NUMPY_DTYPES = frozenset(
    dtype
    for name in (
        "bool",
        "uint8",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
        "complex64",
        "complex128",
    )
    for dtype in [getattr(torch, name, None)]
    if dtype is not None and _numpy_reads(dtype)
)


# Past this many elements a tensor's numpy() view costs less than its
# Python values: a grid of a few hundred items still goes as a list.
_LIST_ELEMENTS = 1024


def _tensor_list(value):
    """A small tensor's values as nested lists of Python numbers (torch's
    tolist() costs less than its numpy() view, and the records kernel
    decodes lists), or the tensor itself wherever the converting path must
    judge it: a dtype numpy cannot read, a negative-bit view (numpy()
    refuses both), an empty tensor (whose shape the list would lose), a meta
    tensor."""
    if value.dtype not in _NUMPY_DTYPES or value.is_neg() or value.numel() > _LIST_ELEMENTS:
        return value
    try:
        values = value.tolist()
    except (RuntimeError, NotImplementedError):
        return value
    return values if values else value


def checked_prompt_positions(
    config, ids, image_grid_thw, video_grid_thw, second_per_grid_ts, audio_feature_lengths, use_audio_in_video
) -> tuple[np.ndarray, int]:
    """`prompt_positions` the long way, for the errors it explains: every
    argument checked and converted, then the builder on a state of its own,
    and its error code turned into a message naming the argument."""
    ids = as_token_ids(ids)
    items, audio_lengths = normalize_items(
        config, image_grid_thw, video_grid_thw, second_per_grid_ts, audio_feature_lengths, use_audio_in_video
    )
    out = np.empty((config.num_dims, ids.shape[0]), _INT64)
    state = np.empty(NUM_STATE, _INT64)
    code, a, b, c, d = build_from_tokens(_NO_ROWS, _NO_SCALES, state, out, ids, config.kernel_params, *items)
    if code:
        raise layout_error(code, a, b, c, d, config, Items(items, audio_lengths), ids=ids)
    return out, int(state[S_MAX]) + 1 - ids.shape[0]


_NO_ROWS = np.zeros((0, C.NUM_COLS), np.int64)
_NO_SCALES = np.zeros((0, C.NUM_SCALE_COLS), np.float32)


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
    if not (
        type(out_offset) is int and type(delta) is int and type(context_len) is int and type(num_new_tokens) is int
    ):
        # numpy integers and the like: checked, then as plain ints
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
