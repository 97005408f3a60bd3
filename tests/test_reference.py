"""Direct tests of mrope_tracker.reference: its input rules, rejections and helpers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from spec_cases import omni, omni_toy, qwen2_5_vl, qwen2_vl, tokens

from mrope_tracker.reference import audio_token_count, next_positions, prompt_positions


def _pp(config, prompt, **kwargs):
    return prompt_positions(config, tokens(config, prompt), **kwargs)


# --- helpers ---------------------------------------------------------------------


@pytest.mark.parametrize(("frames", "count"), [(20, 5), (100, 25), (160, 40), (400, 100), (3000, 750), (3, 1)])
def test_audio_token_count(frames, count):
    """n_a(F) = ((F - 1) // 2 + 1 - 2) // 2 + 1 matches the published examples (20 -> 5, 3000 -> 750)."""
    assert audio_token_count(frames) == count


def test_audio_token_count_rejects_non_int():
    """A bool or float frame count is a TypeError naming the argument."""
    for bad in (True, 20.0):
        with pytest.raises(TypeError, match="num_mel_frames"):
            audio_token_count(bad)


def test_next_positions_continue_t1():
    """Decode after the Qwen2-VL image example (delta -3, L 12): index 12 -> 9, 13 -> 10 on all rows."""
    out = next_positions(-3, 12, 2)
    assert out.dtype == torch.int64 and out.tolist() == [[9, 10]] * 3


def test_next_positions_rejects_negative_count():
    """A negative number of new tokens is a ValueError."""
    with pytest.raises(ValueError, match="num_new_tokens"):
        next_positions(0, 5, -1)


def test_text_only_prompt():
    """A text-only prompt gets 0..L-1 on all rows and delta 0."""
    positions, delta = _pp(qwen2_vl(), "t t t t")
    assert positions.dtype == torch.int64 and positions.tolist() == [[0, 1, 2, 3]] * 3 and delta == 0


def test_input_forms_agree():
    """List, numpy and torch token ids and grids give the same result; delta is a Python int."""
    config = qwen2_vl()
    ids = tokens(config, "t VS I*6 VE t")
    expected, delta = prompt_positions(config, ids, image_grid_thw=[[1, 4, 6]])
    assert type(delta) is int
    for ids_form, grid_form in (
        (np.array(ids, dtype=np.int32), np.array([[1, 4, 6]], dtype=np.uint8)),
        (torch.tensor(ids), torch.tensor([[1, 4, 6]], dtype=torch.int32)),
    ):
        positions, other = prompt_positions(config, ids_form, image_grid_thw=grid_form)
        assert torch.equal(positions, expected) and other == delta


# --- rule 1: input types and shapes -------------------------------------------------


@pytest.mark.parametrize("ids", [[1.0, 2.0], [True, 5], np.array([1.5]), torch.tensor([True]), "abc", 7])
def test_token_ids_wrong_type(ids):
    """Float, bool or non-numeric token ids are a TypeError naming token_ids."""
    with pytest.raises(TypeError, match="token_ids"):
        prompt_positions(qwen2_vl(), ids)


@pytest.mark.parametrize("ids", [[[1, 2], [3, 4]], np.array(5), [[1], [2, 3]]], ids=["2d", "0d", "ragged"])
def test_token_ids_wrong_shape(ids):
    """Token ids that are not 1-D are a ValueError naming token_ids."""
    with pytest.raises(ValueError, match="token_ids"):
        prompt_positions(qwen2_vl(), ids)


def test_grid_wrong_dtype_and_shape():
    """Float grids are a TypeError; grids not of shape (n, 3) are a ValueError."""
    config = qwen2_vl()
    ids = tokens(config, "VS I*6 VE")
    with pytest.raises(TypeError, match="image_grid_thw"):
        prompt_positions(config, ids, image_grid_thw=[[1.0, 4.0, 6.0]])
    with pytest.raises(ValueError, match="image_grid_thw"):
        prompt_positions(config, ids, image_grid_thw=[1, 4, 6])


# --- rule 2: scanning ---------------------------------------------------------------


def test_placeholder_count_mismatch():
    """Text inside the placeholder run of a grid is a ValueError (count does not match)."""
    with pytest.raises(ValueError, match="does not match"):
        _pp(qwen2_vl(), "VS I*5 t I VE", image_grid_thw=[[1, 4, 6]])


def test_item_cut_off():
    """An item running past the end of the prompt is a ValueError."""
    with pytest.raises(ValueError, match="cut off"):
        _pp(qwen2_vl(), "t VS I*4", image_grid_thw=[[1, 4, 6]])


def test_more_items_than_grids():
    """A placeholder after the last grid is consumed is a ValueError."""
    with pytest.raises(ValueError, match="more image items"):
        _pp(qwen2_vl(), "VS I*6 VE VS I*4 VE", image_grid_thw=[[1, 4, 6]])


def test_fewer_items_than_grids():
    """A grid left unconsumed at the end of the prompt is a ValueError."""
    with pytest.raises(ValueError, match="fewer items"):
        _pp(qwen2_vl(), "VS I*6 VE", image_grid_thw=[[1, 4, 6], [1, 2, 2]])


# --- rule 3: grid values -----------------------------------------------------------------


@pytest.mark.parametrize("grid", [[0, 4, 6], [1, 3, 6], [1, 4, 5], [2, 4, 6]])
def test_bad_image_grid(grid):
    """A zero dimension, h or w not divisible by the merge size, or image t != 1 is a ValueError."""
    with pytest.raises(ValueError, match="image_grid_thw"):
        _pp(qwen2_vl(), "VS I*6 VE", image_grid_thw=[grid])


# --- rule 4: temporal scale ------------------------------------------------------------


def test_qwen2_vl_rejects_second_per_grid_ts():
    """Qwen2-VL numbers frames 0, 1, 2, ...; passing second_per_grid_ts is a ValueError."""
    with pytest.raises(ValueError, match="second_per_grid_ts"):
        _pp(qwen2_vl(), "VS V*12 VE", video_grid_thw=[[3, 4, 4]], second_per_grid_ts=[1.0])


@pytest.mark.parametrize("sp", [[float("nan")], [float("inf")], [-0.5], [1.0, 1.0], [1e30]])
def test_bad_second_per_grid_ts(sp):
    """Non-finite, negative, too large or wrongly counted sp values are a ValueError."""
    with pytest.raises(ValueError, match="second_per_grid_ts"):
        _pp(qwen2_5_vl(), "VS V*8 VE", video_grid_thw=[[4, 2, 4]], second_per_grid_ts=sp)


def test_second_per_grid_ts_defaults_to_one():
    """Without second_per_grid_ts every video uses sp = 1.0."""
    kwargs = dict(video_grid_thw=[[4, 2, 4]])
    default = _pp(qwen2_5_vl(), "t VS V*8 VE", **kwargs)
    explicit = _pp(qwen2_5_vl(), "t VS V*8 VE", second_per_grid_ts=[1.0], **kwargs)
    assert torch.equal(default[0], explicit[0]) and default[1] == explicit[1]


# --- rule 6: audio ----------------------------------------------------------------------


def test_audio_too_short():
    """An audio track with fewer than 3 mel frames (no token) is a ValueError."""
    with pytest.raises(ValueError, match="audio_feature_lengths"):
        _pp(omni(), "AS A AE", audio_feature_lengths=[2])


def test_audio_arguments_rejected_for_vl_families():
    """audio_feature_lengths and use_audio_in_video=True are ValueErrors for VL families."""
    with pytest.raises(ValueError, match="audio_feature_lengths"):
        _pp(qwen2_5_vl(), "t t", audio_feature_lengths=[20])
    with pytest.raises(ValueError, match="use_audio_in_video"):
        _pp(qwen2_5_vl(), "t t", use_audio_in_video=True)


# --- rule 7: Omni audio-in-video -------------------------------------------------------------

_AV = dict(video_grid_thw=[[4, 2, 4]], audio_feature_lengths=[24], use_audio_in_video=True)


@pytest.mark.parametrize(
    ("prompt", "kwargs", "match"),
    [
        ("t VS V*4 A*4 V*4 A*2 AE VE t", _AV, "audio_start"),  # missing audio_start
        ("t VS AS V*4 A*4 V*4 A*2 AE VE t", dict(_AV, audio_feature_lengths=None), "audio_feature_lengths"),
        ("t VS AS V*4 A*4 V*4 A*2 VE t", _AV, "audio_end"),  # missing audio_end
        ("t VS AS V*4 A*4 V*4 A*2 AE", _AV, "cut off"),
        ("t VS AS V*4 A*4 V*5 A*2 AE VE t", _AV, "expected 8 video and 6 audio tokens"),  # one video token too many
    ],
    ids=["no_audio_start", "no_audio_length", "no_audio_end", "cut_off", "wrong_count"],
)
def test_bad_audio_in_video_block(prompt, kwargs, match):
    """A malformed audio-in-video block or a video without an audio length is a ValueError."""
    with pytest.raises(ValueError, match=match):
        _pp(omni_toy(), prompt, **kwargs)


def test_audio_in_video_any_interleave_accepted():
    """Any interleave with the right counts is accepted: a processor's chunking is not checked."""
    config = omni_toy()
    chunked, _ = _pp(config, "t VS AS V*4 A*4 V*4 A*2 AE VE t", **_AV)
    unchunked, _ = _pp(config, "t VS AS V*8 A*6 AE VE t", **_AV)
    is_video = torch.tensor(tokens(config, "t VS AS V*4 A*4 V*4 A*2 AE VE t")) == config.video_token_id
    assert torch.equal(chunked[:, is_video], unchunked[:, 3:11])


def test_plain_video_when_audio_in_video_off():
    """With use_audio_in_video=False an Omni video is a plain R-max block."""
    positions, delta = _pp(omni_toy(), "t VS V*8 VE t", video_grid_thw=[[4, 2, 4]])
    assert positions[0].tolist() == [0, 1, 2, 2, 4, 4, 6, 6, 8, 8, 9, 10] and delta == -1


# --- rule 8 --------------------------------------------------------------------------------


def test_empty_prompt():
    """An empty prompt is a ValueError."""
    with pytest.raises(ValueError, match="token_ids"):
        prompt_positions(qwen2_vl(), [])
