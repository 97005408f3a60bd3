"""Locating a per-frame video's frames inside its placeholder range.

vLLM gives a Qwen3-VL or GLM video one range spanning all its frames and the
timestamp text between them, with an `is_embed` mask marking the frames'
tokens. The frames are found by walking the mask once: skip the gap to the
next embedded token, take h'w' tokens as a frame (checking each is embedded),
and go on. Only the mask is read, never a token; the walk is a plain loop
that LLVM vectorises, so even a 10^6-token range takes tens of microseconds.
"""

from .jit_options import helper


@helper
def locate_frames(mask, t, hw, starts):
    """Write the first index of each of the `t` frames of `hw` embedded tokens
    into `starts`. Returns -1 when the mask holds exactly those frames (and
    nothing else), else the number of frames found before the first problem
    (a short run, or embedded tokens after the last frame)."""
    n = mask.shape[0]
    p = 0
    for f in range(t):
        while p < n and mask[p] == 0:
            p += 1
        if p + hw > n:
            return f
        bad = 0
        run = mask[p : p + hw]
        for k in range(hw):
            bad |= run[k] == 0
        if bad:
            return f
        starts[f] = p
        p += hw
    rest = 0
    for k in range(p, n):
        rest |= mask[k] != 0
    return t if rest else -1
