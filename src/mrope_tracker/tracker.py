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

import marshal
import operator
from collections.abc import Hashable

import numpy as np
import torch

from .inputs import Items, as_config, as_index, as_int_array, as_token_ids
from .kernels import layout_codes as C
from .kernels import tracker_step as K
from .kernels.pool import compact_pool
from .kernels.records import MARSHAL_INTS, read_int_records
from .layout import PromptLayout, build_rows_from_ranges, build_rows_from_tokens, estimate_rows
from .ranges import Ranges
from .staging import PositionBuffers

__all__ = ["PositionTracker"]

_INT64 = np.dtype(np.int64)
_INT32 = np.dtype(np.int32)
# "num_computed_tokens not given", one per index dtype the step kernel takes
_NOT_GIVEN = {_INT64: np.zeros(0, np.int64), _INT32: np.zeros(0, np.int32)}
_INDEX_LIMIT = 2**62  # num_computed_tokens limit without max_model_len (keeps kernel sums in int64)


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
            raise ValueError(
                f"device: expected a torch device such as 'cpu' or 'cuda:0', got {device!r} ({exc})"
            ) from None
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
        # [max_num_reqs] int64: the step's argument arrays when the caller's
        # cannot go to the kernel as they are (ids, lists, other dtypes)
        self._batch_slots = np.zeros(self.max_num_reqs, np.int64)  # prepare's slots of _last_req_ids
        self._slot_args = np.zeros(self.max_num_reqs, np.int64)  # prepare_slots's converted slots
        self._batch_counts = np.zeros(self.max_num_reqs, np.int64)
        self._batch_computed = np.zeros(self.max_num_reqs, np.int64)
        self.buffers = PositionBuffers(self.max_num_batched_tokens, self.device, dtype, staging, num_staging_buffers)
        self._slot_of: dict[Hashable, int] = {}
        self._req_of_slot: list[Hashable | None] = [None] * self.max_num_reqs
        self._free_slots = list(range(self.max_num_reqs - 1, -1, -1))  # pop() gives slot 0 first
        # the previous prepare()'s ids (a list copy, or the tuple itself) once mapped (see prepare)
        self._last_req_ids: list | tuple | None = None
        self._last_slots = self._batch_slots[:0]  # their slots: a view of _batch_slots
        # by argument name: the marshal bytes of the list its conversion buffer
        # holds, and the view of the buffer that holds it (see _index_array)
        self._held: dict[str, tuple[bytes, np.ndarray]] = {}
        # largest position the output dtype holds (int64 positions stay below 2**62)
        self._max_position = 2**31 - 1 if dtype == torch.int32 else 2**62
        # the step kernel's limits and step counter (kernels/tracker_step.py, P_*)
        self._params = np.zeros(K.NUM_PARAMS, np.int64)
        self._params[K.P_MAX_TOKENS] = self.max_num_batched_tokens
        self._params[K.P_MAX_MODEL_LEN] = 0 if self.max_model_len is None else self.max_model_len
        self._params[K.P_MAX_POSITION] = self._max_position
        self._params[K.P_MAX_INDEX] = _INDEX_LIMIT if self.max_model_len is None else self.max_model_len
        self._kernel = K.step_kernel(np.int32 if dtype == torch.int32 else np.int64)

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
        self._check_new_id(req_id)
        ids = as_token_ids(token_ids)
        num_computed_tokens = self._check_computed(num_computed_tokens, ids.shape[0], "token_ids")
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
        self._check_new_id(req_id)
        num_tokens = as_index(num_tokens, "num_tokens", minimum=1)
        num_computed_tokens = self._check_computed(num_computed_tokens, num_tokens, "num_tokens")
        items = Items.normalize(
            self.config, image_grid_thw, video_grid_thw, second_per_grid_ts, audio_feature_lengths, use_audio_in_video
        )
        ranges = Ranges(self.config, items, image_ranges, video_ranges, audio_ranges, interleave, second_per_grid_ts)
        return self._admit(
            req_id,
            num_tokens,
            num_computed_tokens,
            estimate_rows(self.config, items, ranges),
            lambda rows, scales: build_rows_from_ranges(self.config, num_tokens, items, ranges, rows, scales),
        )

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
            raise ValueError(
                f"req_id: no free slot for {req_id!r}: all max_num_reqs={self.max_num_reqs} slots are in use"
            )

    def _check_computed(self, num_computed_tokens, num_tokens: int, prompt_arg: str) -> int:
        if self.max_model_len is not None and num_tokens > self.max_model_len:
            raise ValueError(
                f"{prompt_arg}: expected a prompt of at most max_model_len={self.max_model_len} tokens, got "
                f"{num_tokens}"
            )
        # Past the prompt is a resumed request whose generated tokens are
        # cached too: they sit at index + delta like any decode token.
        num_computed_tokens = as_index(num_computed_tokens, "num_computed_tokens")
        if self.max_model_len is not None and num_computed_tokens > self.max_model_len:
            raise ValueError(
                f"num_computed_tokens: expected at most max_model_len={self.max_model_len}, got {num_computed_tokens}"
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
    def prepare(self, req_ids, num_scheduled_tokens, *, num_computed_tokens=None) -> torch.Tensor:
        """Positions of each request's next tokens, in the given order, as a
        (3, sum) view of the device buffer; advances every request.

        `num_scheduled_tokens` (and `num_computed_tokens`) are aligned with
        `req_ids`: lists, tuples, 1-D integer arrays or tensors.
        `num_computed_tokens`, when given, is the scheduler's count of each
        request's computed tokens: positions start there and the tracker's
        counters follow (num_computed + scheduled), so rejected draft tokens
        and preemptions need no `rollback`. Without it, each request goes on
        from the tracker's own counter.

        A step that repeats the previous step's ids (the usual decode step)
        reuses their slots without looking them up again."""
        kind = type(req_ids)
        if kind is list or kind is tuple:
            n = len(req_ids)
            if req_ids == self._last_req_ids:  # a list never equals a tuple
                slots = self._last_slots
            else:
                slots = self._map_ids(req_ids, n)
        elif kind is np.ndarray and req_ids.ndim == 1:
            n = req_ids.shape[0]
            slots = self._map_ids(req_ids, n)
        else:  # sets and dicts have no batch order
            raise TypeError(f"req_ids: expected a list, tuple or 1-D array of request ids, got {kind.__name__}")
        counts = self._index_array(num_scheduled_tokens, "num_scheduled_tokens", self._batch_counts)
        if num_computed_tokens is None:
            computed = _NOT_GIVEN[_INT64]
        else:
            computed = self._index_array(num_computed_tokens, "num_computed_tokens", self._batch_computed)
            if computed.shape[0] != n:
                raise ValueError(
                    f"num_computed_tokens: expected one count per request id ({n}), got {computed.shape[0]}"
                )
        return self._step(slots, counts, computed, req_ids)

    def _map_ids(self, req_ids, n: int) -> np.ndarray:
        if n > self.max_num_reqs:
            raise ValueError(f"req_ids: expected at most max_num_reqs={self.max_num_reqs} requests, got {n}")
        try:
            # itemgetter looks all ids up in one C call (25% faster than map)
            found = operator.itemgetter(*req_ids)(self._slot_of) if n > 1 else [self._slot_of[r] for r in req_ids]
        except KeyError as exc:
            raise KeyError(f"req_ids: expected tracked request ids, got unknown id {exc.args[0]!r}") from None
        except TypeError:
            raise TypeError("req_ids: expected a sequence of hashable request ids") from None
        self._last_req_ids = None  # until _batch_slots holds these ids' slots
        slots = self._batch_slots[:n]
        if not (MARSHAL_INTS and n > 1 and read_int_records(marshal.dumps(found, 2), slots) < 0):
            slots[:] = found
        if type(req_ids) is not np.ndarray:
            # a list is copied (callers may change theirs); a tuple cannot change
            self._last_req_ids = list(req_ids) if type(req_ids) is list else req_ids
            self._last_slots = slots
        return slots

    def _index_array(self, value, name: str, buffer: np.ndarray) -> np.ndarray:
        """Slots or counts as a 1-D int64 array for the step kernel: an int64
        array the kernel can take is passed as is; anything else is converted
        into `buffer` (the tracker's own, so nothing is allocated for a list
        of ints or an integer array) or refused, naming `name`."""
        kind = type(value)
        if kind is list or kind is tuple:
            n = len(value)
            if n > buffer.shape[0]:
                raise ValueError(f"{name}: expected at most max_num_reqs={self.max_num_reqs} entries, got {n}")
            if MARSHAL_INTS:
                # One C pass records each element's exact type, so bools and
                # floats are told from ints without a Python-level scan; the
                # kernel decodes plain ints and stops at anything else.
                try:
                    data = marshal.dumps(value, 2)
                except ValueError:  # numpy scalars and other objects marshal cannot write
                    data = None
                if data is not None:
                    held = self._held.get(name)
                    if held is not None and held[0] == data:
                        return held[1]  # the buffer already holds exactly these ints
                    out = buffer[:n]
                    if read_int_records(data, out) < 0:
                        self._held[name] = (data, out)
                        return out
            self._held.pop(name, None)
            out = buffer[:n]
            out[:] = as_int_array(value, name, 1, "(num_reqs,)")  # the checked path: precise errors
            return out
        if kind is torch.Tensor:
            if value.dtype == torch.bool or value.is_floating_point() or value.is_complex():
                raise TypeError(f"{name}: expected an integer tensor, got dtype {value.dtype}")
            value = value.detach().cpu().numpy()
            kind = np.ndarray
        if kind is np.ndarray and value.ndim == 1 and value.dtype.kind in "iu":
            if value.dtype is _INT64 and value.flags.carray:  # C-contiguous, aligned, writable
                return value
            n = value.shape[0]
            if n > buffer.shape[0]:
                raise ValueError(f"{name}: expected at most max_num_reqs={self.max_num_reqs} entries, got {n}")
            if value.dtype.kind == "u" and value.dtype.itemsize == 8 and n and value.max() > np.iinfo(np.int64).max:
                raise ValueError(f"{name}: expected values below 2**63, got {value.max()}")
            self._held.pop(name, None)
            out = buffer[:n]
            np.copyto(out, value, casting="unsafe")  # every value fits: int64 holds all but the checked uint64
            return out
        return as_int_array(value, name, 1, "(num_reqs,)")  # raises for every other form

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
                    computed = _NOT_GIVEN.get(dtype)
                elif type(num_computed_tokens) is np.ndarray and num_computed_tokens.dtype is dtype:
                    computed = num_computed_tokens
                else:
                    computed = None
                if computed is not None:
                    buffers = self.buffers
                    try:
                        if num_computed_tokens is not None and len(computed) != len(slots):
                            raise TypeError  # (the checked path below names the argument)
                        total = self._kernel(
                            buffers.acquire(),
                            slots,
                            num_scheduled_tokens,
                            computed,
                            self.slot_state,
                            self.pool_rows,
                            self.pool_scales,
                            self._params,
                        )
                    except TypeError:
                        pass  # read-only, strided or not 1-D: the kernel takes no such array; converted below
                    else:
                        if total < 0:
                            raise self._step_error(-total, slots, num_scheduled_tokens, computed, None)
                        return buffers.publish(total)
        slots = self._index_array(slots, "slots", self._slot_args)
        counts = self._index_array(num_scheduled_tokens, "num_scheduled_tokens", self._batch_counts)
        if num_computed_tokens is None:
            computed = _NOT_GIVEN[_INT64]
        else:
            computed = self._index_array(num_computed_tokens, "num_computed_tokens", self._batch_computed)
            if computed.shape[0] != slots.shape[0]:
                raise ValueError(
                    f"num_computed_tokens: expected one count per slot ({slots.shape[0]}), got {computed.shape[0]}"
                )
        return self._step(slots, counts, computed, None)

    def _step(self, slots: np.ndarray, counts: np.ndarray, computed: np.ndarray, req_ids) -> torch.Tensor:
        buffers = self.buffers
        total = self._kernel(
            buffers.acquire(), slots, counts, computed, self.slot_state, self.pool_rows, self.pool_scales, self._params
        )
        if total < 0:
            raise self._step_error(-total, slots, counts, computed, req_ids)
        return buffers.publish(total)

    def _step_error(self, code, slots, counts, computed, req_ids) -> Exception:
        n = len(slots)
        if code == K.STEP_ERR_COUNTS_LENGTH:
            per = "request id" if req_ids is not None else "slot"
            return ValueError(f"num_scheduled_tokens: expected one count per {per} ({n}), got {len(counts)}")
        if code == K.STEP_ERR_TOO_MANY_REQS:
            return ValueError(f"slots: expected at most max_num_reqs={self.max_num_reqs} requests, got {n}")
        b = int(self._params[K.P_ERR_INDEX])
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
        if code == K.STEP_ERR_COMPUTED_NEGATIVE:
            return ValueError(f"num_computed_tokens[{b}]: expected a count >= 0 for {who}, got {int(computed[b])}")
        if code == K.STEP_ERR_COMPUTED_LIMIT:
            limit = f"max_model_len={self.max_model_len}" if self.max_model_len is not None else f"{_INDEX_LIMIT}"
            return ValueError(f"num_computed_tokens[{b}]: expected at most {limit} for {who}, got {int(computed[b])}")
        done = int(computed[b]) if computed.shape[0] else int(self.slot_state[slots[b], K.F_NUM_COMPUTED])
        if code == K.STEP_ERR_POSITION_LIMIT:
            return ValueError(
                f"num_scheduled_tokens[{b}]: {who} would reach position "
                f"{done + count - 1 + int(self.slot_state[slots[b], K.F_DELTA])}, "
                f"past the largest {self.dtype} value {self._max_position}"
            )
        if code == K.STEP_ERR_MODEL_LEN:
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
        # what the step path reuses without looking again: the last ids' slots, the lists the buffers hold
        if self._last_req_ids is not None:
            assert [self._slot_of[r] for r in self._last_req_ids] == self._last_slots.tolist()
        for data, view in self._held.values():
            assert list(marshal.loads(data)) == view.tolist()
