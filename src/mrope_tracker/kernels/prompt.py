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
"""

import numpy as np

from . import layout_codes as C
from .jit_options import helper_with_gil
from .layout_build import build_from_tokens
from .layout_emit import NUM_STATE, S_MAX

# Deltas are at least -len(ids), so this cannot be one.
FAILED = -(2**62)

# Room for the builder's state.
SCRATCH_SIZE = NUM_STATE


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
        rows, scales, state, out, ids, params, image_grid, video_grid, video_sp, audio_tokens, use_audio_in_video
    )[0]
    if code != C.OK:
        return FAILED
    return state[S_MAX] + 1 - ids.shape[0]
