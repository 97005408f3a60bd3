"""Bookkeeping kernel for the tracker's layout-row pool.

Requests own contiguous row ranges [row_start, row_start + row_count) of one
pool; removing a request leaves a hole. When an admission finds no room at
the top, `compact_pool` slides every live range down, in row order, so all
free rows end up at the top. It runs at admission, never in the step path.
"""

import numpy as np

from .jit_options import jit
from .tracker_step import F_ACTIVE, F_ROW_COUNT, F_ROW_START


@jit
def compact_pool(pool_rows, pool_scales, slot_state):
    """Move live rows to the front of the pool; returns the new top."""
    num_slots = slot_state.shape[0]
    # Live ranges are disjoint, so marking each one's first row orders them
    # in one sweep (numba's argsort would cost a second of first compile).
    owner = np.empty(pool_rows.shape[0], np.int64)
    for r in range(owner.shape[0]):
        owner[r] = -1
    for slot in range(num_slots):
        if slot_state[slot, F_ACTIVE] != 0:
            if slot_state[slot, F_ROW_COUNT] > 0:
                owner[slot_state[slot, F_ROW_START]] = slot
            else:
                slot_state[slot, F_ROW_START] = 0  # an empty range may start anywhere
    top = 0
    for first in range(owner.shape[0]):
        slot = owner[first]
        if slot < 0:
            continue
        start = slot_state[slot, F_ROW_START]
        count = slot_state[slot, F_ROW_COUNT]
        if start != top:
            # destination <= source, so a forward copy never overwrites
            # rows it has yet to read
            for r in range(count):
                for c in range(pool_rows.shape[1]):
                    pool_rows[top + r, c] = pool_rows[start + r, c]
                for c in range(pool_scales.shape[1]):
                    pool_scales[top + r, c] = pool_scales[start + r, c]
            slot_state[slot, F_ROW_START] = top
        top += count
    return top
