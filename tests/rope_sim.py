"""A Model Runner V2 stand-in for RopeState's tests: per-slot arrays, steps, and two oracles.

- `TableDesign` re-states vLLM 0.33 MRV2's table design from its rules, in
  plain torch: a dense [slots * 3, max_model_len] table holding each slot's
  prefill positions (written at admission) and a delta per slot; a step
  takes, for each batch entry, columns [num_computed, num_computed + n) of
  its slot's table rows while num_computed < prefill_len, and index + delta
  once the prefill is done. It shares nothing with the kernels.
- `PositionTracker`, the CPU path, admitted with the same layouts.

`Harness` drives a `RopeState` and both oracles through the same admissions
and steps, as MRV2 would (per-slot `prefill_len` and `num_computed_tokens`
arrays, an `idx_mapping` in any order, a padded `query_start_loc`), and
checks that the three agree, and that the columns past the step's tokens
(CUDA-graph padding) are left as they were.
"""

from __future__ import annotations

import numpy as np
import torch

from mrope_tracker import PositionTracker, PromptLayout
from mrope_tracker.device.rope_state import RopeState

SENTINEL = -7  # what the padding columns hold before a step, and must hold after it


class TableDesign:
    def __init__(self, max_num_reqs: int, max_model_len: int) -> None:
        self.table = torch.zeros((max_num_reqs * 3, max_model_len), dtype=torch.int64)
        self.delta = torch.zeros(max_num_reqs, dtype=torch.int64)

    def admit(self, slot: int, positions: np.ndarray, delta: int) -> None:
        self.table[3 * slot : 3 * slot + 3, : positions.shape[1]] = torch.from_numpy(positions)
        self.delta[slot] = delta

    def update(self, slot: int, positions: torch.Tensor, delta: int) -> None:
        self.table[3 * slot : 3 * slot + 3, : positions.shape[1]] = positions.to(torch.int64)
        self.delta[slot] = delta

    def step(self, idx_mapping, query_start_loc, prefill_lens, num_computed, out: torch.Tensor) -> None:
        for b, slot in enumerate(idx_mapping.tolist()):
            start, end = int(query_start_loc[b]), int(query_start_loc[b + 1])
            done = int(num_computed[slot])
            index = torch.arange(done, done + end - start)
            if done < int(prefill_lens[slot]):
                out[:, start:end] = self.table[3 * slot : 3 * slot + 3, index]
            else:
                out[:, start:end] = index + self.delta[slot]


class Harness:
    def __init__(self, config, max_num_reqs: int, max_num_tokens: int, max_model_len: int, device, **kwargs):
        self.config = config
        self.device = device
        self.max_num_reqs = max_num_reqs
        self.state = RopeState(3, max_num_reqs, max_num_tokens, max_model_len, device, config=config, **kwargs)
        self.tracker = PositionTracker(
            config, max_num_reqs=max_num_reqs, max_num_batched_tokens=max_num_tokens, max_model_len=max_model_len
        )
        self.table = TableDesign(max_num_reqs, max_model_len)
        self.prefill_len = np.zeros(max_num_reqs, np.int32)
        self.num_computed = np.zeros(max_num_reqs, np.int32)
        self.held = [False] * max_num_reqs  # slots the tracker holds a request in

    def admit(self, slot: int, layout: PromptLayout, num_computed: int = 0, *, features=None) -> None:
        """Admit `layout` into `slot` (through init_prefill_positions when
        `features` are given, else init_prefill_layout), then apply."""
        if features is None:
            self.state.init_prefill_layout(slot, layout)
        else:
            self.state.init_prefill_positions(slot, self.config, [0] * layout.num_tokens, features)
        self.state.apply_staged_writes()
        if self.held[slot]:
            self.tracker.remove_request(slot)
        self.tracker.add_request_layout(slot, layout, num_computed_tokens=num_computed)
        self.held[slot] = True
        self.table.admit(slot, layout.positions(), layout.delta)
        self.prefill_len[slot] = layout.num_tokens
        self.num_computed[slot] = num_computed

    def finish(self, slot: int) -> None:
        """The request in `slot` ends: MRV2 tells its RopeState nothing."""
        self.tracker.remove_request(slot)
        self.held[slot] = False

    def step(self, entries: list[tuple[int, int]], *, pad_reqs: int = 0, pad_tokens: int = 0, check_table=True):
        """One step of (slot, num_scheduled) in batch order; returns the
        positions. Padding: `query_start_loc` carries `pad_reqs` extra
        entries at the total, as MRV2's buffer does, and the `pad_tokens`
        columns after the step's tokens must keep their values."""
        slots = np.array([s for s, _ in entries], np.int64)
        counts = np.array([n for _, n in entries], np.int32)
        total = int(counts.sum())
        qsl = np.zeros(len(entries) + 1 + pad_reqs, np.int32)
        np.cumsum(counts, out=qsl[1 : len(entries) + 1])
        qsl[len(entries) + 1 :] = total
        dev = self.device
        idx_mapping = torch.from_numpy(slots).to(dev)
        query_start_loc = torch.from_numpy(qsl).to(dev)
        prefill_lens = torch.from_numpy(self.prefill_len.copy()).to(dev)
        num_computed = torch.from_numpy(self.num_computed.copy()).to(dev)
        self.state.positions[:, total : total + pad_tokens] = SENTINEL
        self.state.prepare_positions(idx_mapping, query_start_loc, prefill_lens, num_computed)
        got = self.state.get_positions(total + pad_tokens).cpu()
        assert (got[:, total:] == SENTINEL).all(), "a padding column was written"
        got = got[:, :total]
        tracker_slots = np.array([self.tracker.slot(int(s)) for s in slots], np.int64)
        expected = self.tracker.prepare_slots(
            tracker_slots, counts.astype(np.int64), self.num_computed[slots].astype(np.int64)
        ).clone()
        assert torch.equal(got, expected), f"RopeState and PositionTracker differ on {entries}"
        if check_table:
            table_out = torch.empty((3, total), dtype=torch.int64)
            self.table.step(slots, qsl, self.prefill_len, self.num_computed, table_out)
            assert torch.equal(got, table_out), f"RopeState and the table design differ on {entries}"
        return got
