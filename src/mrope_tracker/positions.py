"""Public one-shot entry points: a prompt's positions, and decode positions.

`prompt_positions` is the fast path of the position rules (docs/semantics.md): one
numba call scans the tokens, builds the layout and writes the (3, L) output.
`next_positions` is the in-place decode rule (index + delta), the seed PR's
`get_next_input_positions`.
"""

from __future__ import annotations

import marshal

import numpy as np
import torch

from .config import MRopeConfig
from .errors import layout_error
from .inputs import (
    EMPTY_FLOAT,
    EMPTY_GRID,
    Items,
    as_config,
    as_grid,
    as_index,
    as_second_per_grid_ts,
    as_token_ids,
    normalize_items,
)
from .kernels import layout_codes as C
from .kernels.layout_build import build_from_tokens
from .kernels.layout_emit import NUM_STATE, S_MAX
from .kernels.next_positions import next_positions_kernel
from .kernels.prompt import (
    GAVE_UP,
    RECORDS_SCRATCH_SIZE,
    image_prompt_positions,
    vision_prompt_positions,
    vision_prompt_positions_from_records,
)
from .kernels.records import MARSHAL_INTS

__all__ = ["prompt_positions", "next_positions"]

_INT64 = np.dtype(np.int64)


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

    Returns ``(positions, delta)``: an int64 array of shape (3, L) (rows T, H,
    W) and ``max(positions) + 1 - L``, the offset of every later token
    (``index + delta`` on all rows).

    `token_ids` is 1-D and integer (list, numpy array or torch tensor), with
    each multimodal item expanded to its placeholder tokens. Grids are
    (n, 3) ``(t, h, w)`` before spatial merging, one row per item in prompt
    order. `second_per_grid_ts` holds one value per video (default 1.0).
    `audio_feature_lengths` holds the mel-frame count of every audio track in
    prompt order: audio clips, and with `use_audio_in_video` the tracks of
    the videos too. Bad input raises ValueError or TypeError.
    """
    # On the hot path of an engine's admission: the common prompts (text,
    # images, whole-block videos) with int64 token ids take one fast kernel
    # after a few type tests, most often its compiled function past numba's
    # dispatcher (see _entries). Everything the fast kernels do not handle,
    # including every error, goes to the checked path.
    ids = token_ids
    if not (
        type(config) is MRopeConfig
        and type(ids) is _NDARRAY
        and ids.dtype is _INT64
        and ids.strides == _IDS_STRIDES
        and audio_feature_lengths is None
        and use_audio_in_video is False
        and _fast_kernels_sealed
    ):
        return _other_prompt_positions(
            config,
            token_ids,
            image_grid_thw,
            video_grid_thw,
            second_per_grid_ts,
            audio_feature_lengths,
            use_audio_in_video,
        )
    params = config.kernel_params
    out = _empty((3, len(ids)), _INT64)
    try:
        if video_grid_thw is None and second_per_grid_ts is None:
            grid_type = type(image_grid_thw)
            if grid_type is _NDARRAY and image_grid_thw.dtype is _INT64:
                if image_grid_thw.strides == _GRID_STRIDES:
                    delta = _image_entry(out, ids, params, image_grid_thw)
                else:  # the sealed dispatcher reads what it can, refuses the rest (TypeError)
                    delta = image_prompt_positions(out, ids, params, image_grid_thw)
            elif grid_type in _SEQUENCES:  # decoded in the kernel
                delta = _records_entry(out, ids, params, _dumps(image_grid_thw, 2), _RECORDS_SCRATCH, True)
            elif image_grid_thw is None:
                delta = _image_entry(out, ids, params, EMPTY_GRID)
            elif grid_type is _TENSOR:  # its plain ints, decoded in the kernel
                # (a tensor _tensor_list hands back makes marshal raise ValueError: the checked path)
                delta = _records_entry(
                    out, ids, params, _dumps(_tensor_list(image_grid_thw), 2), _RECORDS_SCRATCH, True
                )
            else:
                delta = image_prompt_positions(out, ids, params, as_grid(image_grid_thw, "image_grid_thw"))
        elif (
            type(video_grid_thw) is _NDARRAY
            and type(image_grid_thw) in _ARRAY_OR_NONE
            and type(second_per_grid_ts) in _ARRAY_OR_NONE
        ):
            # Arrays go to the kernel as they are: its compiled function
            # when they have the compiled dtypes and strides, its sealed
            # dispatcher otherwise (which refuses what it cannot read:
            # TypeError); the walk checks shapes and values. An empty
            # second_per_grid_ts would read as
            # "the default" there, so it takes the checked path, which
            # explains it.
            image_grid = EMPTY_GRID if image_grid_thw is None else image_grid_thw
            sp = EMPTY_FLOAT if second_per_grid_ts is None else second_per_grid_ts
            if not len(sp) and second_per_grid_ts is not None:
                delta = GAVE_UP
            elif (
                video_grid_thw.dtype is _INT64
                and image_grid.dtype is _INT64
                and sp.dtype is _FLOAT32
                and video_grid_thw.strides == _GRID_STRIDES
                and image_grid.strides == _GRID_STRIDES
                and sp.strides == _SP_STRIDES
            ):
                delta = _vision_entry(out, ids, params, image_grid, video_grid_thw, sp)
            else:
                delta = vision_prompt_positions(out, ids, params, image_grid, video_grid_thw, sp)
        elif (
            type(video_grid_thw) in _SEQUENCES_OR_NONE
            and type(image_grid_thw) in _SEQUENCES_OR_NONE
            and type(second_per_grid_ts) in _SEQUENCES_OR_NONE
        ):
            records = _dumps((image_grid_thw, video_grid_thw, second_per_grid_ts), 2)
            delta = _records_entry(out, ids, params, records, _RECORDS_SCRATCH, False)
        else:
            # Small tensors (grids, times) as their Python values: torch's
            # tolist() costs half its numpy() view, and the lists then go to
            # the records kernel like any others.
            image_grid, video_grid, sp = (
                _tensor_list(v) if type(v) is _TENSOR else v
                for v in (image_grid_thw, video_grid_thw, second_per_grid_ts)
            )
            if (
                type(image_grid) in _SEQUENCES_OR_NONE
                and type(video_grid) in _SEQUENCES_OR_NONE
                and type(sp) in _SEQUENCES_OR_NONE
            ):
                delta = _records_entry(
                    out, ids, params, _dumps((image_grid, video_grid, sp), 2), _RECORDS_SCRATCH, False
                )
            else:
                # Arrays of the compiled types go to the kernel as they are (it
                # checks their shapes and values); other forms are converted.
                image_grid = _grid(image_grid, "image_grid_thw")
                video_grid = _grid(video_grid, "video_grid_thw")
                if sp is None:
                    sp = EMPTY_FLOAT  # the kernel takes the family's default
                elif type(sp) is not _NDARRAY or not len(sp):
                    sp = as_second_per_grid_ts(sp, video_grid.shape[0], config)
                delta = vision_prompt_positions(out, ids, params, image_grid, video_grid, sp)
    except (TypeError, ValueError):  # the checked path explains it, or takes what the kernel cannot
        delta = GAVE_UP
    if delta == GAVE_UP:
        # `out` is reused: for a long per-frame video (Qwen3-VL, GLM) a
        # second allocation cost more than the fast kernel's attempt.
        return _checked_prompt_positions(
            config,
            token_ids,
            image_grid_thw,
            video_grid_thw,
            second_per_grid_ts,
            audio_feature_lengths,
            use_audio_in_video,
            out,
        )
    return out, delta


def _other_prompt_positions(
    config, token_ids, image_grid_thw, video_grid_thw, second_per_grid_ts, audio_feature_lengths, use_audio_in_video
):
    """`prompt_positions` for what its first test sends away: the first call
    (which seals the fast kernels), a config given as a dict or a
    transformers config, token ids other than an int64 array of strides
    (8,) (lists, other dtypes and layouts), audio."""
    if not _fast_kernels_sealed:
        _seal_fast_kernels()
    config = as_config(config)
    ids = as_token_ids(token_ids)
    if not (
        type(config) is MRopeConfig
        and type(ids) is _NDARRAY
        and ids.dtype is _INT64
        and ids.strides == _IDS_STRIDES
        and audio_feature_lengths is None
        and use_audio_in_video is False
    ):
        # (audio; a subclass of MRopeConfig; a 1-token array of any stride,
        # which is C-contiguous and as_token_ids keeps)
        return _checked_prompt_positions(
            config,
            ids,
            image_grid_thw,
            video_grid_thw,
            second_per_grid_ts,
            audio_feature_lengths,
            use_audio_in_video,
        )
    return prompt_positions(
        config,
        ids,
        image_grid_thw=image_grid_thw,
        video_grid_thw=video_grid_thw,
        second_per_grid_ts=second_per_grid_ts,
    )


# Lists and tuples go to the records kernel where marshal writes the records
# it decodes (every CPython we know of); elsewhere to the converting path.
_SEQUENCES = (list, tuple) if MARSHAL_INTS else ()
_SEQUENCES_OR_NONE = (list, tuple, type(None)) if MARSHAL_INTS else ()
_ARRAY_OR_NONE = (np.ndarray, type(None))
_RECORDS_SCRATCH = np.empty(RECORDS_SCRATCH_SIZE, np.int64)
_NDARRAY = np.ndarray
_TENSOR = torch.Tensor
_FLOAT32 = np.dtype(np.float32)
_empty = np.empty
_dumps = marshal.dumps
# The strides of the one layout each fast kernel was compiled for (1-D and
# (n, 3) C-contiguous): strides this exact imply the dimensions and the
# layout, in one test.
_IDS_STRIDES = (_INT64.itemsize,)
_GRID_STRIDES = (3 * _INT64.itemsize, _INT64.itemsize)
_SP_STRIDES = (_FLOAT32.itemsize,)


def _numpy_reads(dtype) -> bool:
    try:
        torch.zeros(1, dtype=dtype).numpy()
    except (TypeError, RuntimeError):
        return False
    return True


# The dtypes whose tensors the checked path can read (through numpy()); it
# refuses the others (bfloat16, the float8 types, ...), and so must this path.
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


def _tensor_list(value):
    """A tensor's values as nested lists of Python numbers, or the tensor
    itself wherever the checked conversion must judge it: a dtype numpy
    cannot read, a negative-bit view (numpy() refuses both), an empty tensor
    (whose shape the list would lose), a meta tensor."""
    if value.dtype not in _NUMPY_DTYPES or value.is_neg():
        return value
    try:
        values = value.tolist()
    except (RuntimeError, NotImplementedError):
        return value
    return values if values else value


def _grid(value, name: str) -> np.ndarray:
    if value is None:
        return EMPTY_GRID
    if type(value) is np.ndarray and value.dtype is _INT64 and value.ndim == 2:
        return value  # the kernel's dispatcher and its shape check take it from here
    return as_grid(value, name)


def _checked_prompt_positions(
    config,
    token_ids,
    image_grid_thw,
    video_grid_thw,
    second_per_grid_ts,
    audio_feature_lengths,
    use_audio_in_video,
    out=None,
):
    """Every input form and every prompt, with precise errors: each argument
    is checked and converted, then the general builder runs. `out`, if it
    has the prompt's shape, receives the positions (the builder writes every
    column)."""
    ids = as_token_ids(token_ids)
    items, audio_lengths = normalize_items(
        config, image_grid_thw, video_grid_thw, second_per_grid_ts, audio_feature_lengths, use_audio_in_video
    )
    if out is None or out.shape[1] != ids.shape[0]:
        out = np.empty((3, ids.shape[0]), _INT64)
    state = np.empty(NUM_STATE, _INT64)
    # The layout table's builder, called with no room for rows: it writes
    # the positions into `out` as it goes and keeps only the running state.
    code, a, b, c, d = build_from_tokens(_NO_ROWS, _NO_SCALES, state, out, ids, config.kernel_params, *items)
    if code:
        raise layout_error(code, a, b, c, d, config, Items(items, audio_lengths), ids=ids)
    return out, int(state[S_MAX]) + 1 - ids.shape[0]


_NO_ROWS = np.zeros((0, C.NUM_COLS), np.int64)
_NO_SCALES = np.zeros((0, C.NUM_SCALE_COLS), np.float32)


_fast_kernels_sealed = False
FAST_KERNELS = (image_prompt_positions, vision_prompt_positions, vision_prompt_positions_from_records)


def _seal_fast_kernels() -> None:
    """Compile (or load from the cache) the fast kernels for exactly the
    argument types `prompt_positions` hands them, then stop their
    dispatchers from compiling any other: an unusual array (a strided view,
    a float64 second_per_grid_ts) then raises TypeError, which sends the call
    to the checked path, instead of a new specialisation compiling for
    seconds in the middle of serving. Then take each kernel's compiled
    function (see _entries)."""
    global _fast_kernels_sealed, _records_entry, _image_entry, _vision_entry
    params = MRopeConfig(family="qwen2_vl").kernel_params
    out = np.empty((3, 1), _INT64)
    ids = np.zeros(1, _INT64)
    image_prompt_positions(out, ids, params, EMPTY_GRID)
    vision_prompt_positions(out, ids, params, EMPTY_GRID, EMPTY_GRID, EMPTY_FLOAT)
    vision_prompt_positions_from_records(
        out, ids, params, marshal.dumps((None, None, None), 2), _RECORDS_SCRATCH, False
    )
    for kernel in FAST_KERNELS:
        kernel.disable_compile()
    _records_entry = _compiled_entry(vision_prompt_positions_from_records)
    _image_entry = _compiled_entry(image_prompt_positions)
    _vision_entry = _compiled_entry(vision_prompt_positions)
    _fast_kernels_sealed = True


# _entries: the fast kernels' compiled functions, called without numba's
# dispatcher. Typing and matching the arguments is a good part of a short
# prompt's call: 0.4 us of 1.1 us for the records kernel (a bytes argument,
# six in all), 0.11 us of 0.46 us for one image given as an array (output
# preallocated; 2-core EPYC). The compiled function trusts its arguments'
# types: it reads any array as the dtype, dimensions and layout it was
# compiled for, without checking (numba's unboxing does not even compare
# the number of dimensions). So `prompt_positions` calls one only when it
# made or tested every argument itself: out, the bytes, the scratch and
# the flag are its own, params belong to an exact MRopeConfig, and each
# array passed has the exact type and dtype and the exact strides of the
# compiled layout (strides that imply the dimensions and C-contiguity).
# Read-only and misaligned arrays are fine: the kernels only read their
# inputs, and numba's own dispatch types a misaligned array like any other
# (numba 0.68). Until sealing, and if numba ever stops exposing them, these
# are the dispatchers themselves, which check every argument.
_records_entry = vision_prompt_positions_from_records
_image_entry = image_prompt_positions
_vision_entry = vision_prompt_positions


def _compiled_entry(kernel):
    """The CPython entry of `kernel`'s only compiled signature, or `kernel`."""
    try:
        (signature,) = kernel.signatures
        entry = kernel.overloads[signature].entry_point
    except (AttributeError, KeyError, TypeError, ValueError):
        return kernel
    return entry if callable(entry) else kernel


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
