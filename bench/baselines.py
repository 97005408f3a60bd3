"""Re-implementations of today's designs, for side-by-side benchmarks.

Each design turns one scheduler step (request ids in batch order, and how
many tokens each gets) into the step's (3, N) positions on the "device"
(a CPU tensor here), keeping whatever per-request state the design keeps:

- `SeedMainDesign`: vLLM before the seed PR (v0.8.5): the torch reference
  at admission, then per request a slice of its prompt tensor or a fresh
  `torch.arange(...).expand(3, -1)` for decode tokens.
- `V1Design`: vLLM's V1 runner (v0.33, `gpu_model_runner.py`; 0.34 removed it): a
  (3, L) prompt array per request from admission on, a Python loop per step
  copying slices and writing numpy aranges into a CPU buffer, then one
  device copy per row.
- `MRV2Design`: like vLLM's Model Runner V2 (v0.33,
  `vllm/v1/worker/gpu/mm/rope.py`): a [max_num_reqs * 3, max_model_len]
  int32 table of prompt positions per slot (pinned in vLLM), filled at
  admission and gathered by one kernel per step (Triton in vLLM, numba
  here), then one device copy. Real MRV2 keeps the batch's slot indices
  (`idx_mapping`) in its shared input batch, built by the runner whatever
  the positions; so `map_ids` turns request ids into slots outside `step`,
  and the scheduler suite times it on its own.
- `TrackerSlotsDesign`: `PositionTracker.prepare_slots`, with the ids
  mapped outside the step exactly as for MRV2: the like-for-like comparison
  with MRV2's gather.
- `TrackerDesign`: `PositionTracker.prepare` (its id mapping included).

On a CPU-only run the "device" is the CPU: every design writes host memory
and none copies (V1 and MRV2 skip their device copies, the tracker writes in
place). With `device="cuda"` V1 stages in a pinned buffer and copies row by
row, MRV2 copies its step, and the tracker uses its staging ring
(bench/gpu_check.py).

Admission takes what each engine's runner really gets. vLLM's runners (V1
and MRV2) hold the prompt ids as a Python list and one
`MultiModalFeatureSpec` per item, and call the model's
`get_mrope_input_positions(prompt_token_ids, mm_features)`, which computes
the positions from the features (O(items) plus a write of every position);
V1 and MRV2 here call this library's `mrope_tracker.vllm` version of it,
faster than vLLM's numpy code, and MRV2 writes the table with one numpy copy
where vLLM turns each row into a Python list and stages it. The tracker
admits from the same list and features (`add_request_from_features`). The
seed's main-branch design uses this library's torch reference on the token
ids. Each substitution flatters the baselines, never us.
"""

from __future__ import annotations

from functools import lru_cache

import numba
import numpy as np
import torch

from mrope_tracker import PositionTracker, reference
from mrope_tracker.vllm import get_mrope_input_positions

from .scenarios import RequestSpec, Scenario


class SeedMainDesign:
    name = "seed main (torch)"  # admission: this library's torch reference

    def __init__(self, scenario: Scenario) -> None:
        self.config = scenario.config
        self.requests: dict[str, list] = {}  # req_id -> [positions tensor, delta, num_computed]
        self.out = torch.zeros((3, scenario.max_num_batched_tokens + 1), dtype=torch.int64)

    def admit(self, spec: RequestSpec) -> None:
        positions, delta = reference.prompt_positions(self.config, spec.prompt.token_ids, **spec.prompt.kwargs)
        self.requests[spec.req_id] = [positions, delta, spec.prefix_hit]

    def step(self, req_ids: list[str], num_scheduled: list[int]) -> torch.Tensor:
        out = self.out
        offset = 0
        for req_id, n in zip(req_ids, num_scheduled):
            state = self.requests[req_id]
            positions, delta, c = state
            prompt_len = positions.shape[1]
            p = max(0, min(n, prompt_len - c))
            if p:
                out[:, offset : offset + p] = positions[:, c : c + p]
            if n > p:
                start = c + p + delta
                out[:, offset + p : offset + n] = torch.arange(start, start + n - p).expand(3, -1)
            offset += n
            state[2] = c + n
        return out[:, :offset]

    def finish(self, req_id: str) -> None:
        del self.requests[req_id]

    def nbytes(self) -> int:
        return sum(s[0].numel() * 8 for s in self.requests.values()) + self.out.numel() * 8


def v1_next_positions(out: np.ndarray, offset: int, delta: int, context_len: int, n: int) -> None:
    """vLLM V1's numpy form of get_next_input_positions_tensor (PR #19939)."""
    out[:, offset : offset + n] = np.arange(delta + context_len, delta + context_len + n)


class V1Design:
    name = "vLLM V1 (numpy loop)"

    def __init__(self, scenario: Scenario, device: str = "cpu") -> None:
        self.config = scenario.config
        width = scenario.max_num_batched_tokens + 1
        on_gpu = device != "cpu"
        self.cpu = torch.zeros((3, width), dtype=torch.int64, pin_memory=on_gpu)  # pinned, as in vLLM
        self.cpu_np = self.cpu.numpy()
        self.device = torch.zeros((3, width), dtype=torch.int64, device=device) if on_gpu else None
        self.requests: dict[str, list] = {}  # req_id -> [positions (3, L), delta, num_computed]

    def admit(self, spec: RequestSpec) -> None:
        # the runner's call: the model's get_mrope_input_positions(prompt list, features)
        positions, delta = get_mrope_input_positions(self.config, spec.prompt.token_list, spec.prompt.features)
        self.requests[spec.req_id] = [positions.numpy(), delta, spec.prefix_hit]

    def step(self, req_ids: list[str], num_scheduled: list[int]) -> torch.Tensor:
        out = self.cpu_np
        offset = 0
        for req_id, n in zip(req_ids, num_scheduled):
            state = self.requests[req_id]
            positions, delta, c = state
            prompt_len = positions.shape[1]
            p = max(0, min(n, prompt_len - c))
            if p:
                out[:, offset : offset + p] = positions[:, c : c + p]
            if n > p:
                v1_next_positions(out, offset + p, delta, c + p, n - p)
            offset += n
            state[2] = c + n
        if self.device is None:  # the CPU is the device
            return self.cpu[:, :offset]
        # one copy per row: a strided 2-D copy would go through a pageable
        # temporary and block (vLLM's comment in its V1 runner)
        for row in range(3):
            self.device[row, :offset].copy_(self.cpu[row, :offset], non_blocking=True)
        return self.device[:, :offset]

    def finish(self, req_id: str) -> None:
        del self.requests[req_id]

    def nbytes(self) -> int:
        buffers = (1 if self.device is None else 2) * self.cpu.numel() * 8
        return sum(s[0].nbytes for s in self.requests.values()) + buffers


@numba.njit(cache=True, nogil=True)
def _mrv2_gather(out, idx_mapping, num_scheduled, num_computed, prefill_len, delta, table):
    """MRV2's _prepare_rope_positions_kernel: per batch row, prompt positions
    from the table while the request is in prefill, index + delta after."""
    col = 0
    for b in range(idx_mapping.shape[0]):
        r = idx_mapping[b]
        c = num_computed[r]
        n = num_scheduled[b]
        if c < prefill_len[r]:
            for d in range(3):
                row = table[3 * r + d, c : c + n]
                dst = out[d, col : col + n]
                for j in range(n):
                    dst[j] = row[j]
        else:
            base = c + delta[r]
            for d in range(3):
                dst = out[d, col : col + n]
                for j in range(n):
                    dst[j] = base + j
        num_computed[r] = c + n
        col += n
    return col


def warm_up() -> None:
    """Compile this module's kernel before anything is timed."""
    one = np.zeros(1, np.int64)
    _mrv2_gather(np.zeros((3, 2), np.int64), one, one + 1, one.copy(), one + 1, one, np.zeros((3, 2), np.int32))
    from . import seed_design
    from .suite_prompt import write_floor

    write_floor(4)
    seed_design.warm_up()


class MRV2Design:
    name = "MRV2-like (full table)"

    def __init__(self, scenario: Scenario) -> None:
        self.config = scenario.config
        max_reqs = scenario.max_num_seqs
        width = scenario.max_num_batched_tokens + 1
        # [max_num_reqs * 3, max_model_len] int32: the per-slot prompt table
        self.table = np.zeros((max_reqs * 3, scenario.max_model_len), dtype=np.int32)
        self.delta = np.zeros(max_reqs, np.int64)
        self.prefill_len = np.zeros(max_reqs, np.int64)
        self.num_computed = np.zeros(max_reqs, np.int64)
        self.cpu = torch.zeros((3, width), dtype=torch.int64)
        self.cpu_np = self.cpu.numpy()
        self.index: dict[str, int] = {}
        self.free = list(range(max_reqs - 1, -1, -1))
        self.idx = np.zeros(max_reqs, np.int64)  # [max_num_reqs] int64: the batch's slots
        self.counts = np.zeros(max_reqs, np.int64)  # [max_num_reqs] int64: its scheduled counts
        self.num_batch = 0

    def admit(self, spec: RequestSpec) -> None:
        slot = self.free.pop()
        # RopeState.init_prefill_positions: the model's positions, then the table rows
        positions, delta = get_mrope_input_positions(self.config, spec.prompt.token_list, spec.prompt.features)
        self.table[3 * slot : 3 * slot + 3, : positions.shape[1]] = positions.numpy()
        self.delta[slot] = delta
        self.prefill_len[slot] = positions.shape[1]
        self.num_computed[slot] = spec.prefix_hit
        self.index[spec.req_id] = slot

    def map_ids(self, req_ids: list[str], num_scheduled: list[int]) -> None:
        """The batch's slots and counts as arrays: MRV2's input batch holds
        these for every feature, so its position step does not pay for them."""
        n = len(req_ids)
        self.idx[:n] = [self.index[r] for r in req_ids]
        self.counts[:n] = num_scheduled
        self.num_batch = n

    def step(self, req_ids: list[str], num_scheduled: list[int]) -> torch.Tensor:
        """The gather alone (call `map_ids` first, with the same batch)."""
        n = self.num_batch
        total = _mrv2_gather(
            self.cpu_np, self.idx[:n], self.counts[:n], self.num_computed, self.prefill_len, self.delta, self.table
        )
        return self.cpu[:, :total]  # CPU runs: the CPU is the device (MRV2 gathers on the GPU)

    def finish(self, req_id: str) -> None:
        self.free.append(self.index.pop(req_id))

    def nbytes(self) -> int:
        return self.table.nbytes + 3 * self.delta.nbytes + self.cpu.numel() * 8


class TrackerDesign:
    name = "mrope_tracker"

    def __init__(self, scenario: Scenario) -> None:
        self.tracker = PositionTracker(
            scenario.config,
            max_num_reqs=scenario.max_num_seqs,
            max_num_batched_tokens=scenario.max_num_batched_tokens,
            max_model_len=scenario.max_model_len,
        )

    def admit(self, spec: RequestSpec) -> None:
        p = spec.prompt
        self.tracker.add_request_from_features(
            spec.req_id, p.token_list, p.features, num_computed_tokens=spec.prefix_hit
        )

    def step(self, req_ids: list[str], num_scheduled: list[int]) -> torch.Tensor:
        return self.tracker.prepare(req_ids, num_scheduled)

    def finish(self, req_id: str) -> None:
        self.tracker.remove_request(req_id)

    def nbytes(self) -> int:
        return sum(self.tracker.nbytes().values())


class TrackerSlotsDesign(TrackerDesign):
    """`PositionTracker.prepare_slots`: the tracker as an engine that keeps
    the batch's slots in arrays would call it, like MRV2's gather; the ids
    are mapped to slots outside the step, as for MRV2."""

    name = "mrope_tracker (slots)"

    def __init__(self, scenario: Scenario) -> None:
        super().__init__(scenario)
        self.index: dict[str, int] = {}
        self.idx = np.zeros(scenario.max_num_seqs, np.int64)  # [max_num_reqs] int64: the batch's slots
        self.counts = np.zeros(scenario.max_num_seqs, np.int64)  # [max_num_reqs] int64: its scheduled counts
        self.num_batch = 0

    def admit(self, spec: RequestSpec) -> None:
        super().admit(spec)
        self.index[spec.req_id] = self.tracker.slot(spec.req_id)

    def map_ids(self, req_ids: list[str], num_scheduled: list[int]) -> None:
        n = len(req_ids)
        self.idx[:n] = [self.index[r] for r in req_ids]
        self.counts[:n] = num_scheduled
        self.num_batch = n

    def step(self, req_ids: list[str], num_scheduled: list[int]) -> torch.Tensor:
        n = self.num_batch
        return self.tracker.prepare_slots(self.idx[:n], self.counts[:n])

    def finish(self, req_id: str) -> None:
        super().finish(req_id)
        del self.index[req_id]


# the scheduler suite compares every design with the last one
DESIGNS = (SeedMainDesign, V1Design, MRV2Design, TrackerSlotsDesign, TrackerDesign)


# --------------------------------------------------------------------------
# Per-request decode positions: the seed's next-positions comparison
# --------------------------------------------------------------------------


def torch_next_positions(delta: int, context_len: int, n: int) -> torch.Tensor:
    """vLLM v0.8.5 get_next_input_positions_tensor: a fresh arange per request."""
    return torch.arange(delta + context_len, delta + context_len + n).expand(3, -1)


@lru_cache(maxsize=1024)
def _cached_arange(n: int) -> torch.Tensor:
    return torch.arange(n)


def torch_lru_next_positions(delta: int, context_len: int, n: int) -> torch.Tensor:
    """vLLM PR #17617's idea: reuse cached constant aranges instead of allocating one."""
    return (_cached_arange(n) + (delta + context_len)).expand(3, -1)
