"""`PositionTracker`: per-request M-RoPE positions for a model runner.

A request is admitted once: its layout (O(items) rows, see layout.py) goes
into a shared row pool and its counters into a slot of `slot_state`. Every
scheduler step is then one numba call (kernels/tracker_step.py) that writes
the positions of all scheduled tokens into a preallocated buffer and
advances the counters; positions are never materialised per request.

Index spaces: `req_id` (the engine's, any hashable) maps to a `slot` (row of
`slot_state`, stable for the request's lifetime); `batch_idx` is a position
in one step's argument arrays.
"""

from __future__ import annotations

from collections.abc import Hashable

import operator

import numpy as np
import torch

from .config import MRopeConfig
from .inputs import Items, as_config, as_index, as_int_array, as_token_ids, ready
from .kernels import layout_codes as C
from .kernels import tracker_step as K
from .kernels.pool import compact_pool
from .layout import PromptLayout, Ranges, build_rows_from_ranges, build_rows_from_tokens, estimate_rows
from .staging import PositionBuffers

__all__ = ["PositionTracker"]

_INT64 = np.dtype(np.int64)
_PLAIN_INT = {int}
_ID_SEQUENCES = (list, tuple, np.ndarray)
_COUNT_SEQUENCES = (list, tuple, np.ndarray, torch.Tensor)


# Layout rows reserved per request slot at construction; the pool grows (at
# admission only) when requests carry more items than that.
_DEFAULT_ROWS_PER_REQ = 8
_MAX_REQS = 2**20
_MAX_BATCHED_TOKENS = 2**26


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
            max_num_batched_tokens, "max_num_batched_tokens", minimum=1, maximum=_MAX_BATCHED_TOKENS
        )
        self.max_model_len = None if max_model_len is None else as_index(max_model_len, "max_model_len", minimum=1)
        try:
            self.device = torch.device(device)
        except (RuntimeError, TypeError) as exc:
            raise ValueError(f"device: expected a torch device such as 'cpu' or 'cuda:0', got {device!r} ({exc})") from None
        if self.device.type not in ("cpu", "cuda"):
            raise ValueError(f"device: expected 'cpu' or a CUDA device, got {device!r}")
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device: {device!r} was asked for but CUDA is not available")
        if dtype not in (torch.int64, torch.int32):
            raise ValueError(f"dtype: expected torch.int64 or torch.int32, got {dtype!r}")
        self.dtype = dtype
        if staging is not None and not isinstance(staging, bool):
            raise TypeError(f"staging: expected True, False or None, got {staging!r}")
        if staging is None:
            staging = self.device.type == "cuda"
        elif self.device.type == "cuda" and not staging:
            raise ValueError("staging: a CUDA tracker always stages through pinned host buffers; expected True or None")
        num_staging_buffers = as_index(num_staging_buffers, "num_staging_buffers", minimum=1, maximum=64)
        if layout_rows is None:
            layout_rows = self.max_num_reqs * _DEFAULT_ROWS_PER_REQ
        else:
            layout_rows = as_index(layout_rows, "layout_rows", minimum=1, maximum=_MAX_REQS * _DEFAULT_ROWS_PER_REQ)

        # [max_num_reqs, NUM_SLOT_FIELDS] int64: every per-request counter
        self.slot_state = np.zeros((self.max_num_reqs, K.NUM_SLOT_FIELDS), np.int64)
        # [layout_rows, NUM_COLS] int64 and [layout_rows, 2] float32: all layouts
        self.pool_rows = np.zeros((layout_rows, C.NUM_COLS), np.int64)
        self.pool_scales = np.zeros((layout_rows, C.NUM_SCALE_COLS), np.float32)
        self._pool_top = 0
        # [max_num_reqs] int64: argument arrays for `prepare`
        self._batch_slots = np.zeros(self.max_num_reqs, np.int64)
        self._batch_counts = np.zeros(self.max_num_reqs, np.int64)
        self.buffers = PositionBuffers(self.max_num_batched_tokens, self.device, dtype, staging, num_staging_buffers)
        self._slot_of: dict[Hashable, int] = {}
        self._req_of_slot: list[Hashable | None] = [None] * self.max_num_reqs
        self._free_slots = list(range(self.max_num_reqs - 1, -1, -1))  # pop() gives slot 0 first
        self._step_id = 0
        # the previous prepare()'s ids and counts, once validated (see prepare)
        self._last_req_ids: list | None = None
        self._last_counts: list | None = None
        self._max_model_len_arg = 0 if self.max_model_len is None else self.max_model_len
        # largest position the output dtype holds (int64 positions stay below 2**62)
        self._max_position = 2**31 - 1 if dtype == torch.int32 else 2**62

    # ------------------------------------------------------------------ admission
    def add_request(
        self, req_id, token_ids, *, image_grid_thw=None, video_grid_thw=None, second_per_grid_ts=None,
        audio_feature_lengths=None, use_audio_in_video=False, num_computed_tokens=0,
    ) -> int:  # fmt: skip
        """Admit a request from its prompt tokens (one scan); returns its slot.

        `num_computed_tokens` > 0 is a prefix-cache hit: those tokens cost
        nothing now and are never generated."""
        self._check_new_id(req_id)
        ids = as_token_ids(token_ids)
        num_computed_tokens = self._check_computed(num_computed_tokens, ids.shape[0], "token_ids")
        items = Items.normalize(self.config, image_grid_thw, video_grid_thw, second_per_grid_ts, audio_feature_lengths, use_audio_in_video)
        return self._admit(req_id, ids.shape[0], num_computed_tokens, estimate_rows(self.config, items),
                           lambda rows, scales: build_rows_from_tokens(self.config, ids, items, rows, scales))  # fmt: skip

    def add_request_from_ranges(
        self, req_id, num_tokens, *, image_ranges=None, image_grid_thw=None, video_ranges=None, video_grid_thw=None,
        second_per_grid_ts=None, audio_ranges=None, audio_feature_lengths=None, use_audio_in_video=False,
        num_computed_tokens=0,
    ) -> int:  # fmt: skip
        """Admit a request from placeholder ranges without reading its tokens:
        O(items) whatever the prompt length (see `PromptLayout.from_ranges`)."""
        self._check_new_id(req_id)
        num_tokens = as_index(num_tokens, "num_tokens", minimum=1)
        num_computed_tokens = self._check_computed(num_computed_tokens, num_tokens, "num_tokens")
        items = Items.normalize(self.config, image_grid_thw, video_grid_thw, second_per_grid_ts, audio_feature_lengths, use_audio_in_video)
        ranges = Ranges(items, image_ranges, video_ranges, audio_ranges)
        return self._admit(req_id, num_tokens, num_computed_tokens, estimate_rows(self.config, items),
                           lambda rows, scales: build_rows_from_ranges(self.config, num_tokens, items, ranges, rows, scales))  # fmt: skip

    def add_request_layout(self, req_id, layout: PromptLayout, *, num_computed_tokens=0) -> int:
        """Admit a request whose layout was built elsewhere (e.g. in a tokenizer process)."""
        self._check_new_id(req_id)
        if not isinstance(layout, PromptLayout):
            raise TypeError(f"layout: expected a PromptLayout, got {type(layout).__name__}")
        num_computed_tokens = self._check_computed(num_computed_tokens, layout.num_tokens, "layout")

        def copy_rows(rows, scales):
            n = layout.num_rows
            rows[:n] = layout.rows
            scales[:n] = layout.scales
            return rows, scales, n, layout.max_position

        return self._admit(req_id, layout.num_tokens, num_computed_tokens, layout.num_rows, copy_rows)

    def _admit(self, req_id, num_tokens: int, num_computed: int, estimate: int, build) -> int:
        # Make room for the estimated rows, then build straight into the free
        # top of the pool. Nothing is committed until the build succeeds, so
        # a rejected request leaves no trace (a compaction changes no position).
        top = self._make_room(estimate)
        rows, scales, n, max_position = build(self.pool_rows[top:], self.pool_scales[top:])
        if rows.base is not self.pool_rows:  # more rows than estimated: built in a table of its own
            top = self._make_room(n)
            self.pool_rows[top : top + n] = rows[:n]
            self.pool_scales[top : top + n] = scales[:n]
        if max_position > self._max_position:
            raise ValueError(
                f"dtype: this tracker's {self.dtype} positions stop at {self._max_position}, but the prompt of "
                f"{req_id!r} reaches {max_position} (use dtype=torch.int64)"
            )
        slot = self._free_slots.pop()
        state = self.slot_state[slot]
        state[K.F_ACTIVE] = 1
        state[K.F_NUM_COMPUTED] = num_computed
        state[K.F_PROMPT_LEN] = num_tokens
        state[K.F_DELTA] = max_position + 1 - num_tokens
        state[K.F_ROW_START] = top
        state[K.F_ROW_COUNT] = n
        state[K.F_STAMP] = 0
        self._pool_top = top + n
        self._slot_of[req_id] = slot
        self._req_of_slot[slot] = req_id
        return slot

    def _make_room(self, needed: int) -> int:
        """Have `needed` free rows at the top of the pool (compacting, then
        growing, only when short); returns the top."""
        if self._pool_top + needed <= self.pool_rows.shape[0]:
            return self._pool_top
        self._pool_top = compact_pool(self.pool_rows, self.pool_scales, self.slot_state)
        if self._pool_top + needed > self.pool_rows.shape[0]:
            capacity = max(2 * self.pool_rows.shape[0], self._pool_top + needed)
            rows = np.zeros((capacity, C.NUM_COLS), np.int64)
            scales = np.zeros((capacity, C.NUM_SCALE_COLS), np.float32)
            rows[: self._pool_top] = self.pool_rows[: self._pool_top]
            scales[: self._pool_top] = self.pool_scales[: self._pool_top]
            self.pool_rows, self.pool_scales = rows, scales
        return self._pool_top

    def _check_new_id(self, req_id) -> None:
        try:
            known = req_id in self._slot_of
        except TypeError:
            raise TypeError(f"req_id: expected a hashable id, got {type(req_id).__name__}") from None
        if known:
            raise ValueError(f"req_id: expected a new request id, got {req_id!r}, which is already tracked")
        if not self._free_slots:
            raise ValueError(f"req_id: no free slot for {req_id!r}: all max_num_reqs={self.max_num_reqs} slots are in use")

    def _check_computed(self, num_computed_tokens, num_tokens: int, prompt_arg: str) -> int:
        if self.max_model_len is not None and num_tokens > self.max_model_len:
            raise ValueError(
                f"{prompt_arg}: expected a prompt of at most max_model_len={self.max_model_len} tokens, got {num_tokens}"
            )
        num_computed_tokens = as_index(num_computed_tokens, "num_computed_tokens")
        if num_computed_tokens > num_tokens:
            raise ValueError(
                f"num_computed_tokens: expected at most the prompt's {num_tokens} tokens, got {num_computed_tokens}"
            )
        return num_computed_tokens

    # ------------------------------------------------------------------ lifecycle
    def remove_request(self, req_id) -> None:
        """Forget a request; its slot and layout rows are reused."""
        slot = self.slot(req_id)
        self.slot_state[slot, K.F_ACTIVE] = 0
        self._last_req_ids = None  # the slot may soon hold another request
        del self._slot_of[req_id]
        self._req_of_slot[slot] = None
        self._free_slots.append(slot)
        if not self._slot_of:
            self._pool_top = 0

    def rollback(self, req_id, num_tokens: int) -> None:
        """Un-schedule the last `num_tokens` tokens (rejected draft tokens, or
        preemption back to a prefix-cache hit or to zero)."""
        slot = self.slot(req_id)
        num_tokens = as_index(num_tokens, "num_tokens")
        done = int(self.slot_state[slot, K.F_NUM_COMPUTED])
        if num_tokens > done:
            raise ValueError(f"num_tokens: expected at most the {done} computed tokens of {req_id!r}, got {num_tokens}")
        self.slot_state[slot, K.F_NUM_COMPUTED] = done - num_tokens

    def slot(self, req_id) -> int:
        """The request's slot, stable for its lifetime (for `prepare_slots`)."""
        try:
            return self._slot_of[req_id]
        except KeyError:
            raise KeyError(f"req_id: expected a tracked request id, got {req_id!r}") from None
        except TypeError:
            raise TypeError(f"req_id: expected a hashable id, got {type(req_id).__name__}") from None

    def mrope_position_delta(self, req_id) -> int:
        return int(self.slot_state[self.slot(req_id), K.F_DELTA])

    def num_computed_tokens(self, req_id) -> int:
        return int(self.slot_state[self.slot(req_id), K.F_NUM_COMPUTED])

    def prompt_len(self, req_id) -> int:
        return int(self.slot_state[self.slot(req_id), K.F_PROMPT_LEN])

    def __contains__(self, req_id) -> bool:
        return req_id in self._slot_of

    def __len__(self) -> int:
        return len(self._slot_of)

    @property
    def positions(self) -> torch.Tensor:
        """The persistent [3, max_num_batched_tokens + 1] buffer `prepare` returns views of."""
        return self.buffers.positions

    # ------------------------------------------------------------------ steps
    def prepare(self, req_ids, num_scheduled_tokens) -> torch.Tensor:
        """Positions of each request's next tokens, in the given order, as a
        (3, sum) view of the device buffer; advances every request.

        `num_scheduled_tokens` is aligned with `req_ids` (a sequence or array).
        A step that repeats the previous step's ids (the usual decode step)
        reuses their slots without looking them up again."""
        if not isinstance(req_ids, _ID_SEQUENCES):  # sets and dicts have no batch order
            raise TypeError(f"req_ids: expected a list, tuple or 1-D array of request ids, got {type(req_ids).__name__}")
        if not isinstance(num_scheduled_tokens, _COUNT_SEQUENCES):
            raise TypeError(
                f"num_scheduled_tokens: expected a list, tuple, 1-D array or tensor of counts, "
                f"got {type(num_scheduled_tokens).__name__}"
            )
        n = len(req_ids)
        if type(req_ids) is list and req_ids == self._last_req_ids:
            slots = self._batch_slots[:n]
        else:
            slots = self._map_ids(req_ids, n)
        return self._step(slots, self._copy_counts(num_scheduled_tokens, n), req_ids)

    def _map_ids(self, req_ids, n: int) -> np.ndarray:
        if n > self.max_num_reqs:
            raise ValueError(f"req_ids: expected at most max_num_reqs={self.max_num_reqs} requests, got {n}")
        slots = self._batch_slots[:n]
        try:
            # itemgetter looks all ids up in one C call (25% faster than map)
            slots[:] = operator.itemgetter(*req_ids)(self._slot_of) if n > 1 else [self._slot_of[r] for r in req_ids]
        except KeyError as exc:
            raise KeyError(f"req_ids: expected tracked request ids, got unknown id {exc.args[0]!r}") from None
        except TypeError:
            raise TypeError("req_ids: expected a sequence of hashable request ids") from None
        self._last_req_ids = list(req_ids)  # a copy: callers may mutate their list
        return slots

    def _copy_counts(self, num_scheduled_tokens, n: int) -> np.ndarray:
        """The counts as the step kernel's int64 array. A list of plain ints
        equal to the previous step's (every decode step) is not copied again."""
        counts = self._batch_counts[:n]
        if len(num_scheduled_tokens) != n:
            raise ValueError(
                f"num_scheduled_tokens: expected one count per request id ({n}), got {len(num_scheduled_tokens)}"
            )
        if type(num_scheduled_tokens) is list and set(map(type, num_scheduled_tokens)) <= _PLAIN_INT:
            if num_scheduled_tokens != self._last_counts:
                try:
                    counts[:] = num_scheduled_tokens
                except OverflowError:
                    self._last_counts = None
                    raise ValueError("num_scheduled_tokens: expected counts that fit in int64, got a larger one") from None
                self._last_counts = list(num_scheduled_tokens)  # a copy: callers may mutate their list
            return counts
        self._last_counts = None
        if type(num_scheduled_tokens) is np.ndarray and num_scheduled_tokens.dtype.kind == "i" and num_scheduled_tokens.ndim == 1:
            counts[:] = num_scheduled_tokens
        elif type(num_scheduled_tokens) is tuple and set(map(type, num_scheduled_tokens)) <= _PLAIN_INT:
            try:
                counts[:] = num_scheduled_tokens
            except OverflowError:
                raise ValueError("num_scheduled_tokens: expected counts that fit in int64, got a larger one") from None
        else:  # numpy scalars, tensors, unsigned arrays, or something wrong: the slow, checked path
            counts[:] = as_int_array(num_scheduled_tokens, "num_scheduled_tokens", 1, "(num_reqs,)")
        return counts

    def prepare_slots(self, slots: np.ndarray, num_scheduled_tokens: np.ndarray) -> torch.Tensor:
        """`prepare` for engines that keep slots and counts as integer numpy
        arrays (from `slot`); no per-request Python work."""
        if not ready(slots, _INT64, 1):
            slots = as_int_array(slots, "slots", 1, "(num_reqs,)")
        if not ready(num_scheduled_tokens, _INT64, 1):
            num_scheduled_tokens = as_int_array(num_scheduled_tokens, "num_scheduled_tokens", 1, "(num_reqs,)")
        n = slots.shape[0]
        if num_scheduled_tokens.shape != slots.shape:
            raise ValueError(
                f"num_scheduled_tokens: expected 1-D arrays of equal length, got shapes {slots.shape} and "
                f"{num_scheduled_tokens.shape}"
            )
        if n > self.max_num_reqs:
            raise ValueError(f"slots: expected at most max_num_reqs={self.max_num_reqs} requests, got {n}")
        return self._step(slots, num_scheduled_tokens, None)

    def _step(self, slots: np.ndarray, counts: np.ndarray, req_ids) -> torch.Tensor:
        self._step_id += 1
        buffers = self.buffers
        total, code, bad = K.prepare_step(
            buffers.acquire(), slots, counts, self.slot_state, self.pool_rows, self.pool_scales, self._step_id,
            self.max_num_batched_tokens, self._max_model_len_arg, self._max_position,
        )  # fmt: skip
        if code:
            raise self._step_error(code, bad, slots, counts, req_ids)
        return buffers.publish(total)

    def _step_error(self, code, b, slots, counts, req_ids) -> Exception:
        who = f"req_ids[{b}] = {req_ids[b]!r}" if req_ids is not None else f"slots[{b}] = {int(slots[b])}"
        count = int(counts[b])
        if code == K.STEP_ERR_SLOT_RANGE:
            return ValueError(f"slots[{b}]: expected a slot in [0, {self.max_num_reqs}), got {int(slots[b])}")
        if code == K.STEP_ERR_SLOT_FREE:
            return KeyError(f"slots[{b}]: expected the slot of a tracked request, got free slot {int(slots[b])}")
        if code == K.STEP_ERR_DUPLICATE:
            return ValueError(f"{who}: expected each request at most once per step, got it twice")
        if code == K.STEP_ERR_NEGATIVE:
            return ValueError(f"num_scheduled_tokens[{b}]: expected a count >= 0, got {count}")
        if code == K.STEP_ERR_TOO_MANY_TOKENS:
            total = sum(int(v) for v in counts)  # Python ints: the sum may not fit in int64
            return ValueError(
                f"num_scheduled_tokens: expected at most max_num_batched_tokens={self.max_num_batched_tokens} "
                f"tokens in one step, got {total}"
            )
        if code == K.STEP_ERR_POSITION_LIMIT:
            done = int(self.slot_state[slots[b], K.F_NUM_COMPUTED])
            return ValueError(
                f"num_scheduled_tokens[{b}]: {who} would reach position {done + count - 1 + int(self.slot_state[slots[b], K.F_DELTA])}, "
                f"past the largest {self.dtype} value {self._max_position}"
            )
        if code == K.STEP_ERR_MODEL_LEN:
            done = int(self.slot_state[slots[b], K.F_NUM_COMPUTED])
            return ValueError(
                f"num_scheduled_tokens[{b}]: {who} has {done} tokens; expected at most max_model_len="
                f"{self.max_model_len} after this step, got {done + count}"
            )
        raise AssertionError(f"unknown step error code {code}")  # internal invariant

    # ------------------------------------------------------------------ introspection
    def state_nbytes(self, req_id) -> int:
        """Host bytes that hold one request: its slot row and its layout rows."""
        rows = int(self.slot_state[self.slot(req_id), K.F_ROW_COUNT])
        return self.slot_state.itemsize * K.NUM_SLOT_FIELDS + rows * (
            self.pool_rows.itemsize * C.NUM_COLS + self.pool_scales.itemsize * C.NUM_SCALE_COLS
        )

    def nbytes(self) -> dict[str, int]:
        """Every buffer the tracker holds, in bytes."""
        sizes = {
            "slot_state": self.slot_state.nbytes,
            "layout_pool": self.pool_rows.nbytes + self.pool_scales.nbytes,
            "batch_args": self._batch_slots.nbytes + self._batch_counts.nbytes,
        }
        sizes.update(self.buffers.nbytes())
        return sizes

    def check_invariants(self) -> None:
        """Raise AssertionError if the bookkeeping is inconsistent (for tests)."""
        assert len(self._slot_of) + len(self._free_slots) == self.max_num_reqs
        assert len(set(self._free_slots)) == len(self._free_slots)
        live = []
        for req_id, slot in self._slot_of.items():
            state = self.slot_state[slot]
            assert self._req_of_slot[slot] == req_id
            assert state[K.F_ACTIVE] == 1 and slot not in self._free_slots
            assert 0 <= state[K.F_NUM_COMPUTED]
            if self.max_model_len is not None:
                assert state[K.F_NUM_COMPUTED] <= self.max_model_len
            start, count = int(state[K.F_ROW_START]), int(state[K.F_ROW_COUNT])
            assert 0 < count and start + count <= self._pool_top <= self.pool_rows.shape[0]
            rows = self.pool_rows[start : start + count]
            # rows tile [0, prompt_len) in order
            assert rows[0, C.COL_TOK_START] == 0
            assert (rows[1:, C.COL_TOK_START] == rows[:-1, C.COL_TOK_START] + rows[:-1, C.COL_TOK_LEN]).all()
            assert rows[-1, C.COL_TOK_START] + rows[-1, C.COL_TOK_LEN] == state[K.F_PROMPT_LEN]
            assert (rows[:, C.COL_TOK_LEN] > 0).all()
            live.append((start, start + count))
        for slot in self._free_slots:
            assert self.slot_state[slot, K.F_ACTIVE] == 0 and self._req_of_slot[slot] is None
        live.sort()
        for (_, end), (start, _) in zip(live, live[1:]):
            assert end <= start, "two requests share layout rows"
