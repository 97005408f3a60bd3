"""The tracker's per-step kernel: one call writes a whole batch's positions.

Per-request bookkeeping lives in one int64 table, `slot_state`
[max_num_reqs, NUM_SLOT_FIELDS], whose rows are request slots; layouts live in
a shared row pool (see layout_codes). A struct of arrays passed to an njit
function compiled without numba's runtime rather than a numba jitclass: with
the same body, the call costs about half a jitclass method's
(`mrope-tracker bench --suite decode`, dispatch table), and every buffer
stays a plain numpy array the tracker owns. The step's limits and its counter travel in one small int64 array,
`params`.

The kernel validates the whole batch before writing anything, so a rejected
step changes no counter and no position: pass 1 checks, pass 2 writes and
advances. Each request's first index is the scheduler's `num_computed`
when the engine passes it (the counter then follows it), else the tracker's
own counter. A decode token (one token past the prompt) is one scalar
store per row (three for 3-axis families); anything else goes through the
layout's segment writers. `out` has the family's num_dims rows.

Argument types are fixed: `out` is int64 or int32 (the tracker's dtype);
`slots`, `num_scheduled` and `num_computed` are 1-D C-contiguous writable
arrays of one dtype, int64 or int32, so an engine's int32 arrays need no
copy. `step_kernel` compiles those two signatures for a dtype (or loads them
from numba's cache) and then forbids compiling any other: an argument of
another form raises TypeError at the call instead of compiling a new
specialisation in the middle of serving, and the tracker converts it.
"""

import threading

import numba
import numpy as np
from numba import types as nt

from .jit_options import full_optimisation, helper, set_compiling, tiny
from .layout_fill import fill_positions, write_next_positions

# slot_state columns
F_ACTIVE = 0  # 1 while a request holds the slot
F_NUM_COMPUTED = 1  # tokens whose positions were handed out (or cached)
F_PROMPT_LEN = 2
F_DELTA = 3  # mrope_position_delta
F_ROW_START = 4  # first layout row in the pool
F_ROW_COUNT = 5
NUM_SLOT_FIELDS = 6

# params entries (int64)
P_STEP_ID = 0  # incremented by every call, rejected or not (duplicate stamps)
P_MAX_TOKENS = 1  # max_num_batched_tokens
P_MAX_MODEL_LEN = 2  # 0: no limit
P_MAX_POSITION = 3  # the largest value the output dtype holds
P_MAX_INDEX = 4  # the largest num_computed accepted (keeps sums inside int64)
P_ERR_INDEX = 5  # out: batch index of the entry a rejected step stopped at
NUM_STEP_PARAMS = 6
# params[P_STAMPS + slot], one per slot (the params array is NUM_STEP_PARAMS + max_num_reqs long): the last step
# that scheduled the slot, for duplicate detection. Scratch, apart from slot_state: a rejected step stamps the
# entries it checked, and every later step has a new step id, so stamps never need undoing, and slot_state (what
# a request's positions depend on) is unchanged by a rejected step.
P_STAMPS = NUM_STEP_PARAMS

STEP_OK = 0
STEP_ERR_SLOT_RANGE = 1  # a slot outside [0, max_num_reqs)
STEP_ERR_SLOT_FREE = 2  # a slot that holds no request
STEP_ERR_DUPLICATE = 3  # the same slot twice in one step
STEP_ERR_NEGATIVE = 4  # a negative token count
STEP_ERR_TOO_MANY_TOKENS = 5  # the step's total exceeds max_num_batched_tokens
STEP_ERR_MODEL_LEN = 6  # a request would pass max_model_len
STEP_ERR_POSITION_LIMIT = 7  # a position past what the output dtype holds
STEP_ERR_COMPUTED_NEGATIVE = 8  # a negative num_computed
STEP_ERR_COMPUTED_LIMIT = 9  # num_computed past max_model_len (or past P_MAX_INDEX)
STEP_ERR_COUNTS_LENGTH = 10  # num_scheduled and slots differ in length
STEP_ERR_TOO_MANY_REQS = 11  # more entries than slots


@tiny
def _check_entry(b, slots, num_scheduled, num_computed, slot_state, params, step_id, total, max_tokens, limits):
    """STEP_OK, or why batch entry b cannot run; stamps its slot with the
    step (duplicate detection, in the params' scratch)."""
    slot = slots[b]
    count = num_scheduled[b]
    max_model_len, max_position, max_index = limits
    if slot < 0 or slot >= slot_state.shape[0]:
        return STEP_ERR_SLOT_RANGE
    if slot_state[slot, F_ACTIVE] == 0:
        return STEP_ERR_SLOT_FREE
    if params[P_STAMPS + slot] == step_id:
        return STEP_ERR_DUPLICATE
    params[P_STAMPS + slot] = step_id
    if count < 0:
        return STEP_ERR_NEGATIVE
    if count > max_tokens - total:
        return STEP_ERR_TOO_MANY_TOKENS
    if num_computed.shape[0] != 0:
        start = num_computed[b]
        if start < 0:
            return STEP_ERR_COMPUTED_NEGATIVE
        if start > max_index:
            return STEP_ERR_COMPUTED_LIMIT
    else:
        start = slot_state[slot, F_NUM_COMPUTED]
    # start <= max_index and count <= max_tokens, so no sum below overflows
    end = start + count
    if max_model_len > 0 and end > max_model_len:
        return STEP_ERR_MODEL_LEN
    if end > slot_state[slot, F_PROMPT_LEN] and end - 1 + slot_state[slot, F_DELTA] > max_position:
        return STEP_ERR_POSITION_LIMIT
    return STEP_OK


@tiny
def _check_step(slots, num_scheduled, num_computed, slot_state, params, step_id):
    """Pass 1: (STEP_OK, n, the step's total), or (an error code, the batch index it stopped at, 0)."""
    n = slots.shape[0]
    max_tokens = params[P_MAX_TOKENS]
    limits = (params[P_MAX_MODEL_LEN], params[P_MAX_POSITION], params[P_MAX_INDEX])
    total = 0
    for b in range(n):
        code = _check_entry(
            b, slots, num_scheduled, num_computed, slot_state, params, step_id, total, max_tokens, limits
        )
        if code != STEP_OK:
            return code, b, 0
        total += num_scheduled[b]
    return STEP_OK, n, total


@tiny
def _write_entry(out, col, count, start, slot, slot_state, pool_rows, pool_scales):
    """Positions of one entry's `count` tokens from index `start`, into out[:, col:col + count]."""
    prompt_len = slot_state[slot, F_PROMPT_LEN]
    if count == 1 and start >= prompt_len:
        # a decode token: index + delta on every row (three scalar
        # stores, and an empty loop, for 3-axis families)
        value = start + slot_state[slot, F_DELTA]
        out[0, col] = value
        out[1, col] = value
        out[2, col] = value
        for d in range(3, out.shape[0]):
            out[d, col] = value
    elif count > 0:
        in_prompt = min(count, max(prompt_len - start, 0))
        if in_prompt > 0:
            row_start = slot_state[slot, F_ROW_START]
            fill_positions(
                out,
                col,
                pool_rows,
                pool_scales,
                row_start,
                row_start + slot_state[slot, F_ROW_COUNT],
                start,
                start + in_prompt,
            )
        if count > in_prompt:
            write_next_positions(out, col + in_prompt, slot_state[slot, F_DELTA], start + in_prompt, count - in_prompt)


@helper  # allocates nothing: without numba's runtime, no reference counting of its 7 arrays
def prepare_step(out, slots, num_scheduled, num_computed, slot_state, pool_rows, pool_scales, params):
    """Write positions for every scheduled token, batch order, into out[:, :total].

    `num_computed` is empty when not given, else as long as `slots` (the
    caller checks). Returns the step's total (>= 0), or minus an error code
    with the offending batch index in params[P_ERR_INDEX]; a rejected step
    changes nothing but the params (the step counter, the stamps' scratch)."""
    n = slots.shape[0]
    given = num_computed.shape[0] != 0
    step_id = params[P_STEP_ID] + 1
    params[P_STEP_ID] = step_id
    if num_scheduled.shape[0] != n:
        return -STEP_ERR_COUNTS_LENGTH
    if n > slot_state.shape[0]:
        return -STEP_ERR_TOO_MANY_REQS
    code, b, total = _check_step(slots, num_scheduled, num_computed, slot_state, params, step_id)
    if code != STEP_OK:
        params[P_ERR_INDEX] = b
        return -code
    col = np.int64(0)  # not a literal 0: that would compile the fill helpers twice
    for b in range(n):
        slot = slots[b]
        count = num_scheduled[b]
        start = num_computed[b] if given else slot_state[slot, F_NUM_COMPUTED]
        _write_entry(out, col, count, start, slot, slot_state, pool_rows, pool_scales)
        col += count
        slot_state[slot, F_NUM_COMPUTED] = start + count
    return total


_compiled: set = set()
_compile_lock = threading.Lock()


def step_signatures(out_dtype) -> list[tuple]:
    """The argument types `prepare_step` is compiled for, given the output
    dtype: int64 and int32 index arrays."""
    out = numba.from_dtype(np.dtype(out_dtype))[:, ::1]
    return [
        (out, index, index, index, nt.int64[:, ::1], nt.int64[:, ::1], nt.float32[:, ::1], nt.int64[::1])
        for index in (nt.int64[::1], nt.int32[::1])
    ]


def compile_step_signature(signature) -> None:
    """`prepare_step` compiled (or loaded) for one of `step_signatures`, at
    numba's own optimisation level even inside a warm-up's lighter one: it
    is the kernel every scheduler step runs. Compiling must be switched on."""
    with full_optimisation():
        prepare_step.compile(signature)


def step_kernel(out_dtype):
    """`prepare_step`, ready for `out_dtype` (int64 or int32) positions with
    int64 or int32 index arrays, and for no other argument types: the two
    signatures are compiled (or loaded from numba's cache) on first use, then
    compilation is switched off again."""
    key = np.dtype(out_dtype)
    if key not in _compiled:
        with _compile_lock:
            if key not in _compiled:
                set_compiling(prepare_step, True)
                try:
                    for signature in step_signatures(key):
                        compile_step_signature(signature)
                finally:
                    set_compiling(prepare_step, False)
                _compiled.add(key)
    return prepare_step
