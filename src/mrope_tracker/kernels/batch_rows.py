"""SGLang's batch fields as the step kernel's arguments, in one pass.

`sglang.BatchPositions` finds each request's tracker slot from SGLang's
``req_pool_idx`` (its row in ``req_to_token``), and for a decode batch makes
each request's one token at ``seq_len - 1``. With numpy that is a handful of
whole-array passes (two range tests, two ``flatnonzero``, a gather, a
subtraction, a fill): several microseconds on a batch of one, more than the
positions themselves. Here it is one loop; the caller's checked route says
what is wrong when this returns an entry. A speculative batch's host rows
are only range-checked (`first_outside`): its rows read a delta table.

Before either, the plugin asks whether the batch brings a request it has not
admitted yet (`unseen_row`): the same kind of whole-array passes (a gather
of SGLang's row generations, a compare, a ``flatnonzero``, a test of the
rows it cannot serve) cost more than the positions, on every batch.
"""

from .jit_options import helper

FREE = -1  # a row that holds no request
# unseen_row's answers when no row is new
SERVED = -1  # every row admitted, none foreign
FOREIGN = -2  # every row admitted, some the adapter does not serve


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


@helper
def unseen_row(rows, live, seen, foreign):
    """The first k whose row is new, its ``live`` generation (SGLang's) not
    the one ``seen`` holds, or outside a table; SERVED when there is none
    and no row is ``foreign``, else FOREIGN."""
    num_live = live.shape[0]
    num_seen = min(seen.shape[0], foreign.shape[0])
    some_foreign = False
    for k in range(rows.shape[0]):
        row = rows[k]
        if row < 0 or row >= num_live or row >= num_seen or live[row] != seen[row]:
            return k
        if foreign[row]:
            some_foreign = True
    return FOREIGN if some_foreign else SERVED
