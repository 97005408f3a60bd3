"""Checks of a `PositionTracker` kept out of its module: where its positions
go, as its constructor accepts them, and its bookkeeping (`check_invariants`,
for tests)."""

from __future__ import annotations

import torch

from ..kernels import layout_codes as C
from ..kernels import tracker_step as K

__all__ = ["check_tracker", "checked_placement"]


def checked_placement(device, dtype, staging) -> tuple[torch.device, torch.dtype, bool]:
    """The constructor's `device`, `dtype` and `staging` checked: (the torch
    device, the dtype, whether to stage through host buffers)."""
    try:
        where = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as exc:  # (ValueError: an index past int64)
        raise ValueError(f"device: expected a torch device such as 'cpu' or 'cuda:0', got {device!r} ({exc})") from None
    if where.type not in ("cpu", "cuda"):
        raise ValueError(f"device: expected 'cpu' or a CUDA device, got {device!r}")
    if where.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device: {device!r} was asked for but CUDA is not available")
    if dtype not in (torch.int64, torch.int32):
        raise ValueError(f"dtype: expected torch.int64 or torch.int32, got {dtype!r}")
    if staging is not None and not isinstance(staging, bool):
        raise TypeError(f"staging: expected True, False or None, got {staging!r}")
    if staging is None:
        staging = where.type == "cuda"
    elif where.type == "cuda" and not staging:
        raise ValueError("staging: a CUDA tracker always stages through pinned host buffers; expected True or None")
    return where, dtype, staging


def check_tracker(slots, pool, slot_state, args, max_model_len) -> None:
    """Raise AssertionError if a tracker's request slots, its `slot_state`
    counters, its layout-row pool and its step arguments disagree."""
    assert len(slots.slot_of) + len(slots.free) == slot_state.shape[0]
    assert len(set(slots.free)) == len(slots.free)
    live = []
    for req_id, slot in slots.slot_of.items():
        state = slot_state[slot]
        assert slots.req_of_slot[slot] == req_id
        assert state[K.F_ACTIVE] == 1 and slot not in slots.free
        assert 0 <= state[K.F_NUM_COMPUTED]
        if max_model_len is not None:
            assert state[K.F_NUM_COMPUTED] <= max_model_len
        start, count = int(state[K.F_ROW_START]), int(state[K.F_ROW_COUNT])
        assert 0 < count and start + count <= pool.top <= pool.capacity
        rows = pool.rows[start : start + count]
        # rows tile [0, prompt_len) in order
        assert rows[0, C.COL_TOK_START] == 0
        assert (rows[1:, C.COL_TOK_START] == rows[:-1, C.COL_TOK_START] + rows[:-1, C.COL_TOK_LEN]).all()
        assert rows[-1, C.COL_TOK_START] + rows[-1, C.COL_TOK_LEN] == state[K.F_PROMPT_LEN]
        assert (rows[:, C.COL_TOK_LEN] > 0).all()
        live.append((start, start + count))
    for slot in slots.free:
        assert slot_state[slot, K.F_ACTIVE] == 0 and slots.req_of_slot[slot] is None
    live.sort()
    for (_, end), (start, _) in zip(live, live[1:]):
        assert end <= start, "two requests share layout rows"
    # what the step path reuses without looking again: the last ids' slots, the lists the buffers hold
    args.check_invariants(slots.slot_of)
