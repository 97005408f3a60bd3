"""`RopeState`: vLLM 0.33 Model Runner V2's M-RoPE state, with O(items) memory.

A drop-in for ``vllm.v1.worker.gpu.mm.rope.RopeState``: the same
constructor, methods and `positions` buffer, called at the same points by
MRV2. Where vLLM keeps a pinned int32 table of every slot's prompt positions
([max_num_reqs * 3, max_model_len], read over UVA), this keeps each prompt's
layout rows (device/rows.py) in a device row pool that grows on demand, and
one Triton kernel per step (device/triton_step.py) writes every scheduled token's
positions from them, with integer arithmetic and no host sync.

Lifecycle (as MRV2 calls it):
- `init_prefill_positions(req_idx, model, prefill_token_ids, mm_features)`
  builds the layout on the host from the features' placeholder ranges
  (`mrope_tracker.vllm.layout_from_features`: O(items), the ids are only
  counted) and stages its rows; the slot's previous request, if any, is
  dropped (MRV2 never removes a request from its RopeState: a slot is
  simply admitted again).
- `apply_staged_writes()` moves every staged row and slot record to the
  device: one copy and one scatter launch (device/staging.py). The runner
  calls it before a step, as vLLM's does; `prepare_positions` never does.
- `prepare_positions(...)` launches the step kernel once, nothing else; `get_positions(n)`
  is the buffer's first n columns.
- EVS: `read_prefill_positions` materialises a slot's positions on the
  device; `update_prefill_positions` gives the slot a dense override of its
  own (positions need not fit layout rows), freed when the slot is admitted
  again or removed (`remove_request`).

Memory: a request's rows are O(items), never O(tokens): a run of text or
one grid of an image or frame is one row (44 bytes). The pool starts at 64
rows a slot and grows on demand, at admission, never in a step
(device/pool.py, placed by the row allocator the tracker shares,
core/row_arena.py). Every request that fits max_model_len is accepted: the
one bound is the pool's int32 addressing, `MAX_POOL_ROWS` (about 194
million rows, 8 GiB; each row covers at least one token, so only prompts
that are one row per token across every slot at once could reach it).
docs/engine.md gives the figures.
"""

from __future__ import annotations

import os

import numpy as np
import torch

from ..core.admission import check_layout
from ..core.canvas import canvas_layout_from_features
from ..core.config import MRopeConfig
from ..core.features import read_features, sequence_length
from ..core.inputs import as_index
from ..core.layout import PromptLayout, build_rows_from_ranges
from ..kernels import layout_codes as C
from . import rows as D
from .checks import as_slot, check_index_tensor, checked_override, config_mismatch
from .overrides import DenseOverrides
from .pool import MAX_POOL_ROWS, SlotRows
from .staging import StagedWrites

__all__ = ["DEFAULT_ROWS_PER_REQ", "DEFAULT_STAGING_BYTES", "RopeState", "load_kernels"]

DEFAULT_ROWS_PER_REQ = 64  # the pool's first size per slot; it grows by doubling when admissions need more
# the pool is addressed by int32 element offsets (records first): the most rows it can ever hold
_SCRATCH_ROWS = 1024  # layout rows an admission builds in place (a long video: a few hundred)
DEFAULT_STAGING_BYTES = 256 * 1024
# position rows: 3 (T, H, W) for M-RoPE, 4 for HunYuan-VL's XD-RoPE (the family's num_dims)
SUPPORTED_NUM_DIMS = (3, 4)
# host checks of every step (and of pending writes), for tests and debugging; `debug=` overrides it
DEBUG_ENV = "MROPE_TRACKER_DEBUG"


def load_kernels():
    """The Triton kernels (device/triton_step.py), or an ImportError naming triton."""
    try:
        from . import triton_step
    except ImportError as exc:
        raise ImportError(
            f"RopeState: makes positions with a Triton kernel and needs the `triton` package, which could not be "
            f"imported ({exc}); install it (pip install triton) or use PositionTracker, which needs none"
        ) from exc
    return triton_step


class RopeState:
    """M-RoPE positions for MRV2, from O(items) layout rows kept on `device`.

    Args (vLLM's):
        num_dims: position rows the model reads: the family's `num_dims`,
            3 (T, H, W), or 4 for HunYuan-VL.
        max_num_reqs: request slots (MRV2's `req_idx` space).
        max_num_tokens: most tokens one step schedules.
        max_model_len: longest request (prompt plus outputs).
        device: where positions are made (a CUDA device; "cpu" runs the
            kernels under TRITON_INTERPRET=1, for tests).
    Keywords (ours):
        config: an `MRopeConfig` to use for every request; without it each
            model object's `.config` is read once, under `semantics`.
        semantics: the preset a model's config is read with (default
            "vllm-0.33": vLLM 0.33's positions, bit for bit).
        max_num_rows: the device row pool's first size, layout rows and tau tables
            of all slots together (default 64 per slot).
        staging_bytes: size of each of the two host staging buffers.
        block_size: tokens per kernel block (1024; smaller in tests).
        prompt_block: the lanes a block holding prompt tokens is positioned
            with, a power of two <= block_size (default: the whole block).
            Fewer lanes take fewer registers per thread, so more programs run
            at once, but a long prefill chunk takes more passes
            (`python -m mrope_tracker.bench.gpu_check --registers`, `--sweep`).
        debug: check each step's tensors on the host, and that no write is
            pending, before the launch (default: the MROPE_TRACKER_DEBUG
            environment variable, off unless set to 1).
    """

    def __init__(
        self,
        num_dims: int,
        max_num_reqs: int,
        max_num_tokens: int,
        max_model_len: int,
        device,
        *,
        config: MRopeConfig | None = None,
        semantics: str = "vllm-0.33",
        max_num_rows: int | None = None,
        staging_bytes: int = DEFAULT_STAGING_BYTES,
        block_size: int = 1024,
        prompt_block: int | None = None,
        debug: bool | None = None,
    ) -> None:
        num_dims = as_index(num_dims, "num_dims")
        if num_dims not in SUPPORTED_NUM_DIMS:
            raise ValueError(f"num_dims: expected 3 (T, H, W) or 4 (HunYuan-VL) position rows, got {num_dims}")
        if config is not None and isinstance(config, MRopeConfig) and config.num_dims != num_dims:
            raise ValueError(
                f"num_dims: expected {config.family}'s {config.num_dims} position rows (config.num_dims), "
                f"got {num_dims}"
            )
        self.num_dims = num_dims
        self.max_num_reqs = as_index(max_num_reqs, "max_num_reqs", minimum=1, maximum=2**20)
        self.max_num_tokens = as_index(max_num_tokens, "max_num_tokens", minimum=1, maximum=2**30)
        self.max_model_len = as_index(max_model_len, "max_model_len", minimum=1, maximum=D.INT32_MAX)
        try:
            self.device = torch.device(device)
        except (RuntimeError, TypeError, ValueError) as exc:  # (ValueError: an index past int64)
            raise ValueError(f"device: expected a torch device such as 'cuda:0', got {device!r} ({exc})") from None
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device: {device!r} was asked for but CUDA is not available")
        if self.device.type not in ("cpu", "cuda"):
            raise ValueError(f"device: expected a CUDA device (or 'cpu' for the interpreter), got {device!r}")
        if config is not None and not isinstance(config, MRopeConfig):
            raise TypeError(f"config: expected an MRopeConfig or None, got {type(config).__name__}")
        self.config = config
        self.semantics = semantics
        if max_num_rows is None:
            max_num_rows = self.max_num_reqs * DEFAULT_ROWS_PER_REQ
        # the pool's first size: it grows as admissions need (device/pool.py)
        max_num_rows = as_index(max_num_rows, "max_num_rows", minimum=1, maximum=MAX_POOL_ROWS)
        staging_bytes = as_index(staging_bytes, "staging_bytes", minimum=1024, maximum=2**30)
        self.block_size = as_index(block_size, "block_size", minimum=16, maximum=8192)
        if self.block_size & (self.block_size - 1):
            raise ValueError(f"block_size: expected a power of two, got {self.block_size}")
        if prompt_block is None:
            prompt_block = self.block_size
        self.prompt_block = as_index(prompt_block, "prompt_block", minimum=16, maximum=self.block_size)
        if self.prompt_block & (self.prompt_block - 1):
            raise ValueError(f"prompt_block: expected a power of two, got {self.prompt_block}")
        if debug is None:
            debug = os.environ.get(DEBUG_ENV, "0") not in ("", "0")
        if not isinstance(debug, bool):
            raise TypeError(f"debug: expected a bool or None, got {type(debug).__name__}")
        self.debug = debug
        # warps per program of the step kernel: triton's default; bench/rope_check.py times others on a GPU
        self._num_warps = 4
        self._kernels = load_kernels()

        # the buffer the model reads, as vLLM's: one extra column keeps [:, :n] views non-contiguous
        self.positions = torch.zeros((num_dims, self.max_num_tokens + 1), dtype=torch.int64, device=self.device)
        self._positions_stride, self._positions_width = self.positions.stride(0), self.positions.shape[1]  # fixed
        # slot records and the row pool (device/pool.py), written through staging
        self._staging = StagedWrites(staging_bytes // 4, self.device, self._kernels.scatter_kernel)
        self._rows = SlotRows(self.max_num_reqs, max_num_rows, self.device, self._staging)
        self._records = self._rows.records  # the host's copy of the records, as staged
        # EVS: slot -> its dense [num_dims, length] int32 positions; all of them, flattened, in one arena
        self._overrides = DenseOverrides(self.device)
        self._model = None
        self._model_config: MRopeConfig | None = None
        # the admission's scratch layout table (a larger prompt builds into a table of its own)
        self._scratch_rows = np.empty((_SCRATCH_ROWS, C.NUM_COLS), np.int64)
        self._scratch_scales = np.empty((_SCRATCH_ROWS, C.NUM_SCALE_COLS), np.float32)

    # ------------------------------------------------------------------ admission
    def init_prefill_positions(self, req_idx: int, model, prefill_token_ids, mm_features) -> None:
        """Admit slot `req_idx`: the layout of `prefill_token_ids` (the prompt,
        plus any tokens generated before a preemption, which sit past the
        last item like text) from vLLM's `mm_features`, staged for the next
        `apply_staged_writes`. `model` is the vLLM model (its `.config` read
        once per model object) or an `MRopeConfig`."""
        slot = self._slot(req_idx)
        num_tokens = sequence_length(prefill_token_ids, "prefill_token_ids")  # a dict or a 2-D array: refused
        if not 1 <= num_tokens <= self.max_model_len:
            raise ValueError(
                f"prefill_token_ids: expected 1 to max_model_len={self.max_model_len} tokens, got {num_tokens}"
            )
        config = self._config_of(model)
        if config.num_dims != self.num_dims:
            raise ValueError(
                f"model: expected a model of this state's {self.num_dims} position rows, got {config.family} "
                f"({config.num_dims})"
            )
        if config.spec.canvas:  # MiniCPM-V 4.7: its canvas reads the ids (the markers)
            self._admit(slot, canvas_layout_from_features(config, prefill_token_ids, mm_features))
            return
        self._admit_features(slot, config, prefill_token_ids, mm_features)

    def _admit_features(self, slot: int, config: MRopeConfig, prefill_token_ids, mm_features) -> None:
        """The checked admission of `init_prefill_positions` (device/evs_rows.py adds pruned videos)."""
        num_tokens = len(prefill_token_ids)
        items, ranges = read_features(config, mm_features)  # what layout_from_features reads
        # the rows built straight into this state's scratch table: no layout object on the admission path
        rows, scales, n, top = build_rows_from_ranges(
            config, num_tokens, items, ranges, self._scratch_rows, self._scratch_scales
        )
        self._admit_rows(slot, rows[:n], scales[:n], num_tokens, top)

    def init_prefill_layout(self, req_idx: int, layout: PromptLayout) -> None:
        """`init_prefill_positions` for a `PromptLayout` built elsewhere (for
        instance in the front-end process); one built under another config
        than this state's `config` is refused."""
        slot = self._slot(req_idx)
        if self.config is not None:
            check_layout(layout, self.config)
        elif not isinstance(layout, PromptLayout):
            raise TypeError(f"layout: expected a PromptLayout, got {type(layout).__name__}")
        if layout.num_tokens > self.max_model_len:
            raise ValueError(
                f"layout: expected at most max_model_len={self.max_model_len} tokens, got {layout.num_tokens}"
            )
        self._admit(slot, layout)

    def _admit(self, slot: int, layout: PromptLayout) -> None:
        rows_of = layout.config.num_dims if layout.config is not None else None
        if rows_of not in (None, self.num_dims) or (
            self.num_dims == 3 and (layout.rows[:, C.COL_KIND] == C.KIND_XD_GRID).any()
        ):
            raise ValueError(
                f"layout: expected positions of this state's {self.num_dims} rows, got a layout of "
                f"{rows_of or 4} ({layout.config.family if layout.config is not None else 'XD_GRID rows'})"
            )
        self._admit_rows(slot, layout.rows, layout.scales, layout.num_tokens, layout.max_position)

    def _admit_rows(self, slot: int, rows, scales, num_tokens: int, max_position: int) -> None:
        if max_position > D.INT32_MAX:
            raise ValueError(
                f"prefill_token_ids: positions reach {max_position}, past the int32 positions a device "
                f"row holds ({D.INT32_MAX})"
            )
        rows, taus = D.device_rows(rows, scales)
        start = self._rows.place(slot, rows, taus)  # the last check: nothing has changed if it raises
        self._drop_override(slot)
        self._rows.set_record(slot, start, rows.shape[0], num_tokens, max_position + 1 - num_tokens)

    def remove_request(self, req_idx: int) -> None:
        """Free slot `req_idx`'s rows and override now (MRV2 never calls it:
        a slot's state is replaced when it is admitted again). The slot then
        gives index + 0 for every token, as a slot never admitted."""
        slot = self._slot(req_idx)
        self._drop_override(slot)
        self._rows.release(slot)

    def apply_staged_writes(self) -> None:
        """Move every staged admission and EVS update to the device: one copy,
        one scatter launch (nothing when nothing is staged)."""
        if self._overrides.dirty:
            for slot, at, length in self._overrides.rebuild():
                self._records[slot, D.S_OVERRIDE_AT] = at
                self._records[slot, D.S_OVERRIDE_LEN] = length
                self._rows.stage_record(slot)
        self._rows.apply()

    # ------------------------------------------------------------------ steps
    def get_positions(self, num_tokens: int) -> torch.Tensor:
        """The positions buffer's first `num_tokens` columns (CUDA-graph padded
        counts included: columns past the step's tokens keep their values)."""
        num_tokens = as_index(num_tokens, "num_tokens", maximum=self.max_num_tokens + 1)
        return self.positions[:, :num_tokens]

    def prepare_positions(
        self,
        idx_mapping: torch.Tensor,
        query_start_loc: torch.Tensor,
        prefill_lens: torch.Tensor,
        num_computed_tokens: torch.Tensor,
    ) -> None:
        """Write the positions of every scheduled token into `positions`: one
        kernel launch, no host check, no host sync (as vLLM's).

        `idx_mapping` [num_reqs]: batch entry -> slot; `query_start_loc`
        [>= num_reqs + 1]: each entry's first column; `prefill_lens` and
        `num_computed_tokens` [max_num_reqs]: per slot, as MRV2's request
        states hold them. The runner calls `apply_staged_writes` first, as
        vLLM's does: writes still pending here are not seen by this step
        (a ValueError in debug mode). Whatever the tensors hold, the kernel
        stays in bounds: a slot outside [0, max_num_reqs) writes nothing, and
        its loops never run past the positions buffer. With `debug` on, the
        tensors' types, devices and shapes are checked on the host first."""
        if self.debug:
            self._check_step(idx_mapping, query_start_loc, prefill_lens, num_computed_tokens)
        num_reqs = idx_mapping.shape[0]
        if num_reqs == 0:
            return
        self._kernels.prepare_kernel[(num_reqs,)](
            self.positions,
            self._positions_stride,
            self._positions_width,
            self._rows.records_dev,
            self._rows.pool_dev,
            self._overrides.arena,
            self.max_num_reqs,
            idx_mapping,
            query_start_loc,
            prefill_lens,
            num_computed_tokens,
            BLOCK_SIZE=self.block_size,
            NUM_DIMS=self.num_dims,
            PROMPT_BLOCK=self.prompt_block,
            num_warps=self._num_warps,
        )

    def _check_step(self, idx_mapping, query_start_loc, prefill_lens, num_computed_tokens) -> None:
        """Debug mode's host checks of a step (about 12 us: off the served path)."""
        num_reqs = check_index_tensor(idx_mapping, "idx_mapping", 0, self.max_num_reqs, self.device)
        check_index_tensor(query_start_loc, "query_start_loc", num_reqs + 1, None, self.device)
        check_index_tensor(prefill_lens, "prefill_lens", self.max_num_reqs, None, self.device)
        check_index_tensor(num_computed_tokens, "num_computed_tokens", self.max_num_reqs, None, self.device)
        if self._staging.pending or self._overrides.dirty:
            raise ValueError(
                "apply_staged_writes: expected the runner to apply staged writes before prepare_positions, "
                "got writes still pending (this step would not see them)"
            )

    # ------------------------------------------------------------------ EVS
    def read_prefill_positions(self, req_idx: int, length: int) -> torch.Tensor:
        """Slot `req_idx`'s positions of tokens [0, length), made on the device
        as a new int32 [num_dims, length] tensor (vLLM's table dtype)."""
        slot = self._slot(req_idx)
        length = as_index(length, "length", maximum=self.max_model_len)
        if self._staging.pending or self._overrides.dirty:
            self.apply_staged_writes()
        out = torch.empty((self.num_dims, length), dtype=torch.int32, device=self.device)
        if length:
            grid = (triton_cdiv(length, self.block_size),)
            self._kernels.read_kernel[grid](
                out,
                length,
                self._rows.records_dev,
                self._rows.pool_dev,
                self._overrides.arena,
                slot,
                BLOCK_SIZE=self.block_size,
                NUM_DIMS=self.num_dims,
            )
        return out

    def update_prefill_positions(self, req_idx: int, positions: torch.Tensor, delta: int) -> None:
        """Give slot `req_idx` new positions for its first `positions.shape[1]`
        tokens, and a new delta, at once (this applies the staged writes).

        Recomputed positions need not fit layout rows, so they are kept as a
        dense int32 override of the slot's own, in the device arena; its
        other tokens keep their rows. The override is freed when the slot is
        admitted again or removed."""
        slot = self._slot(req_idx)
        prompt_len = int(self._records[slot, D.S_PROMPT_LEN])
        dense = checked_override(positions, delta, self.num_dims, prompt_len, self.device)
        self._overrides.set(slot, dense)
        self._records[slot, D.S_DELTA] = delta
        self._rows.stage_record(slot)
        self.apply_staged_writes()

    def _drop_override(self, slot: int) -> None:
        if self._overrides.drop(slot):
            self._records[slot, D.S_OVERRIDE_AT] = 0
            self._records[slot, D.S_OVERRIDE_LEN] = 0
            self._rows.stage_record(slot)

    # ------------------------------------------------------------------ helpers
    def _slot(self, req_idx) -> int:
        return as_slot(req_idx, self.max_num_reqs)

    def _config_of(self, model) -> MRopeConfig:
        """The config `model` (a vLLM model, its `.config` read once per model
        object, or an `MRopeConfig`) gives; a state built for one config (its
        `config`, or the first model's) refuses a model of another, naming both."""
        if isinstance(model, MRopeConfig):
            config = model
        elif model is not None and model is self._model:  # (None: no model seen yet, and never a model)
            config = self._model_config
        else:
            hf_config = getattr(model, "config", None)
            if hf_config is None:
                raise TypeError(
                    f"model: expected a vLLM model (with .config) or an MRopeConfig, got {type(model).__name__}"
                )
            semantics = self.config.semantics if self.config is not None else self.semantics
            config = MRopeConfig.from_hf_config(hf_config, semantics=semantics)
        bound = self.config if self.config is not None else self._model_config
        error = config_mismatch(bound, config) if bound is not None else None
        if error is not None:
            raise error
        if not isinstance(model, MRopeConfig) and model is not self._model:
            self._model, self._model_config = model, config
        return self.config if self.config is not None else config

    def nbytes(self) -> dict[str, int]:
        """Every buffer this state holds, in bytes (`device_nbytes` and
        `pinned_nbytes` sum them by where they live)."""
        sizes = {
            "positions": self.positions.nbytes,
            "slot_records": self._rows.records_dev.nbytes,
            "row_pool": self._rows.pool_dev.nbytes,
            "evs_arena": self._overrides.arena.nbytes,
        }
        sizes.update(self._staging.nbytes())
        return sizes

    def device_nbytes(self) -> int:
        return sum(v for k, v in self.nbytes().items() if not k.startswith("staging_pinned") and k != "staging_host")

    def pinned_nbytes(self) -> int:
        return self.nbytes().get("staging_pinned", 0)

    @property
    def max_num_rows(self) -> int:
        """The row pool's size now (it grows as admissions need)."""
        return self._rows.capacity

    def check_invariants(self) -> None:
        """Raise AssertionError if the host bookkeeping is inconsistent (for tests)."""
        self._rows.check_invariants()
        for slot in range(self.max_num_reqs):
            assert slot in self._overrides or self._records[slot, D.S_OVERRIDE_LEN] == 0 or self._overrides.dirty


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)
