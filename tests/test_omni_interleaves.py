"""Omni audio-in-video blocks laid out by every processor convention (transformers',
the model's own chunking, vLLM's, Qwen3-Omni's time merge), at 0.1 to 12 fps and with
long videos, are accepted and positioned by token identity: token form, range form and a
tracker fed in random chunks all equal the independent reference."""

from __future__ import annotations

import numpy as np
import pytest
from family_prompts import family_prompts
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import examples

from mrope_tracker import MRopeConfig, PositionTracker, PromptLayout, prompt_positions, reference
from mrope_tracker.families.interleave import compact, hf_walker_runs, vllm_chunk_runs

CONVENTIONS = [
    ("qwen2_5_omni", "transformers"),
    ("qwen2_5_omni", "model"),
    ("qwen2_5_omni", "vllm"),
    ("qwen3_omni", "transformers"),
]


def _config(prompt) -> MRopeConfig:
    return MRopeConfig.from_hf_config(prompt.config)


def _reference(prompt):
    positions, delta = reference.prompt_positions(_config(prompt), list(prompt.token_ids), **prompt.kwargs())
    return positions.numpy(), delta


def _range_kwargs_float64_sp(prompt) -> dict:
    """The range form with the processor's own float64 second_per_grid_ts (2 / fps),
    which a named convention needs to rebuild a float64 layout exactly."""
    kwargs = prompt.range_kwargs()
    if prompt.video_fps is not None and all(fps is not None for fps in prompt.video_fps):
        kwargs["second_per_grid_ts"] = [2.0 / fps for fps in prompt.video_fps]
    if prompt.interleave == "model":
        kwargs["interleave"] = "model"
    return kwargs


@pytest.mark.parametrize(("family", "convention"), CONVENTIONS, ids=[f"{f}-{c}" for f, c in CONVENTIONS])
@settings(max_examples=examples(200, minimum=40))
@given(data=st.data())
def test_every_convention_follows_identity(family, convention, data):
    """Whatever convention laid a block out, the token form equals the reference, the
    range form (named convention, and explicit runs) equals the token form."""
    prompt = data.draw(family_prompts(family, interleave=convention, use_audio_in_video=True, min_videos=1))
    config = _config(prompt)
    expected, delta = _reference(prompt)
    positions, got_delta = prompt_positions(config, prompt.token_ids, **prompt.kwargs())
    np.testing.assert_array_equal(positions, expected)
    assert got_delta == delta
    named = PromptLayout.from_ranges(config, prompt.num_tokens, **_range_kwargs_float64_sp(prompt))
    explicit = PromptLayout.from_ranges(
        config, prompt.num_tokens, **dict(prompt.range_kwargs(), interleave=prompt.interleave_runs())
    )
    for layout in (named, explicit):
        np.testing.assert_array_equal(layout.positions(), expected)
        assert layout.delta == delta


@pytest.mark.parametrize(("family", "convention"), CONVENTIONS, ids=[f"{f}-{c}" for f, c in CONVENTIONS])
@settings(max_examples=examples(50, minimum=10))
@given(data=st.data())
def test_long_videos_in_random_chunks(family, convention, data):
    """Long videos (up to 300 temporal patches) fed to a tracker in chunks that split
    anywhere inside the interleave come out as the reference, then index + delta."""
    prompt = data.draw(
        family_prompts(family, interleave=convention, use_audio_in_video=True, min_videos=1, max_items=2)
    )
    config = _config(prompt)
    expected, delta = _reference(prompt)
    tracker = PositionTracker(config, max_num_reqs=2, max_num_batched_tokens=4096)
    tracker.add_request_from_ranges("r", prompt.num_tokens, **_range_kwargs_float64_sp(prompt))
    chunks, done = [], 0
    while done < prompt.num_tokens + 2:
        n = data.draw(st.integers(1, 200))
        chunks.append(tracker.prepare(["r"], [n]).numpy().copy())
        done += n
    got = np.concatenate(chunks, axis=1)
    np.testing.assert_array_equal(got[:, : prompt.num_tokens], expected)
    np.testing.assert_array_equal(
        got[:, prompt.num_tokens :], np.arange(prompt.num_tokens, done) + delta + np.zeros((3, 1), np.int64)
    )


def test_conventions_differ_when_chunks_go_empty():
    """Below 1 fps at 25 positions per second, vLLM keeps empty chunks and transformers
    splits frames: the two layouts differ, and both are accepted (identity)."""
    t, h, w, sp, n_audio = 4, 1, 2, 2.0 / 0.4, 300  # tau = 0, 125, 250, 375; C = 50
    hf = hf_walker_runs(t, h, w, sp, n_audio, 25.0, 50)
    vllm = vllm_chunk_runs(t, h, w, sp, n_audio, 25.0, 50)
    assert hf != vllm
    assert sum(c for k, c in hf if k == 0) == sum(c for k, c in vllm if k == 0) == t * h * w
    assert sum(c for k, c in hf if k == 1) == sum(c for k, c in vllm if k == 1) == n_audio
    config = MRopeConfig(family="qwen2_5_omni")
    results = []
    for runs in (hf, vllm):
        kinds = [config.video_token_id if k == 0 else config.audio_token_id for k, c in runs for _ in range(c)]
        ids = [
            7,
            config.vision_start_token_id,
            config.audio_start_token_id,
            *kinds,
            config.audio_end_token_id,
            config.vision_end_token_id,
            8,
        ]
        kwargs = dict(
            video_grid_thw=[[t, 2 * h, 2 * w]],
            second_per_grid_ts=[sp],
            audio_feature_lengths=[4 * n_audio],
            use_audio_in_video=True,
        )
        positions, delta = prompt_positions(config, ids, **kwargs)
        ref, ref_delta = reference.prompt_positions(config, ids, **kwargs)
        np.testing.assert_array_equal(positions, ref.numpy())
        results.append(positions)
    # the same tokens by identity, in a different order: the same multiset of positions
    assert sorted(map(tuple, results[0].T)) == sorted(map(tuple, results[1].T))


def test_explicit_runs_must_add_up():
    """Explicit runs whose counts differ from the video's or the track's are a ValueError naming interleave."""
    config = MRopeConfig(family="qwen2_5_omni")
    kwargs = dict(video_grid_thw=[[2, 2, 2]], audio_feature_lengths=[20], use_audio_in_video=True)  # 2 video, 5 audio
    with pytest.raises(ValueError, match=r"interleave\[0\]: expected runs of 2 video and 5 audio"):
        PromptLayout.from_ranges(config, 20, video_ranges=[(3, 7)], interleave=[[("video", 2), ("audio", 4)]], **kwargs)
    with pytest.raises(ValueError, match="interleave"):
        PromptLayout.from_ranges(config, 20, video_ranges=[(3, 7)], interleave=[[("text", 2)]], **kwargs)
    with pytest.raises(ValueError, match="interleave"):
        PromptLayout.from_ranges(config, 20, video_ranges=[(3, 7)], interleave="processor", **kwargs)
    assert compact([(0, 2), (0, 0), (1, 3), (1, 2)]) == [(0, 2), (1, 5)]
