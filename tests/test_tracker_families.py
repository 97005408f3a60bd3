"""The tracker with the newer families (Qwen3-VL, GLM, Qwen3-Omni) and every Omni layout:
prefix-cache hits anywhere (inside a frame, inside timestamp text or an interleave),
chunks through prepare_slots, a rollback, and the scheduler's own counts, all equal the
reference (then index + delta past the prompt)."""

from __future__ import annotations

import numpy as np
from family_prompts import family_prompts
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import examples

from mrope_tracker import MRopeConfig, PositionTracker, reference

FAMILIES = ("qwen3_vl", "glm4v", "qwen3_omni", "qwen2_5_omni")


def _expected(config, prompt, start: int, stop: int) -> np.ndarray:
    positions, delta = reference.prompt_positions(config, list(prompt.token_ids), **prompt.kwargs())
    index = np.arange(start, stop)
    out = np.empty((3, stop - start), np.int64)
    inside = index < prompt.num_tokens
    out[:, inside] = positions.numpy()[:, index[inside]]
    out[:, ~inside] = index[~inside] + delta
    return out


@settings(max_examples=examples(200, minimum=40))
@given(family=st.sampled_from(FAMILIES), data=st.data())
def test_cache_hits_chunks_and_rollback(family, data):
    """A request admitted at a random cache hit, advanced in random chunks (prepare_slots with int32
    arrays), rolled back, then driven by the scheduler's counts, stays equal to the reference."""
    prompt = data.draw(family_prompts(family, min_videos=1, max_items=3))
    config = MRopeConfig.from_hf_config(prompt.config)
    tracker = PositionTracker(config, max_num_reqs=2, max_num_batched_tokens=512)
    by_ranges = data.draw(st.booleans())
    hit = data.draw(st.integers(0, prompt.num_tokens))
    if by_ranges:
        tracker.add_request_from_ranges("r", prompt.num_tokens, num_computed_tokens=hit, **prompt.range_kwargs())
    else:
        tracker.add_request("r", list(prompt.token_ids), num_computed_tokens=hit, **prompt.kwargs())
    slots = np.array([tracker.slot("r")], np.int32)
    done = hit
    while done < prompt.num_tokens + 2:
        n = data.draw(st.integers(1, 64))
        got = tracker.prepare_slots(slots, np.array([n], np.int32)).numpy()
        np.testing.assert_array_equal(got, _expected(config, prompt, done, done + n))
        done += n
    back = data.draw(st.integers(0, done))
    tracker.rollback("r", back)  # rejected drafts, or preemption back to a hit
    done -= back
    n = data.draw(st.integers(1, 64))
    np.testing.assert_array_equal(tracker.prepare(["r"], [n]).numpy(), _expected(config, prompt, done, done + n))
    # the scheduler's count rules: restart anywhere without a rollback
    start = data.draw(st.integers(0, prompt.num_tokens))
    got = tracker.prepare_slots(slots, np.array([n], np.int32), np.array([start], np.int32)).numpy()
    np.testing.assert_array_equal(got, _expected(config, prompt, start, start + n))
    assert tracker.num_computed_tokens("r") == start + n
    tracker.check_invariants()
