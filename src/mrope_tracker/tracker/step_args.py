"""A step's arguments as the step kernel takes them: request ids mapped to slots,
counts as 1-D integer arrays.

The kernel takes C-contiguous, writable int64 (or, from `prepare_slots`,
int32) arrays. An argument already in that form goes as it is; anything else
(lists, tuples, tensors, other dtypes, strided or read-only arrays) is
converted into one of `StepArgs`' own buffers, so a step allocates nothing.
Two caches spare the usual decode step its Python work: the previous step's
request ids with their slots, and per argument the marshal bytes of the
list its buffer holds.
"""

from __future__ import annotations

import marshal
import operator

import numpy as np
import torch

from ..core.inputs import as_int_array, check_fits_int64, tensor_values
from ..kernels.records import MARSHAL_INTS, read_int_records

__all__ = ["StepArgs", "NOT_GIVEN", "INT64"]

INT64 = np.dtype(np.int64)
INT32 = np.dtype(np.int32)
# "num_computed_tokens not given", one per index dtype the step kernel takes
NOT_GIVEN = {INT64: np.zeros(0, np.int64), INT32: np.zeros(0, np.int32)}


class StepArgs:
    """Conversion buffers ([max_num_reqs] int64 each) and the caches over them.

    - ``batch_slots``: `prepare`'s slots of ``last_req_ids``;
    - ``slot_args``: `prepare_slots`'s converted slots;
    - ``counts``, ``computed``: converted num_scheduled_tokens, num_computed_tokens;
    - ``last_req_ids``: the previous `prepare`'s ids once mapped (a list copy,
      or the tuple itself), None when unknown; ``last_slots`` their slots, a
      view of ``batch_slots``;
    - ``held``: by argument name, the marshal bytes of the list its buffer
      holds and the view of the buffer that holds it.
    """

    def __init__(self, max_num_reqs: int) -> None:
        self.max_num_reqs = max_num_reqs
        self.batch_slots = np.zeros(max_num_reqs, np.int64)
        self.slot_args = np.zeros(max_num_reqs, np.int64)
        self.counts = np.zeros(max_num_reqs, np.int64)
        self.computed = np.zeros(max_num_reqs, np.int64)
        self.last_req_ids: list | tuple | None = None
        self.last_slots = self.batch_slots[:0]
        self.held: dict[str, tuple[bytes, np.ndarray]] = {}

    @staticmethod
    def tracks(req_id, slot_of: dict) -> bool:
        """`req_id in slot_of`, an unhashable id named (`PositionTracker.__contains__`)."""
        try:
            return req_id in slot_of
        except TypeError:
            raise TypeError(f"req_id: expected a hashable request id, got {type(req_id).__name__}") from None

    def repeats(self, req_ids) -> bool:
        """Whether `req_ids` (a list or tuple) are the previous step's ids (a list never equals a tuple);
        ids that cannot be compared (arrays among them) are not: `map_ids` names them."""
        try:
            return req_ids == self.last_req_ids
        except (ValueError, TypeError):
            return False

    def map_ids(self, req_ids, n: int, slot_of: dict) -> np.ndarray:
        """The slots of `req_ids` (a list, tuple or 1-D array of `n` ids) in
        ``batch_slots``; a list or tuple is remembered as ``last_req_ids``."""
        if n > self.max_num_reqs:
            raise ValueError(f"req_ids: expected at most max_num_reqs={self.max_num_reqs} requests, got {n}")
        try:
            # itemgetter looks all ids up in one C call instead of a Python-level loop
            found = operator.itemgetter(*req_ids)(slot_of) if n > 1 else [slot_of[r] for r in req_ids]
        except KeyError as exc:
            raise KeyError(f"req_ids: expected tracked request ids, got unknown id {exc.args[0]!r}") from None
        except TypeError:
            raise TypeError("req_ids: expected a sequence of hashable request ids") from None
        self.last_req_ids = None  # until batch_slots holds these ids' slots
        slots = self.batch_slots[:n]
        if not (MARSHAL_INTS and n > 1 and read_int_records(marshal.dumps(found, 2), slots) < 0):
            slots[:] = found
        if type(req_ids) is not np.ndarray:
            # a list is copied (callers may change theirs); a tuple cannot change
            self.last_req_ids = list(req_ids) if type(req_ids) is list else req_ids
            self.last_slots = slots
        return slots

    def index_array(self, value, name: str, buffer: np.ndarray) -> np.ndarray:
        """Slots or counts as a 1-D int64 array for the step kernel: an int64
        array the kernel can take is passed as is; anything else is converted
        into `buffer` (one of ours, so nothing is allocated for a list of ints
        or an integer array) or refused, naming `name`."""
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
                    held = self.held.get(name)
                    if held is not None and held[0] == data:
                        return held[1]  # the buffer already holds exactly these ints
                    out = buffer[:n]
                    if read_int_records(data, out) < 0:
                        self.held[name] = (data, out)
                        return out
            self.held.pop(name, None)
            out = buffer[:n]
            out[:] = as_int_array(value, name, 1, "(num_reqs,)")  # the checked path: precise errors
            return out
        if kind is torch.Tensor:
            if value.dtype == torch.bool or value.is_floating_point() or value.is_complex():
                raise TypeError(f"{name}: expected an integer tensor, got dtype {value.dtype}")
            value = tensor_values(value, name)
            kind = np.ndarray
        if kind is np.ndarray and value.ndim == 1 and value.dtype.kind in "iu":
            if value.dtype is INT64 and value.flags.carray:  # C-contiguous, aligned, writable
                return value
            n = value.shape[0]
            if n > buffer.shape[0]:
                raise ValueError(f"{name}: expected at most max_num_reqs={self.max_num_reqs} entries, got {n}")
            check_fits_int64(value, name)
            self.held.pop(name, None)
            out = buffer[:n]
            np.copyto(out, value, casting="unsafe")  # every value fits: int64 holds all but the checked uint64
            return out
        return as_int_array(value, name, 1, "(num_reqs,)")  # raises for every other form

    def check_invariants(self, slot_of: dict) -> None:
        """Raise AssertionError if a cache disagrees with what it stands for."""
        if self.last_req_ids is not None:
            assert [slot_of[r] for r in self.last_req_ids] == self.last_slots.tolist()
        for data, view in self.held.values():
            assert list(marshal.loads(data)) == view.tolist()

    def nbytes(self) -> int:
        """What the step arguments' buffers take ("batch_args" in `PositionTracker.nbytes`)."""
        return self.batch_slots.nbytes + self.counts.nbytes
