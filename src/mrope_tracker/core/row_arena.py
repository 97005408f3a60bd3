"""`RowArena`: which rows of a shared row table each request slot holds (host bookkeeping only).

Both row pools place rows with it: the tracker's layout rows
(tracker/row_pool.py: numpy tables, compacted in place) and `RopeState`'s
device rows (device/pool.py: one torch tensor, compacted by a device
gather). The arena holds no rows itself. Its owner keeps the storage and
asks it where an admission's rows go and, when the free top is too short,
how to move the live rows (a `Compaction`), which the owner carries out on
its storage before it `adopt`s the plan.

Slot s holds rows [start[s], start[s] + count[s]) (count 0: none). Rows are
taken only at the free top [top, capacity); a freed range is a hole until
the next compaction. A compaction slides every live range down, in row
order, so that the holes close at the top, into a table grown by doubling
while the live rows would fill more than `fill` of it. So a row moves O(1)
times on average, and the table stays within a constant factor of the live
rows: O(items), never O(tokens). It never grows past `limit` rows.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Compaction", "RowArena", "grown_capacity"]


def grown_capacity(capacity: int, rows: int, *, fill: float = 1.0, limit: int | None = None) -> int:
    """The size of a row table that is to hold `rows` live rows: `capacity`
    while they fill at most `fill` of it, else doubled until they do (never
    past `limit`). The tracker's pool uses fill 1 (it compacts in place on
    the host, for free); `RopeState`'s uses 3/4 (a compaction there is a
    device gather, so a quarter stays free and each row moves O(1) times)."""
    capacity = max(capacity, 1)
    while rows > fill * capacity and (limit is None or capacity < limit):
        capacity = 2 * capacity if limit is None else min(2 * capacity, limit)
    return capacity


class Compaction:
    """How live rows move: slot `slots[k]`'s `counts[k]` rows go from
    `old_starts[k]` to `new_starts[k]`, in a table of `capacity` rows whose
    rows [0, top) are then held. Ranges keep their order, so a forward copy
    in place never overwrites a row it has still to read."""

    def __init__(self, capacity: int, slots: np.ndarray, old_starts: np.ndarray, counts: np.ndarray) -> None:
        self.capacity = capacity
        self.slots = slots
        self.old_starts = old_starts
        self.counts = counts
        self.new_starts = np.cumsum(counts) - counts
        self.top = int(counts.sum())

    def source_rows(self) -> np.ndarray:
        """int64 [top]: the old row each of the rows [0, top) is copied from
        (a gather index: `table[:top] = table[source_rows()]`)."""
        shift = np.repeat(self.old_starts - self.new_starts, self.counts)
        return shift + np.arange(self.top, dtype=np.int64)


class RowArena:
    """Row ranges of `num_slots` slots in a table of `capacity` rows.

    `start` and `count` ([num_slots] int64) are the ranges; rows [top,
    capacity) are free. `fill` and `limit` are the growth rule
    (`grown_capacity`)."""

    def __init__(self, num_slots: int, capacity: int, *, fill: float = 1.0, limit: int | None = None) -> None:
        self.start = np.zeros(num_slots, np.int64)
        self.count = np.zeros(num_slots, np.int64)
        self.capacity = capacity
        self.top = 0
        self.fill = fill
        self.limit = limit

    def fits(self, num_rows: int) -> bool:
        """Whether the free top holds `num_rows` rows (no compaction needed)."""
        return self.top + num_rows <= self.capacity

    def live_rows(self, drop: int | None = None) -> int:
        """Rows the slots hold, not counting slot `drop`'s."""
        held = int(self.count.sum())
        return held if drop is None else held - int(self.count[drop])

    def plan(self, num_rows: int, drop: int | None = None) -> Compaction:
        """The compaction that leaves `num_rows` free rows at the top, slot
        `drop`'s rows given up (it is being replaced), in a table grown by
        the rule when needed. Changes nothing; a plan that still cannot hold
        them (past `limit`) has `top + num_rows > capacity`."""
        held = self.count.copy()
        if drop is not None:
            held[drop] = 0
        slots = np.flatnonzero(held)
        slots = slots[np.argsort(self.start[slots], kind="stable")]
        counts = held[slots]
        live = int(counts.sum())
        capacity = grown_capacity(self.capacity, live + num_rows, fill=self.fill, limit=self.limit)
        return Compaction(capacity, slots, self.start[slots], counts)

    def adopt(self, plan: Compaction, drop: int | None = None) -> None:
        """The owner has moved its rows as `plan` says (`drop` as planned)."""
        if drop is not None:
            self.count[drop] = 0
        self.start[plan.slots] = plan.new_starts
        self.capacity = plan.capacity
        self.top = plan.top

    def take(self, slot: int, num_rows: int) -> int:
        """Give slot `slot` the `num_rows` rows at the free top (its previous
        rows, if any, become a hole); returns their first row."""
        start = self.top
        if start + num_rows > self.capacity:
            raise ValueError(
                f"num_rows: expected at most the {self.capacity - start} free rows at the arena's top "
                f"(plan and adopt a compaction first), got {num_rows}"
            )
        self.start[slot] = start
        self.count[slot] = num_rows
        self.top = start + num_rows
        return start

    def free(self, slot: int) -> None:
        """Slot `slot` holds no rows any more (they are a hole until the next compaction)."""
        self.count[slot] = 0

    def clear(self) -> None:
        """No slot holds rows any more: the whole table is free."""
        self.count[:] = 0
        self.start[:] = 0
        self.top = 0

    def check_invariants(self) -> None:
        """Raise AssertionError if the ranges overlap or leave the held rows (for tests)."""
        held = np.flatnonzero(self.count)
        order = held[np.argsort(self.start[held], kind="stable")]
        ends = self.start[order] + self.count[order]
        assert (self.count >= 0).all() and (self.start[held] >= 0).all()
        assert (ends[:-1] <= self.start[order][1:]).all(), "two slots share rows"
        assert not len(ends) or ends[-1] <= self.top
        assert self.top <= self.capacity
