"""The SGLang Qwen3-Omni drop-in's one pass (kernels/sglang_omni.py,
`omni_checked_positions`) against the two passes it replaces: the integer
builder's check (`build_from_tokens`) followed by transformers' float32 rule
truncated (`omni_truncated_positions`, itself checked against SGLang's
positions in test_sglang_adapter.py and test_sglang_oracle.py).

On random Qwen3-Omni prompts, intact and broken (a token replaced by a
special id, a token dropped, an item taken away, use_audio_in_video
flipped), the one pass may only accept what both passes accept, and then
writes their positions, bit for bit; on intact prompts it accepts whatever
they accept, so the drop-in's lean path is the one SGLang's calls take.
The drop-ins' lean path (sglang/rope_fast.py) is then driven with a plan
kept: what it refuses must raise the checked route's errors or give its
positions.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from family_prompts import family_prompts
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import examples

from mrope_tracker import MRopeConfig
from mrope_tracker.core.inputs import NO_ROWS, NO_SCALES, normalize_items
from mrope_tracker.kernels.layout_build import FAILED, build_from_tokens
from mrope_tracker.kernels.layout_emit import NUM_STATE
from mrope_tracker.kernels.sglang_omni import omni_checked_positions, omni_truncated_positions
from mrope_tracker.sglang import get_rope_index_qwen3_omni

SEMANTICS = "sglang-0.5"


def _two_passes(config, ids, items):
    """(out, top) of the integer check then the float rule truncated; top -1 where either refuses."""
    out = np.full((3, ids.shape[0]), np.nan, np.float32)
    scan = np.empty((3, ids.shape[0]), np.int64)
    if (
        not ids.shape[0]
        or build_from_tokens(NO_ROWS, NO_SCALES, np.empty(NUM_STATE, np.int64), scan, ids, config.kernel_params, *items)
        == FAILED
    ):
        return out, -1
    return out, int(omni_truncated_positions(out, ids, config.kernel_params, *items))


def _one_pass(config, ids, items):
    out = np.full((3, ids.shape[0]), np.nan, np.float32)
    return out, int(omni_checked_positions(out, ids, config.kernel_params, *items))


@st.composite
def broken(draw, prompt):
    """(ids, kwargs) of `prompt`, intact or broken in one place."""
    config = MRopeConfig.from_hf_config(prompt.config, semantics=SEMANTICS)
    ids = list(prompt.token_ids)
    kwargs = prompt.kwargs()
    kind = draw(st.sampled_from(("intact", "replace", "drop", "item", "av")))
    if kind in ("replace", "drop") and ids:
        at = draw(st.integers(0, len(ids) - 1))
        if kind == "drop":
            del ids[at]
        else:
            specials = [
                config.image_token_id, config.video_token_id, config.audio_token_id, config.vision_start_token_id,
                config.vision_end_token_id, config.audio_start_token_id, config.audio_end_token_id, 101,
            ]  # fmt: skip
            ids[at] = draw(st.sampled_from(specials))
    elif kind == "item":
        names = [name for name in ("image_grid_thw", "video_grid_thw", "audio_feature_lengths") if name in kwargs]
        if names:
            name = draw(st.sampled_from(names))
            kwargs[name] = kwargs[name][:-1]
            if name == "video_grid_thw" and "second_per_grid_ts" in kwargs:
                kwargs["second_per_grid_ts"] = kwargs["second_per_grid_ts"][:-1]
    elif kind == "av":
        kwargs["use_audio_in_video"] = not kwargs.get("use_audio_in_video", False)
    return kind, config, np.array(ids, np.int64), kwargs


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family_prompts("qwen3_omni").flatmap(broken))
def test_one_pass_accepts_only_what_both_passes_accept_and_writes_theirs(case):
    kind, config, ids, kwargs = case
    try:
        items, _ = normalize_items(
            config, kwargs.get("image_grid_thw"), kwargs.get("video_grid_thw"), kwargs.get("second_per_grid_ts"),
            kwargs.get("audio_feature_lengths"), kwargs.get("use_audio_in_video", False),
        )  # fmt: skip
    except ValueError:  # (an argument the drop-in refuses before any kernel)
        return
    expected, expected_top = _two_passes(config, ids, items)
    got, top = _one_pass(config, ids, items)
    if top >= 0:
        assert expected_top == top
        np.testing.assert_array_equal(got, expected)
    if kind == "intact":
        assert expected_top >= 0 and top == expected_top


def _call(config, ids, **kwargs):
    return get_rope_index_qwen3_omni(
        config.spatial_merge_size, config.image_token_id, config.video_token_id, config.vision_start_token_id,
        None, torch.tensor([ids]), kwargs.pop("image_grid_thw", None), kwargs.pop("video_grid_thw", None),
        kwargs.pop("second_per_grid_ts", None), audio_token_id=config.audio_token_id,
        audio_start_token_id=config.audio_start_token_id, position_id_per_seconds=config.tokens_per_second,
        semantics=SEMANTICS, **kwargs,
    )  # fmt: skip


def test_lean_path_refusals_take_the_checked_route():
    """Once the drop-in keeps a plan for these arguments, what the one pass
    refuses still raises the checked route's error, and an audio-in-video
    block, a tensor flag or a list grid give the checked route's positions."""
    config = MRopeConfig(family="qwen3_omni", model_type="qwen3_omni_moe", semantics=SEMANTICS)
    vs, ve, v = config.vision_start_token_id, config.vision_end_token_id, config.video_token_id
    a, as_, ae = config.audio_token_id, config.audio_start_token_id, config.audio_end_token_id
    ids = [1, vs, *[v] * 8, ve, 2]
    grid, sp = torch.tensor([[2, 4, 4]]), torch.tensor([2 / 3], dtype=torch.float32)
    usual = _call(config, ids, video_grid_thw=grid, second_per_grid_ts=sp)
    assert usual[0].dtype == torch.float32 and usual[0].shape == (3, 1, len(ids))
    listed = _call(config, ids, video_grid_thw=[[2, 4, 4]], second_per_grid_ts=[2 / 3])
    assert torch.equal(usual[0], listed[0]) and torch.equal(usual[1], listed[1])
    with pytest.raises(ValueError, match="token_ids"):
        _call(config, ids[:-2] + [2], video_grid_thw=grid, second_per_grid_ts=sp)  # no vision_end
    with pytest.raises(ValueError, match="video_grid_thw|token_ids"):
        _call(config, ids, video_grid_thw=torch.tensor([[2, 4, 4], [2, 4, 4]]), second_per_grid_ts=sp.repeat(2))
    n_audio = config.spec.audio_tokens(40, config)
    av_ids = [1, vs, as_, *[v] * 4, *[a] * n_audio, *[v] * 4, ae, ve, 2]
    kwargs = dict(video_grid_thw=grid, second_per_grid_ts=sp, audio_seqlens=torch.tensor([40]))
    flagged = _call(config, av_ids, use_audio_in_video=True, **dict(kwargs))
    tensor_flag = _call(config, av_ids, use_audio_in_video=torch.tensor(True), **dict(kwargs))
    assert torch.equal(flagged[0], tensor_flag[0]) and torch.equal(flagged[1], tensor_flag[1])


def test_lean_path_of_get_rope_index_refuses_what_the_checked_route_refuses():
    """Qwen2.5-VL with a plan kept: bad grids, times and tokens raise the checked route's errors (the kernel
    refuses, nothing is returned from the lean path), and other forms give the checked route's positions."""
    from mrope_tracker import prompt_positions
    from mrope_tracker.sglang import get_rope_index

    config = MRopeConfig(family="qwen2_5_vl", semantics=SEMANTICS)
    vs, ve, v = config.vision_start_token_id, config.vision_end_token_id, config.video_token_id
    ids = [1, vs, *[v] * 8, ve, 2]

    def call(token_ids, grid, times):
        return get_rope_index(
            2, config.image_token_id, v, vs, "qwen2_5_vl", config.tokens_per_second, token_ids, None, grid, times,
            semantics=SEMANTICS,
        )  # fmt: skip

    grid, sp = torch.tensor([[2, 4, 4]]), torch.tensor([1.2])
    positions, delta = call(torch.tensor([ids]), grid, sp)  # (the first call keeps the plan)
    expected, expected_delta = prompt_positions(config, ids, video_grid_thw=[[2, 4, 4]], second_per_grid_ts=[1.2])
    assert (positions[:, 0].numpy() == expected).all() and int(delta) == expected_delta
    again = call(torch.tensor([ids]), grid, sp)
    assert torch.equal(again[0], positions) and torch.equal(again[1], delta)
    with pytest.raises(ValueError, match="second_per_grid_ts"):
        call(torch.tensor([ids]), grid, torch.tensor([float("nan")]))
    with pytest.raises(ValueError, match="second_per_grid_ts"):
        call(torch.tensor([ids]), grid, torch.tensor([1.2, 1.2]))
    with pytest.raises(ValueError, match="video_grid_thw"):
        call(torch.tensor([ids]), torch.tensor([[2, 4, 0]]), sp)
    with pytest.raises(ValueError, match="token_ids|video"):
        call(torch.tensor([ids[:-3] + [2]]), grid, sp)  # the video cut short
    rows = call(torch.tensor([ids, ids]), torch.tensor([[2, 4, 4], [2, 4, 4]]), sp.repeat(2))  # a batch
    assert rows[0].shape == (3, 2, len(ids)) and torch.equal(rows[0][:, 1:], positions)
    default = call(torch.tensor([ids]), grid, None)  # the family's default time scale
    expected, _ = prompt_positions(config, ids, video_grid_thw=[[2, 4, 4]])
    assert (default[0][:, 0].numpy() == expected).all()
