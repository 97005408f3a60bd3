"""The shared row allocator (core/row_arena.py) against a plain-Python model of it.

Random sequences of admissions (with and without giving up the slot's old
rows at a compaction), removals and clears drive a `RowArena` whose
compactions are carried out on a plain list standing for the owner's
storage, and, separately, the tracker's numpy pool (tracker/row_pool.py).
After every operation each slot's rows must hold what was written there,
and the arena's top and size must be the model's. `RopeState`'s device pool
uses the same arena; tests/test_rope_state.py drives it through the device.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mrope_tracker.core.row_arena import RowArena, grown_capacity
from mrope_tracker.kernels import layout_codes as C
from mrope_tracker.kernels.tracker_step import F_ROW_COUNT, F_ROW_START, NUM_SLOT_FIELDS
from mrope_tracker.tracker.row_pool import LayoutRowPool

NUM_SLOTS = 6

operations = st.lists(
    st.one_of(
        st.tuples(st.just("take"), st.integers(0, NUM_SLOTS - 1), st.integers(0, 9), st.booleans()),
        st.tuples(st.just("free"), st.integers(0, NUM_SLOTS - 1)),
        st.tuples(st.just("clear")),
    ),
    max_size=40,
)


def model_capacity(capacity: int, rows: int, fill: float, limit: int | None) -> int:
    """The first of capacity, 2 capacity, 4 capacity, ... (capped at limit) that `rows` fill at most `fill` of."""
    k = 0
    while True:
        size = capacity * 2**k if limit is None else min(capacity * 2**k, limit)
        if rows <= fill * size or size == limit:
            return size
        k += 1


class Model:
    """What the arena should do, in plain Python: slot -> (start, rows written there)."""

    def __init__(self, capacity: int, fill: float, limit: int | None) -> None:
        self.capacity, self.fill, self.limit = capacity, fill, limit
        self.held: dict[int, tuple[int, list]] = {}
        self.top = 0

    def compact(self, num_rows: int, drop: int | None) -> bool:
        """Slide the live ranges (but `drop`'s) down in row order; False (nothing changed) past the limit."""
        live = sorted((start, slot) for slot, (start, _) in self.held.items() if slot != drop)
        total = sum(len(self.held[slot][1]) for _, slot in live)
        capacity = model_capacity(self.capacity, total + num_rows, self.fill, self.limit)
        if total + num_rows > capacity:
            return False
        self.held.pop(drop, None)
        at = 0
        for _, slot in live:
            self.held[slot] = (at, self.held[slot][1])
            at += len(self.held[slot][1])
        self.capacity, self.top = capacity, at
        return True


def _check(arena: RowArena, storage: list, model: Model) -> None:
    arena.check_invariants()
    assert arena.top == model.top and arena.capacity == model.capacity == len(storage)
    for slot in range(NUM_SLOTS):
        if model.held.get(slot, (0, []))[1]:  # (an empty range holds no rows: its start is of no matter)
            start, content = model.held[slot]
            assert arena.start[slot] == start and arena.count[slot] == len(content)
            assert storage[start : start + len(content)] == content
        else:
            assert arena.count[slot] == 0


@given(
    capacity=st.integers(1, 12),
    fill=st.sampled_from([1.0, 0.75]),
    limit=st.sampled_from([None, 16, 24]),
    ops=operations,
)
def test_arena_matches_the_model(capacity, fill, limit, ops):
    if limit is not None and capacity > limit:
        capacity = limit
    arena = RowArena(NUM_SLOTS, capacity, fill=fill, limit=limit)
    storage: list = [None] * capacity
    model = Model(capacity, fill, limit)
    for step, op in enumerate(ops):
        if op[0] == "take":
            _, slot, num_rows, drop_old = op
            drop = slot if drop_old else None
            if not arena.fits(num_rows):
                before = (arena.start.copy(), arena.count.copy(), arena.top, arena.capacity)
                plan = arena.plan(num_rows, drop)
                # planning changes nothing
                assert (arena.start == before[0]).all() and (arena.count == before[1]).all()
                assert (arena.top, arena.capacity) == before[2:]
                if not model.compact(num_rows, drop):
                    assert plan.top + num_rows > plan.capacity  # refused: the owner keeps everything as it was
                    _check(arena, storage, model)
                    continue
                assert plan.top + num_rows <= plan.capacity
                moved = [storage[r] for r in plan.source_rows()]  # the owner's gather
                storage = moved + [None] * (plan.capacity - plan.top)
                arena.adopt(plan, drop)
            content = [(step, k) for k in range(num_rows)]
            start = arena.take(slot, num_rows)
            assert start == model.top
            storage[start : start + num_rows] = content
            model.held[slot] = (start, content)
            model.top += num_rows
        elif op[0] == "free":
            arena.free(op[1])
            model.held.pop(op[1], None)
        else:
            arena.clear()
            model.held.clear()
            model.top = 0
        _check(arena, storage, model)


def test_take_past_the_free_top_is_refused_and_changes_nothing():
    arena = RowArena(2, 4)
    arena.take(0, 3)
    with pytest.raises(ValueError, match="num_rows: expected at most the 1 free rows"):
        arena.take(1, 2)
    assert arena.top == 3 and arena.count.tolist() == [3, 0]


@given(capacity=st.integers(1, 64), rows=st.integers(0, 500), limit=st.sampled_from([None, 64, 100]))
def test_grown_capacity_is_the_model_rule(capacity, rows, limit):
    if limit is not None:
        capacity = min(capacity, limit)
    for fill in (1.0, 0.75):
        assert grown_capacity(capacity, rows, fill=fill, limit=limit) == model_capacity(capacity, rows, fill, limit)


@given(capacity=st.integers(1, 10), ops=operations)
def test_tracker_pool_keeps_every_slots_rows(capacity, ops):
    """The tracker's numpy pool, driven as PositionTracker drives it: each
    slot's rows (and their row starts in slot_state) survive every
    compaction and growth, in place."""
    pool = LayoutRowPool(capacity, NUM_SLOTS)
    slot_state = np.zeros((NUM_SLOTS, NUM_SLOT_FIELDS), np.int64)
    written: dict[int, np.ndarray] = {}
    # the most rows held at once (a slot's old rows count until its new ones are in): the pool stays
    # under twice that, O(items)
    peak = 0
    for step, op in enumerate(ops):
        if op[0] == "take":
            _, slot, num_rows, in_place = op
            num_rows = max(num_rows, 1)  # a layout has at least one row
            values = np.arange(num_rows * C.NUM_COLS, dtype=np.int64).reshape(num_rows, C.NUM_COLS) + 1000 * step

            def build(rows, scales, values=values):
                n = values.shape[0]
                if rows.shape[0] < n:  # as the builders do: a table of their own when given too few rows
                    rows, scales = np.empty((n, C.NUM_COLS), np.int64), np.empty((n, C.NUM_SCALE_COLS), np.float32)
                rows[:n] = values
                scales[:n] = values[:, :1]
                return rows, scales, n, 0

            peak = max(peak, num_rows + sum(v.shape[0] for v in written.values()))
            # an estimate that is right (built in place when there is room) or too small (built aside)
            top, n, _ = pool.build_at_top(num_rows if in_place else 0, build, slot_state)
            pool.commit(slot, top, n)
            slot_state[slot, F_ROW_START], slot_state[slot, F_ROW_COUNT] = top, n
            written[slot] = values
        elif op[0] == "free":
            pool.release(op[1])
            slot_state[op[1]] = 0
            written.pop(op[1], None)
        else:
            pool.clear()
            slot_state[:] = 0
            written.clear()
        pool.arena.check_invariants()
        assert pool.arena.capacity == pool.capacity
        for slot, values in written.items():
            start, n = slot_state[slot, F_ROW_START], slot_state[slot, F_ROW_COUNT]
            assert pool.arena.start[slot] == start and pool.arena.count[slot] == n
            assert (pool.rows[start : start + n] == values).all()
            assert (pool.scales[start : start + n, 0] == values[:, 0].astype(np.float32)).all()
        assert pool.top <= pool.capacity <= max(capacity, 2 * peak)
