"""Kernel behind `mrope_tracker.next_positions` (the seed's
get_next_input_positions): checks its own bounds, so the Python wrapper only
checks types."""

from .jit_options import jit


@jit
def next_positions_kernel(out, out_offset, delta, context_len, num_new_tokens):
    """out[:, out_offset + n] = context_len + delta + n on every row; returns 0,
    or 1 (writing nothing) when an argument is out of range."""
    if (
        out_offset < 0
        or num_new_tokens < 0
        or context_len < 0
        or num_new_tokens > out.shape[1] - out_offset
        or delta > 2**62
        or delta < -(2**62)
        or context_len > 2**62
        or context_len + delta < 0
        or context_len + delta > 2**62 - num_new_tokens  # every position stays below 2**62
    ):
        return 1
    first = context_len + delta
    for d in range(out.shape[0]):
        row = out[d, out_offset : out_offset + num_new_tokens]  # 0-based: vectorises
        for n in range(num_new_tokens):
            row[n] = first + n
    return 0
