"""The tracker's layout-row pool: every admitted request's layout rows in two shared numpy tables.

Where each request's rows go is the shared allocator's business
(core/row_arena.py, which `RopeState`'s device pool uses too); this module
keeps the tables, mirrors each slot's row start into `slot_state` (where the
step kernel reads it), and carries out the arena's compactions in place.
Compaction and growth happen at admission only, never in the step path,
and change no position.
"""

from __future__ import annotations

import numpy as np

from ..core.row_arena import Compaction, RowArena, grown_capacity
from ..kernels import layout_codes as C
from ..kernels.tracker_step import F_ROW_START

__all__ = ["LayoutRowPool", "grown_capacity"]


class LayoutRowPool:
    """``rows`` [capacity, NUM_COLS] int64 and ``scales`` [capacity, NUM_SCALE_COLS]
    float32, placed by ``arena`` (a `RowArena` of `num_slots` slots, fill 1:
    a host compaction costs little, so the pool grows only when the live rows
    alone do not fit)."""

    def __init__(self, capacity: int, num_slots: int) -> None:
        self.rows = np.zeros((capacity, C.NUM_COLS), np.int64)
        self.scales = np.zeros((capacity, C.NUM_SCALE_COLS), np.float32)
        self.arena = RowArena(num_slots, capacity)

    @property
    def capacity(self) -> int:
        return self.rows.shape[0]

    @property
    def top(self) -> int:
        """Rows [0, top) may be held; [top, capacity) are free."""
        return self.arena.top

    def make_room(self, needed: int, slot_state: np.ndarray) -> int:
        """Have `needed` free rows at the top of the pool (compacting, then
        growing, only when short); returns the top. Every held range is kept
        (its new start written to `slot_state`)."""
        if not self.arena.fits(needed):
            self._compact(self.arena.plan(needed), slot_state)
        return self.arena.top

    def _compact(self, plan: Compaction, slot_state: np.ndarray) -> None:
        source = plan.source_rows()
        if plan.capacity != self.capacity:
            rows = np.zeros((plan.capacity, C.NUM_COLS), np.int64)
            scales = np.zeros((plan.capacity, C.NUM_SCALE_COLS), np.float32)
        else:  # in place: the gather reads a copy of the live rows first
            rows, scales = self.rows, self.scales
        rows[: plan.top] = self.rows[source]
        scales[: plan.top] = self.scales[source]
        self.rows, self.scales = rows, scales
        slot_state[plan.slots, F_ROW_START] = plan.new_starts
        self.arena.adopt(plan)

    def build_at_top(self, estimate: int, build, slot_state: np.ndarray, accept=None) -> tuple[int, int, int]:
        """Run `build(rows, scales)` into the free top, or aside when the free
        top holds fewer than `estimate` rows; returns (start, num_rows,
        max_position) of the rows it placed.

        `build` returns (rows, scales, num_rows, max_position), built into the
        table it was given or, when that held too few rows, into one of its
        own; `accept(max_position)` may still refuse the result. Only then is
        the pool compacted or grown to take rows built aside, and nothing is
        committed: the caller calls `commit` once the request is accepted. So
        a refused request leaves the pool exactly as it was (its memory, its
        rows, every row start), whatever its `estimate` claimed."""
        top = self.arena.top
        if self.arena.fits(estimate):
            rows, scales = self.rows[top:], self.scales[top:]
        else:  # no room without compacting or growing the pool: build aside first
            rows = np.empty((estimate, C.NUM_COLS), np.int64)
            scales = np.empty((estimate, C.NUM_SCALE_COLS), np.float32)
        rows, scales, n, max_position = build(rows, scales)
        if accept is not None:
            accept(max_position)
        if rows.base is not self.rows:  # built aside: make room, then copy the rows up
            top = self.make_room(n, slot_state)
            self.rows[top : top + n] = rows[:n]
            self.scales[top : top + n] = scales[:n]
        return top, n, max_position

    def commit(self, slot: int, start: int, num_rows: int) -> None:
        """Rows [start, start + num_rows) (built at the top) now belong to
        `slot`; the rows it held before, if any, are free."""
        if start != self.arena.top:
            raise ValueError(f"start: expected the free top {self.arena.top} that build_at_top returned, got {start}")
        self.arena.take(slot, num_rows)

    def release(self, slot: int) -> None:
        """`slot`'s rows are free (the slot's request was removed)."""
        self.arena.free(slot)

    def clear(self) -> None:
        """No request holds rows any more: the whole pool is free."""
        self.arena.clear()

    def row_nbytes(self) -> int:
        """Bytes one layout row takes (both tables)."""
        return self.rows.itemsize * C.NUM_COLS + self.scales.itemsize * C.NUM_SCALE_COLS

    def nbytes(self) -> int:
        return self.rows.nbytes + self.scales.nbytes
