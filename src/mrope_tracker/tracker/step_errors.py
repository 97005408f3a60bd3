"""What a refused step was told: the step kernel's error codes as exceptions.

The step kernel (kernels/tracker_step.py) checks a whole step before it
writes anything and returns a negative code on the first problem, the batch
index of the offending entry in its parameters (``P_ERR_INDEX``). Decoding
that into a message that names the argument, what was expected and what came
needs Python objects the kernel never sees (request ids, the limits as the
user gave them), so it happens here, only once a step has failed.
"""

from __future__ import annotations

import numpy as np
import torch

from ..kernels import tracker_step as K

__all__ = ["refuse_pending", "step_error"]


def step_error(
    code: int,
    slots: np.ndarray,
    counts: np.ndarray,
    computed: np.ndarray,
    req_ids,
    params: np.ndarray,
    slot_state: np.ndarray,
    dtype: torch.dtype,
) -> Exception:
    """The exception for step error `code`; `req_ids` is None for a step by
    slots. The limits come from the step kernel's `params` (``P_*``)."""
    n = len(slots)
    max_num_reqs = slot_state.shape[0]
    max_model_len = int(params[K.P_MAX_MODEL_LEN]) or None
    if code == K.STEP_ERR_COUNTS_LENGTH:
        per = "request id" if req_ids is not None else "slot"
        return ValueError(f"num_scheduled_tokens: expected one count per {per} ({n}), got {len(counts)}")
    if code == K.STEP_ERR_TOO_MANY_REQS:
        return ValueError(f"slots: expected at most max_num_reqs={max_num_reqs} requests, got {n}")
    b = int(params[K.P_ERR_INDEX])
    who = f"req_ids[{b}] = {req_ids[b]!r}" if req_ids is not None else f"slots[{b}] = {int(slots[b])}"
    count = int(counts[b])
    if code == K.STEP_ERR_SLOT_RANGE:
        return ValueError(f"slots[{b}]: expected a slot in [0, {max_num_reqs}), got {int(slots[b])}")
    if code == K.STEP_ERR_SLOT_FREE:
        return KeyError(f"slots[{b}]: expected the slot of a tracked request, got free slot {int(slots[b])}")
    if code == K.STEP_ERR_DUPLICATE:
        return ValueError(f"{who}: expected each request at most once per step, got it twice")
    if code == K.STEP_ERR_NEGATIVE:
        return ValueError(f"num_scheduled_tokens[{b}]: expected a count >= 0, got {count}")
    if code == K.STEP_ERR_TOO_MANY_TOKENS:
        total = sum(int(v) for v in counts)  # Python ints: the sum may not fit in int64
        return ValueError(
            f"num_scheduled_tokens: expected at most max_num_batched_tokens={int(params[K.P_MAX_TOKENS])} "
            f"tokens in one step, got {total}"
        )
    if code == K.STEP_ERR_COMPUTED_NEGATIVE:
        return ValueError(f"num_computed_tokens[{b}]: expected a count >= 0 for {who}, got {int(computed[b])}")
    if code == K.STEP_ERR_COMPUTED_LIMIT:
        limit = f"max_model_len={max_model_len}" if max_model_len is not None else f"{int(params[K.P_MAX_INDEX])}"
        return ValueError(f"num_computed_tokens[{b}]: expected at most {limit} for {who}, got {int(computed[b])}")
    done = int(computed[b]) if computed.shape[0] else int(slot_state[slots[b], K.F_NUM_COMPUTED])
    if code == K.STEP_ERR_POSITION_LIMIT:
        return ValueError(
            f"num_scheduled_tokens[{b}]: {who} would reach position "
            f"{done + count - 1 + int(slot_state[slots[b], K.F_DELTA])}, "
            f"past the largest {dtype} value {int(params[K.P_MAX_POSITION])}"
        )
    if code == K.STEP_ERR_MODEL_LEN:
        return ValueError(
            f"num_scheduled_tokens[{b}]: {who} has {done} tokens; expected at most max_model_len="
            f"{max_model_len} after this step, got {done + count}"
        )
    raise AssertionError(f"unknown step error code {code}")  # internal invariant


def refuse_pending(pending: dict, slot_state: np.ndarray, slots, counts, computed, req_ids) -> None:
    """Refuse a step that schedules tokens a retention mask still to come
    decides (only while a pruned request waits for one; `pending` maps its
    slot to its PendingPrune). Entries the step kernel refuses anyway (bad
    slots, lengths) are left to it."""
    if slots.ndim != 1 or counts.ndim != 1 or computed.ndim != 1:
        return  # not the kernel's form: its checks (or the conversion) come first and say what is wrong
    n = min(len(slots), len(counts), len(computed) if len(computed) else len(slots))
    for slot, prune in pending.items():
        for b in np.flatnonzero(np.asarray(slots[:n]) == slot).tolist():
            start = int(computed[b]) if len(computed) else int(slot_state[slot, K.F_NUM_COMPUTED])
            end = start + int(counts[b])
            for k, (lo, hi) in prune.spans():
                if start < hi and end > lo:
                    who = f"req_ids[{b}] = {req_ids[b]!r}" if req_ids is not None else f"slots[{b}] = {slot}"
                    raise ValueError(
                        f"num_scheduled_tokens[{b}]: {who} schedules tokens [{start}, {end}), but tokens "
                        f"[{lo}, {hi}) belong to pruned video {k}, whose retention mask has not come "
                        "(call set_retention_mask first)"
                    )
