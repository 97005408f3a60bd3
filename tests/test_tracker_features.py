"""`PositionTracker.add_request_from_features`: admission from vLLM's prompt ids and features.

The features are the stand-ins of vllm_features.py (exactly the
attributes vLLM 0.33's objects have); the recorded vLLM 0.33.0 vectors give
the expected positions, and the token form the expected ones of random prompts.
"""

from __future__ import annotations

from collections import UserDict

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import examples, prompts
from vllm_features import VECTORS, FeatureSpec, feature, prompt_features, vector_features

from mrope_tracker import MRopeConfig, PositionTracker

IDS = [f"{i:03d}-{v['family']}" for i, v in enumerate(VECTORS)]


def _tracker(config, **kwargs) -> PositionTracker:
    kwargs = {"max_num_reqs": 4, "max_num_batched_tokens": 64, **kwargs}
    return PositionTracker(config, **kwargs)


def _serve(tracker: PositionTracker, req_id, start: int, end: int, chunk: int = 61) -> np.ndarray:
    """Positions of tokens [start, end), scheduled in chunks from the tracker's own counter."""
    out = []
    for lo in range(start, end, chunk):
        out.append(tracker.prepare([req_id], [min(chunk, end - lo)]).numpy().copy())
    return np.concatenate(out, axis=1)


@pytest.mark.parametrize("index", range(len(VECTORS)), ids=IDS)
def test_features_reproduce_vllm(index):
    """Admitted from vLLM's features (prompt ids as a list), the tracker serves vLLM 0.33.0's positions and delta,
    from the start and from a prefix-cache hit."""
    vector = VECTORS[index]
    config = MRopeConfig.from_hf_config(vector["config"], semantics="vllm-0.33")
    expected = np.array(vector["positions"])
    num_tokens = expected.shape[1]
    tracker = _tracker(config, max_model_len=num_tokens + 8)
    tracker.add_request_from_features("r", list(vector["token_ids"]), vector_features(vector))
    hit = num_tokens // 3
    tracker.add_request_from_features("hit", num_tokens, vector_features(vector), num_computed_tokens=hit)
    assert tracker.mrope_position_delta("r") == tracker.mrope_position_delta("hit") == vector["delta"]
    np.testing.assert_array_equal(_serve(tracker, "r", 0, num_tokens), expected)
    np.testing.assert_array_equal(_serve(tracker, "hit", hit, num_tokens), expected[:, hit:])
    decode = tracker.prepare(["r"], [1]).numpy()[:, 0]
    assert (decode == num_tokens + vector["delta"]).all()
    tracker.check_invariants()


@settings(max_examples=examples(60))
@given(
    prompt=prompts(use_audio_in_video=False),
    semantics=st.sampled_from(("reference", "vllm-0.33")),
    data=st.data(),
)
def test_features_equal_ranges(prompt, semantics, data):
    """Features in any order, with the ids in any form, admit the request add_request_from_ranges admits."""
    config = MRopeConfig.from_hf_config(prompt.config, semantics=semantics)
    order = data.draw(
        st.permutations(range(len(prompt.image_ranges) + len(prompt.video_ranges) + len(prompt.audio_ranges)))
    )
    ids = data.draw(
        st.sampled_from(
            [prompt.token_ids.tolist(), tuple(prompt.token_ids.tolist()), prompt.token_ids, prompt.num_tokens]
        )
    )
    hit = data.draw(st.integers(0, prompt.num_tokens))
    tracker = _tracker(config)
    tracker.add_request_from_features("f", ids, prompt_features(prompt, lambda n: order), num_computed_tokens=hit)
    tracker.add_request_from_ranges("r", prompt.num_tokens, num_computed_tokens=hit, **prompt.range_kwargs())
    assert tracker.mrope_position_delta("f") == tracker.mrope_position_delta("r")
    for _ in range(3):
        np.testing.assert_array_equal(tracker.prepare(["f"], [23]).numpy(), tracker.prepare(["r"], [23]).numpy())
    tracker.check_invariants()


def test_kwargs_item_as_user_dict():
    """vLLM's MultiModalKwargsItem is a UserDict: its fields are read like a dict's."""
    vector = next(v for v in VECTORS if v["family"] == "qwen3_vl" and v["video_grid_thw"])
    config = MRopeConfig.from_hf_config(vector["config"], semantics="vllm-0.33")
    features = vector_features(vector)
    wrapped = [FeatureSpec(f.modality, f.mm_position, UserDict(f.data)) for f in features]
    tracker = _tracker(config, max_num_batched_tokens=len(vector["token_ids"]))
    tracker.add_request_from_features("r", vector["token_ids"], wrapped)
    np.testing.assert_array_equal(tracker.prepare(["r"], [len(vector["token_ids"])]).numpy(), vector["positions"])


def test_strided_is_embed_tensor():
    """A per-frame video's is_embed as a strided tensor view gives the positions a contiguous one gives."""
    vector = next(v for v in VECTORS if v["family"] == "qwen3_vl" and v["video_grid_thw"])
    config = MRopeConfig.from_hf_config(vector["config"], semantics="vllm-0.33")
    features = vector_features(vector)
    for f in features:
        mask = f.mm_position.is_embed
        if mask is not None:
            f.mm_position.is_embed = torch.stack([mask, mask], dim=1)[:, 0]  # stride 2
            assert not f.mm_position.is_embed.is_contiguous()
    tracker = _tracker(config, max_num_batched_tokens=len(vector["token_ids"]))
    tracker.add_request_from_features("r", vector["token_ids"], features)
    np.testing.assert_array_equal(tracker.prepare(["r"], [len(vector["token_ids"])]).numpy(), vector["positions"])


QWEN3 = MRopeConfig(family="qwen3_vl")


def _video(offset, length, is_embed, grid=(2, 4, 4)):
    return feature("video", offset, length, is_embed, mask_form="raw", video_grid_thw=grid)


# a (2, 4, 4) Qwen3-VL video, each frame of 4 tokens after 3 timestamp tokens, 2 text tokens around
FRAMES = torch.tensor([False] * 3 + [True] * 4 + [False] * 3 + [True] * 4)
GOOD = [_video(2, 14, FRAMES)]
NUM_TOKENS = 18


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda t: t.add_request_from_features("a", NUM_TOKENS, GOOD), ValueError, "already tracked"),
        (lambda t: t.add_request_from_features(["x"], NUM_TOKENS, GOOD), TypeError, "req_id"),
        (lambda t: t.add_request_from_features("x", [], GOOD), ValueError, "prompt_token_ids"),
        (lambda t: t.add_request_from_features("x", 0, GOOD), ValueError, "prompt_token_ids"),
        (lambda t: t.add_request_from_features("x", True, GOOD), TypeError, "prompt_token_ids"),
        (lambda t: t.add_request_from_features("x", "abc", GOOD), TypeError, "prompt_token_ids"),
        (lambda t: t.add_request_from_features("x", 41, GOOD), ValueError, "max_model_len"),
        (
            lambda t: t.add_request_from_features("x", NUM_TOKENS, GOOD, num_computed_tokens=-1),
            ValueError,
            "num_computed_tokens",
        ),
        (lambda t: t.add_request_from_features("x", NUM_TOKENS, GOOD[0]), TypeError, "mm_features"),
        (lambda t: t.add_request_from_features("x", NUM_TOKENS, [object()]), TypeError, r"mm_features\[0\]"),
        (
            lambda t: t.add_request_from_features("x", NUM_TOKENS, [_video(2, 14, FRAMES, grid=(3, 4, 4))]),
            ValueError,
            r"video_ranges\[0\] is_embed: expected exactly 3 frames of 4 embedding tokens, found 2",
        ),
        (
            lambda t: t.add_request_from_features("x", NUM_TOKENS, [_video(2, 14, FRAMES, grid=(4, 4, 4))]),
            ValueError,
            r"expected exactly 4 frames of 4 embedding tokens, found 2",
        ),
        (
            lambda t: t.add_request_from_features("x", NUM_TOKENS, [_video(2, 14, ~FRAMES)]),
            ValueError,
            r"video_ranges\[0\] is_embed: expected exactly 2 frames",
        ),
        (
            lambda t: t.add_request_from_features("x", 10, GOOD),
            ValueError,
            r"video_ranges\[1\]: expected a range inside",
        ),
    ],
    ids=[
        "known_id",
        "unhashable_id",
        "empty_ids",
        "zero_count",
        "bool_count",
        "string_ids",
        "beyond_max_model_len",
        "negative_cached",
        "not_a_list",
        "not_a_feature",
        "mask_short_of_frames",
        "range_short_of_frames",
        "mask_inverted",
        "range_past_prompt",
    ],
)
def test_refused_admission_changes_nothing(call, error, match):
    """A refused admission raises naming the argument and leaves the tracker as it was."""
    tracker = _tracker(QWEN3, max_model_len=40)
    tracker.add_request_from_features("a", list(range(NUM_TOKENS)), GOOD)
    before = (tracker.slot_state.copy(), tracker.pool_rows.copy(), len(tracker))
    with pytest.raises(error, match=match):
        call(tracker)
    assert len(tracker) == before[2]
    np.testing.assert_array_equal(tracker.slot_state, before[0])
    live = int(tracker.slot_state[tracker.slot("a"), 5])  # F_ROW_COUNT: the live request's rows are untouched
    start = int(tracker.slot_state[tracker.slot("a"), 4])
    np.testing.assert_array_equal(tracker.pool_rows[start : start + live], before[1][start : start + live])
    tracker.check_invariants()
    # the tracker still admits and serves
    tracker.add_request_from_features("b", NUM_TOKENS, GOOD)
    np.testing.assert_array_equal(
        tracker.prepare(["b"], [NUM_TOKENS]).numpy(), tracker.prepare(["a"], [NUM_TOKENS]).numpy()
    )


@pytest.mark.parametrize(
    ("prompt", "error", "match"),
    [
        (10**20, ValueError, r"prompt_token_ids: expected an int in \[1, "),
        (torch.zeros((1, 8), dtype=torch.int64), ValueError, "prompt_token_ids: expected a 1-D sequence"),
        (np.zeros((2, 4), np.int64), ValueError, "prompt_token_ids: expected a 1-D sequence"),
    ],
)
def test_prompt_counts_are_bounded_and_one_dimensional(prompt, error, match):
    """A count past what positions can hold, or ids that are not 1-D, are refused naming the argument."""
    tracker = _tracker(QWEN3)
    with pytest.raises(error, match=match):
        tracker.add_request_from_features("r", prompt, [])
    assert "r" not in tracker
