"""Kernels behind `mrope_tracker.prompt_positions`: one dispatch per call.

The builder runs with a zero-row table and writes positions straight into
the caller's (3, L) output, so nothing but a small state array is allocated.
Both entry points call the no-NRT helper below, not each other: a call into
an NRT-compiled function costs reference counting on every array passed.
"""

import numpy as np

from . import layout_codes as C
from .jit_options import inner, jit
from .layout_build import build_from_tokens
from .layout_emit import NUM_STATE, S_MAX


@inner
def _fill_prompt(state, out, ids, params, image_grid, video_grid, video_sp, audio_tokens, use_audio_in_video):  # fmt: skip
    no_rows = state[:0].reshape((0, C.NUM_COLS))
    no_scales = video_sp[:0].reshape((0, C.NUM_SCALE_COLS))
    code, a, b, c, d = build_from_tokens(
        no_rows, no_scales, state, out, ids, params, image_grid, video_grid, video_sp, audio_tokens, use_audio_in_video,
    )  # fmt: skip
    return code, a, b, c, d, state[S_MAX] + 1 - ids.shape[0]


@jit
def prompt_positions_kernel(out, ids, params, image_grid, video_grid, video_sp, audio_tokens, use_audio_in_video):  # fmt: skip
    """Fill out (3, L) with the prompt's positions. Returns (code, a, b, c, d, delta)."""
    state = np.empty(NUM_STATE, np.int64)
    return _fill_prompt(state, out, ids, params, image_grid, video_grid, video_sp, audio_tokens, use_audio_in_video)  # fmt: skip


@jit
def image_prompt_positions_kernel(out, ids, params, image_grid):
    """`prompt_positions_kernel` for the most common prompt, text and images
    only: four arguments instead of eight (each array argument costs ~70 ns
    of dispatch)."""
    state = np.empty(NUM_STATE, np.int64)
    no_sp = np.empty(0, np.float32)
    no_av = ids.shape[0] < 0  # False, typed as a run-time bool: a literal would compile the builder again
    return _fill_prompt(state, out, ids, params, image_grid, image_grid[:0], no_sp, ids[:0], no_av)  # fmt: skip
