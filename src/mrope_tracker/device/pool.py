"""`SlotRows`: `RopeState`'s slot records and row pool, on the device and on the host.

Both live in one flat int32 device tensor, records first, so that every
staged write (device/staging.py) is an offset into it. The host keeps the
records as staged and the pool rows each slot holds. Rows are taken at the
free top; when it runs out, the live rows slide down (one gather on the
device), into a pool twice as large when they would fill more than 3/4 of
the current one, so a row moves O(1) times on average. All of it happens at
admission, queued on the stream before the runner's `apply_staged_writes`,
never in a step. The one bound is the int32 addressing of the tensor,
`MAX_POOL_ROWS`.
"""

from __future__ import annotations

import numpy as np
import torch

from ..tracker.row_pool import grown_capacity
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
        self.rows_held = np.zeros(max_num_reqs, np.int64)  # pool rows each slot holds (0: none)
        self.top = 0  # pool rows [0, top) may be held, [top, capacity) are free

    def stage_rows(self, slot: int, start: int, block: np.ndarray, total: int) -> None:
        """Stage `block` (int32, `total` rows flattened) at pool row `start`, now `slot`'s."""
        self.staging.stage(self.pool_at + start * D.NUM_DEVICE_COLS, block, self.state)
        self.rows_held[slot] = total

    def release(self, slot: int) -> None:
        self.rows_held[slot] = 0
        self.set_record(slot, 0, 0, 0, 0)

    def apply(self) -> None:
        self.staging.apply(self.state)

    def allocate(self, slot: int, total: int) -> int:
        """First pool row of `total` free rows for `slot`, whose current rows
        (if any) are given up. Rows are taken at the free top; when it runs
        out, the live rows slide down (one gather on the device), into a pool
        twice as large when they would fill more than 3/4 of this one, so a
        row moves O(1) times on average. Refused, changing nothing, only past
        the int32 addressing of the pool (`MAX_POOL_ROWS`)."""
        if self.top + total > self.capacity:
            live = int(self.rows_held.sum() - self.rows_held[slot])
            capacity = grown_capacity(self.capacity, live + total, fill=0.75, limit=MAX_POOL_ROWS)
            if live + total > capacity:
                raise ValueError(
                    f"prefill_token_ids: live requests hold {live} device rows and this one needs {total}, past "
                    f"the {MAX_POOL_ROWS} rows that int32 offsets address"
                )
            self._relocate(slot, capacity)
        start = self.top
        self.top += total
        return start

    def _relocate(self, dropped: int, capacity: int) -> None:
        """Slide every live slot's rows (but `dropped`'s) to the bottom of a
        pool of `capacity` rows (this one, or a new, larger one): device
        copies queued on the stream, no host sync, at admission only."""
        self.staging.apply(self.state)  # every staged row is where the records say
        self.rows_held[dropped] = 0
        live = np.flatnonzero(self.rows_held)
        live = live[np.argsort(self.records[live, D.S_ROW_START], kind="stable")]
        held = self.rows_held[live]
        new_starts = np.cumsum(held) - held
        total = int(held.sum())
        old_pool = self.pool_dev
        if capacity != self.capacity:
            state = torch.zeros(self.pool_at + capacity * D.NUM_DEVICE_COLS, dtype=torch.int32, device=self.device)
            state[: self.pool_at] = self.state[: self.pool_at]
            self._bind(state, capacity)
        if total:
            old_starts = self.records[live, D.S_ROW_START].astype(np.int64)
            source = np.repeat(old_starts - new_starts, held) + np.arange(total)
            index = torch.from_numpy(source).to(self.device)
            self.pool_dev[:total] = old_pool.index_select(0, index)
            self.records[live, D.S_ROW_START] = new_starts
            # every record in one write (nothing else is staged: the apply above emptied the buffer)
            self.staging.stage(0, self.records.reshape(-1).copy(), self.state)
            self.staging.apply(self.state)
        self.top = total

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
        held = sorted((int(self.records[s, D.S_ROW_START]), int(n)) for s, n in enumerate(self.rows_held) if n)
        for (start, n), (next_start, _) in zip(held, held[1:]):
            assert start + n <= next_start, "two slots share pool rows"
        assert all(start + n <= self.top <= self.capacity for start, n in held)
        assert (self.records[:, D.S_NUM_ROWS] <= self.rows_held).all()
