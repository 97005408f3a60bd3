"""PositionTracker API behaviour on small hand-checkable prompts, against the torch reference."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from spec_cases import omni, omni_toy, qwen2_5_vl, qwen2_vl, tokens
from strategies import audio_tokens, interleave_kinds, tau_values

from mrope_tracker import MRopeConfig, PromptLayout, reference
from mrope_tracker.tracker import PositionTracker

# --- prompts ---------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """A prompt in token form and range form, with its multimodal blocks (offset, length)."""

    name: str
    config: MRopeConfig
    ids: np.ndarray
    kwargs: dict
    ranges: dict = field(default_factory=dict)
    blocks: tuple = ()

    @property
    def num_tokens(self) -> int:
        return int(self.ids.shape[0])

    def reference(self) -> tuple[np.ndarray, int]:
        positions, delta = reference.prompt_positions(self.config, self.ids, **self.kwargs)
        return positions.numpy(), int(delta)

    def add(self, tracker: PositionTracker, req_id, form: str = "tokens", num_computed_tokens: int = 0) -> int:
        if form == "tokens":
            return tracker.add_request(req_id, self.ids, num_computed_tokens=num_computed_tokens, **self.kwargs)
        if form == "ranges":
            return tracker.add_request_from_ranges(
                req_id, self.num_tokens, num_computed_tokens=num_computed_tokens, **self.kwargs, **self.ranges
            )
        if form == "layout_tokens":
            layout = PromptLayout.from_tokens(self.config, self.ids, **self.kwargs)
        else:
            layout = PromptLayout.from_ranges(self.config, self.num_tokens, **self.kwargs, **self.ranges)
        return tracker.add_request_layout(req_id, layout, num_computed_tokens=num_computed_tokens)


def _ids(config, prompt: str) -> np.ndarray:
    return np.array(tokens(config, prompt), dtype=np.int64)


def vl_image() -> Case:
    """Spec T1: Qwen2-VL, one image (1, 4, 6) -> 1x2x3 placeholders at 3..8."""
    c = qwen2_vl()
    return Case(
        "vl_image",
        c,
        _ids(c, "t t VS I*6 VE t t"),
        {"image_grid_thw": [[1, 4, 6]]},
        {"image_ranges": [[3, 6]]},
        ((3, 6),),
    )


def vl_video() -> Case:
    """Qwen2-VL, one video (3, 4, 4) -> 3x2x2 placeholders at 2..13."""
    c = qwen2_vl()
    return Case(
        "vl_video",
        c,
        _ids(c, "t VS V*12 VE t t"),
        {"video_grid_thw": [[3, 4, 4]]},
        {"video_ranges": [[2, 12]]},
        ((2, 12),),
    )


def vl_text(n: int = 7) -> Case:
    c = qwen2_vl()
    return Case(f"vl_text{n}", c, _ids(c, " ".join(["t"] * n)), {})


def vl_images(num_images: int, text: int = 1) -> Case:
    """Qwen2-VL, `num_images` images of 2x2 placeholders, each wrapped and followed by `text` tokens."""
    c = qwen2_vl()
    body = " ".join([f"VS I*4 VE t*{text}"] * num_images)
    ids = _ids(c, "t " + body)
    ranges = [[1 + k * (6 + text) + 1, 4] for k in range(num_images)]
    return Case(
        f"vl_images{num_images}",
        c,
        ids,
        {"image_grid_thw": [[1, 4, 4]] * num_images},
        {"image_ranges": ranges},
        tuple(map(tuple, ranges)),
    )


def vl25_items(num_items: int, text: int = 1) -> Case:
    """Qwen2.5-VL, `num_items` wrapped items alternating a 2x2 image and a 2-frame 2x2 video at
    0.5, 1.3, 2.6 ... s per grid, each followed by `text` tokens."""
    c = qwen2_5_vl()
    words, images, videos, sps, image_ranges, video_ranges = ["t"], [], [], [], [], []
    pos = 1
    for k in range(num_items):
        video = k % 2 == 1
        n = 8 if video else 4
        words.append(f"VS {'V' if video else 'I'}*{n} VE t*{text}")
        (video_ranges if video else image_ranges).append([pos + 1, n])
        if video:
            videos.append([2, 4, 4])
            sps.append([0.5, 1.3, 2.6][(k // 2) % 3])
        else:
            images.append([1, 4, 4])
        pos += n + 2 + text
    kwargs = {}
    if images:
        kwargs["image_grid_thw"] = images
    if videos:
        kwargs.update(video_grid_thw=videos, second_per_grid_ts=sps)
    ranges = {"image_ranges": image_ranges, "video_ranges": video_ranges}
    blocks = tuple(sorted(map(tuple, image_ranges + video_ranges)))
    return Case(f"vl25_items{num_items}", c, _ids(c, " ".join(words)), kwargs, ranges, blocks)


def vl25_video() -> Case:
    """Qwen2.5-VL (r = 2), one video (3, 4, 4) at 1.3 s per grid: tau = 0, 2, 5."""
    c = qwen2_5_vl()
    return Case(
        "vl25_video",
        c,
        _ids(c, "t VS V*12 VE t t"),
        {"video_grid_thw": [[3, 4, 4]], "second_per_grid_ts": [1.3]},
        {"video_ranges": [[2, 12]]},
        ((2, 12),),
    )


def omni_audio_in_video() -> Case:
    """Omni toy config (r = 2, chunk 4), one video (3, 4, 4) carrying 40 mel frames of audio."""
    c = omni_toy()
    t, h, w, frames = 3, 2, 2, 40
    order = interleave_kinds(
        tau_values(t, np.float32(1.0), c.tokens_per_second), h * w, audio_tokens(frames), c.audio_chunk_positions
    )
    block = [c.video_token_id if k == "V" else c.audio_token_id for k in order]
    ids = tokens(c, "t t") + [c.vision_start_token_id, c.audio_start_token_id] + block
    ids += [c.audio_end_token_id, c.vision_end_token_id] + tokens(c, "t")
    kwargs = {
        "video_grid_thw": [[t, 2 * h, 2 * w]],
        "second_per_grid_ts": [1.0],
        "audio_feature_lengths": [frames],
        "use_audio_in_video": True,
    }
    return Case("omni_av", c, np.array(ids, np.int64), kwargs, {"video_ranges": [[4, len(block)]]}, ((4, len(block)),))


def omni_image_audio() -> Case:
    """Omni (published values), an image (1, 4, 4) then a 20-frame (5-token) audio clip."""
    c = omni()
    return Case(
        "omni_mixed",
        c,
        _ids(c, "t VS I*4 VE t AS A*5 AE t"),
        {"image_grid_thw": [[1, 4, 4]], "audio_feature_lengths": [20]},
        {"image_ranges": [[2, 4]], "audio_ranges": [[8, 5]]},
        ((2, 4), (8, 5)),
    )


CASES = [vl_image(), vl_video(), vl25_video(), omni_audio_in_video(), omni_image_audio()]
by_name = pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
FORMS = ["tokens", "ranges", "layout_tokens", "layout_ranges"]


# --- helpers ---------------------------------------------------------------------


def make_tracker(config, **kwargs) -> PositionTracker:
    kwargs.setdefault("max_num_reqs", 4)
    kwargs.setdefault("max_num_batched_tokens", 64)
    return PositionTracker(config, **kwargs)


def expected_step(ref: np.ndarray, delta: int, computed: int, count: int) -> np.ndarray:
    """Reference positions of tokens [computed, computed + count): prompt slice, then index + delta."""
    length = ref.shape[1]
    prompt_part = ref[:, computed : min(computed + count, length)]
    after = np.arange(max(computed, length), computed + count, dtype=np.int64) + delta
    return np.concatenate([prompt_part, np.broadcast_to(after, (3, after.shape[0]))], axis=1)


def as_numpy(out: torch.Tensor) -> np.ndarray:
    return out.cpu().numpy().astype(np.int64)


def assert_positions(out: torch.Tensor, expected: np.ndarray) -> None:
    assert tuple(out.shape) == expected.shape
    np.testing.assert_array_equal(as_numpy(out), expected)


def run_steps(tracker, req_id, counts) -> np.ndarray:
    """Prepare `counts` tokens of one request step by step; the concatenated positions."""
    parts = [as_numpy(tracker.prepare([req_id], [n])) for n in counts]
    return np.concatenate(parts, axis=1)


def chunks_from_splits(length: int, splits) -> list[int]:
    bounds = [0, *sorted(set(s for s in splits if 0 < s < length)), length]
    return [b - a for a, b in zip(bounds, bounds[1:])]


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


# --- batches --------------------------------------------------------------------------


def _batch_cases():
    return {"a": vl_image(), "b": vl_text(9), "c": vl_video(), "d": vl_images(3)}


def test_batch_order_respected():
    """Each request's positions appear in the order the step lists the requests, with its own counts."""
    cases = _batch_cases()
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
    cases = _batch_cases()
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
    cases = _batch_cases()
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
    cases = _batch_cases()
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


# --- bad calls -------------------------------------------------------------------------------

IDS = ("a", "b", "c")


def populated(**kwargs) -> PositionTracker:
    """Three Qwen2-VL requests part-way through their prompts (slot 3 free unless max_num_reqs=3)."""
    kwargs.setdefault("max_num_batched_tokens", 16)
    kwargs.setdefault("max_model_len", 40)
    cases = _batch_cases()
    tracker = make_tracker(qwen2_vl(), **kwargs)
    for rid in IDS:
        cases[rid].add(tracker, rid)
    tracker.prepare(["a", "b", "c"], [3, 2, 0])
    tracker.prepare(["c", "a"], [4, 1])  # the last step: bad calls below repeat its ids
    return tracker


def assert_same_state(tracker: PositionTracker, twin: PositionTracker) -> None:
    """Same requests, counters and slots, and the next step gives the same positions."""
    tracker.check_invariants()
    assert len(tracker) == len(twin)
    for rid in (*IDS, "x", "zz"):
        assert (rid in tracker) == (rid in twin)
    live = [rid for rid in IDS if rid in twin]
    for rid in live:
        assert tracker.num_computed_tokens(rid) == twin.num_computed_tokens(rid)
        assert tracker.prompt_len(rid) == twin.prompt_len(rid)
        assert tracker.mrope_position_delta(rid) == twin.mrope_position_delta(rid)
        assert tracker.slot(rid) == twin.slot(rid)
    order = live[::-1]
    counts = [4, 5, 6][: len(order)]
    np.testing.assert_array_equal(as_numpy(tracker.prepare(order, counts)), as_numpy(twin.prepare(order, counts)))


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
    cases = _batch_cases()
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
    for rid, case in _batch_cases().items():
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
