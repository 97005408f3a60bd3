"""The kernel behind `mrope_tracker.prompt_positions`: one call per prompt.

`prompt_from_arrays` runs the layout builder's own token scan
(`layout_build.build_from_tokens`) with no room for rows, so it writes the
positions into `out` as it goes and keeps only its running state: one scan
of the rules for every prompt. Its items come in the canonical form
core/inputs.py makes of every input form: int64 grids, float32 times
already defaulted and truncated by the preset, int64 audio token counts.

It returns the prompt's delta, or `FAILED` when the builder found an error
(the caller runs the builder again on a state of its own, for the message).
It never raises.

It keeps the GIL: a call is over in microseconds, releasing and retaking
the GIL would cost a good part of it, and it is what makes the caller's
module-level scratch safe to share between threads.

One signature serves writable and read-only inputs (`sealed_prompt_entry`):
it is compiled for read-only C-contiguous input arrays, which numba's
dispatcher also passes writable ones as (a safe conversion, at the cost of
an exact match), and then compiling is switched off. The entry views its
inputs as writable (`as_writable_type`: the same array, retyped; nothing
here writes them) to call the builder's one specialisation, so a read-only
token array (a `np.frombuffer` of bytes, a shared buffer) needs no copy and
no second compile of the builder (about 13 s of CPU, measured).
"""

import threading

import numpy as np
from numba import types
from numba.extending import intrinsic

from . import layout_codes as C
from .jit_options import helper_with_gil, set_compiling
from .layout_build import build_from_tokens
from .layout_emit import NUM_STATE, S_MAX

# Deltas are at least -len(ids), so this cannot be one.
FAILED = -(2**62)

# Room for the builder's state.
SCRATCH_SIZE = NUM_STATE


@intrinsic
def as_writable_type(typingctx, arr):
    """`arr` itself, typed as a writable array: the array types differ only in
    numba's typing, not in their data. For inputs the kernels only read."""
    if not isinstance(arr, types.Array):
        return None

    def codegen(context, builder, signature, args):
        if context.enable_nrt:  # a new reference to the same array (only where numba counts them)
            context.nrt.incref(builder, signature.return_type, args[0])
        return args[0]

    return arr.copy(readonly=False)(arr), codegen


@helper_with_gil
def prompt_from_arrays(out, ids, params, image_grid, video_grid, video_sp, audio_tokens, use_audio_in_video, scratch):
    """Positions of a prompt whose items are canonical arrays; `scratch` holds
    the builder's state. Returns the delta, or FAILED (an empty prompt among
    the errors)."""
    state = scratch[:NUM_STATE]
    if ids.shape[0] == 0:
        return FAILED
    rows = state[:0].reshape((0, C.NUM_COLS))
    scales = params.view(np.float32)[:0].reshape((0, C.NUM_SCALE_COLS))
    code = build_from_tokens(
        rows,
        scales,
        state,
        out,
        as_writable_type(ids),
        params,
        as_writable_type(image_grid),
        as_writable_type(video_grid),
        as_writable_type(video_sp),
        as_writable_type(audio_tokens),
        use_audio_in_video,
    )[0]
    if code != C.OK:
        return FAILED
    return state[S_MAX] + 1 - ids.shape[0]


def _read_only(dtype, ndim: int):
    return types.Array(dtype, ndim, "C", readonly=True)


# out, ids, params, image_grid, video_grid, video_sp, audio_tokens, use_audio_in_video, scratch
SIGNATURE = (
    types.int64[:, ::1],
    _read_only(types.int64, 1),
    types.float64[::1],
    _read_only(types.int64, 2),
    _read_only(types.int64, 2),
    _read_only(types.float32, 1),
    _read_only(types.int64, 1),
    types.boolean,
    types.int64[::1],
)
_sealed: list = []
_seal_lock = threading.Lock()


def sealed_prompt_entry():
    """`prompt_from_arrays` with its one signature compiled (or loaded from
    numba's cache) and compiling switched off: arguments of any other type
    are refused by the dispatcher rather than compiled for in service."""
    if not _sealed:
        with _seal_lock:
            if not _sealed:
                prompt_from_arrays.compile(SIGNATURE)
                set_compiling(prompt_from_arrays, False)
                _sealed.append(True)
    return prompt_from_arrays
