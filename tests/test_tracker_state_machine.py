"""PositionTracker as a hypothesis state machine against a plain-Python model built on the reference.

The model keeps, per request, the reference positions of its prompt, its
delta, its slot and how many tokens it has computed. A step's expected output
is, over the batch in order, ``ref[:, c:min(c + n, L)]`` followed by
``arange(max(c, L), c + n) + delta`` on all rows. Small capacities make
capacity errors, layout-pool compaction and growth, and max_model_len common.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test
from strategies import configs, examples, prompts

from mrope_tracker import PromptLayout, reference
from mrope_tracker.kernels import tracker_step as K
from mrope_tracker.tracker import PositionTracker

# Each machine runs twice: a few short programs in the default run, so the model check is never left out, and
# its full examples(...) count of 60-step programs under -m slow.
QUICK = dict(max_examples=examples(20, minimum=4), stateful_step_count=25)

MAX_NUM_REQS = 4
MAX_NUM_BATCHED_TOKENS = 64
LAYOUT_ROWS = 2
MAX_MODEL_LEN = 256


class ModelRequest:
    """What the model knows of one request."""

    def __init__(self, positions: np.ndarray, delta: int, computed: int, slot: int):
        self.positions = positions
        self.delta = delta
        self.computed = computed
        self.slot = slot

    @property
    def length(self) -> int:
        return self.positions.shape[1]

    def expected(self, count: int) -> np.ndarray:
        c, length = self.computed, self.length
        after = np.arange(max(c, length), c + count, dtype=np.int64) + self.delta
        return np.concatenate(
            [self.positions[:, c : min(c + count, length)], np.broadcast_to(after, (3, after.size))], axis=1
        )


class TrackerMachine(RuleBasedStateMachine):
    """Random admissions, steps, rollbacks, removals and bad calls."""

    @initialize(config=configs(), dtype=st.sampled_from([torch.int64, torch.int32]), staging=st.booleans())
    def setup(self, config, dtype, staging):
        self.config = config
        self.tracker = PositionTracker(
            config,
            max_num_reqs=MAX_NUM_REQS,
            max_num_batched_tokens=MAX_NUM_BATCHED_TOKENS,
            max_model_len=MAX_MODEL_LEN,
            layout_rows=LAYOUT_ROWS,
            dtype=dtype,
            staging=staging,
            num_staging_buffers=2,
        )
        self.requests: dict[int, ModelRequest] = {}
        self.next_id = 0
        self.last_ids: list[int] = []
        self.last_counts: list[int] = []

    # ------------------------------------------------------------------ helpers
    def live_ids(self) -> list[int]:
        return sorted(self.requests)

    def row_starts(self) -> dict:
        """First layout row of each live slot (only to label compactions)."""
        return {req.slot: self.tracker.slot_state[req.slot, K.F_ROW_START] for req in self.requests.values()}

    def draw_batch(self, data):
        """A random subset of live requests in random order, with counts the step can take."""
        ids = data.draw(st.permutations(self.live_ids()))
        ids = ids[: data.draw(st.one_of(st.just(len(ids)), st.integers(0, len(ids))))]
        return ids, self.draw_counts(data, ids)

    def fits(self, ids, counts) -> bool:
        """Whether a step with these ids and counts is valid now."""
        return sum(counts) <= MAX_NUM_BATCHED_TOKENS and all(
            self.requests[rid].computed + n <= MAX_MODEL_LEN for rid, n in zip(ids, counts)
        )

    def draw_counts(self, data, ids) -> list[int]:
        counts, room = [], MAX_NUM_BATCHED_TOKENS
        for rid in ids:
            req = self.requests[rid]
            cap = min(room, MAX_MODEL_LEN - req.computed)
            to_end = req.length - req.computed
            choices = [st.integers(0, cap), st.just(cap)]
            if 0 <= to_end <= cap:
                choices.append(st.just(to_end))  # finish the prompt exactly
            if 0 <= to_end < cap:
                choices.append(st.integers(to_end + 1, cap))  # cross the prompt end
            n = data.draw(st.one_of(choices))
            counts.append(n)
            room -= n
        return counts

    def expected_step(self, ids, counts) -> np.ndarray:
        parts = [self.requests[rid].expected(n) for rid, n in zip(ids, counts)]
        return np.concatenate(parts, axis=1) if parts else np.zeros((3, 0), np.int64)

    def check_step(self, out, ids, counts) -> None:
        expected = self.expected_step(ids, counts)
        assert out.dtype == self.tracker.dtype
        assert out.untyped_storage().data_ptr() == self.tracker.positions.untyped_storage().data_ptr()
        if out.numel():  # torch reports data_ptr() 0 for an empty view
            assert out.data_ptr() == self.tracker.positions.data_ptr()
        assert tuple(out.shape) == expected.shape
        np.testing.assert_array_equal(out.numpy().astype(np.int64), expected)
        for rid, n in zip(ids, counts):
            self.requests[rid].computed += n

    def expect_rejected(self, exc, match, call) -> None:
        """The call raises `exc` with a message matching `match` (the invariants then check nothing changed)."""
        with pytest.raises(exc, match=match):
            call()

    # ------------------------------------------------------------------ rules
    @rule(data=st.data(), form=st.sampled_from(["tokens", "ranges", "layout"]))
    def add_request(self, data, form):
        prompt = data.draw(prompts(self.config, max_items=3, max_text=10))
        cached = data.draw(
            st.one_of(
                st.just(0),
                st.just(prompt.num_tokens),
                st.integers(0, prompt.num_tokens),
                st.integers(prompt.num_tokens, max(prompt.num_tokens, MAX_MODEL_LEN)),
            )
        )  # resumed
        rid = self.next_id
        self.next_id += 1
        if len(self.requests) == MAX_NUM_REQS:
            self.expect_rejected(ValueError, "req_id", lambda: prompt_add(self.tracker, rid, prompt, form, cached))
            return
        if prompt.num_tokens > MAX_MODEL_LEN:
            event("add: prompt longer than max_model_len")
            self.expect_rejected(
                ValueError, "max_model_len", lambda: prompt_add(self.tracker, rid, prompt, form, cached)
            )
            return
        pool_size, starts = self.tracker.pool_rows.shape[0], self.row_starts()
        slot = prompt_add(self.tracker, rid, prompt, form, cached)
        event("add: pool grew" if self.tracker.pool_rows.shape[0] > pool_size else "add: pool kept its size")
        if starts != {s: self.tracker.slot_state[s, K.F_ROW_START] for s in starts}:
            event("add: pool compacted")
        positions, delta = reference.prompt_positions(self.config, prompt.token_ids, **prompt.kwargs())
        assert slot not in {req.slot for req in self.requests.values()}
        self.requests[rid] = ModelRequest(positions.numpy(), int(delta), cached, slot)

    @rule(data=st.data(), as_array=st.booleans(), as_tuple=st.booleans())
    def prepare(self, data, as_array, as_tuple):
        ids, counts = self.draw_batch(data)
        event(f"step: {len(ids)} requests")
        self.last_ids, self.last_counts = list(ids), list(counts)
        out = self.tracker.prepare(
            tuple(ids) if as_tuple else ids, np.array(counts, dtype=np.int64) if as_array else counts
        )
        self.check_step(out, ids, counts)

    @rule(data=st.data(), same_counts=st.booleans())
    def repeat_step(self, data, same_counts):
        """The previous prepare's ids again (a decode step), with its counts when they still fit."""
        ids = [rid for rid in self.last_ids if rid in self.requests]
        if not ids or ids != self.last_ids:
            return
        counts = list(self.last_counts)
        if not (same_counts and self.fits(ids, counts)):
            counts = self.draw_counts(data, ids)
        event("repeat step: same counts" if counts == self.last_counts else "repeat step: new counts")
        self.last_counts = list(counts)
        out = self.tracker.prepare(list(ids), counts)
        self.check_step(out, ids, counts)

    @rule(data=st.data())
    def prepare_slots(self, data):
        ids, counts = self.draw_batch(data)
        slots = np.array([self.requests[rid].slot for rid in ids], dtype=np.int64)
        out = self.tracker.prepare_slots(slots, np.array(counts, dtype=np.int64))
        self.check_step(out, ids, counts)

    @rule(data=st.data())
    def rollback(self, data):
        if not self.requests:
            return
        rid = data.draw(st.sampled_from(self.live_ids()))
        req = self.requests[rid]
        amount = data.draw(st.one_of(st.integers(0, req.computed), st.just(req.computed)))
        self.tracker.rollback(rid, amount)
        req.computed -= amount

    @rule(data=st.data())
    def remove_request(self, data):
        if not self.requests:
            return
        rid = data.draw(st.sampled_from(self.live_ids()))
        self.tracker.remove_request(rid)
        del self.requests[rid]

    @rule(data=st.data())
    def bad_step(self, data):
        """A step with one bad entry anywhere in an otherwise valid batch (often the previous step's batch)."""
        repeat = self.last_ids and all(rid in self.requests for rid in self.last_ids) and data.draw(st.booleans())
        if repeat:
            ids, counts = list(self.last_ids), list(self.last_counts)
        else:
            ids, counts = self.draw_batch(data)
        kinds = ["unknown_id", "count_mismatch", "negative_count", "too_many_tokens"]
        if ids:
            kinds += ["duplicate_id", "past_max_model_len", "float_count", "bool_count"]
        kind = data.draw(st.sampled_from(kinds))
        if kind not in ("float_count", "bool_count") and not self.fits(ids, counts):
            counts = self.draw_counts(data, ids)  # (a wrongly typed count is rejected before any count is checked)
        if kind in ("float_count", "bool_count"):
            # a valid step, then the same ids with one count of equal value but the wrong type
            pick = data.draw(st.integers(0, len(ids) - 1))
            if not self.fits(ids, counts):
                counts = self.draw_counts(data, ids)
            counts = list(counts)
            if kind == "bool_count":
                counts[pick] = min(counts[pick], 1)
            self.check_step(self.tracker.prepare(list(ids), list(counts)), ids, counts)
            self.last_ids, self.last_counts = list(ids), list(counts)
            counts[pick] = float(counts[pick]) if kind == "float_count" else bool(counts[pick])
            event(f"bad step: {kind}")
            if data.draw(st.booleans()):
                slots = np.array([self.requests[r].slot for r in ids], np.int64)
                self.expect_rejected(
                    TypeError, "num_scheduled_tokens", lambda: self.tracker.prepare_slots(slots, counts)
                )
            else:
                self.expect_rejected(TypeError, "num_scheduled_tokens", lambda: self.tracker.prepare(list(ids), counts))
            return
        event(f"bad step: {kind}")
        where = data.draw(st.integers(0, len(ids)))
        by_slots = data.draw(st.booleans())
        ids, counts = list(ids), list(counts)
        exc, match = ValueError, "num_scheduled_tokens"
        if kind == "unknown_id":
            ids.insert(where, -1)  # never an id (ids count up from 0)
            counts.insert(where, 1)
            exc, match = (KeyError, r"slots\[") if by_slots else (KeyError, "req_ids")
        elif kind == "count_mismatch":
            counts.append(1)
        elif kind == "negative_count":
            ids.insert(where, None)
            counts.insert(where, -data.draw(st.integers(1, 5)))
        elif kind == "too_many_tokens":
            ids.insert(where, None)
            # the running total passes the limit exactly at this entry
            counts.insert(where, MAX_NUM_BATCHED_TOKENS - sum(counts[:where]) + data.draw(st.integers(1, 5)))
            match = "max_num_batched_tokens"
        elif kind == "duplicate_id":
            pick = data.draw(st.integers(0, len(ids) - 1))
            ids.insert(max(where, pick + 1), ids[pick])
            counts.insert(max(where, pick + 1), 0)
            match = r"slots\[" if by_slots else r"req_ids\["
        else:  # past_max_model_len: give one entry more tokens than it has room for
            pick = data.draw(st.integers(0, len(ids) - 1))
            over = MAX_MODEL_LEN - self.requests[ids[pick]].computed + 1
            if over > MAX_NUM_BATCHED_TOKENS:
                event("bad step: past_max_model_len out of reach")
                return
            counts = [0] * len(ids)
            counts[pick] = over
            match = "max_model_len"
        if kind in ("negative_count", "too_many_tokens"):
            # the bad entry is a live request not already in the batch, or no step at all
            spare = [rid for rid in self.live_ids() if rid not in ids]
            if not spare:
                return
            ids[where] = data.draw(st.sampled_from(spare))
        if len(ids) > MAX_NUM_REQS:
            match = "slots|req_ids" if kind != "count_mismatch" else "num_scheduled_tokens|req_ids|slots"
            exc = ValueError
        if by_slots:
            slots = np.array([self.requests[r].slot if r in self.requests else MAX_NUM_REQS + 3 for r in ids], np.int64)
            if kind == "unknown_id" and len(ids) <= MAX_NUM_REQS:
                # a free slot when there is one (KeyError), else an out-of-range one (ValueError)
                free = sorted(set(range(MAX_NUM_REQS)) - {req.slot for req in self.requests.values()})
                slots[where] = free[0] if free else MAX_NUM_REQS + 3
                exc = KeyError if free else ValueError
            self.expect_rejected(exc, match, lambda: self.tracker.prepare_slots(slots, np.array(counts, np.int64)))
        else:
            self.expect_rejected(exc, match, lambda: self.tracker.prepare(ids, counts))

    @rule(data=st.data())
    def bad_admission(self, data):
        """Duplicate ids, cached counts beyond max_model_len, or no free slot."""
        prompt = data.draw(prompts(self.config, max_items=2, max_text=6))
        form = data.draw(st.sampled_from(["tokens", "ranges", "layout"]))
        if self.requests and data.draw(st.booleans()):
            rid = data.draw(st.sampled_from(self.live_ids()))
            self.expect_rejected(ValueError, "req_id", lambda: prompt_add(self.tracker, rid, prompt, form, 0))
        elif len(self.requests) == MAX_NUM_REQS:
            self.expect_rejected(ValueError, "req_id", lambda: prompt_add(self.tracker, -2, prompt, form, 0))
        else:
            cached = MAX_MODEL_LEN + data.draw(st.integers(1, 3))
            match = "num_computed_tokens" if prompt.num_tokens <= MAX_MODEL_LEN else "max_model_len"
            self.expect_rejected(ValueError, match, lambda: prompt_add(self.tracker, -2, prompt, form, cached))

    @rule(data=st.data())
    def bad_rollback_or_remove(self, data):
        if self.requests and data.draw(st.booleans()):
            rid = data.draw(st.sampled_from(self.live_ids()))
            extra = data.draw(st.integers(1, 3))
            self.expect_rejected(
                ValueError, "num_tokens", lambda: self.tracker.rollback(rid, self.requests[rid].computed + extra)
            )
        elif data.draw(st.booleans()):
            self.expect_rejected(KeyError, "req_id", lambda: self.tracker.rollback(-1, 0))
        else:
            self.expect_rejected(KeyError, "req_id", lambda: self.tracker.remove_request(-1))

    # ------------------------------------------------------------------ invariants
    @invariant()
    def consistent(self):
        if not hasattr(self, "tracker"):
            return
        tracker = self.tracker
        tracker.check_invariants()
        assert len(tracker) == len(self.requests)
        assert -1 not in tracker and -2 not in tracker
        for rid, req in self.requests.items():
            assert rid in tracker
            assert tracker.slot(rid) == req.slot
            assert tracker.num_computed_tokens(rid) == req.computed
            assert tracker.prompt_len(rid) == req.length
            assert tracker.mrope_position_delta(rid) == req.delta


def prompt_add(tracker, rid, prompt, form, cached) -> int:
    if form == "tokens":
        return tracker.add_request(rid, prompt.token_ids, num_computed_tokens=cached, **prompt.kwargs())
    if form == "ranges":
        return tracker.add_request_from_ranges(
            rid, prompt.num_tokens, num_computed_tokens=cached, **prompt.range_kwargs()
        )
    layout = PromptLayout.from_ranges(prompt.config, prompt.num_tokens, **prompt.range_kwargs())
    return tracker.add_request_layout(rid, layout, num_computed_tokens=cached)


def test_tracker_machine_quick():
    """A few short random programs of the tracker machine (the default run)."""
    run_state_machine_as_test(TrackerMachine, settings=settings(TrackerMachine.TestCase.settings, **QUICK))


@pytest.mark.slow
def test_tracker_state_machine():
    """The tracker machine at length: examples(200) programs of 60 steps."""
    full = settings(TrackerMachine.TestCase.settings, max_examples=examples(200), stateful_step_count=60)
    run_state_machine_as_test(TrackerMachine, settings=full)


# --- the scheduler as the source of truth --------------------------------------------------------


def expected_positions(ref: np.ndarray, delta: int, start: int, count: int) -> np.ndarray:
    """Tokens [start, start + count): the prompt's reference positions, then index + delta on all rows."""
    length = ref.shape[1]
    after = np.arange(max(start, length), start + count, dtype=np.int64) + delta
    return np.concatenate([ref[:, start : min(start + count, length)], np.broadcast_to(after, (3, after.size))], axis=1)


class ScheduledRequest:
    """One request as the scheduler sees it, and what the tracker's counter must read."""

    def __init__(self, prompt, positions: np.ndarray, delta: int, slot: int, computed: int, known: int):
        self.prompt = prompt
        self.positions = positions
        self.delta = delta
        self.slot = slot
        self.computed = computed  # the scheduler's num_computed_tokens
        self.counter = computed  # the tracker's: the last step's num_computed + scheduled
        self.known = known  # tokens the request has (prompt + accepted outputs): a resumption may cache them all


class SchedulerMachine(RuleBasedStateMachine):
    """A tracker driven only by the scheduler's num_computed_tokens, never by rollback: chunked prefill,
    decode, speculative steps whose drafts are partly rejected (the next step's num_computed is below the
    tracker's counter), preemption back to a cache hit or to zero, eviction and resumption with cached
    generated tokens (admission with num_computed_tokens past the prompt)."""

    @initialize(config=configs(), dtype=st.sampled_from([torch.int64, torch.int32]), staging=st.booleans())
    def setup(self, config, dtype, staging):
        self.config = config
        self.tracker = PositionTracker(
            config,
            max_num_reqs=MAX_NUM_REQS,
            max_num_batched_tokens=MAX_NUM_BATCHED_TOKENS,
            max_model_len=MAX_MODEL_LEN,
            layout_rows=LAYOUT_ROWS,
            dtype=dtype,
            staging=staging,
        )
        self.running: dict[int, ScheduledRequest] = {}
        self.evicted: dict[int, ScheduledRequest] = {}
        self.next_id = 0

    def admit_prompt(self, rid: int, prompt, form: str, cached: int) -> ScheduledRequest:
        slot = prompt_add(self.tracker, rid, prompt, form, cached)
        positions, delta = reference.prompt_positions(self.config, prompt.token_ids, **prompt.kwargs())
        return ScheduledRequest(prompt, positions.numpy(), int(delta), slot, cached, max(cached, prompt.num_tokens))

    def draw_step(self, data):
        """A batch of running requests with counts a scheduler could give them, and their num_computed_tokens."""
        ids = data.draw(st.permutations(sorted(self.running)))
        ids = ids[: data.draw(st.integers(0, len(ids)))]
        counts, room = [], MAX_NUM_BATCHED_TOKENS
        for rid in ids:
            req = self.running[rid]
            cap = min(room, MAX_MODEL_LEN - req.computed)
            left = req.positions.shape[1] - req.computed
            if left > 0:  # chunked prefill: often to the prompt's end, else a chunk, or across the end
                n = data.draw(
                    st.one_of(
                        st.just(min(cap, left)),
                        st.just(min(cap, left)),
                        st.integers(0, min(cap, left)),
                        st.integers(0, cap),
                    )
                )
            else:  # one decode token, or one plus up to three drafts
                n = min(cap, data.draw(st.sampled_from([1, 1, 2, 3, 4])))
            counts.append(n)
            room -= n
        return ids, counts, [self.running[rid].computed for rid in ids]

    def call(self, ids, counts, computed, entry: str, form: str):
        """The step through `entry`, its index arguments in `form`."""

        def as_form(values):
            if form in ("int32", "int64"):
                return np.array(values, np.dtype(form))
            return tuple(values) if form == "tuple" else list(values)

        if entry == "prepare":
            return self.tracker.prepare(
                as_form(ids) if form == "tuple" else list(ids), as_form(counts), num_computed_tokens=as_form(computed)
            )
        slots = [self.running[rid].slot if rid in self.running else MAX_NUM_REQS + 1 for rid in ids]
        return self.tracker.prepare_slots(as_form(slots), as_form(counts), as_form(computed))

    @rule(data=st.data(), form=st.sampled_from(["tokens", "ranges", "layout"]))
    def admit(self, data, form):
        if len(self.running) == MAX_NUM_REQS:
            return
        prompt = data.draw(prompts(self.config, max_items=3, max_text=10))
        if prompt.num_tokens > MAX_MODEL_LEN:
            return
        cached = data.draw(st.one_of(st.just(0), st.integers(0, prompt.num_tokens)))
        self.running[self.next_id] = self.admit_prompt(self.next_id, prompt, form, cached)
        self.next_id += 1

    @rule(
        data=st.data(),
        entry=st.sampled_from(["prepare", "prepare_slots"]),
        form=st.sampled_from(["list", "tuple", "int32", "int64"]),
    )
    def step(self, data, entry, form):
        self.run_step(data, *self.draw_step(data), entry, form)

    @rule(data=st.data(), entry=st.sampled_from(["prepare", "prepare_slots"]), form=st.sampled_from(["list", "int32"]))
    def speculative_step(self, data, entry, form):
        """Every request past its prompt gets one token plus up to three drafts (the others a prefill chunk)."""
        ids, counts, computed = self.draw_step(data)
        for k, rid in enumerate(ids):
            req = self.running[rid]
            if req.computed >= req.positions.shape[1]:
                counts[k] = min(MAX_MODEL_LEN - req.computed, data.draw(st.integers(2, 4)))
        if sum(counts) <= MAX_NUM_BATCHED_TOKENS:
            self.run_step(data, ids, counts, computed, entry, form)

    def run_step(self, data, ids, counts, computed, entry, form):
        out = self.call(ids, counts, computed, entry, form)
        parts = [
            expected_positions(self.running[r].positions, self.running[r].delta, c, n)
            for r, n, c in zip(ids, counts, computed)
        ]
        expected = np.concatenate(parts, axis=1) if parts else np.zeros((3, 0), np.int64)
        assert out.dtype == self.tracker.dtype and tuple(out.shape) == expected.shape
        np.testing.assert_array_equal(out.numpy().astype(np.int64), expected)
        for rid, n in zip(ids, counts):
            req = self.running[rid]
            req.counter = req.computed + n
            # the scheduler accepts the step; a speculative step may lose some drafts
            rejected = data.draw(st.integers(0, n - 1)) if n > 1 and req.computed >= req.positions.shape[1] else 0
            if rejected:
                event("step: drafts rejected")
            req.computed += n - rejected
            req.known = max(req.known, req.computed)

    @rule(data=st.data())
    def preempt(self, data):
        """The scheduler drops a request's computed tokens back to a cache hit or to zero; the tracker is not told."""
        if not self.running:
            return
        req = self.running[data.draw(st.sampled_from(sorted(self.running)))]
        req.computed = data.draw(st.one_of(st.just(0), st.integers(0, req.computed)))

    @rule(data=st.data())
    def evict(self, data):
        """A preempted request leaves the batch (and the tracker) until it resumes."""
        if not self.running:
            return
        rid = data.draw(st.sampled_from(sorted(self.running)))
        self.tracker.remove_request(rid)
        self.evicted[rid] = self.running.pop(rid)

    @rule(data=st.data(), form=st.sampled_from(["tokens", "ranges", "layout"]))
    def resume(self, data, form):
        """An evicted request comes back with a cached prefix that may include its generated tokens."""
        if not self.evicted or len(self.running) == MAX_NUM_REQS:
            return
        rid = data.draw(st.sampled_from(sorted(self.evicted)))
        old = self.evicted.pop(rid)
        cached = data.draw(st.one_of(st.just(old.known), st.integers(0, old.known)))
        if cached > old.prompt.num_tokens:
            event("resume: cached generated tokens")
        req = self.admit_prompt(rid, old.prompt, form, cached)
        req.known = old.known
        self.running[rid] = req

    @rule(data=st.data())
    def finish(self, data):
        if not self.running:
            return
        rid = data.draw(st.sampled_from(sorted(self.running)))
        self.tracker.remove_request(rid)
        del self.running[rid]

    @rule(
        data=st.data(),
        entry=st.sampled_from(["prepare", "prepare_slots"]),
        form=st.sampled_from(["list", "int32", "int64"]),
    )
    def bad_computed(self, data, entry, form):
        """A step with one bad num_computed_tokens entry is refused naming it, and changes no counter."""
        ids, counts, computed = self.draw_step(data)
        if not ids:
            return
        pick = data.draw(st.integers(0, len(ids) - 1))
        kind = data.draw(st.sampled_from(["negative", "past_max_model_len", "end_past_max_model_len", "missing"]))
        exc, match = ValueError, rf"num_computed_tokens\[{pick}\]"
        if kind == "negative":
            computed[pick] = -data.draw(st.integers(1, 3))
        elif kind == "past_max_model_len":
            computed[pick] = MAX_MODEL_LEN + data.draw(st.integers(1, 3))
        elif kind == "end_past_max_model_len":
            counts[pick] = max(counts[pick], 1)
            if sum(counts) > MAX_NUM_BATCHED_TOKENS:
                return
            computed[pick] = MAX_MODEL_LEN - counts[pick] + 1
            match = rf"num_scheduled_tokens\[{pick}\].*max_model_len"
        else:
            del computed[pick]
            match = "num_computed_tokens"
        event(f"bad computed: {kind}")
        with pytest.raises(exc, match=match):
            self.call(ids, counts, computed, entry, form)

    @invariant()
    def consistent(self):
        if not hasattr(self, "tracker"):
            return
        tracker = self.tracker
        tracker.check_invariants()
        assert len(tracker) == len(self.running)
        for rid, req in self.running.items():
            assert tracker.slot(rid) == req.slot
            assert tracker.num_computed_tokens(rid) == req.counter
            assert tracker.prompt_len(rid) == req.positions.shape[1]
            assert tracker.mrope_position_delta(rid) == req.delta
        for rid in self.evicted:
            assert rid not in tracker


def test_scheduler_machine_quick():
    """A few short random programs of the scheduler machine (the default run)."""
    run_state_machine_as_test(SchedulerMachine, settings=settings(SchedulerMachine.TestCase.settings, **QUICK))


@pytest.mark.slow
def test_scheduler_state_machine():
    """The scheduler machine at length: examples(150) programs of 60 steps."""
    full = settings(SchedulerMachine.TestCase.settings, max_examples=examples(150), stateful_step_count=60)
    run_state_machine_as_test(SchedulerMachine, settings=full)
