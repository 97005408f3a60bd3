"""The tracker's layout-row pool: every admitted request's layout rows in two shared tables.

Requests own contiguous row ranges (their start and count live in the
tracker's `slot_state`); removing a request leaves a hole. Rows are only ever
added at the free top. When an admission finds too little room there, the
pool compacts (`kernels/pool.py` slides live ranges down) and grows only if
that is still not enough. This happens at admission only, never in the step
path, and changes no position.
"""

from __future__ import annotations

import numpy as np

from ..kernels import layout_codes as C
from ..kernels.pool import compact_pool

__all__ = ["LayoutRowPool", "grown_capacity"]


def grown_capacity(capacity: int, rows: int, *, fill: float = 1.0, limit: int | None = None) -> int:
    """The size of a row pool that is to hold `rows` live rows: `capacity`
    while they fill at most `fill` of it, else doubled until they do (never
    past `limit`). Both row pools grow by this rule: the tracker's (fill 1:
    it compacts in place on the host) and `RopeState`'s (device/pool.py,
    fill 3/4: a compaction there is a device gather, so it keeps a quarter
    free and each row moves O(1) times on average)."""
    capacity = max(capacity, 1)
    while rows > fill * capacity and (limit is None or capacity < limit):
        capacity = 2 * capacity if limit is None else min(2 * capacity, limit)
    return capacity


class LayoutRowPool:
    """``rows`` [capacity, NUM_COLS] int64 and ``scales`` [capacity, NUM_SCALE_COLS]
    float32, rows [0, top) possibly in use and [top, capacity) free."""

    def __init__(self, capacity: int) -> None:
        self.rows = np.zeros((capacity, C.NUM_COLS), np.int64)
        self.scales = np.zeros((capacity, C.NUM_SCALE_COLS), np.float32)
        self.top = 0

    @property
    def capacity(self) -> int:
        return self.rows.shape[0]

    def make_room(self, needed: int, slot_state: np.ndarray) -> int:
        """Have `needed` free rows at the top of the pool (compacting, then
        growing, only when short); returns the top. The rows of the requests
        `slot_state` marks active are kept (their row starts move with them)."""
        if self.top + needed <= self.rows.shape[0]:
            return self.top
        self.top = compact_pool(self.rows, self.scales, slot_state)
        if self.top + needed > self.rows.shape[0]:
            capacity = grown_capacity(self.rows.shape[0], self.top + needed)
            rows = np.zeros((capacity, C.NUM_COLS), np.int64)
            scales = np.zeros((capacity, C.NUM_SCALE_COLS), np.float32)
            rows[: self.top] = self.rows[: self.top]
            scales[: self.top] = self.scales[: self.top]
            self.rows, self.scales = rows, scales
        return self.top

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
        top = self.top
        if top + estimate <= self.rows.shape[0]:
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

    def commit(self, start: int, num_rows: int) -> None:
        """Rows [start, start + num_rows) now belong to a request."""
        self.top = start + num_rows

    def clear(self) -> None:
        """No request holds rows any more: the whole pool is free."""
        self.top = 0

    def row_nbytes(self) -> int:
        """Bytes one layout row takes (both tables)."""
        return self.rows.itemsize * C.NUM_COLS + self.scales.itemsize * C.NUM_SCALE_COLS

    def nbytes(self) -> int:
        return self.rows.nbytes + self.scales.nbytes
