"""`SlotRows`: `RopeState`'s slot records and row pool, on the device and on the host.

Both live in one flat int32 device tensor, records first, so that every
staged write (device/staging.py) is an offset into it. The host keeps the
records as staged. Where each slot's rows go is the shared allocator's
business (core/row_arena.py, which `PositionTracker`'s pool uses too), here
with fill 3/4: rows are taken at the free top; when it runs out, the live
rows slide down (one gather on the device), into a pool twice as large
when they would fill more than 3/4 of the current one, so a row moves O(1)
times on average. All of it happens at admission, queued on the stream
before the runner's `apply_staged_writes`, never in a step. The one bound
is the int32 addressing of the tensor, `MAX_POOL_ROWS`.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..core.row_arena import Compaction, RowArena
from . import rows as D
from .staging import StagedWrites

__all__ = ["MAX_POOL_ROWS", "SlotRows"]

# the pool is addressed by int32 element offsets (records first): the most rows it can ever hold
MAX_POOL_ROWS = (D.INT32_MAX - 2**24) // D.NUM_DEVICE_COLS


class SlotRows:
    def __init__(self, max_num_reqs: int, capacity: int, device: torch.device, staging: StagedWrites) -> None:
        self.max_num_reqs = max_num_reqs
        self.device = device
        self.staging = staging
        self.pool_at = max_num_reqs * D.NUM_SLOT_COLS
        self._bind(torch.zeros(self.pool_at + capacity * D.NUM_DEVICE_COLS, dtype=torch.int32, device=device), capacity)
        self.records = np.zeros((max_num_reqs, D.NUM_SLOT_COLS), np.int32)  # as staged
        # which pool rows each slot holds (arena.count: 0 for none)
        self.arena = RowArena(max_num_reqs, capacity, fill=0.75, limit=MAX_POOL_ROWS)

    @property
    def rows_held(self) -> np.ndarray:
        """[max_num_reqs] int64: pool rows each slot holds (0: none)."""
        return self.arena.count

    @property
    def top(self) -> int:
        """Pool rows [0, top) may be held, [top, capacity) are free."""
        return self.arena.top

    def place(self, slot: int, rows: np.ndarray, taus: np.ndarray) -> int:
        """Stage `rows` (int32 [n, NUM_DEVICE_COLS]) and then `taus` (int32,
        packed into whole rows) at pool rows of their own, now `slot`'s (its
        previous rows are given up); returns the first. Refused, changing
        nothing, only past the pool's addressing (`allocate`)."""
        n = rows.shape[0]
        total = n + math.ceil(taus.shape[0] / D.NUM_DEVICE_COLS)
        start = self.allocate(slot, total)
        if taus.shape[0]:
            block = np.zeros(total * D.NUM_DEVICE_COLS, np.int32)
            block[: n * D.NUM_DEVICE_COLS] = rows.reshape(-1)
            block[n * D.NUM_DEVICE_COLS : n * D.NUM_DEVICE_COLS + taus.shape[0]] = taus
        else:  # the usual case: the rows alone, staged as they are
            block = rows.reshape(-1)
        self.staging.stage(self.pool_at + start * D.NUM_DEVICE_COLS, block, self.state)
        return start

    def release(self, slot: int) -> None:
        self.arena.free(slot)
        self.set_record(slot, 0, 0, 0, 0)

    def apply(self) -> None:
        self.staging.apply(self.state)

    def allocate(self, slot: int, total: int) -> int:
        """First pool row of `total` rows now `slot`'s (its current rows, if
        any, are given up), compacting or growing the pool when the free top
        is short. Refused, changing nothing, only past the int32 addressing
        of the pool (`MAX_POOL_ROWS`)."""
        if not self.arena.fits(total):
            plan = self.arena.plan(total, drop=slot)
            if plan.top + total > plan.capacity:
                raise ValueError(
                    f"prefill_token_ids: live requests hold {plan.top} device rows and this one needs {total}, "
                    f"past the {self.arena.limit} rows that int32 offsets address"
                )
            self._relocate(plan, slot)
        return self.arena.take(slot, total)

    def _relocate(self, plan: Compaction, dropped: int) -> None:
        """Carry out `plan` on the device: every live slot's rows (but
        `dropped`'s) gathered to the bottom of a pool of `plan.capacity` rows
        (this one, or a new, larger one): device copies queued on the stream,
        no host sync, at admission only."""
        self.staging.apply(self.state)  # every staged row is where the records say
        old_pool = self.pool_dev
        if plan.capacity != self.capacity:
            state = torch.zeros(self.pool_at + plan.capacity * D.NUM_DEVICE_COLS, dtype=torch.int32, device=self.device)
            state[: self.pool_at] = self.state[: self.pool_at]
            self._bind(state, plan.capacity)
        if plan.top:
            index = torch.from_numpy(plan.source_rows()).to(self.device)
            self.pool_dev[: plan.top] = old_pool.index_select(0, index)
            self.records[plan.slots, D.S_ROW_START] = plan.new_starts
            # every record in one write (nothing else is staged: the apply above emptied the buffer)
            self.staging.stage(0, self.records.reshape(-1).copy(), self.state)
            self.staging.apply(self.state)
        self.arena.adopt(plan, drop=dropped)

    def _bind(self, state: torch.Tensor, capacity: int) -> None:
        """Slot records, then a pool of `capacity` rows, in one flat int32
        tensor: every staged write is an offset into it."""
        self.state = state
        self.capacity = capacity
        self.records_dev = state[: self.pool_at].view(self.max_num_reqs, D.NUM_SLOT_COLS)
        self.pool_dev = state[self.pool_at :].view(capacity, D.NUM_DEVICE_COLS)

    def set_record(self, slot: int, row_start: int, num_rows: int, prompt_len: int, delta: int) -> None:
        record = self.records[slot]
        record[D.S_ROW_START] = row_start
        record[D.S_NUM_ROWS] = num_rows
        record[D.S_PROMPT_LEN] = prompt_len
        record[D.S_DELTA] = delta
        self.stage_record(slot)

    def stage_record(self, slot: int) -> None:
        self.staging.stage(slot * D.NUM_SLOT_COLS, self.records[slot].copy(), self.state)

    def check_invariants(self) -> None:
        """Raise AssertionError if the host bookkeeping is inconsistent (for tests)."""
        self.arena.check_invariants()
        assert self.arena.capacity == self.capacity
        held = self.arena.count > 0
        assert (self.records[held, D.S_ROW_START] == self.arena.start[held]).all()
        assert (self.records[:, D.S_NUM_ROWS] <= self.arena.count).all()
