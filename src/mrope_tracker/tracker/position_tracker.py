"""`PositionTracker`: per-request M-RoPE positions for a model runner.

A request is admitted once: its layout (O(items) rows, see core/layout.py) goes
into a shared row pool and its counters into a slot of `slot_state`. Every
scheduler step is then one numba call (kernels/tracker_step.py) that writes
the positions of all scheduled tokens into a preallocated buffer and
advances the counters; positions are never materialised per request.

Index spaces: `req_id` (the engine's, any hashable) maps to a `slot` (row of
`slot_state`, stable for the request's lifetime); `batch_idx` is a position
in one step's argument arrays.

This module orchestrates; each job has a module of its own: core/admission.py
(slots and the checks before admission), tracker/row_pool.py (the layout-row pool),
tracker/step_args.py (a step's arguments in the kernel's form), tracker/step_errors.py (a
refused step's exception), tracker/staging.py (where positions go) and tracker/invariants.py
(the constructor's placement checks, and `check_invariants`).
"""

from __future__ import annotations

import numpy as np
import torch

from ..core.admission import RequestSlots, check_layout, check_num_computed
from ..core.canvas import canvas_layout, canvas_layout_from_features
from ..core.features import count_prompt_tokens, read_features
from ..core.inputs import Items, as_config, as_index, as_token_ids
from ..core.layout import PromptLayout, build_rows_from_ranges, build_rows_from_tokens, estimate_rows
from ..core.ranges import Ranges
from ..evs.pruned import PendingPrune, PrunedPrompt
from ..kernels import tracker_step as K
from .invariants import check_tracker, checked_placement
from .row_pool import LayoutRowPool
from .staging import PositionBuffers
from .step_args import INT64, NOT_GIVEN, StepArgs
from .step_errors import refuse_pending, step_error

__all__ = ["PositionTracker"]

_INDEX_LIMIT = 2**62  # num_computed_tokens limit without max_model_len (keeps kernel sums in int64)

# Layout rows reserved per request slot at construction; the pool grows (at
# admission only) when requests carry more items than that.
_DEFAULT_ROWS_PER_REQ = 8
_MAX_REQS = 2**20
MAX_TRACKED_REQUESTS = _MAX_REQS  # (the most slots a tracker takes: for adapters that add slots of their own)
MAX_BATCHED_TOKENS = 2**26


class PositionTracker:
    """Incremental M-RoPE positions for up to `max_num_reqs` running requests.

    Args:
        config: an `MRopeConfig` (or anything `MRopeConfig.from_hf_config` takes).
        max_num_reqs: request slots.
        max_num_batched_tokens: most tokens one step may schedule.
        device: where `prepare` returns positions ("cpu" or a CUDA device).
        max_model_len: when set, a step that would take a request past it is rejected.
        dtype: torch.int64 (default, as vLLM) or torch.int32.
        layout_rows: initial size of the layout-row pool (default 8 per slot).
        staging: stage through host buffers and copy (default: only on CUDA).
        num_staging_buffers: size of the host staging ring (default 2).
    """

    def __init__(
        self,
        config,
        *,
        max_num_reqs: int,
        max_num_batched_tokens: int,
        device="cpu",
        max_model_len: int | None = None,
        dtype: torch.dtype = torch.int64,
        layout_rows: int | None = None,
        staging: bool | None = None,
        num_staging_buffers: int = 2,
    ) -> None:
        self.config = as_config(config)
        # Upper bounds keep absurd capacities a ValueError rather than a MemoryError.
        self.max_num_reqs = as_index(max_num_reqs, "max_num_reqs", minimum=1, maximum=_MAX_REQS)
        self.max_num_batched_tokens = as_index(
            max_num_batched_tokens, "max_num_batched_tokens", minimum=1, maximum=MAX_BATCHED_TOKENS
        )
        self.max_model_len = None if max_model_len is None else as_index(max_model_len, "max_model_len", minimum=1)
        self.device, self.dtype, staging = checked_placement(device, dtype, staging)
        num_staging_buffers = as_index(num_staging_buffers, "num_staging_buffers", minimum=1, maximum=64)
        if layout_rows is None:
            layout_rows = self.max_num_reqs * _DEFAULT_ROWS_PER_REQ
        else:
            layout_rows = as_index(layout_rows, "layout_rows", minimum=1, maximum=_MAX_REQS * _DEFAULT_ROWS_PER_REQ)

        # [max_num_reqs, NUM_SLOT_FIELDS] int64: every per-request counter
        self.slot_state = np.zeros((self.max_num_reqs, K.NUM_SLOT_FIELDS), np.int64)
        # all layouts' rows: [layout_rows, NUM_COLS] int64 and [layout_rows, 2] float32
        self._pool = LayoutRowPool(layout_rows, self.max_num_reqs)
        self._slots = RequestSlots(self.max_num_reqs)
        self._slot_of = self._slots.slot_of  # the same dict: the step path looks ids up in it
        # [max_num_reqs] int64 each: the step's argument arrays when the
        # caller's cannot go to the kernel as they are (ids, lists, other dtypes)
        self._args = StepArgs(self.max_num_reqs)
        self._slot_args = self._args.slot_args
        self._batch_counts = self._args.counts
        self._batch_computed = self._args.computed
        # [num_dims, max_num_batched_tokens + 1]: the family's axes (3, or 4 for HunYuan-VL)
        self.buffers = PositionBuffers(
            self.max_num_batched_tokens, self.device, dtype, staging, num_staging_buffers, num_dims=self.config.num_dims
        )
        # largest position the output dtype holds (int64 positions stay below 2**62)
        self._max_position = 2**31 - 1 if dtype == torch.int32 else 2**62
        # the step kernel's limits and step counter (kernels/tracker_step.py, P_*)
        self._params = np.zeros(K.NUM_STEP_PARAMS + self.max_num_reqs, np.int64)  # (+ the slots' stamps)
        self._params[K.P_MAX_TOKENS] = self.max_num_batched_tokens
        self._params[K.P_MAX_MODEL_LEN] = 0 if self.max_model_len is None else self.max_model_len
        self._params[K.P_MAX_POSITION] = self._max_position
        self._params[K.P_MAX_INDEX] = _INDEX_LIMIT if self.max_model_len is None else self.max_model_len
        self._kernel = K.step_kernel(np.int32 if dtype == torch.int32 else np.int64)
        # slot -> PendingPrune, for requests with a pruned video whose retention mask has not come
        self._pending: dict[int, PendingPrune] = {}

    @property
    def pool_rows(self) -> np.ndarray:
        """[layout_rows, NUM_COLS] int64: every live request's layout rows (grows at admission)."""
        return self._pool.rows

    @property
    def pool_scales(self) -> np.ndarray:
        """[layout_rows, NUM_SCALE_COLS] float32: their time scales."""
        return self._pool.scales

    # ------------------------------------------------------------------ admission
    def add_request(
        self,
        req_id,
        token_ids,
        *,
        image_grid_thw=None,
        video_grid_thw=None,
        second_per_grid_ts=None,
        audio_feature_lengths=None,
        use_audio_in_video=False,
        num_computed_tokens=0,
    ) -> int:
        """Admit a request from its prompt tokens (one scan); returns its slot.

        `num_computed_tokens` > 0 is a prefix-cache hit: those tokens cost
        nothing now and are never generated."""
        self._slots.check_new(req_id)
        ids = as_token_ids(token_ids)
        num_computed_tokens = check_num_computed(num_computed_tokens, ids.shape[0], "token_ids", self.max_model_len)
        items = Items.normalize(
            self.config, image_grid_thw, video_grid_thw, second_per_grid_ts, audio_feature_lengths, use_audio_in_video
        )
        return self._admit(
            req_id,
            ids.shape[0],
            num_computed_tokens,
            estimate_rows(self.config, items),
            lambda rows, scales: build_rows_from_tokens(self.config, ids, items, rows, scales),
        )

    def add_request_from_ranges(
        self,
        req_id,
        num_tokens,
        *,
        image_ranges=None,
        image_grid_thw=None,
        video_ranges=None,
        video_grid_thw=None,
        second_per_grid_ts=None,
        audio_ranges=None,
        audio_feature_lengths=None,
        use_audio_in_video=False,
        interleave="transformers",
        num_computed_tokens=0,
    ) -> int:
        """Admit a request from placeholder ranges without reading its tokens:
        O(items) whatever the prompt length (see `PromptLayout.from_ranges`)."""
        self._slots.check_new(req_id)
        num_tokens = as_index(num_tokens, "num_tokens", minimum=1)
        num_computed_tokens = check_num_computed(num_computed_tokens, num_tokens, "num_tokens", self.max_model_len)
        items = Items.normalize(
            self.config, image_grid_thw, video_grid_thw, second_per_grid_ts, audio_feature_lengths, use_audio_in_video
        )
        ranges = Ranges(self.config, items, image_ranges, video_ranges, audio_ranges, interleave, second_per_grid_ts)
        return self._admit_ranges(req_id, num_tokens, num_computed_tokens, items, ranges)

    def add_request_from_features(self, req_id, prompt_token_ids, mm_features, *, num_computed_tokens=0) -> int:
        """Admit a request from what vLLM's model runners hold: its prompt ids
        (only counted; their number may be given instead) and its multimodal
        features (vLLM 0.33's ``MultiModalFeatureSpec`` objects, read by duck
        typing: core/features.py). O(items): no token is read, no position
        written; each `is_embed` mask of a per-frame video is walked once
        (MiniCPM-V 4.7 reads its ids: `canvas.canvas_layout_from_features`).
        Positions follow this tracker's ``config.semantics`` (``"vllm-0.33"``
        reproduces vLLM 0.33)."""
        self._slots.check_new(req_id)
        if self.config.spec.canvas:  # MiniCPM-V 4.7: its canvas reads the ids (the markers)
            layout = canvas_layout_from_features(self.config, prompt_token_ids, mm_features)
            return self.add_request_layout(req_id, layout, num_computed_tokens=num_computed_tokens)
        num_tokens = count_prompt_tokens(prompt_token_ids, "prompt_token_ids")
        num_computed_tokens = check_num_computed(
            num_computed_tokens, num_tokens, "prompt_token_ids", self.max_model_len
        )
        items, ranges = read_features(self.config, mm_features)
        return self._admit_ranges(req_id, num_tokens, num_computed_tokens, items, ranges)

    def _admit_ranges(self, req_id, num_tokens: int, num_computed_tokens: int, items, ranges) -> int:
        """Admission of a prompt in range form: its rows built straight into the pool."""
        return self._admit(
            req_id,
            num_tokens,
            num_computed_tokens,
            estimate_rows(self.config, items, ranges),
            lambda rows, scales: build_rows_from_ranges(self.config, num_tokens, items, ranges, rows, scales),
        )

    def add_request_layout(self, req_id, layout: PromptLayout, *, num_computed_tokens=0) -> int:
        """Admit a request whose layout was built elsewhere (e.g. in a tokenizer
        process). A layout built under another config (family, semantics
        preset or parameters) is refused."""
        self._slots.check_new(req_id)
        check_layout(layout, self.config)
        num_computed_tokens = check_num_computed(num_computed_tokens, layout.num_tokens, "layout", self.max_model_len)

        def copy_rows(rows, scales):
            n = layout.num_rows
            rows[:n] = layout.rows
            scales[:n] = layout.scales
            return rows, scales, n, layout.max_position

        return self._admit(req_id, layout.num_tokens, num_computed_tokens, layout.num_rows, copy_rows)

    def add_request_canvas(
        self,
        req_id,
        token_ids,
        mm_token_type_ids,
        *,
        target_sizes=None,
        target_sizes_videos=None,
        num_computed_tokens=0,
    ) -> int:
        """Admit a MiniCPM-V 4.7 prompt from its tokens, modality labels and
        per-crop patch grids (`mrope_tracker.canvas.canvas_layout` takes the same);
        returns its slot. Its O(crops) rows go into the pool like any layout's."""
        self._slots.check_new(req_id)
        layout = canvas_layout(
            self.config,
            token_ids,
            mm_token_type_ids,
            target_sizes=target_sizes,
            target_sizes_videos=target_sizes_videos,
        )
        return self.add_request_layout(req_id, layout, num_computed_tokens=num_computed_tokens)

    def add_request_pruned(self, req_id, prompt: PrunedPrompt, *, num_computed_tokens=0, retention_masks=None) -> int:
        """Admit a prompt whose videos vLLM pruned (EVS), before or after its
        retention masks are known (`mrope_tracker.evs`). Until
        `set_retention_mask` gives video k's mask, a step that schedules any
        of the tokens its mask decides is refused; every other token is
        exact already."""
        if not isinstance(prompt, PrunedPrompt):
            raise TypeError(f"prompt: expected an mrope_tracker.evs.PrunedPrompt, got {type(prompt).__name__}")
        pending = PendingPrune(prompt, retention_masks)
        slot = self.add_request_layout(req_id, pending.layout(), num_computed_tokens=num_computed_tokens)
        if pending.spans():
            self._pending[slot] = pending
        return slot

    def set_retention_mask(self, req_id, video_index: int, retention_mask) -> None:
        """Video `video_index`'s retention mask (one bit per token of its
        unpruned grid, frame-major), once the vision encoder has chosen: the
        request's layout rows are rebuilt: a pass over the unpruned prompt's
        keep bits (numpy), then O(items + mask bits / 192) rows.
        Tokens already computed keep their positions: what the mask decides
        was never handed out."""
        slot = self.slot(req_id)
        pending = self._pending.get(slot)
        if pending is None:
            raise ValueError(
                f"req_id: expected a request with a pruned video still waiting for its mask, got {req_id!r}"
            )
        updated = pending.with_mask(video_index, retention_mask)
        layout = updated.layout()

        def copy_rows(rows, scales):
            n = layout.num_rows
            rows[:n] = layout.rows
            scales[:n] = layout.scales
            return rows, scales, n, layout.max_position

        top, n, _ = self._pool.build_at_top(layout.num_rows, copy_rows, self.slot_state)
        state = self.slot_state[slot]
        state[K.F_ROW_START] = top
        state[K.F_ROW_COUNT] = n
        state[K.F_DELTA] = layout.delta
        self._pool.commit(slot, top, n)
        if updated.spans():
            self._pending[slot] = updated
        else:
            del self._pending[slot]

    def _admit(self, req_id, num_tokens: int, num_computed: int, estimate: int, build) -> int:
        # Build straight into the free top of the pool. Nothing is committed
        # until the build succeeds, so a rejected request leaves no trace.
        def accept(max_position: int) -> None:  # before the pool makes room: a refusal leaves it as it was
            if max_position > self._max_position:
                raise ValueError(
                    f"dtype: this tracker's {self.dtype} positions stop at {self._max_position}, but the prompt of "
                    f"{req_id!r} reaches {max_position} (use dtype=torch.int64)"
                )

        top, n, max_position = self._pool.build_at_top(estimate, build, self.slot_state, accept)
        slot = self._slots.take(req_id)
        state = self.slot_state[slot]
        state[K.F_ACTIVE] = 1
        state[K.F_NUM_COMPUTED] = num_computed
        state[K.F_PROMPT_LEN] = num_tokens
        state[K.F_DELTA] = max_position + 1 - num_tokens
        state[K.F_ROW_START] = top
        state[K.F_ROW_COUNT] = n
        self._pool.commit(slot, top, n)
        return slot

    # ------------------------------------------------------------------ lifecycle
    def remove_request(self, req_id) -> None:
        """Forget a request; its slot and layout rows are reused."""
        slot = self.slot(req_id)
        self.slot_state[slot, K.F_ACTIVE] = 0
        self._pending.pop(slot, None)
        self._args.last_req_ids = None  # the slot may soon hold another request
        self._slots.release(req_id)
        self._pool.release(slot)
        if not self._slot_of:
            self._pool.clear()

    def rollback(self, req_id, num_tokens: int) -> None:
        """Un-schedule the last `num_tokens` tokens (rejected draft tokens, or
        preemption back to a prefix-cache hit or to zero). An engine that
        passes `num_computed_tokens` to each step never needs it."""
        slot = self.slot(req_id)
        num_tokens = as_index(num_tokens, "num_tokens")
        done = int(self.slot_state[slot, K.F_NUM_COMPUTED])
        if num_tokens > done:
            raise ValueError(f"num_tokens: expected at most the {done} computed tokens of {req_id!r}, got {num_tokens}")
        self.slot_state[slot, K.F_NUM_COMPUTED] = done - num_tokens

    def slot(self, req_id) -> int:
        """The request's slot, stable for its lifetime (for `prepare_slots`)."""
        return self._slots.slot(req_id)

    def mrope_position_delta(self, req_id) -> int:
        return int(self.slot_state[self.slot(req_id), K.F_DELTA])

    def num_computed_tokens(self, req_id) -> int:
        return int(self.slot_state[self.slot(req_id), K.F_NUM_COMPUTED])

    def prompt_len(self, req_id) -> int:
        return int(self.slot_state[self.slot(req_id), K.F_PROMPT_LEN])

    def __contains__(self, req_id) -> bool:
        return self._args.tracks(req_id, self._slot_of)

    def __len__(self) -> int:
        return len(self._slot_of)

    @property
    def positions(self) -> torch.Tensor:
        """The persistent [num_dims, max_num_batched_tokens + 1] buffer `prepare` returns views of
        (``config.num_dims`` rows: 3 for M-RoPE, 4 for HunYuan-VL)."""
        return self.buffers.positions

    # ------------------------------------------------------------------ steps
    def prepare(self, req_ids, num_scheduled_tokens, *, num_computed_tokens=None) -> torch.Tensor:
        """Positions of each request's next tokens, in the given order, as a
        (num_dims, sum) view of the device buffer; advances every request.

        `num_scheduled_tokens` (and `num_computed_tokens`) are aligned with
        `req_ids`: lists, tuples, 1-D integer arrays or tensors.
        `num_computed_tokens`, when given, is the scheduler's count of each
        request's computed tokens: positions start there and the tracker's
        counters follow (num_computed + scheduled), so rejected draft tokens
        and preemptions need no `rollback`. Without it, each request goes on
        from the tracker's own counter.

        A step that repeats the previous step's ids (the usual decode step)
        reuses their slots without looking them up again."""
        args = self._args
        kind = type(req_ids)
        if kind is list or kind is tuple:
            n = len(req_ids)
            if args.repeats(req_ids):
                slots = args.last_slots
            else:
                slots = args.map_ids(req_ids, n, self._slot_of)
        elif kind is np.ndarray and req_ids.ndim == 1:
            n = req_ids.shape[0]
            slots = args.map_ids(req_ids, n, self._slot_of)
        else:  # sets and dicts have no batch order
            raise TypeError(f"req_ids: expected a list, tuple or 1-D array of request ids, got {kind.__name__}")
        counts = args.index_array(num_scheduled_tokens, "num_scheduled_tokens", args.counts)
        if num_computed_tokens is None:
            computed = NOT_GIVEN[INT64]
        else:
            computed = args.index_array(num_computed_tokens, "num_computed_tokens", args.computed)
            if computed.shape[0] != n:
                raise ValueError(
                    f"num_computed_tokens: expected one count per request id ({n}), got {computed.shape[0]}"
                )
        return self._step(slots, counts, computed, req_ids)

    def prepare_slots(self, slots, num_scheduled_tokens, num_computed_tokens=None) -> torch.Tensor:
        """`prepare` for engines that keep slots (from `slot`) and counts in
        arrays: no per-request Python work.

        int32 or int64 numpy arrays (1-D, C-contiguous, writable, all of one
        dtype) go to the kernel as they are: nothing is checked in Python,
        copied or allocated. Lists, tuples, tensors and other arrays are
        converted first."""
        if type(slots) is np.ndarray and type(num_scheduled_tokens) is np.ndarray:
            dtype = slots.dtype
            if num_scheduled_tokens.dtype is dtype:
                if num_computed_tokens is None:
                    computed = NOT_GIVEN.get(dtype)
                elif type(num_computed_tokens) is np.ndarray and num_computed_tokens.dtype is dtype:
                    computed = num_computed_tokens
                else:
                    computed = None
                if computed is not None:
                    if self._pending:
                        refuse_pending(self._pending, self.slot_state, slots, num_scheduled_tokens, computed, None)
                    buffers, pool = self.buffers, self._pool
                    try:
                        if num_computed_tokens is not None and len(computed) != len(slots):
                            raise TypeError  # (the checked path below names the argument)
                        total = self._kernel(
                            buffers.acquire(),
                            slots,
                            num_scheduled_tokens,
                            computed,
                            self.slot_state,
                            pool.rows,
                            pool.scales,
                            self._params,
                        )
                    except TypeError:
                        pass  # read-only, strided or not 1-D: the kernel takes no such array; converted below
                    else:
                        if total < 0:
                            raise self._step_error(-total, slots, num_scheduled_tokens, computed, None)
                        return buffers.publish(total)
        args = self._args
        slots = args.index_array(slots, "slots", args.slot_args)
        counts = args.index_array(num_scheduled_tokens, "num_scheduled_tokens", args.counts)
        if num_computed_tokens is None:
            computed = NOT_GIVEN[INT64]
        else:
            computed = args.index_array(num_computed_tokens, "num_computed_tokens", args.computed)
            if computed.shape[0] != slots.shape[0]:
                raise ValueError(
                    f"num_computed_tokens: expected one count per slot ({slots.shape[0]}), got {computed.shape[0]}"
                )
        return self._step(slots, counts, computed, None)

    def _step(self, slots: np.ndarray, counts: np.ndarray, computed: np.ndarray, req_ids) -> torch.Tensor:
        if self._pending:
            refuse_pending(self._pending, self.slot_state, slots, counts, computed, req_ids)
        buffers, pool = self.buffers, self._pool
        total = self._kernel(
            buffers.acquire(), slots, counts, computed, self.slot_state, pool.rows, pool.scales, self._params
        )
        if total < 0:
            raise self._step_error(-total, slots, counts, computed, req_ids)
        return buffers.publish(total)

    def _step_error(self, code, slots, counts, computed, req_ids) -> Exception:
        return step_error(code, slots, counts, computed, req_ids, self._params, self.slot_state, self.dtype)

    # ------------------------------------------------------------------ introspection
    def state_nbytes(self, req_id) -> int:
        """Host bytes that hold one request: its slot row, its stamp in the step's scratch, its layout rows."""
        rows = int(self.slot_state[self.slot(req_id), K.F_ROW_COUNT])
        return self.slot_state.itemsize * (K.NUM_SLOT_FIELDS + 1) + rows * self._pool.row_nbytes()

    def nbytes(self) -> dict[str, int]:
        """Every buffer the tracker holds, in bytes."""
        sizes = {
            "slot_state": self.slot_state.nbytes,
            "step_params": self._params.nbytes,
            "layout_pool": self._pool.nbytes(),
            "batch_args": self._args.nbytes(),
        }
        sizes.update(self.buffers.nbytes())
        return sizes

    def check_invariants(self) -> None:
        """Raise AssertionError if the bookkeeping is inconsistent (for tests)."""
        check_tracker(self._slots, self._pool, self.slot_state, self._args, self.max_model_len)
