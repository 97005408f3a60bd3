"""PositionTracker bad calls: each raises ValueError/TypeError naming its argument and leaves the tracker as
if the call never came (same requests, counters, slots and next step as an untouched twin)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from spec_cases import qwen2_vl
from tracker_cases import as_numpy, assert_positions, assert_same_state, make_tracker, populated, vl_image

from mrope_tracker import MRopeConfig, PromptLayout
from mrope_tracker.tracker import PositionTracker

# --- bad calls -------------------------------------------------------------------------------

_IMAGE = vl_image()
_LAYOUT = PromptLayout.from_tokens(_IMAGE.config, _IMAGE.ids, **_IMAGE.kwargs)


def _add(form, req_id="x", computed=0):
    return lambda t: _IMAGE.add(t, req_id, form, computed)


BAD_CALLS = {
    # admission
    "add_duplicate_id": ({}, _add("tokens", "a"), ValueError, "req_id"),
    "add_from_ranges_duplicate_id": ({}, _add("ranges", "b"), ValueError, "req_id"),
    "add_layout_duplicate_id": ({}, _add("layout_tokens", "c"), ValueError, "req_id"),
    "add_unhashable_id": ({}, _add("tokens", ["x"]), TypeError, "req_id"),
    "add_no_free_slot": ({"max_num_reqs": 3}, _add("tokens"), ValueError, "req_id"),
    "add_from_ranges_no_free_slot": ({"max_num_reqs": 3}, _add("ranges"), ValueError, "req_id"),
    "add_layout_no_free_slot": ({"max_num_reqs": 3}, _add("layout_ranges"), ValueError, "req_id"),
    # (populated() sets max_model_len=40; a cached count past the 12-token prompt but within it is a resumption)
    "add_cached_beyond_max_model_len": ({}, _add("tokens", computed=41), ValueError, "num_computed_tokens"),
    "add_from_ranges_cached_beyond_max_model_len": ({}, _add("ranges", computed=41), ValueError, "num_computed_tokens"),
    "add_layout_cached_beyond_max_model_len": (
        {},
        _add("layout_tokens", computed=41),
        ValueError,
        "num_computed_tokens",
    ),
    "add_cached_beyond_index_limit": (
        {"max_model_len": None},
        _add("tokens", computed=2**62 + 1),
        ValueError,
        "num_computed_tokens",
    ),
    "add_negative_cached": ({}, _add("tokens", computed=-1), ValueError, "num_computed_tokens"),
    "add_float_cached": ({}, _add("tokens", computed=2.0), TypeError, "num_computed_tokens"),
    "add_bad_items": (
        {},
        lambda t: t.add_request("x", _IMAGE.ids, image_grid_thw=[[1, 4, 4]]),
        ValueError,
        "token_ids",
    ),
    "add_empty_prompt": ({}, lambda t: t.add_request("x", []), ValueError, "token_ids"),
    "add_from_ranges_zero_tokens": ({}, lambda t: t.add_request_from_ranges("x", 0), ValueError, "num_tokens"),
    "add_from_ranges_range_out": (
        {},
        lambda t: t.add_request_from_ranges("x", 5, image_ranges=[[3, 6]], image_grid_thw=[[1, 4, 6]]),
        ValueError,
        "image_ranges",
    ),
    "add_prompt_beyond_max_model_len": ({}, lambda t: t.add_request("x", [7] * 41), ValueError, "max_model_len"),
    "add_from_ranges_beyond_max_model_len": (
        {},
        lambda t: t.add_request_from_ranges("x", 41),
        ValueError,
        "max_model_len",
    ),
    "add_layout_beyond_max_model_len": (
        {},
        lambda t: t.add_request_layout("x", PromptLayout.from_ranges(qwen2_vl(), 41)),
        ValueError,
        "max_model_len",
    ),
    "add_layout_not_a_layout": ({}, lambda t: t.add_request_layout("x", _IMAGE.ids), TypeError, "layout"),
    # steps by id
    "prepare_unknown_id": ({}, lambda t: t.prepare(["a", "b", "zz"], [1, 1, 1]), KeyError, "req_ids"),
    "prepare_unhashable_id": ({}, lambda t: t.prepare(["a", ["b"]], [1, 1]), TypeError, "req_ids"),
    "prepare_same_id_twice": ({}, lambda t: t.prepare(["a", "b", "a"], [1, 1, 1]), ValueError, r"req_ids\[2\]"),
    "prepare_count_mismatch": ({}, lambda t: t.prepare(["a", "b"], [1, 1, 1]), ValueError, "num_scheduled_tokens"),
    "prepare_negative_count": ({}, lambda t: t.prepare(["a", "b"], [2, -1]), ValueError, r"num_scheduled_tokens\[1\]"),
    "prepare_float_count": ({}, lambda t: t.prepare(["a", "b"], [2, 1.0]), TypeError, "num_scheduled_tokens"),
    "prepare_bool_count": ({}, lambda t: t.prepare(["a"], [True]), TypeError, "num_scheduled_tokens"),
    "prepare_meta_counts": (
        {},
        lambda t: t.prepare(["a"], torch.ones(1, dtype=torch.int64, device="meta")),
        TypeError,
        "num_scheduled_tokens",
    ),
    # the same ids and equal-comparing counts as the previous step
    "prepare_float_count_repeating_last_step": (
        {},
        lambda t: t.prepare(["c", "a"], [4.0, 1]),
        TypeError,
        "num_scheduled_tokens",
    ),
    "prepare_bool_count_repeating_last_step": (
        {},
        lambda t: t.prepare(["c", "a"], [4, True]),
        TypeError,
        "num_scheduled_tokens",
    ),
    "prepare_negative_count_repeating_last_step": (
        {},
        lambda t: t.prepare(["c", "a"], [4, -1]),
        ValueError,
        r"num_scheduled_tokens\[1\]",
    ),
    "prepare_count_mismatch_repeating_last_step": (
        {},
        lambda t: t.prepare(["c", "a"], [4]),
        ValueError,
        "num_scheduled_tokens",
    ),
    "prepare_too_many_tokens": (
        {},
        lambda t: t.prepare(["a", "b", "c"], [8, 8, 1]),
        ValueError,
        "max_num_batched_tokens",
    ),
    "prepare_too_many_requests": (
        {},
        lambda t: t.prepare(["a", "b", "c", "a", "b"], [1] * 5),
        ValueError,
        "req_ids.*max_num_reqs",
    ),
    "prepare_past_max_model_len": (
        {"max_num_batched_tokens": 64},
        lambda t: t.prepare(["a", "c"], [3, 37]),
        ValueError,
        "max_model_len",
    ),
    "prepare_ids_generator": ({}, lambda t: t.prepare((r for r in ["a", "b"]), [1, 1]), TypeError, "req_ids"),
    "prepare_uint64_count_beyond_int64": (
        {},
        lambda t: t.prepare(["a", "b"], np.array([2**64 - 1, 1], np.uint64)),
        ValueError,
        "num_scheduled_tokens",
    ),
    "prepare_2d_counts": (
        {},
        lambda t: t.prepare(["a", "b"], np.array([[1], [2]])),
        ValueError,
        "num_scheduled_tokens",
    ),
    "prepare_count_beyond_int64": (
        {},
        lambda t: t.prepare(["a"], [2**70]),
        (ValueError, TypeError),
        "num_scheduled_tokens",
    ),
    # steps by slot (slot 3 is free)
    "slots_free_slot": ({}, lambda t: t.prepare_slots(np.array([0, 3]), np.array([1, 1])), KeyError, r"slots\[1\]"),
    "slots_out_of_range": (
        {},
        lambda t: t.prepare_slots(np.array([0, 4]), np.array([1, 1])),
        ValueError,
        r"slots\[1\]",
    ),
    "slots_negative": ({}, lambda t: t.prepare_slots(np.array([0, -1]), np.array([1, 1])), ValueError, r"slots\[1\]"),
    "slots_same_slot_twice": (
        {},
        lambda t: t.prepare_slots(np.array([1, 0, 1]), np.array([1, 1, 1])),
        ValueError,
        r"slots\[2\]",
    ),
    "slots_length_mismatch": (
        {},
        lambda t: t.prepare_slots(np.array([0, 1]), np.array([1])),
        ValueError,
        "num_scheduled_tokens",
    ),
    "slots_negative_count": (
        {},
        lambda t: t.prepare_slots(np.array([0, 1]), np.array([1, -2])),
        ValueError,
        "num_scheduled_tokens",
    ),
    "slots_0d": (
        {},
        lambda t: t.prepare_slots(np.array(0), np.array(1)),
        (ValueError, TypeError),
        "slots|num_scheduled_tokens",
    ),
    "slots_2d": (
        {},
        lambda t: t.prepare_slots(np.array([[0, 1]]), np.array([[1, 1]])),
        (ValueError, TypeError),
        "slots|num_scheduled_tokens",
    ),
    "slots_float": ({}, lambda t: t.prepare_slots(np.array([0.0]), np.array([1])), TypeError, "slots"),
    "slots_too_many_tokens": (
        {},
        lambda t: t.prepare_slots(np.array([0, 1]), np.array([10, 7])),
        ValueError,
        "max_num_batched_tokens",
    ),
    "slots_too_many_requests": ({}, lambda t: t.prepare_slots(np.arange(5), np.ones(5, np.int64)), ValueError, "slots"),
    "slots_past_max_model_len": (
        {"max_num_batched_tokens": 64},
        lambda t: t.prepare_slots(np.array([1, 2]), np.array([1, 37])),
        ValueError,
        "max_model_len",
    ),
    # lifecycle
    "rollback_past_zero": ({}, lambda t: t.rollback("c", 5), ValueError, "num_tokens"),
    "rollback_negative": ({}, lambda t: t.rollback("a", -1), ValueError, "num_tokens"),
    "rollback_float": ({}, lambda t: t.rollback("a", 1.0), TypeError, "num_tokens"),
    "rollback_unknown_id": ({}, lambda t: t.rollback("zz", 0), KeyError, "req_id"),
    "remove_unknown_id": ({}, lambda t: t.remove_request("zz"), KeyError, "req_id"),
    "remove_unhashable_id": ({}, lambda t: t.remove_request(["a"]), TypeError, "req_id"),
    "num_computed_unknown_id": ({}, lambda t: t.num_computed_tokens("zz"), KeyError, "req_id"),
    "delta_unknown_id": ({}, lambda t: t.mrope_position_delta("zz"), KeyError, "req_id"),
    "prompt_len_unknown_id": ({}, lambda t: t.prompt_len("zz"), KeyError, "req_id"),
    "state_nbytes_unknown_id": ({}, lambda t: t.state_nbytes("zz"), KeyError, "req_id"),
}


@pytest.mark.parametrize("name", sorted(BAD_CALLS))
def test_bad_call_rejected_and_changes_nothing(name):
    """The bad call raises the documented exception naming the argument, and the tracker is as if it never came."""
    setup, call, exc, match = BAD_CALLS[name]
    tracker, twin = populated(**setup), populated(**setup)
    with pytest.raises(exc, match=match):
        call(tracker)
    assert_same_state(tracker, twin)


def test_rollback_of_fresh_request_rejected():
    """Rolling back a request that has computed nothing is a ValueError and leaves it at zero."""
    tracker = make_tracker(_IMAGE.config)
    _IMAGE.add(tracker, "x")
    with pytest.raises(ValueError, match="num_tokens"):
        tracker.rollback("x", 1)
    assert tracker.num_computed_tokens("x") == 0
    assert_positions(tracker.prepare(["x"], [_IMAGE.num_tokens]), _IMAGE.reference()[0])


def test_rejected_steps_then_same_ids_accepted():
    """After a step rejected for a duplicate id, the same ids are accepted in the next step."""
    tracker, twin = populated(), populated()
    with pytest.raises(ValueError, match="req_ids"):
        tracker.prepare(["a", "b", "a"], [1, 1, 1])
    with pytest.raises(ValueError, match="slots"):
        tracker.prepare_slots(np.array([tracker.slot("b"), tracker.slot("b")]), np.array([1, 1]))
    np.testing.assert_array_equal(
        as_numpy(tracker.prepare(["a", "b"], [2, 2])), as_numpy(twin.prepare(["a", "b"], [2, 2]))
    )
    assert_same_state(tracker, twin)


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"max_num_reqs": 0}, ValueError, "max_num_reqs"),
        ({"max_num_reqs": 2.0}, TypeError, "max_num_reqs"),
        ({"max_num_batched_tokens": 0}, ValueError, "max_num_batched_tokens"),
        ({"max_model_len": 0}, ValueError, "max_model_len"),
        ({"dtype": torch.float32}, ValueError, "dtype"),
        ({"device": "meta"}, ValueError, "device"),
        ({"device": "not a device"}, ValueError, "device"),
        ({"layout_rows": 0}, ValueError, "layout_rows"),
        ({"num_staging_buffers": 0}, ValueError, "num_staging_buffers"),
    ],
)
def test_bad_constructor_arguments(kwargs, exc, match):
    """Bad constructor arguments are rejected naming the argument."""
    with pytest.raises(exc, match=match):
        make_tracker(qwen2_vl(), **kwargs)


# --- limits found in review: int32 output, argument containers -------------------------


def test_int32_tracker_refuses_prompts_past_int32():
    """An int32 tracker refuses a prompt whose positions pass 2**31 - 1 (naming dtype), and changes nothing."""
    config = MRopeConfig(family="qwen2_5_vl", tokens_per_second=2)
    # tau(1) = float32(1 * 1.07e9) * 2 = 2.14e9 (both exact in float32) is a valid temporal index; 8M text
    # tokens before the video (a range-form prompt: O(items)) put its last frame at 2,148,000,000 > 2**31 - 1.
    num_tokens, video = 8_000_011, {"video_ranges": [[8_000_000, 8]], "video_grid_thw": [[2, 4, 4]]}
    tracker = PositionTracker(config, max_num_reqs=2, max_num_batched_tokens=64, dtype=torch.int32)
    with pytest.raises(ValueError, match="dtype"):
        tracker.add_request_from_ranges("r", num_tokens, **video, second_per_grid_ts=[1.07e9])
    assert len(tracker) == 0
    wide = PositionTracker(config, max_num_reqs=2, max_num_batched_tokens=64)
    wide.add_request_from_ranges("r", num_tokens, **video, second_per_grid_ts=[1.07e9])  # int64 holds it
    tracker.add_request_from_ranges("ok", num_tokens, **video, second_per_grid_ts=[1.0])
    assert len(tracker) == 1


def test_int32_tracker_refuses_decode_past_int32():
    """Decode positions (index + delta) past 2**31 - 1 are refused by an int32 tracker, and the step changes nothing."""
    config = MRopeConfig(family="qwen2_vl")
    tracker = PositionTracker(config, max_num_reqs=1, max_num_batched_tokens=8, dtype=torch.int32)
    tracker.add_request("r", [5, 6, 7])
    tracker.rollback("r", 0)
    tracker.slot_state[tracker.slot("r"), 1] = 2**31 - 3  # far into decode (white-box: no prompt that long fits here)
    assert tracker.prepare(["r"], [2]).tolist() == [[2**31 - 3, 2**31 - 2]] * 3
    with pytest.raises(ValueError, match=r"num_scheduled_tokens\[0\]"):
        tracker.prepare(["r"], [2])
    assert tracker.num_computed_tokens("r") == 2**31 - 1


@pytest.mark.parametrize(
    "ids, counts, match",
    [
        ({"a", "b"}, [1, 1], "req_ids"),
        ({"a": 1}, [1], "req_ids"),
        ("ab", [1, 1], "req_ids"),
        (["a"], 1, "num_scheduled_tokens"),
        (["a"], None, "num_scheduled_tokens"),
        (["a"], {1}, "num_scheduled_tokens"),
    ],
)
def test_prepare_refuses_unordered_or_scalar_arguments(ids, counts, match):
    """Sets, dicts, strings or scalars where prepare needs ordered sequences are a TypeError naming the argument."""
    tracker = PositionTracker(MRopeConfig(family="qwen2_vl"), max_num_reqs=2, max_num_batched_tokens=8)
    tracker.add_request("a", [1, 2])
    tracker.add_request("b", [1, 2])
    with pytest.raises(TypeError, match=match):
        tracker.prepare(ids, counts)
    assert tracker.num_computed_tokens("a") == 0


def test_staging_must_be_a_bool():
    """staging accepts True, False or None only."""
    with pytest.raises(TypeError, match="staging"):
        PositionTracker(MRopeConfig(family="qwen2_vl"), max_num_reqs=1, max_num_batched_tokens=8, staging="yes")


_SLOTS = np.array([1, 0], np.int64)  # the slots of "b" and "a" in populated()

BAD_FORMS = {
    # argument: (bad value, exception, message pattern); the other arguments are valid int64 arrays
    "counts_float_list": ("counts", [1, 2.0], TypeError, "num_scheduled_tokens"),
    "counts_bool_in_list": ("counts", [True, 1], TypeError, "num_scheduled_tokens"),
    "counts_bool_tuple": ("counts", (1, False), TypeError, "num_scheduled_tokens"),
    "counts_float_array": ("counts", np.array([1.0, 2.0]), TypeError, "num_scheduled_tokens"),
    "counts_bool_array": ("counts", np.array([True, True]), TypeError, "num_scheduled_tokens"),
    "counts_bool_tensor": ("counts", torch.tensor([True, True]), TypeError, "num_scheduled_tokens"),
    "counts_float_tensor": ("counts", torch.tensor([1.0, 1.0]), TypeError, "num_scheduled_tokens"),
    "counts_2d": ("counts", np.array([[1, 1]], np.int32), ValueError, "num_scheduled_tokens"),
    "counts_set": ("counts", {1, 2}, TypeError, "num_scheduled_tokens"),
    "counts_none": ("counts", None, TypeError, "num_scheduled_tokens"),
    "counts_str": ("counts", "11", TypeError, "num_scheduled_tokens"),
    "counts_beyond_int64": ("counts", [2**64, 1], (TypeError, ValueError), "num_scheduled_tokens"),
    "counts_too_short_int32": ("counts", np.array([1], np.int32), ValueError, "num_scheduled_tokens"),
    "counts_too_long_list": ("counts", [1, 1, 1], ValueError, "num_scheduled_tokens"),
    "counts_more_than_max_num_reqs": ("counts", [1] * 9, ValueError, "num_scheduled_tokens"),
    "counts_negative_int32": ("counts", np.array([1, -1], np.int32), ValueError, r"num_scheduled_tokens\[1\]"),
    "computed_float_list": ("computed", [1, 2.5], TypeError, "num_computed_tokens"),
    "computed_bool_list": ("computed", [3, True], TypeError, "num_computed_tokens"),
    "computed_float_array": ("computed", np.array([1.0, 2.0]), TypeError, "num_computed_tokens"),
    "computed_negative_list": ("computed", [3, -1], ValueError, r"num_computed_tokens\[1\]"),
    "computed_negative_int32": ("computed", np.array([-4, 1], np.int32), ValueError, r"num_computed_tokens\[0\]"),
    "computed_past_max_model_len": ("computed", [3, 41], ValueError, r"num_computed_tokens\[1\].*max_model_len"),
    "computed_plus_count_past_max_model_len": (
        "computed",
        [40, 3],
        ValueError,
        r"num_scheduled_tokens\[0\].*max_model_len",
    ),
    "computed_too_short": ("computed", [3], ValueError, "num_computed_tokens"),
    "computed_2d": ("computed", [[3], [4]], ValueError, "num_computed_tokens"),
    "computed_str": ("computed", "34", TypeError, "num_computed_tokens"),
    "computed_generator": ("computed", (c for c in (3, 4)), TypeError, "num_computed_tokens"),
    "slots_float_list": ("slots", [1.0, 0], TypeError, "slots"),
    "slots_bool_list": ("slots", [True, False], TypeError, "slots"),
    "slots_str": ("slots", "10", TypeError, "slots"),
    "slots_2d_int32": ("slots", np.array([[1, 0]], np.int32), ValueError, "slots"),
    "slots_free_int32": ("slots", np.array([1, 3], np.int32), KeyError, r"slots\[1\]"),
    "slots_out_of_range_list": ("slots", [1, 9], ValueError, r"slots\[1\]"),
    "slots_negative_int32": ("slots", np.array([-1, 0], np.int32), ValueError, r"slots\[0\]"),
    "slots_duplicate_int32": ("slots", np.array([1, 1], np.int32), ValueError, r"slots\[1\]"),
    "slots_more_than_max_num_reqs": ("slots", list(range(9)), ValueError, "slots"),
}


@pytest.mark.parametrize(
    ("name", "entry"),
    [
        (name, entry)
        for name in sorted(BAD_FORMS)
        for entry in ("prepare", "prepare_slots")
        if entry == "prepare_slots" or BAD_FORMS[name][0] != "slots"
    ],  # (prepare's bad ids are in BAD_CALLS)
)
def test_bad_argument_forms_rejected_and_change_nothing(name, entry):
    """A bad slot, count or computed-count argument raises naming it, and the tracker is as if the call never came."""
    arg, bad, exc, match = BAD_FORMS[name]
    tracker, twin = populated(), populated()
    args = {"slots": _SLOTS.copy(), "counts": np.array([1, 2], np.int64), "computed": np.array([3, 4], np.int64)}
    args[arg] = bad
    with pytest.raises(exc, match=match):
        if entry == "prepare":
            tracker.prepare(["b", "a"], args["counts"], num_computed_tokens=args["computed"])
        else:
            tracker.prepare_slots(args["slots"], args["counts"], args["computed"])
    assert_same_state(tracker, twin)


def test_bad_forms_after_a_cached_list_step():
    """A bad count list that compares equal to the previous step's (True == 1, 4.0 == 4) is still refused."""
    tracker, twin = populated(), populated()
    for t in (tracker, twin):
        t.prepare(["c", "a"], [4, 1], num_computed_tokens=[5, 4])
    bad = [
        ([4, True], [5, 4], "num_scheduled_tokens"),
        ([4.0, 1], [5, 4], "num_scheduled_tokens"),
        ([4, 1], [5.0, 4], "num_computed_tokens"),
        ([4, 1], [5, True], "num_computed_tokens"),
    ]
    for counts, computed, name in bad:
        with pytest.raises(TypeError, match=name):
            tracker.prepare(["c", "a"], counts, num_computed_tokens=computed)
        slots = np.array([tracker.slot("c"), tracker.slot("a")])
        with pytest.raises(TypeError, match=name):
            tracker.prepare_slots(slots, counts, computed)
    assert_same_state(tracker, twin)


def test_ids_that_cannot_be_compared_or_hashed_are_named():
    """A step after a step of plain ids compares the lists first: an array among the ids is named, not
    numpy's ambiguous truth value; membership of an unhashable id is named too."""
    tracker = PositionTracker(MRopeConfig(family="qwen2_5_vl"), max_num_reqs=2, max_num_batched_tokens=8)
    tracker.add_request("a", [1, 2, 3])
    tracker.prepare(["a"], [1])
    with pytest.raises(TypeError, match="req_ids"):
        tracker.prepare([np.array(["a", "b"])], [1])
    with pytest.raises(TypeError, match="req_id"):
        ["a"] in tracker  # noqa: B015 (the membership test is the call under test)
    assert tracker.num_computed_tokens("a") == 1


def test_a_negative_audio_length_is_named_before_any_table_is_sized():
    config = MRopeConfig(family="qwen3_omni")
    ids = [
        config.vision_start_token_id, config.audio_start_token_id, config.video_token_id, config.audio_token_id,
        config.audio_end_token_id, config.vision_end_token_id,
    ]  # fmt: skip
    for semantics in ("reference", "sglang-0.5"):
        with pytest.raises(ValueError, match=r"audio_feature_lengths\[0\]"):
            PromptLayout.from_tokens(
                MRopeConfig(family="qwen3_omni", semantics=semantics), ids, video_grid_thw=[[1, 2, 2]],
                audio_feature_lengths=[-(10**6)], use_audio_in_video=True,
            )  # fmt: skip
