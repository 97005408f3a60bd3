"""PositionTracker steps against the torch reference: prefill in one step or in chunks, prefix-cache hits,
decode, speculative steps and rollback, preemption, and the scheduler's num_computed_tokens driving them."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from spec_cases import qwen2_vl
from tracker_cases import (
    FORMS,
    as_numpy,
    assert_positions,
    batch_cases,
    by_name,
    chunks_from_splits,
    expected_step,
    make_tracker,
    run_steps,
    vl_image,
)

# --- prefill, cache hits, decode ------------------------------------------------------


@by_name
@pytest.mark.parametrize("form", FORMS)
def test_prefill_in_one_step(case, form):
    """A whole prompt in one step equals the reference; delta, prompt_len and computed agree."""
    ref, delta = case.reference()
    tracker = make_tracker(case.config)
    case.add(tracker, "r", form)
    assert tracker.num_computed_tokens("r") == 0 and tracker.prompt_len("r") == case.num_tokens
    assert tracker.mrope_position_delta("r") == delta
    assert_positions(tracker.prepare(["r"], [case.num_tokens]), ref)
    assert tracker.num_computed_tokens("r") == case.num_tokens
    tracker.check_invariants()


@by_name
def test_prefill_chunks_split_inside_blocks(case):
    """Chunks that end one token into, half-way through and one token before the end of each block concatenate to
    the reference."""
    ref, _ = case.reference()
    splits = [s for off, n in case.blocks for s in (off + 1, off + n // 2, off + n - 1)]
    counts = chunks_from_splits(case.num_tokens, splits)
    assert len(counts) >= 3 * len(case.blocks)
    tracker = make_tracker(case.config)
    case.add(tracker, "r")
    np.testing.assert_array_equal(run_steps(tracker, "r", counts), ref)


@by_name
@pytest.mark.parametrize("chunk", [1, 2, 3, 5])
def test_prefill_fixed_size_chunks(case, chunk):
    """Fixed-size chunks (the last one crossing the prompt end) equal the reference then index + delta."""
    ref, delta = case.reference()
    steps = -(-case.num_tokens // chunk) + 1
    tracker = make_tracker(case.config)
    case.add(tracker, "r")
    got = run_steps(tracker, "r", [chunk] * steps)
    np.testing.assert_array_equal(got, expected_step(ref, delta, 0, chunk * steps))


@by_name
@pytest.mark.parametrize("form", FORMS)
def test_prefix_cache_hit_inside_block(case, form):
    """A cached prefix ending inside the first block: the rest of the prompt starts at the cut."""
    ref, delta = case.reference()
    off, n = case.blocks[0]
    cached = off + n // 2
    tracker = make_tracker(case.config)
    case.add(tracker, "r", form, num_computed_tokens=cached)
    assert tracker.num_computed_tokens("r") == cached
    count = case.num_tokens - cached + 2
    assert_positions(tracker.prepare(["r"], [count]), expected_step(ref, delta, cached, count))


@by_name
@pytest.mark.parametrize("form", FORMS)
def test_prefix_cache_hit_whole_prompt(case, form):
    """num_computed_tokens == prompt length: a 0-token step is empty and decode starts at L + delta."""
    ref, delta = case.reference()
    length = case.num_tokens
    tracker = make_tracker(case.config)
    case.add(tracker, "r", form, num_computed_tokens=length)
    assert tracker.num_computed_tokens("r") == length
    assert tuple(tracker.prepare(["r"], [0]).shape) == (3, 0)
    assert_positions(tracker.prepare(["r"], [1]), np.full((3, 1), length + delta))
    assert tracker.num_computed_tokens("r") == length + 1


@by_name
def test_decode_after_prompt(case):
    """One-token steps after the prompt give index + delta on all three rows."""
    ref, delta = case.reference()
    length = case.num_tokens
    tracker = make_tracker(case.config)
    case.add(tracker, "r")
    tracker.prepare(["r"], [length])
    for index in range(length, length + 6):
        assert tracker.prepare(["r"], [1]).tolist() == [[index + delta]] * 3


def test_decode_delta_values():
    """Decode after T1 (L 12, delta -3) gives 9, 10, 11 (hand-checked)."""
    case = vl_image()
    tracker = make_tracker(case.config)
    case.add(tracker, "r")
    tracker.prepare(["r"], [12])
    assert tracker.mrope_position_delta("r") == -3
    assert tracker.prepare(["r"], [3]).tolist() == [[9, 10, 11]] * 3


@by_name
def test_chunk_crossing_prompt_end(case):
    """A step that starts two tokens before the prompt end and runs five past it."""
    ref, delta = case.reference()
    length = case.num_tokens
    tracker = make_tracker(case.config)
    case.add(tracker, "r", num_computed_tokens=length - 2)
    assert_positions(tracker.prepare(["r"], [7]), expected_step(ref, delta, length - 2, 7))


# --- speculative decoding, preemption ---------------------------------------------------


@by_name
def test_speculative_steps_then_rollback(case):
    """Steps of 1 + 3 draft tokens, rolling back the rejected drafts, continue from the accepted tokens."""
    ref, delta = case.reference()
    tracker = make_tracker(case.config)
    case.add(tracker, "r")
    tracker.prepare(["r"], [case.num_tokens])
    computed = case.num_tokens
    for rejected in (3, 0, 2, 1, 3):
        assert_positions(tracker.prepare(["r"], [4]), expected_step(ref, delta, computed, 4))
        tracker.rollback("r", rejected)
        computed += 4 - rejected
        assert tracker.num_computed_tokens("r") == computed


@by_name
def test_rollback_inside_prompt(case):
    """Rolling back into the prompt (inside a block) re-serves the same prompt positions."""
    ref, delta = case.reference()
    off, n = case.blocks[-1]
    tracker = make_tracker(case.config)
    case.add(tracker, "r")
    tracker.prepare(["r"], [off + n - 1])
    tracker.rollback("r", n // 2 + 1)
    start = off + n - 1 - (n // 2 + 1)
    assert tracker.num_computed_tokens("r") == start
    count = case.num_tokens - start + 1
    assert_positions(tracker.prepare(["r"], [count]), expected_step(ref, delta, start, count))


@by_name
@pytest.mark.parametrize("keep", ["zero", "hit"])
def test_preemption_then_recompute(case, keep):
    """Preempted mid-decode back to zero or to a prefix-cache hit, the recomputation equals the first pass."""
    ref, delta = case.reference()
    length = case.num_tokens
    tracker = make_tracker(case.config)
    case.add(tracker, "r")
    first = run_steps(tracker, "r", [5, length - 5 + 4])
    hit = 0 if keep == "zero" else case.blocks[0][0] + 1
    tracker.rollback("r", tracker.num_computed_tokens("r") - hit)
    assert tracker.num_computed_tokens("r") == hit
    again = run_steps(tracker, "r", [3, length + 4 - hit - 3, 1])
    np.testing.assert_array_equal(again[:, : length + 4 - hit], first[:, hit:])
    np.testing.assert_array_equal(again, expected_step(ref, delta, hit, length + 5 - hit))


# --- the scheduler's num_computed_tokens -------------------------------------------------------


# (num_computed_tokens, num_scheduled_tokens) per step, relative to the prompt length L: chunked
# prefill, 4-token speculative steps whose next num_computed shows rejections (lower than the
# counter), preemption to a cache hit and to zero, then a jump forward (a resumed request).
def _scheduler_plan(length: int) -> list[tuple[int, int]]:
    half = length // 2
    return [
        (0, half),
        (half, length - half + 4),
        (length + 1, 4),
        (length + 3, 4),
        (length + 7, 1),
        (3, 2),
        (0, length + 1),
        (length + 1, 1),
        (length + 20, 3),
        (length + 2, 0),
        (length + 2, 1),
    ]


@by_name
@pytest.mark.parametrize("entry", ["prepare", "prepare_slots"])
def test_num_computed_tokens_drives_positions(case, entry):
    """Given the scheduler's num_computed_tokens, each step starts there and the counter becomes computed +
    scheduled."""
    ref, delta = case.reference()
    tracker = make_tracker(case.config)
    case.add(tracker, "r")
    for computed, count in _scheduler_plan(case.num_tokens):
        if entry == "prepare":
            out = tracker.prepare(["r"], [count], num_computed_tokens=[computed])
        else:
            out = tracker.prepare_slots(np.array([tracker.slot("r")]), np.array([count]), np.array([computed]))
        assert_positions(out, expected_step(ref, delta, computed, count))
        assert tracker.num_computed_tokens("r") == computed + count


@by_name
def test_num_computed_tokens_equals_rollback(case):
    """Driving a tracker by num_computed_tokens gives the same positions as driving a twin by rollback."""
    by_count, by_rollback = make_tracker(case.config), make_tracker(case.config)
    case.add(by_count, "r")
    case.add(by_rollback, "r")
    for computed, count in _scheduler_plan(case.num_tokens):
        counter = by_rollback.num_computed_tokens("r")
        if computed <= counter:
            by_rollback.rollback("r", counter - computed)
        else:  # a jump forward: tokens the scheduler computed elsewhere (a resumed request's cache)
            by_rollback.prepare(["r"], [computed - counter])
        expected = as_numpy(by_rollback.prepare(["r"], [count]))
        np.testing.assert_array_equal(
            as_numpy(by_count.prepare(["r"], [count], num_computed_tokens=[computed])), expected
        )


def test_num_computed_tokens_in_a_batch():
    """In one batch, each request starts at its own num_computed_tokens; requests not in the step keep their
    counters."""
    cases = batch_cases()
    refs = {rid: case.reference() for rid, case in cases.items()}
    tracker = make_tracker(qwen2_vl(), max_num_batched_tokens=128)
    for rid, case in cases.items():
        case.add(tracker, rid)
    tracker.prepare(["a", "b", "c", "d"], [5, 5, 5, 5])
    order, counts, computed = ["d", "b", "a"], [4, 1, 6], [2, 5 + 30, 0]
    out = as_numpy(tracker.prepare(order, counts, num_computed_tokens=computed))
    expected = [expected_step(*refs[rid], c, n) for rid, n, c in zip(order, counts, computed)]
    np.testing.assert_array_equal(out, np.concatenate(expected, axis=1))
    assert [tracker.num_computed_tokens(rid) for rid in "abcd"] == [6, 36, 5, 6]


@by_name
@pytest.mark.parametrize("form", FORMS)
def test_resumed_request_admitted_past_its_prompt(case, form):
    """A request admitted with num_computed_tokens past its prompt (cached generated tokens) decodes at index +
    delta."""
    ref, delta = case.reference()
    computed = case.num_tokens + 9
    tracker = make_tracker(case.config, max_model_len=computed + 3)
    case.add(tracker, "r", form, num_computed_tokens=computed)
    assert tracker.num_computed_tokens("r") == computed
    assert tracker.mrope_position_delta("r") == delta
    assert_positions(tracker.prepare(["r"], [3]), expected_step(ref, delta, computed, 3))
    # a rollback into the prompt still finds the prompt's layout
    tracker.rollback("r", computed + 3 - 2)
    assert_positions(tracker.prepare(["r"], [4]), expected_step(ref, delta, 2, 4))


def test_num_computed_tokens_past_int32():
    """num_computed_tokens past 2**31 (lists fall back to the checked conversion) gives index + delta in an int64
    tracker."""
    case = vl_image()
    ref, delta = case.reference()
    tracker = make_tracker(case.config)
    case.add(tracker, "r")
    start = 2**40 + 3
    for computed in ([start], (start,), np.array([start]), torch.tensor([start])):
        assert_positions(tracker.prepare(["r"], [2], num_computed_tokens=computed), expected_step(ref, delta, start, 2))
    assert tracker.num_computed_tokens("r") == start + 2
