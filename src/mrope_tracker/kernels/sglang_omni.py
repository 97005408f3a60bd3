"""SGLang 0.5's Qwen3-Omni positions in one call (the `float_carry` switch).

SGLang positions Qwen3-Omni prompts with transformers' float32 rule and
truncates every position to int64 at prefill (docs/semantics.md, S1).
`float_row` (hf_batch.py) is that rule, token by token; this entry runs it
and truncates its float32 positions in place, so the drop-in of
``get_rope_index_qwen3_omni`` makes no layout rows in Python. The prompt has
been checked by the integer builder first (its items and counts).
"""

import numpy as np

from .hf_batch import float_row
from .jit_options import jit


@jit
def omni_truncated_positions(out, ids, params, image_grid, video_grid, video_sp, audio_tokens, use_audio_in_video):
    """Write trunc(float32 position) of every token into `out` (3, L) float32
    (SGLang's dtype for these positions, whole numbers as prefill casts them).
    Returns the largest truncated position, or -1 where the row is not laid
    out as the float rule reads it (an item without its bos or eos token, or
    items short): the caller then takes the checked route, which names the
    problem."""
    top = float_row(out, ids, params, image_grid, video_grid, video_sp, audio_tokens, use_audio_in_video)
    if top < 0:
        return np.int64(-1)
    n = ids.shape[0]
    for d in range(3):
        for k in range(n):
            # positions are >= 0: truncation is the floor; whole numbers go back to float32 exactly
            out[d, k] = np.floor(out[d, k])
    return np.int64(top)  # truncation is monotone: the largest truncated position is trunc(top)
