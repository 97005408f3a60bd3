"""Dense position overrides: what `RopeState.update_prefill_positions` keeps (vLLM's EVS recompute).

Recomputed positions need not fit layout rows, so a slot given them keeps a
dense int32 [num_dims, n] tensor of its own for its first n tokens (its other
tokens keep their rows). All of them live flattened in one device arena,
rebuilt when one is added or freed (at EVS updates and admissions, never in
a step); each slot's record says where its override starts and how long it
is (rows.S_OVERRIDE_AT, rows.S_OVERRIDE_LEN).
"""

from __future__ import annotations

import torch

__all__ = ["DenseOverrides"]


class DenseOverrides:
    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._dense: dict[int, torch.Tensor] = {}
        self.arena = torch.zeros(1, dtype=torch.int32, device=device)
        self.dirty = False  # the arena and the records' offsets wait for `rebuild`

    def __contains__(self, slot: int) -> bool:
        return slot in self._dense

    def set(self, slot: int, dense: torch.Tensor) -> None:
        self._dense[slot] = dense
        self.dirty = True

    def drop(self, slot: int) -> bool:
        """Free `slot`'s override; whether it had one."""
        if self._dense.pop(slot, None) is None:
            return False
        self.dirty = True
        return True

    def rebuild(self) -> list[tuple[int, int, int]]:
        """A new arena; returns (slot, first element, tokens) of every override."""
        placed, at = [], 0
        for slot, dense in self._dense.items():
            placed.append((slot, at, dense.shape[1]))
            at += dense.numel()
        if self._dense:
            self.arena = torch.cat([dense.reshape(-1) for dense in self._dense.values()])
        else:
            self.arena = torch.zeros(1, dtype=torch.int32, device=self.device)
        self.dirty = False
        return placed
