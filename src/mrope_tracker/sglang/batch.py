"""One call per SGLang forward batch: every request's positions in one device tensor.

SGLang 0.5 builds a batch's M-RoPE positions request by request
(``ForwardBatch._compute_mrope_positions_extend`` slices each request's
(3, L) tensor, ``_compute_mrope_positions_decode`` reads each delta with
``.item()``, ``compute_spec_mrope_positions`` stacks one delta tensor per
request). `BatchPositions` keeps each request's `PromptLayout` in a
`PositionTracker` slot, found by SGLang's own ``req_pool_idx`` (the request's
row in ``req_to_token``), and makes a batch's positions from SGLang's batch
fields:

- extend (prefill, chunked prefill, mixed batches whose decode requests
  SGLang lists with an extend of 1): ``prefix_lens`` and ``extend_lens``,
  host lists, give each request's slice ``[prefix, prefix + extend)``;
- decode: ``seq_lens_cpu`` gives each request's one token, at ``seq_len - 1``;
- speculative (target verify, draft decode, draft extend): the draft
  tokens' 1-D positions, a device tensor SGLang already holds, plus each
  request's delta from a device table indexed by ``req_pool_indices`` (the
  device copy): tokens past the prompt sit at ``index + delta``.

The host modes are one jitted call (kernels/tracker_step.py) that validates
the batch, writes every position into a staging buffer and makes one copy to
the device; the speculative mode is one gather and one add on the device. No
per-request Python loop, and no read from the device. A rejected call
raises ValueError or TypeError naming the argument and changes nothing.
"""

from __future__ import annotations

import re

import numpy as np
import torch

from ..core.config import MRopeConfig
from ..core.inputs import READY_FLAGS, as_config, as_index, check_fits_int64, tensor_values
from ..core.layout import PromptLayout
from ..kernels.batch_rows import FREE, batch_slots, first_outside
from ..tracker.position_tracker import MAX_BATCHED_TOKENS, MAX_TRACKED_REQUESTS, PositionTracker
from .request_state import read_layout, text_layout

__all__ = ["BatchPositions"]

_INT64 = np.dtype(np.int64)
_INT32 = np.dtype(np.int32)
_NO_INTS = np.empty(0, np.int64)
_TENSOR = torch.Tensor
_TORCH_INT64 = torch.int64
_ROW_NAMED = re.compile(r"req_pool_indices\[(\d+)\] = -?\d+")
_INDEX_DTYPES = (torch.int32, torch.int64)
# the tracker's argument names -> the SGLang field each came from
_EXTEND_NAMES = (
    ("num_scheduled_tokens", "extend_lens"),
    ("num_computed_tokens", "prefix_lens"),
    ("slots", "req_pool_indices"),
)
_DECODE_NAMES = (
    ("num_scheduled_tokens", "seq_lens"),
    ("num_computed_tokens", "seq_lens"),
    ("slots", "req_pool_indices"),
)


def _host_array(value, name: str, length: int | None = None) -> np.ndarray:
    """A 1-D int64 host array of `value` (a list, a numpy array or a CPU tensor)."""
    if isinstance(value, torch.Tensor):
        if value.device.type != "cpu":
            raise TypeError(f"{name}: expected a host (CPU) array, got a tensor on {value.device} (no device reads)")
        value = tensor_values(value, name)  # (a grad, a conjugate bit, a dtype numpy lacks: named)
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name}: expected a 1-D integer array, got {type(value).__name__}") from exc
    if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
        raise TypeError(f"{name}: expected a 1-D integer array, got {array.dtype} of shape {array.shape}")
    if length is not None and array.shape[0] != length:
        raise ValueError(f"{name}: expected one entry per request ({length}), got {array.shape[0]}")
    check_fits_int64(array, name)  # (a uint64 past 2**63 would be reported wrapped negative)
    return np.ascontiguousarray(array, dtype=np.int64)


def usual_ints(value) -> np.ndarray | None:
    """`value` as SGLang passes a batch field (a list of ints, an int64 or int32 array or CPU tensor), as a 1-D
    C-contiguous writable int64 array (a view where it is one); None for anything else, which `_host_array`
    then reads or names (the plugin reads its batch rows with it too)."""
    kind = type(value)
    try:
        if kind is list:
            array = np.asarray(value)
        elif kind is _TENSOR:
            array = value.numpy()  # (raises for other devices, a grad, a dtype numpy lacks)
        elif kind is np.ndarray:
            array = value
        else:
            return None
    except (TypeError, ValueError, OverflowError, RuntimeError, NotImplementedError):
        return None
    if array.ndim != 1:
        return None
    if array.dtype is _INT32:  # (SGLang versions that keep seq_lens in int32)
        return array.astype(np.int64)
    if array.dtype is not _INT64 or array.flags.num & READY_FLAGS != READY_FLAGS:
        return None
    return array


class BatchPositions:
    """M-RoPE positions of SGLang forward batches, from O(items) request state.

    Args:
        config: the model's `MRopeConfig` (or what `MRopeConfig.from_hf_config` reads).
        max_num_reqs: SGLang's ``req_to_token_pool.size``: ``req_pool_idx`` runs
            from 0 to max_num_reqs (row 0 is SGLang's padding row).
        max_num_tokens: most tokens one batch positions (``max_prefill_tokens``,
            chunked prefill size, or decode requests times draft tokens).
        device: where positions go ("cpu" or a CUDA device).
        max_model_len: when set, a batch that would take a request past it is refused.
    """

    def __init__(self, config, *, max_num_reqs: int, max_num_tokens: int, device="cpu", max_model_len=None):
        self.config: MRopeConfig = as_config(config)
        self.max_num_reqs = as_index(max_num_reqs, "max_num_reqs", minimum=1, maximum=MAX_TRACKED_REQUESTS - 2)
        # (checked here, so that a refusal names this argument, not the tracker's max_num_batched_tokens)
        max_num_tokens = as_index(max_num_tokens, "max_num_tokens", minimum=1, maximum=MAX_BATCHED_TOKENS)
        self.tracker = PositionTracker(
            self.config,
            # rows 0..max_num_reqs, and one slot more: a row's new request goes in before its old one leaves,
            # so that a refused layout leaves the row as it was, even with every row in use
            max_num_reqs=self.max_num_reqs + 2,
            max_num_batched_tokens=max_num_tokens,
            device=device,
            max_model_len=max_model_len,
        )
        self.device = self.tracker.device
        # req_pool_idx -> tracker slot (-1: none), and each request's delta on the device for speculative batches
        self._slot_of = np.full(self.max_num_reqs + 1, FREE, np.int64)
        self._deltas = torch.zeros(self.max_num_reqs + 1, dtype=torch.int64, device=self.device)
        self._key_of: dict[int, tuple] = {}  # req_pool_idx -> the tracker's request id
        self._admissions = 0

    # ------------------------------------------------------------------ request lifecycle
    def _pool_index(self, req_pool_idx) -> int:
        return as_index(req_pool_idx, "req_pool_idx", maximum=self.max_num_reqs)

    def admit(self, req_pool_idx, layout=None, *, num_tokens=None) -> None:
        """Give the request in row `req_pool_idx` its positions: `layout` (a
        `PromptLayout` or its bytes), or for a text-only request (SGLang's
        ``multimodal_inputs is None``) its `num_tokens`. A request already in
        that row is replaced (SGLang reuses rows)."""
        idx = self._pool_index(req_pool_idx)
        if layout is None:
            if num_tokens is None:
                raise TypeError("layout: expected a PromptLayout, its bytes, or num_tokens for a text-only request")
            layout = text_layout(self.config, num_tokens)
        else:
            layout = read_layout(layout, self.config)
            if num_tokens is not None and as_index(num_tokens, "num_tokens") != layout.num_tokens:
                raise ValueError(f"num_tokens: expected the layout's {layout.num_tokens}, got {num_tokens}")
        # a fresh key per admission: the new request is in before the old one goes, so a refused layout
        # leaves the row as it was
        self._admissions += 1
        key = ("sglang", idx, self._admissions)
        self.tracker.add_request_layout(key, layout)
        old = self._key_of.get(idx)
        if old is not None:
            self.tracker.remove_request(old)
        self._key_of[idx] = key
        self._slot_of[idx] = self.tracker.slot(key)
        self._deltas[idx] = layout.delta

    def release(self, req_pool_idx) -> None:
        """Forget the request in row `req_pool_idx` (SGLang frees the row)."""
        idx = self._pool_index(req_pool_idx)
        if self._slot_of[idx] == FREE:
            raise KeyError(f"req_pool_idx: row {idx} holds no admitted request")
        self.tracker.remove_request(self._key_of.pop(idx))
        self._slot_of[idx] = FREE

    def __contains__(self, req_pool_idx) -> bool:
        """Whether row `req_pool_idx` holds a request (False for a row outside the table; an int is expected)."""
        idx = as_index(req_pool_idx, "req_pool_idx", minimum=-(2**63))  # (TypeError for floats, strings, bools)
        return 0 <= idx <= self.max_num_reqs and self._slot_of[idx] != FREE

    def delta(self, req_pool_idx) -> int:
        idx = self._pool_index(req_pool_idx)
        if self._slot_of[idx] == FREE:
            raise KeyError(f"req_pool_idx: row {idx} holds no admitted request")
        return self.tracker.mrope_position_delta(self._key_of[idx])

    def layout_nbytes(self, req_pool_idx) -> int:
        """Host bytes that hold one request's positions (its slot and layout rows)."""
        idx = self._pool_index(req_pool_idx)
        if idx not in self._key_of:
            raise KeyError(f"req_pool_idx: row {idx} holds no admitted request")
        return self.tracker.state_nbytes(self._key_of[idx])

    # ------------------------------------------------------------------ batches
    def _slots(self, req_pool_indices) -> np.ndarray:
        idx = _host_array(req_pool_indices, "req_pool_indices")
        bad = np.flatnonzero((idx < 0) | (idx > self.max_num_reqs))
        if bad.size:
            k = int(bad[0])
            raise ValueError(f"req_pool_indices[{k}]: expected a row in [0, {self.max_num_reqs}], got {int(idx[k])}")
        slots = self._slot_of[idx]
        free = np.flatnonzero(slots == FREE)
        if free.size:
            k = int(free[0])
            raise ValueError(f"req_pool_indices[{k}]: row {int(idx[k])} holds no admitted request (call admit first)")
        return slots

    def positions(
        self, req_pool_indices, *, prefix_lens=None, extend_lens=None, seq_lens=None, spec_positions=None
    ) -> torch.Tensor:
        """The batch's positions, (num_dims, num_tokens) on the device, in batch order.

        Exactly one mode: ``prefix_lens`` and ``extend_lens`` (an extend
        batch), ``seq_lens`` (a decode batch: host ``seq_lens_cpu``), or
        ``spec_positions`` (a speculative batch: the draft tokens' 1-D
        positions, bs x num_draft on the device, with `req_pool_indices` the
        device tensor of the batch's rows). Host modes return a view of the
        tracker's buffer, valid until the next batch."""
        extend = prefix_lens is not None or extend_lens is not None
        modes = int(extend) + int(seq_lens is not None) + int(spec_positions is not None)
        if modes != 1:
            raise TypeError(
                "prefix_lens: expected exactly one mode: prefix_lens with extend_lens, seq_lens, or spec_positions"
            )
        if spec_positions is not None:
            return self._speculative(req_pool_indices, spec_positions)
        positions = self._usual_batch(req_pool_indices, prefix_lens, extend_lens, seq_lens)
        if positions is not None:
            return positions
        slots = self._slots(req_pool_indices)
        n = slots.shape[0]
        if extend:
            if prefix_lens is None or extend_lens is None:
                raise TypeError("extend_lens: an extend batch needs both prefix_lens and extend_lens")
            computed = _host_array(prefix_lens, "prefix_lens", n)
            counts = _host_array(extend_lens, "extend_lens", n)
        else:
            seq = _host_array(seq_lens, "seq_lens", n)
            bad = np.flatnonzero(seq < 1)
            if bad.size:
                raise ValueError(f"seq_lens[{int(bad[0])}]: expected at least 1 token, got {int(seq[bad[0]])}")
            computed = seq - 1
            counts = np.ones(n, np.int64)
        try:
            return self.tracker.prepare_slots(slots, counts, computed)
        except (ValueError, TypeError) as exc:  # the tracker's names for SGLang's fields
            names = _EXTEND_NAMES if extend else _DECODE_NAMES
            message = str(exc)
            for ours, theirs in names:
                message = message.replace(ours, theirs)
            # the tracker names its own slot numbers: give the rows SGLang passed instead
            rows = _host_array(req_pool_indices, "req_pool_indices")
            message = _ROW_NAMED.sub(lambda m: f"req_pool_indices[{m[1]}] = {int(rows[int(m[1])])}", message)
            raise type(exc)(message) from None

    def _usual_batch(self, req_pool_indices, prefix_lens, extend_lens, seq_lens) -> torch.Tensor | None:
        """A host batch in SGLang's usual forms (`usual_ints`), its fields read in one kernel pass
        (kernels/batch_rows.py) instead of `positions`' checked route; None for anything else and for any
        refusal, which that route then names under SGLang's field names (a refused call has changed nothing)."""
        rows = usual_ints(req_pool_indices)
        if rows is None:
            return None
        n = rows.shape[0]
        if seq_lens is None:  # extend (positions has checked that exactly one mode is given)
            seq, computed, counts = _NO_INTS, usual_ints(prefix_lens), usual_ints(extend_lens)
            if computed is None or counts is None or computed.shape[0] != n or counts.shape[0] != n:
                return None
        else:
            seq = usual_ints(seq_lens)
            if seq is None or seq.shape[0] != n:
                return None
            computed, counts = np.empty(n, np.int64), np.empty(n, np.int64)
        slots = np.empty(n, np.int64)
        # (an extend batch's counts are not written: seq is empty)
        if batch_slots(self._slot_of, rows, seq, slots, computed, counts) >= 0:
            return None
        try:
            return self.tracker.prepare_slots(slots, counts, computed)
        except (ValueError, TypeError):
            return None

    def _speculative(self, req_pool_indices, spec_positions) -> torch.Tensor:
        if not isinstance(req_pool_indices, torch.Tensor) or req_pool_indices.device != self.device:
            raise TypeError(
                f"req_pool_indices: expected a tensor on {self.device} for a speculative batch, got "
                f"{type(req_pool_indices).__name__}"
            )
        if not isinstance(spec_positions, torch.Tensor) or spec_positions.device != self.device:
            raise TypeError(f"spec_positions: expected a tensor on {self.device}, got {type(spec_positions).__name__}")
        if req_pool_indices.dtype not in _INDEX_DTYPES:
            raise TypeError(f"req_pool_indices: expected an int32 or int64 tensor, got {req_pool_indices.dtype}")
        if spec_positions.dtype not in _INDEX_DTYPES:
            raise TypeError(f"spec_positions: expected an int32 or int64 tensor, got {spec_positions.dtype}")
        if req_pool_indices.ndim != 1:
            raise ValueError(f"req_pool_indices: expected a 1-D tensor, got shape {tuple(req_pool_indices.shape)}")
        bs = req_pool_indices.shape[0]
        if spec_positions.ndim != 1 or bs == 0 or spec_positions.numel() % bs:
            raise ValueError(
                f"spec_positions: expected a 1-D tensor of a whole number of positions per request ({bs} requests), "
                f"got shape {tuple(spec_positions.shape)}"
            )
        rows = req_pool_indices if req_pool_indices.dtype is _TORCH_INT64 else req_pool_indices.to(_TORCH_INT64)
        if rows.is_cpu:  # host rows are checked here; device rows are not (that would read the device) ...
            k = first_outside(np.ascontiguousarray(tensor_values(rows, "req_pool_indices")), self.max_num_reqs)
            if k >= 0:
                expected = f"expected a row in [0, {self.max_num_reqs}]"
                raise ValueError(f"req_pool_indices[{k}]: {expected}, got {int(rows[k])}")
        else:  # ... a row outside the table is clamped into it (one launch: on the device each op is one), so it
            # reads some row's delta, never memory past the table; an unknown row reads its stale or zero delta, as
            # SGLang's padding rows (row 0) do
            rows = rows.clamp(0, self.max_num_reqs)
        deltas = self._deltas.index_select(0, rows)
        drafts = spec_positions.view(bs, -1)
        if drafts.dtype is not _TORCH_INT64:
            drafts = drafts.to(_TORCH_INT64)
        flat = (drafts + deltas.unsqueeze(1)).view(-1)  # (a new contiguous tensor: view, never a copy)
        return flat.expand(self.config.num_dims, -1)

    def admitted(self) -> np.ndarray:
        """The rows that hold a request."""
        return np.flatnonzero(self._slot_of != FREE)

    @staticmethod
    def read_layout(value, config: MRopeConfig | None = None) -> PromptLayout:
        return read_layout(value, config)
