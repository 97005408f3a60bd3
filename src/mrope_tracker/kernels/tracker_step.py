"""The tracker's per-step kernel: one call writes a whole batch's positions.

Per-request bookkeeping lives in one int64 table, `slot_state`
[max_num_reqs, NUM_SLOT_FIELDS], whose rows are request slots; layouts live in
a shared row pool (see layout_codes). A struct of arrays passed to an njit
function rather than a numba jitclass: with the same body, the call costs
0.7 us against 1.0-1.3 us for a jitclass method (`mrope-tracker bench
--suite decode`), and every buffer stays a plain numpy array the tracker owns.

The kernel validates the whole batch before writing anything, so a rejected
step changes no counter: pass 1 checks, pass 2 writes and advances.
"""

from .jit_options import jit
from .layout_fill import fill_positions, write_next_positions

# slot_state columns
F_ACTIVE = 0  # 1 while a request holds the slot
F_NUM_COMPUTED = 1  # tokens whose positions were handed out (or cached)
F_PROMPT_LEN = 2
F_DELTA = 3  # mrope_position_delta
F_ROW_START = 4  # first layout row in the pool
F_ROW_COUNT = 5
F_STAMP = 6  # last step that scheduled the slot (duplicate detection)
NUM_SLOT_FIELDS = 7

STEP_OK = 0
STEP_ERR_SLOT_RANGE = 1  # a slot outside [0, max_num_reqs)
STEP_ERR_SLOT_FREE = 2  # a slot that holds no request
STEP_ERR_DUPLICATE = 3  # the same slot twice in one step
STEP_ERR_NEGATIVE = 4  # a negative token count
STEP_ERR_TOO_MANY_TOKENS = 5  # the step's total exceeds max_num_batched_tokens
STEP_ERR_MODEL_LEN = 6  # a request would pass max_model_len
STEP_ERR_POSITION_LIMIT = 7  # a decode position past what the output dtype holds


@jit
def prepare_step(out, slots, num_scheduled, slot_state, pool_rows, pool_scales, step_id, max_num_tokens, max_model_len, max_position):
    """Write positions for every scheduled token, batch order, into out[:, :total].

    `max_position` is the largest value `out`'s dtype holds (prompt positions
    were checked against it at admission). Returns (total, error code, batch
    index of the offending entry)."""
    n = slots.shape[0]
    num_slots = slot_state.shape[0]
    total = 0
    for b in range(n):
        slot = slots[b]
        count = num_scheduled[b]
        if slot < 0 or slot >= num_slots:
            return 0, STEP_ERR_SLOT_RANGE, b
        if slot_state[slot, F_ACTIVE] == 0:
            return 0, STEP_ERR_SLOT_FREE, b
        if slot_state[slot, F_STAMP] == step_id:
            return 0, STEP_ERR_DUPLICATE, b
        slot_state[slot, F_STAMP] = step_id
        if count < 0:
            return 0, STEP_ERR_NEGATIVE, b
        if count > max_num_tokens - total:
            return 0, STEP_ERR_TOO_MANY_TOKENS, b
        total += count
        end = slot_state[slot, F_NUM_COMPUTED] + count
        if max_model_len > 0 and end > max_model_len:
            return 0, STEP_ERR_MODEL_LEN, b
        if end > slot_state[slot, F_PROMPT_LEN] and end - 1 + slot_state[slot, F_DELTA] > max_position:
            return 0, STEP_ERR_POSITION_LIMIT, b
    col = 0
    for b in range(n):
        slot = slots[b]
        count = num_scheduled[b]
        start = slot_state[slot, F_NUM_COMPUTED]
        prompt_len = slot_state[slot, F_PROMPT_LEN]
        in_prompt = min(count, max(prompt_len - start, 0))
        if in_prompt > 0:
            row_start = slot_state[slot, F_ROW_START]
            fill_positions(
                out, col, pool_rows, pool_scales, row_start, row_start + slot_state[slot, F_ROW_COUNT],
                start, start + in_prompt,
            )  # fmt: skip
        if count > in_prompt:
            write_next_positions(out, col + in_prompt, slot_state[slot, F_DELTA], start + in_prompt, count - in_prompt)
        col += count
        slot_state[slot, F_NUM_COMPUTED] = start + count
    return total, STEP_OK, 0
