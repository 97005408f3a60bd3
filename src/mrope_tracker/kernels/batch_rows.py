"""SGLang's batch fields as the step kernel's arguments, in one pass.

`sglang.BatchPositions` finds each request's tracker slot from SGLang's
``req_pool_idx`` (its row in ``req_to_token``), and for a decode batch makes
each request's one token at ``seq_len - 1``. With numpy that is a handful of
whole-array passes (two range tests, two ``flatnonzero``, a gather, a
subtraction, a fill): several microseconds on a batch of one, more than the
positions themselves. Here it is one loop; the caller's checked route says
what is wrong when this returns an entry. A speculative batch's host rows
are only range-checked (`first_outside`): its rows read a delta table.
"""

from .jit_options import helper

FREE = -1  # a row that holds no request


@helper
def batch_slots(slot_of, rows, seq, slots, computed, counts):
    """rows [n] (SGLang rows) -> slots [n] (the tracker's, from `slot_of`)
    and, where `seq` has n entries (a decode batch; empty for an extend
    batch), computed [n] = seq - 1 and counts [n] = 1. Returns -1 when every
    entry is usable; else the first that is not: k for rows[k] outside
    `slot_of` or FREE there, n + k for seq[k] < 1 (the outputs are then
    partly written, and not to be used)."""
    n = rows.shape[0]
    num_rows = slot_of.shape[0]
    for k in range(n):
        row = rows[k]
        if row < 0 or row >= num_rows:
            return k
        slot = slot_of[row]
        if slot == FREE:
            return k
        slots[k] = slot
    if seq.shape[0]:
        for k in range(n):
            length = seq[k]
            if length < 1:
                return n + k
            computed[k] = length - 1
            counts[k] = 1
    return -1


@helper
def first_outside(values, high):
    """The first k with values[k] outside [0, high], or -1 when there is none."""
    for k in range(values.shape[0]):
        if values[k] < 0 or values[k] > high:
            return k
    return -1
