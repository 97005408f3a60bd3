"""Locating a per-frame video's frames inside its placeholder range.

vLLM gives a Qwen3-VL or GLM video one range spanning all its frames and the
timestamp text between them, with an `is_embed` mask marking the frames'
tokens. The frames are found by walking the mask once: skip the gap to the
next embedded token, take h'w' tokens as a frame (checking each is embedded),
and go on. Only the mask is read, never a token; the walk is a plain loop
that LLVM vectorises, so even a 10^6-token range takes tens of microseconds.
"""

import numpy as np

from .jit_options import helper


@helper
def locate_frames(mask, offset, t, hw, frames):
    """Write each of the `t` frames of `hw` embedded tokens into the (t, 2)
    rows `frames` as (offset + its first index in the mask, hw). Returns -1
    when the mask holds exactly those frames (and nothing else), else the
    number of frames found before the first problem (a short run, or
    embedded tokens after the last frame)."""
    n = mask.shape[0]
    p = 0
    for f in range(t):
        while p < n and mask[p] == 0:
            p += 1
        if p + hw > n:
            return f
        # an AND of the 0/1 bytes over a view indexed from 0 vectorises
        # better than a compare per byte (docs/benchmarks.md)
        every = np.uint8(1)
        run = mask[p : p + hw]
        for k in range(hw):
            every &= run[k]
        if every == 0:
            return f
        frames[f, 0] = offset + p
        frames[f, 1] = hw
        p += hw
    rest = np.uint8(0)
    tail = mask[p:]
    for k in range(tail.shape[0]):
        rest |= tail[k]
    return t if rest else -1
