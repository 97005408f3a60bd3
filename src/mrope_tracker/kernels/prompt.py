"""Kernels behind `mrope_tracker.prompt_positions`: one call per prompt.

Both entry points run the layout builder's own token scan
(`layout_build.build_from_tokens`) with no room for rows, so it writes
the positions into `out` as it goes and keeps only its running state: one
scan of the rules for every prompt, whatever form its items came in.

- `prompt_from_arrays` takes the items as the canonical arrays the Python
  side made (int64 grids, float32 times already defaulted and truncated
  by the preset, int64 audio token counts).
- `prompt_from_records` takes grids and times given as Python lists,
  decoded here from their ``marshal.dumps(..., 2)`` bytes (see records.py):
  a C pass and a decode cost less than converting the lists in Python.

Both return the prompt's delta, or `FAILED` when the builder found an
error (the caller re-runs its checked path to explain it); the records
entry returns `UNREADABLE` for records it does not decode (a bool, a float
grid, more items than its scratch holds), which the caller converts in
Python instead. Neither raises.

They keep the GIL: a call is over in microseconds, releasing and retaking
the GIL would cost a good part of it, and it is what makes the caller's
module-level scratch safe to share between threads.
"""

import numpy as np

from . import layout_codes as C
from .jit_options import helper_with_gil, inner, tiny
from .layout_build import build_from_tokens
from .layout_emit import NUM_STATE, S_MAX
from .records import RECORD_NONE, read_int_rows_at, read_real_records_at, sequence_header

# Deltas are at least -len(ids), so neither can be one.
FAILED = -(2**62)
UNREADABLE = FAILED - 1

# Room for the builder's state and the decoded items of a records call: a
# prompt with more items than fit is converted in Python instead.
SCRATCH_SIZE = 4096


@tiny
def _write_positions(out, ids, params, image_grid, video_grid, video_sp, audio_tokens, use_audio_in_video, state):
    """Run the builder with a zero-row table: positions only. Returns the
    delta, or FAILED (an empty prompt among the errors)."""
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


@helper_with_gil
def prompt_from_arrays(out, ids, params, image_grid, video_grid, video_sp, audio_tokens, use_audio_in_video, scratch):
    """Positions of a prompt whose items are canonical arrays; `scratch` holds the builder's state."""
    return _write_positions(
        out, ids, params, image_grid, video_grid, video_sp, audio_tokens, use_audio_in_video, scratch[:NUM_STATE]
    )


@inner
def _default_times(params, video_sp, num_videos, given):
    """The second_per_grid_ts the builder reads, as `as_second_per_grid_ts`
    makes them: the family's default where none were given, given ones
    truncated to integers under the `int_sp` preset.
    Returns False where the family takes no time scale but one was given."""
    default = params[C.P_SP_DEFAULT]
    if default < 0:  # the family's frames are numbered or timed by text
        return not given
    if not given:
        for n in range(num_videos):
            video_sp[n] = np.float32(default)
    elif params[C.P_SP_TRUNC] != 0:  # transformers 4.57 (docs/semantics.md, D2)
        for n in range(num_videos):
            video_sp[n] = np.trunc(video_sp[n])
    return True


@helper_with_gil
def prompt_from_records(out, ids, params, records, images_only, scratch):
    """Positions of a prompt whose items are ``marshal.dumps((image_grid_thw,
    video_grid_thw, second_per_grid_ts), 2)``: grids as lists or tuples of
    (t, h, w) lists or tuples of plain ints, times as a list or tuple of
    plain ints and floats, each perhaps None. With `images_only`, `records`
    is ``marshal.dumps(image_grid_thw, 2)`` alone: one image given as a list
    is the most common multimodal prompt, and a flag costs less cold start
    than an entry point of its own.

    `scratch` (int64, SCRATCH_SIZE) holds the builder's state, then the
    decoded items. Returns the delta, FAILED or UNREADABLE."""
    state = scratch[:NUM_STATE]
    work = scratch[NUM_STATE:]
    no_audio = scratch[:0]
    # False, as a value rather than a literal: numba would compile the
    # builder once more for a literal False (a type of its own).
    no_audio_in_video = no_audio.shape[0] != 0
    if images_only:
        num_images = sequence_header(records, np.int64(0))
        if num_images < 0 or 3 * num_images > work.shape[0]:
            return UNREADABLE
        image_grid = work[: 3 * num_images].reshape((num_images, 3))
        if read_int_rows_at(records, np.int64(0), image_grid) != len(records):
            return UNREADABLE
        video_grid = image_grid[:0]
        video_sp = params.view(np.float32)[:0]
    else:
        if sequence_header(records, np.int64(0)) != 3:
            return UNREADABLE
        # A grid record of n valid rows takes 5 + 20 n bytes, so the offsets of
        # the records that follow are known before any row is read.
        image_at = np.int64(5)
        num_images = sequence_header(records, image_at)
        if num_images < 0:
            return UNREADABLE
        video_at = image_at + (1 if records[image_at] == RECORD_NONE else 5 + 20 * num_images)
        num_videos = sequence_header(records, video_at)
        num_rows = num_images + num_videos
        if num_videos < 0 or 3 * num_rows + 2 * num_videos > work.shape[0]:
            return UNREADABLE
        sp_at = video_at + (1 if records[video_at] == RECORD_NONE else 5 + 20 * num_videos)
        rows = work[: 3 * num_rows].reshape((num_rows, 3))
        image_grid = rows[:num_images]
        video_grid = rows[num_images:]
        if records[image_at] != RECORD_NONE and read_int_rows_at(records, image_at, image_grid) != video_at:
            return UNREADABLE
        if records[video_at] != RECORD_NONE and read_int_rows_at(records, video_at, video_grid) != sp_at:
            return UNREADABLE
        bits = work[3 * num_rows : 3 * num_rows + num_videos]
        video_sp = work[3 * num_rows + num_videos : 3 * num_rows + 2 * num_videos].view(np.float32)[:num_videos]
        given = not (sp_at < len(records) and records[sp_at] == RECORD_NONE)
        end = read_real_records_at(records, sp_at, bits, video_sp) if given else sp_at + 1
        if end != len(records):
            return UNREADABLE
        if not _default_times(params, video_sp, num_videos, given):
            return FAILED
        if params[C.P_SP_DEFAULT] < 0:
            video_sp = video_sp[:0]
    # one call site: _write_positions is inlined (tiny), and with it the
    # builder's call, which a second site would lower twice
    return _write_positions(out, ids, params, image_grid, video_grid, video_sp, no_audio, no_audio_in_video, state)
