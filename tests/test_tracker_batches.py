"""PositionTracker batches and lifecycle: the order of a step's requests, the accepted forms of its arguments,
slots and the layout pool under churn, the int32 dtype, CPU staging and max_model_len."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from spec_cases import qwen2_5_vl, qwen2_vl
from tracker_cases import (
    CASES,
    FORMS,
    as_numpy,
    assert_positions,
    batch_cases,
    by_name,
    expected_step,
    make_tracker,
    vl25_items,
    vl_image,
    vl_images,
    vl_text,
    vl_video,
)

from mrope_tracker import PromptLayout
from mrope_tracker.tracker import PositionTracker

# --- batches --------------------------------------------------------------------------


def test_batch_order_respected():
    """Each request's positions appear in the order the step lists the requests, with its own counts."""
    cases = batch_cases()
    refs = {rid: case.reference() for rid, case in cases.items()}
    tracker = make_tracker(qwen2_vl())
    for rid, case in cases.items():
        case.add(tracker, rid)
    computed = dict.fromkeys(cases, 0)
    for order, counts in (
        (["c", "a", "d", "b"], [5, 3, 0, 2]),
        (["b", "d", "a", "c"], [7, 9, 10, 11]),
        (["d", "c"], [12, 1]),
        (["a", "b", "c", "d"], [1, 1, 1, 1]),
    ):
        out = as_numpy(tracker.prepare(order, counts))
        expected = [expected_step(*refs[rid], computed[rid], n) for rid, n in zip(order, counts)]
        np.testing.assert_array_equal(out, np.concatenate(expected, axis=1))
        for rid, n in zip(order, counts):
            computed[rid] += n
            assert tracker.num_computed_tokens(rid) == computed[rid]


def test_prepare_slots_equals_prepare():
    """prepare_slots with the requests' slots gives the same positions and counters as prepare."""
    cases = batch_cases()
    by_id, by_slot = make_tracker(qwen2_vl()), make_tracker(qwen2_vl())
    for rid, case in cases.items():
        case.add(by_id, rid)
        case.add(by_slot, rid)
    for order, counts in (
        (["b", "a", "c", "d"], [4, 6, 5, 8]),
        (["d", "a"], [20, 6]),
        (["c", "b", "a", "d"], [9, 6, 1, 1]),
    ):
        expected = as_numpy(by_id.prepare(order, counts))
        slots = np.array([by_slot.slot(rid) for rid in order], dtype=np.int64)
        got = as_numpy(by_slot.prepare_slots(slots, np.array(counts, dtype=np.int64)))
        np.testing.assert_array_equal(got, expected)
        assert [by_slot.num_computed_tokens(r) for r in cases] == [by_id.num_computed_tokens(r) for r in cases]


def test_prepare_accepts_count_forms():
    """Counts as a list, an int32 array, numpy scalars or a tensor give the same positions."""
    case = vl_image()
    ref, delta = case.reference()
    forms = [[3], np.array([3], np.int32), [np.int64(3)], torch.tensor([3])]
    for counts in forms:
        tracker = make_tracker(case.config)
        case.add(tracker, "r", num_computed_tokens=2)
        assert_positions(tracker.prepare(["r"], counts), expected_step(ref, delta, 2, 3))


@pytest.mark.parametrize("form", ["list", "tuple", "numpy", "list_again", "numpy_after_list"])
def test_prepare_accepts_id_sequences(form):
    """Ids as a list, tuple or numpy array give the same positions, also when repeating the previous step's ids."""
    cases = {0: vl_image(), 1: vl_video(), 2: vl_text(5)}
    expected_tracker, tracker = make_tracker(qwen2_vl()), make_tracker(qwen2_vl())
    for t in (expected_tracker, tracker):
        for rid, case in cases.items():
            case.add(t, rid)
    order = [2, 0, 1]
    as_form = {"list": list, "tuple": tuple, "numpy": np.array, "list_again": list, "numpy_after_list": np.array}[form]
    for step in range(3):
        expected = as_numpy(expected_tracker.prepare(order, [3, 2, 1]))
        ids = list(order) if form == "numpy_after_list" and step == 0 else as_form(order)
        np.testing.assert_array_equal(as_numpy(tracker.prepare(ids, [3, 2, 1])), expected)
    assert [tracker.num_computed_tokens(r) for r in cases] == [6, 3, 9]


def test_prepare_after_caller_mutates_its_lists():
    """Mutating the id and count lists after a step does not change what the next step with the new contents does."""
    cases = {"a": vl_image(), "b": vl_video()}
    expected_tracker, tracker = make_tracker(qwen2_vl()), make_tracker(qwen2_vl())
    for t in (expected_tracker, tracker):
        for rid, case in cases.items():
            case.add(t, rid)
    ids, counts = ["a", "b"], [2, 3]
    tracker.prepare(ids, counts)
    expected_tracker.prepare(["a", "b"], [2, 3])
    ids.reverse()
    counts[0] = 5
    np.testing.assert_array_equal(
        as_numpy(tracker.prepare(ids, counts)), as_numpy(expected_tracker.prepare(["b", "a"], [5, 3]))
    )


@pytest.mark.parametrize("form", FORMS[1:])
@pytest.mark.parametrize("computed", [0, 5])
def test_other_admission_forms_equal_add_request(form, computed):
    """add_request_from_ranges and add_request_layout serve the same positions, delta and counters as add_request."""
    for case in CASES:
        plain, other = make_tracker(case.config), make_tracker(case.config)
        case.add(plain, "r", "tokens", computed)
        case.add(other, "r", form, computed)
        assert other.mrope_position_delta("r") == plain.mrope_position_delta("r")
        assert other.prompt_len("r") == plain.prompt_len("r") == case.num_tokens
        for n in (3, 7, case.num_tokens):
            np.testing.assert_array_equal(as_numpy(other.prepare(["r"], [n])), as_numpy(plain.prepare(["r"], [n])))
        assert other.num_computed_tokens("r") == plain.num_computed_tokens("r")


# --- lifecycle, pool ---------------------------------------------------------------------


def test_remove_and_readd_reuses_slot():
    """A removed request's slot goes to the next admission; others keep their slots and progress."""
    a, b, c = vl_image(), vl_video(), vl_images(2)
    tracker = make_tracker(qwen2_vl(), max_num_reqs=2)
    slot_a, slot_b = a.add(tracker, "a"), b.add(tracker, "b")
    assert slot_a != slot_b and {slot_a, slot_b} == {0, 1}
    assert tracker.slot("a") == slot_a and len(tracker) == 2 and "a" in tracker
    tracker.prepare(["a", "b"], [4, 5])
    tracker.remove_request("a")
    assert "a" not in tracker and len(tracker) == 1
    with pytest.raises(KeyError, match="req_id"):
        tracker.slot("a")
    assert c.add(tracker, "c") == slot_a and tracker.slot("b") == slot_b
    ref_b, delta_b = b.reference()
    ref_c, delta_c = c.reference()
    out = as_numpy(tracker.prepare(["c", "b"], [6, 3]))
    expected = np.concatenate([expected_step(ref_c, delta_c, 0, 6), expected_step(ref_b, delta_b, 5, 3)], axis=1)
    np.testing.assert_array_equal(out, expected)
    # the same id can come back after removal
    tracker.remove_request("b")
    assert a.add(tracker, "b") == slot_b and tracker.num_computed_tokens("b") == 0
    ref_a, delta_a = a.reference()
    assert_positions(tracker.prepare(["b"], [a.num_tokens]), ref_a)
    tracker.check_invariants()


def _check_all(tracker, live: dict, computed: dict, count: int = 2) -> None:
    """Advance every live request by `count` tokens in one step and compare with the reference."""
    order = sorted(live)
    out = as_numpy(tracker.prepare(order, [count] * len(order)))
    expected = [expected_step(*live[rid], computed[rid], count) for rid in order]
    np.testing.assert_array_equal(out, np.concatenate(expected, axis=1) if expected else np.zeros((3, 0), np.int64))
    for rid in order:
        computed[rid] += count
    tracker.check_invariants()


def test_layout_pool_compaction_without_growth():
    """When rows fit only after closing a removed request's hole, the pool is compacted, not grown, and live
    requests stay correct."""
    tracker = make_tracker(qwen2_5_vl(), max_num_reqs=8, layout_rows=1)
    cases = {"a": vl25_items(3), "b": vl25_items(6), "c": vl25_items(4)}
    live, computed = {}, {}
    for rid, case in cases.items():
        case.add(tracker, rid)
        live[rid], computed[rid] = case.reference(), 0
        _check_all(tracker, live, computed)
    capacity = tracker.pool_rows.shape[0]
    used = sum(PromptLayout.from_tokens(case.config, case.ids, **case.kwargs).num_rows for case in cases.values())
    hole = PromptLayout.from_tokens(cases["b"].config, cases["b"].ids, **cases["b"].kwargs).num_rows
    tracker.remove_request("b")
    del live["b"], computed["b"]
    # pick a request too big for the free top but small enough for top + hole
    candidates = [vl25_items(k) for k in range(1, 12)]
    rows = [PromptLayout.from_tokens(c.config, c.ids, **c.kwargs).num_rows for c in candidates]
    fits = [c for c, n in zip(candidates, rows) if capacity - used < n <= capacity - used + hole]
    assert fits, (capacity, used, hole)
    fits[-1].add(tracker, "d")
    live["d"], computed["d"] = fits[-1].reference(), 0
    assert tracker.pool_rows.shape[0] == capacity
    for _ in range(4):
        _check_all(tracker, live, computed)


def test_layout_pool_growth_and_churn():
    """With layout_rows=1, many multimodal requests added and removed in turn all keep reference positions."""
    tracker = make_tracker(qwen2_5_vl(), max_num_reqs=5, max_num_batched_tokens=128, layout_rows=1)
    live, computed, next_id = {}, {}, 0
    rng = np.random.default_rng(0)
    for round_ in range(30):
        if len(live) == 5 or (live and rng.random() < 0.4):
            victim = sorted(live)[rng.integers(len(live))]
            tracker.remove_request(victim)
            del live[victim], computed[victim]
        else:
            case = vl25_items(int(rng.integers(1, 9)), text=int(rng.integers(1, 4)))
            cached = int(rng.integers(0, 5))
            case.add(tracker, next_id, FORMS[round_ % 4], cached)
            live[next_id], computed[next_id] = case.reference(), cached
            next_id += 1
        assert len(tracker) == len(live)
        _check_all(tracker, live, computed, count=3)
    assert tracker.pool_rows.shape[0] > 1


def test_all_removed_then_readded():
    """Removing every request empties the tracker; new requests start clean."""
    case = vl_images(3)
    tracker = make_tracker(qwen2_vl(), layout_rows=1)
    for rid in range(4):
        case.add(tracker, rid)
    tracker.prepare([0, 1, 2, 3], [5, 5, 5, 5])
    for rid in range(4):
        tracker.remove_request(rid)
    assert len(tracker) == 0
    tracker.check_invariants()
    ref, _ = case.reference()
    case.add(tracker, "x")
    assert tracker.num_computed_tokens("x") == 0
    assert_positions(tracker.prepare(["x"], [case.num_tokens]), ref)


# --- dtype, staging, max_model_len ------------------------------------------------------------


@by_name
def test_int32_dtype(case):
    """dtype=torch.int32 returns int32 positions equal to the int64 ones."""
    ref, delta = case.reference()
    tracker = make_tracker(case.config, dtype=torch.int32)
    case.add(tracker, "r")
    assert tracker.positions.dtype == torch.int32
    out = tracker.prepare(["r"], [case.num_tokens + 3])
    assert out.dtype == torch.int32
    assert_positions(out, expected_step(ref, delta, 0, case.num_tokens + 3))


@pytest.mark.parametrize("num_staging_buffers", [1, 2, 3])
def test_cpu_staging_matches_direct(num_staging_buffers):
    """staging=True on the CPU gives the same positions through the host ring, rotating one buffer per step."""
    cases = batch_cases()
    direct = make_tracker(qwen2_vl())
    staged = make_tracker(qwen2_vl(), staging=True, num_staging_buffers=num_staging_buffers)
    for rid, case in cases.items():
        case.add(direct, rid)
        case.add(staged, rid)
    host = staged.buffers.host_buffers()
    assert len(host) == num_staging_buffers
    assert all(buf.data_ptr() != staged.positions.data_ptr() for buf in host)
    schedule = [
        (["a", "b", "c", "d"], [6, 5, 4, 3]),
        (["d", "c"], [11, 13]),
        (["b", "a"], [4, 10]),
        (["a", "b", "c", "d"], [1, 1, 1, 1]),
        (["c"], [20]),
        (["d", "a"], [2, 2]),
        (["b"], [1]),
    ]
    for step, (order, counts) in enumerate(schedule):
        expected = as_numpy(direct.prepare(order, counts))
        out = staged.prepare(order, counts)
        assert out.data_ptr() == staged.positions.data_ptr()
        np.testing.assert_array_equal(as_numpy(out), expected)
        # this step was written into ring buffer step % num_staging_buffers
        np.testing.assert_array_equal(host[step % num_staging_buffers].numpy()[:, : out.shape[1]], expected)
    assert staged.nbytes()["host_staging"] == num_staging_buffers * staged.positions.numel() * 8
    assert direct.nbytes()["host_staging"] == 0


@pytest.mark.parametrize("copy_mode", ["rows", "span"])
def test_cpu_staging_copy_modes(copy_mode):
    """Both staging copies (three row copies, or one span) give the direct tracker's positions; only rows scale
    with the step."""
    cases = batch_cases()
    direct, staged = make_tracker(qwen2_vl()), make_tracker(qwen2_vl(), staging=True, num_staging_buffers=2)
    staged.buffers.copy_mode = copy_mode
    for rid, case in cases.items():
        case.add(direct, rid)
        case.add(staged, rid)
    for order, counts in (
        (["a", "b", "c", "d"], [6, 5, 4, 3]),
        (["d", "c"], [11, 13]),
        (["b"], [0]),
        (["a", "b"], [1, 1]),
    ):
        np.testing.assert_array_equal(as_numpy(staged.prepare(order, counts)), as_numpy(direct.prepare(order, counts)))
    width = staged.positions.shape[1]
    assert staged.buffers.copy_nbytes(5) == (3 * 5 if copy_mode == "rows" else 2 * width + 5) * 8
    assert direct.buffers.copy_nbytes(5) == 0


def test_cpu_staging_rejected_step_keeps_ring():
    """A rejected staged step leaves the ring and the next result as if it never happened."""
    case = vl_video()
    direct = make_tracker(case.config)
    staged = make_tracker(case.config, staging=True, num_staging_buffers=2)
    for t in (direct, staged):
        case.add(t, "r")
        t.prepare(["r"], [3])
    with pytest.raises(ValueError, match="num_scheduled_tokens"):
        staged.prepare(["r"], [-1])
    for n in (4, 5, 6):
        np.testing.assert_array_equal(as_numpy(staged.prepare(["r"], [n])), as_numpy(direct.prepare(["r"], [n])))


def test_max_model_len_reached_exactly():
    """A step may take a request exactly to max_model_len; one more token is rejected and changes nothing."""
    case = vl_image()
    ref, delta = case.reference()
    tracker = make_tracker(case.config, max_model_len=case.num_tokens + 4)
    case.add(tracker, "r")
    assert_positions(tracker.prepare(["r"], [case.num_tokens + 4]), expected_step(ref, delta, 0, case.num_tokens + 4))
    with pytest.raises(ValueError, match="max_model_len"):
        tracker.prepare(["r"], [1])
    assert tracker.num_computed_tokens("r") == case.num_tokens + 4
    assert tuple(tracker.prepare(["r"], [0]).shape) == (3, 0)
    tracker.rollback("r", 2)
    assert_positions(tracker.prepare(["r"], [2]), expected_step(ref, delta, case.num_tokens + 2, 2))


def test_cached_prefix_beyond_max_model_len_is_consistent():
    """A cached prefix longer than max_model_len is either rejected unchanged or leaves the tracker consistent."""
    case = vl_image()
    tracker = make_tracker(case.config, max_model_len=5)
    try:
        case.add(tracker, "r", num_computed_tokens=case.num_tokens)
    except ValueError as exc:
        assert "num_computed_tokens" in str(exc) or "max_model_len" in str(exc)
        assert len(tracker) == 0
    tracker.check_invariants()


# --- argument forms -----------------------------------------------------------------------------


def _form(values: list[int], form: str):
    """`values` as one of the accepted argument forms."""
    if form == "list":
        return list(values)
    if form == "tuple":
        return tuple(values)
    if form == "numpy_scalars":
        return [np.int64(v) for v in values]
    if form == "strided":
        return np.repeat(np.array(values, np.int64), 2)[::2]
    if form == "readonly":
        arr = np.array(values, np.int64)
        arr.flags.writeable = False
        return arr
    if form.startswith("tensor"):
        return torch.tensor(values, dtype=getattr(torch, form.split("_")[1]))
    return np.array(values, np.dtype(form))


ARG_FORMS = [
    "list",
    "tuple",
    "int64",
    "int32",
    "int16",
    "uint32",
    "uint64",
    "numpy_scalars",
    "strided",
    "readonly",
    "tensor_int64",
    "tensor_int32",
]


def _forms_tracker() -> PositionTracker:
    tracker = make_tracker(qwen2_vl(), max_num_reqs=5, max_num_batched_tokens=128, max_model_len=200)
    for rid, case in batch_cases().items():
        case.add(tracker, rid)
    tracker.prepare(["a", "b", "c", "d"], [3, 2, 0, 5])
    return tracker


@given(
    data=st.data(),
    slots_form=st.sampled_from(ARG_FORMS),
    counts_form=st.sampled_from(ARG_FORMS),
    computed_form=st.sampled_from([None, *ARG_FORMS]),
    ids_form=st.sampled_from(["list", "tuple", "numpy"]),
)
def test_argument_forms_agree(data, slots_form, counts_form, computed_form, ids_form):
    """Every accepted form of slots, ids, counts and computed counts gives the int64-array step's positions and
    counters."""
    order = data.draw(st.permutations("abcd"))[: data.draw(st.integers(0, 4))]
    counts = [data.draw(st.integers(0, 20)) for _ in order]
    computed = [data.draw(st.integers(0, 60)) for _ in order] if computed_form else None
    trackers = [_forms_tracker() for _ in range(3)]
    reference_tracker, by_slots, by_ids = trackers
    slots = [reference_tracker.slot(rid) for rid in order]
    want = as_numpy(
        reference_tracker.prepare_slots(
            np.array(slots, np.int64),
            np.array(counts, np.int64),
            None if computed is None else np.array(computed, np.int64),
        )
    )
    got = by_slots.prepare_slots(
        _form(slots, slots_form),
        _form(counts, counts_form),
        None if computed is None else _form(computed, computed_form),
    )
    np.testing.assert_array_equal(as_numpy(got), want)
    ids = {"list": list, "tuple": tuple, "numpy": np.array}[ids_form](order)
    kwargs = {} if computed is None else {"num_computed_tokens": _form(computed, computed_form)}
    np.testing.assert_array_equal(as_numpy(by_ids.prepare(ids, _form(counts, counts_form), **kwargs)), want)
    for tracker in (by_slots, by_ids):
        assert [tracker.num_computed_tokens(r) for r in "abcd"] == [
            reference_tracker.num_computed_tokens(r) for r in "abcd"
        ]
