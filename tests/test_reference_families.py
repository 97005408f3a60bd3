"""The torch reference on the per-frame families (Qwen3-VL, GLM-4.1V/4.5V), the
audio-in-video identity rule (Qwen2.5-Omni, Qwen3-Omni) and Qwen3-Omni float positions.

Expected rows were worked out by hand from the rules in docs/semantics.md; the
Qwen3-VL, Qwen3-Omni and GLM cases are the worked examples that were measured
on transformers 4.57.6 and vLLM 0.33.0 (the derivation is in each comment).
Configs are plain namespaces: the reference reads only raw fields.
"""

from __future__ import annotations

import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from family_prompts import qwen3_omni_merge
from hypothesis import assume, given
from hypothesis import strategies as st
from spec_cases import tokens

from mrope_tracker.reference import audio_token_count, next_positions, prompt_positions

QWEN_IDS = dict(image_token_id=151655, video_token_id=151656, vision_start_token_id=151652, vision_end_token_id=151653)


def qwen3_vl():
    return SimpleNamespace(family="qwen3_vl", spatial_merge_size=2, **QWEN_IDS)


def glm4v(**kw):
    """GLM-4.1V ids: vision start/end are <|begin_of_image|>/<|end_of_image|>."""
    values = dict(
        family="glm4v",
        spatial_merge_size=2,
        image_token_id=151343,
        video_token_id=151344,
        vision_start_token_id=151339,
        vision_end_token_id=151340,
        video_start_token_id=151341,
        video_end_token_id=151342,
    )
    return SimpleNamespace(**{**values, **kw})


def qwen3_omni(**kw):
    """Published Qwen3-Omni thinker values: position_id_per_seconds 13, n_window 50."""
    values = dict(
        family="qwen3_omni",
        spatial_merge_size=2,
        **QWEN_IDS,
        audio_token_id=151675,
        audio_start_token_id=151669,
        audio_end_token_id=151670,
        tokens_per_second=13,
        n_window=50,
    )
    return SimpleNamespace(**{**values, **kw})


def omni_toy(**kw):
    """Qwen2.5-Omni with the toy time scale r = 2 (chunks of 4 positions in its processor)."""
    values = dict(
        family="qwen2_5_omni",
        spatial_merge_size=2,
        **QWEN_IDS,
        audio_token_id=151646,
        audio_start_token_id=151647,
        audio_end_token_id=151648,
        tokens_per_second=2,
        seconds_per_chunk=2,
    )
    return SimpleNamespace(**{**values, **kw})


def rows(positions: torch.Tensor) -> list[list]:
    return positions.tolist()


# --- hand-worked examples ----------------------------------------------------------------------


def test_t8_qwen3_vl_image_and_video():
    """Qwen3-VL: every image and video frame is its own tau = 0 block; timestamps and brackets are text."""
    # image 2x3 at 2 (max 4, VE 5); frames of 2x2 at 10 and 16 (max 11, 17); delta 21 - 28.
    config = qwen3_vl()
    prompt = "t VS I*6 VE t ts ts VS V*4 VE ts ts VS V*4 VE t t"
    positions, delta = prompt_positions(
        config, tokens(config, prompt), image_grid_thw=[[1, 4, 6]], video_grid_thw=[[2, 4, 4]]
    )
    assert rows(positions) == [
        [0, 1, 2, 2, 2, 2, 2, 2, 5, 6, 7, 8, 9, 10, 10, 10, 10, 12, 13, 14, 15, 16, 16, 16, 16, 18, 19, 20],
        [0, 1, 2, 2, 2, 3, 3, 3, 5, 6, 7, 8, 9, 10, 10, 11, 11, 12, 13, 14, 15, 16, 16, 17, 17, 18, 19, 20],
        [0, 1, 2, 3, 4, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 10, 11, 12, 13, 14, 15, 16, 17, 16, 17, 18, 19, 20],
    ]
    assert delta == -7 and positions.dtype == torch.int64


def test_t12_glm_image_and_video():
    """GLM: image tokens inside begin/end_of_video are the video's frames, each a tau = 0 block."""
    # image 2x3 at 2 -> EI 5; BV 7, BI 8, frame at 9 (max 10), EI 11, ts 12 13, BI 14, frame at 15, EI 17 ...
    config = glm4v()
    prompt = "t VS I*6 VE t BV VS I*4 VE ts ts VS I*4 VE ts ts EV t t"
    positions, delta = prompt_positions(
        config, tokens(config, prompt), image_grid_thw=[[1, 4, 6]], video_grid_thw=[[2, 4, 4]]
    )
    assert rows(positions) == [
        [0, 1, 2, 2, 2, 2, 2, 2, 5, 6, 7, 8, 9, 9, 9, 9, 11, 12, 13, 14, 15, 15, 15, 15, 17, 18, 19, 20, 21, 22],
        [0, 1, 2, 2, 2, 3, 3, 3, 5, 6, 7, 8, 9, 9, 10, 10, 11, 12, 13, 14, 15, 15, 16, 16, 17, 18, 19, 20, 21, 22],
        [0, 1, 2, 3, 4, 2, 3, 4, 5, 6, 7, 8, 9, 10, 9, 10, 11, 12, 13, 14, 15, 16, 15, 16, 17, 18, 19, 20, 21, 22],
    ]
    assert delta == -7


T9 = dict(video_grid_thw=[[3, 2, 4]], audio_feature_lengths=[100], use_audio_in_video=True)


@pytest.mark.parametrize("float_positions", [False, True])
def test_t9_qwen3_omni_audio_in_video(float_positions):
    """Qwen3-Omni: vision_start b, audio_start b+1, content at b+2, audio_end e and vision_end e+1."""
    # pps 13, sp 1: tau 0, 13, 26; F = 100 -> 13 audio tokens; s = 3; last run = frames 1, 2 (max 29) -> e = 30.
    config = qwen3_omni()
    prompt = "t VS AS V*2 A*13 V*4 AE VE t"
    positions, delta = prompt_positions(
        config, tokens(config, prompt), second_per_grid_ts=[1.0], float_positions=float_positions, **T9
    )
    audio = list(range(3, 16))
    assert rows(positions) == [
        [0, 1, 2, 3, 3, *audio, 16, 16, 29, 29, 30, 31, 32],
        [0, 1, 2, 3, 3, *audio, 3, 3, 3, 3, 30, 31, 32],
        [0, 1, 2, 3, 4, *audio, 3, 4, 3, 4, 30, 31, 32],
    ]
    assert delta == 8
    assert positions.dtype == (torch.float32 if float_positions else torch.int64)
    assert type(delta) is (float if float_positions else int)


def test_t10_qwen3_omni_fractional_times():
    """sp 2/3 (fps 3): float positions keep f*sp*13 = 8.67, 17.33; integer positions truncate to 8, 17."""
    # The processor merges video times 0, 8.67, 17.33 with audio 0..12: V*2 A*9 V*2 A*4 V*2.
    config = qwen3_omni()
    ids = tokens(config, "t VS AS V*2 A*9 V*2 A*4 V*2 AE VE t")
    kwargs = dict(T9, second_per_grid_ts=[2 / 3])
    floats, float_delta = prompt_positions(config, ids, float_positions=True, **kwargs)
    assert floats[0, [3, 4, 14, 15, 20, 21, 22, 23, 24]].tolist() == pytest.approx(
        [3, 3, 3 + 26 / 3, 3 + 26 / 3, 3 + 52 / 3, 3 + 52 / 3, 4 + 52 / 3, 5 + 52 / 3, 6 + 52 / 3], abs=1e-5
    )
    assert float_delta == pytest.approx(7 + 52 / 3 - 25, abs=1e-5)
    ints, int_delta = prompt_positions(config, ids, **kwargs)
    assert ints[0, [3, 13, 14, 20, 22, 23, 24]].tolist() == [3, 11, 11, 20, 21, 22, 23]
    assert int_delta == -1


@pytest.mark.parametrize("float_positions", [False, True])
def test_t11_qwen3_omni_short_audio_after_big_frame(float_positions):
    """The block closes at 1 + max of its last run (7 audio tokens, max 9), not of the 8x8 frame (max 10)."""
    # F = 50: r = 50, g = 25, 7 tokens. s = 3: frame rows 3..10; audio 3..9; AE 10, VE 11, t 12; delta 13 - 77.
    config = qwen3_omni()
    ids = tokens(config, "t VS AS V*64 A*7 AE VE t")
    positions, delta = prompt_positions(
        config,
        ids,
        video_grid_thw=[[1, 16, 16]],
        audio_feature_lengths=[50],
        use_audio_in_video=True,
        float_positions=float_positions,
    )
    assert positions[:, 74:].tolist() == [[10, 11, 12]] * 3
    assert positions[:, 67:74].tolist() == [list(range(3, 10))] * 3
    assert delta == -64


# --- audio in video: the identity rule on any interleave --------------------------------------

_TOY = dict(video_grid_thw=[[4, 2, 4]], audio_feature_lengths=[24], use_audio_in_video=True)  # tau 0,2,4,6; 6 audio


def test_identity_rule_all_audio_first():
    """Audio tokens first: audio at s..s+5, then the video grid in order; the block closes after the video."""
    # t 0, VS 1, AS 1, s 2; video T 2,2,4,4,6,6,8,8; last run video (max 8) -> AE = VE = 9, t 10; delta 11 - 20.
    config = omni_toy()
    positions, delta = prompt_positions(config, tokens(config, "t VS AS A*6 V*8 AE VE t"), **_TOY)
    assert rows(positions) == [
        [0, 1, 1, 2, 3, 4, 5, 6, 7, 2, 2, 4, 4, 6, 6, 8, 8, 9, 9, 10],
        [0, 1, 1, 2, 3, 4, 5, 6, 7, 2, 2, 2, 2, 2, 2, 2, 2, 9, 9, 10],
        [0, 1, 1, 2, 3, 4, 5, 6, 7, 2, 3, 2, 3, 2, 3, 2, 3, 9, 9, 10],
    ]
    assert delta == -9


def test_identity_rule_all_video_first():
    """Video tokens first: the block closes at 1 + the last audio position (7), below the video's 8."""
    config = omni_toy()
    positions, delta = prompt_positions(config, tokens(config, "t VS AS V*8 A*6 AE VE t"), **_TOY)
    assert positions[0].tolist() == [0, 1, 1, 2, 2, 4, 4, 6, 6, 8, 8, 2, 3, 4, 5, 6, 7, 8, 8, 9]
    assert delta == -10


@pytest.mark.parametrize(
    "interleave",
    ["V*2 A*6 V*4", "V*2 A*4 V A*2 V*3"],
    ids=["vllm_processor_empty_chunks", "transformers_processor_split_frame"],
)
def test_identity_rule_frames_beyond_empty_chunks(interleave):
    """sp 5 puts frames at tau 0, 10, 20 (chunks of 4 left empty); both processors' layouts get the grid in order."""
    # video T: frame 0 at 2, frame 1 at 12, frame 2 at 22; audio 2..7; last run video (max 22) -> e 23; delta 25 - 18.
    config = omni_toy()
    ids = tokens(config, f"t VS AS {interleave} AE VE t")
    positions, delta = prompt_positions(
        config,
        ids,
        video_grid_thw=[[3, 2, 4]],
        second_per_grid_ts=[5.0],
        audio_feature_lengths=[24],
        use_audio_in_video=True,
    )
    is_video = torch.tensor(ids) == config.video_token_id
    assert positions[:, is_video].tolist() == [[2, 2, 12, 12, 22, 22], [2] * 6, [2, 3, 2, 3, 2, 3]]
    assert positions[:, torch.tensor(ids) == config.audio_token_id].tolist() == [list(range(2, 8))] * 3
    assert positions[:, 15:].tolist() == [[23, 23, 24]] * 3 and delta == 7


def test_qwen3_omni_identity_rule_audio_first():
    """Qwen3-Omni with all audio first: same video and audio positions as T9; e = 30 after the last video run."""
    config = qwen3_omni()
    ids = tokens(config, "t VS AS A*13 V*6 AE VE t")
    positions, delta = prompt_positions(config, ids, second_per_grid_ts=[1.0], **T9)
    assert positions[:, 3:16].tolist() == [list(range(3, 16))] * 3
    assert positions[:, 16:].tolist() == [
        [3, 3, 16, 16, 29, 29, 30, 31, 32],
        [3] * 6 + [30, 31, 32],
        [3, 4, 3, 4, 3, 4, 30, 31, 32],
    ]
    assert delta == 8


@pytest.mark.parametrize(
    ("config", "default"), [(omni_toy(), 1.0), (qwen3_omni(), 2.0)], ids=["qwen2_5_omni", "qwen3_omni"]
)
def test_omni_default_second_per_grid_ts(config, default):
    """Without second_per_grid_ts an Omni video uses its processor's default: 1.0 (Qwen2.5-Omni), 2.0 (Qwen3-Omni)."""
    ids = tokens(config, "t VS V*8 VE t")
    implicit = prompt_positions(config, ids, video_grid_thw=[[4, 2, 4]])
    explicit = prompt_positions(config, ids, video_grid_thw=[[4, 2, 4]], second_per_grid_ts=[default])
    other = prompt_positions(config, ids, video_grid_thw=[[4, 2, 4]], second_per_grid_ts=[3 - default])
    assert torch.equal(implicit[0], explicit[0]) and not torch.equal(implicit[0], other[0])


# --- rejections ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prompt", "match"),
    [
        ("t VS AS V*7 A*6 AE VE t", "expected 8 video and 6 audio tokens .* found 7 video and 6 audio"),
        ("t VS AS V*8 A*7 AE VE t", "expected 8 video and 6 audio tokens .* found 8 video and 7 audio"),
        ("t VS AS V*4 t A*6 V*4 AE VE t", "found 4 video and 0 audio tokens before token id 1001 at index 7"),
        ("t VS AS V*8 A*6 VE t", "expected audio_end, vision_end"),
        ("t VS AS V*8 A*6 AE", "cut off"),
        ("t VS V*8 A*6 AE VE t", "expected vision_start, audio_start"),
    ],
    ids=["video_short", "audio_long", "foreign_token", "no_audio_end", "cut_off", "no_audio_start"],
)
def test_bad_audio_in_video_block(prompt, match):
    """Wrong counts, a foreign token inside, or missing brackets are a ValueError saying what was expected and found."""
    config = omni_toy()
    with pytest.raises(ValueError, match=match):
        prompt_positions(config, tokens(config, prompt), **_TOY)


def test_qwen3_vl_frames_missing():
    """A Qwen3-VL video with fewer frame runs than t is a ValueError naming the video."""
    config = qwen3_vl()
    with pytest.raises(ValueError, match=r"video_grid_thw\[0\]: expected 2 frames in the prompt, got 1"):
        prompt_positions(config, tokens(config, "ts VS V*4 VE t"), video_grid_thw=[[2, 4, 4]])


@pytest.mark.parametrize("config", [qwen3_vl(), glm4v()], ids=["qwen3_vl", "glm4v"])
def test_per_frame_families_reject_second_per_grid_ts(config):
    """Qwen3-VL and GLM write time as text; a second_per_grid_ts is a ValueError."""
    prompt = "t VS I*4 VE t" if config.family == "qwen3_vl" else "t BV VS I*4 VE EV"
    ids = tokens(config, prompt.replace("I", "V") if config.family == "qwen3_vl" else prompt)
    with pytest.raises(ValueError, match="second_per_grid_ts: expected None for"):
        prompt_positions(config, ids, video_grid_thw=[[1, 4, 4]], second_per_grid_ts=[1.0])


def test_glm_video_split_across_brackets():
    """A GLM video whose frames sit in two begin/end_of_video pairs is a ValueError."""
    config = glm4v()
    ids = tokens(config, "BV VS I*4 VE EV t BV VS I*4 VE EV")
    with pytest.raises(ValueError, match="expected 2 frames inside one"):
        prompt_positions(config, ids, video_grid_thw=[[2, 4, 4]])


def test_glm_two_videos_in_one_bracket():
    """Frames of a second video inside the first video's begin/end_of_video pair are a ValueError."""
    config = glm4v()
    ids = tokens(config, "BV VS I*4 VE ts VS I*4 VE EV")
    with pytest.raises(ValueError, match="got another frame at index 9"):
        prompt_positions(config, ids, video_grid_thw=[[1, 4, 4], [1, 4, 4]])


def test_glm_image_tokens_outside_brackets_are_images():
    """GLM image tokens outside begin/end_of_video need an image grid, not a video one."""
    config = glm4v()
    with pytest.raises(ValueError, match="image_grid_thw: expected an item for the image placeholder"):
        prompt_positions(config, tokens(config, "t VS I*4 VE t"), video_grid_thw=[[1, 4, 4]])


def test_float_positions_only_for_qwen3_omni():
    """float_positions=True is a ValueError for any family but Qwen3-Omni."""
    config = qwen3_vl()
    with pytest.raises(ValueError, match="float_positions: expected False for qwen3_vl"):
        prompt_positions(config, [1, 2, 3], float_positions=True)


def test_float_positions_need_transformers_brackets():
    """Float positions follow transformers, which needs vision_start/vision_end around an image."""
    config = qwen3_omni()
    with pytest.raises(ValueError, match="vision_start .* before and vision_end"):
        prompt_positions(config, tokens(config, "t I*4 VE t"), image_grid_thw=[[1, 4, 4]], float_positions=True)


@pytest.mark.parametrize(
    ("config", "match"),
    [
        (qwen3_omni(n_window=None), "config.n_window: expected a value"),
        (qwen3_omni(tokens_per_second=None), "config.tokens_per_second: expected a value"),
        (qwen3_omni(tokens_per_second=-1.0), "config.tokens_per_second: expected a finite number > 0"),
        (glm4v(video_end_token_id=None), "config.video_end_token_id: expected a value"),
        (glm4v(video_start_token_id=151343), "expected distinct ids"),
        (SimpleNamespace(family="llava", spatial_merge_size=2), "config.family: expected one of"),
    ],
    ids=["no_n_window", "no_time_scale", "negative_time_scale", "no_video_end", "shared_id", "unknown_family"],
)
def test_bad_config_fields(config, match):
    """A missing or invalid raw config field is a ValueError naming it."""
    with pytest.raises(ValueError, match=match):
        prompt_positions(config, [1, 2, 3])


# --- Qwen3-Omni audio token count ---------------------------------------------------------------


@pytest.mark.parametrize(("frames", "count"), [(40, 5), (100, 13), (200, 26), (250, 33), (1, 1), (99, 13)])
def test_qwen3_omni_audio_token_count(frames, count):
    """Windows of 100 frames give 13 tokens each, the rest three stride-2 steps (F = 40 -> 5, 250 -> 33)."""
    assert audio_token_count(frames, n_window=50) == count


def test_qwen3_omni_audio_prompt_uses_windowed_count():
    """A standalone Qwen3-Omni clip of 250 frames takes 33 tokens that continue the text."""
    config = qwen3_omni()
    positions, delta = prompt_positions(config, tokens(config, "t AS A*33 AE t"), audio_feature_lengths=[250])
    assert rows(positions) == [list(range(37))] * 3 and delta == 0
    with pytest.raises(ValueError, match=r"audio_feature_lengths\[0\]"):
        prompt_positions(config, tokens(config, "t AS A*32 AE t"), audio_feature_lengths=[250])


def test_next_positions_float_delta():
    """A float delta continues float32 positions: index + delta on all rows."""
    out = next_positions(-2 / 3, 25, 2)
    assert out.dtype == torch.float32 and torch.equal(out[1:], out[:1].expand(2, -1))
    assert out[0].tolist() == pytest.approx([25 - 2 / 3, 26 - 2 / 3], abs=1e-5)


# --- properties ---------------------------------------------------------------------------------


@given(data=st.data(), family=st.sampled_from(("qwen2_5_omni", "qwen3_omni")))
def test_identity_rule_matches_plain_video(data, family):
    """In any interleave the k-th video token sits where token k of the plain video would, audio at s + k."""
    config = omni_toy() if family == "qwen2_5_omni" else qwen3_omni(tokens_per_second=3)
    t, h, w = data.draw(st.integers(1, 4)), data.draw(st.sampled_from((2, 4))), data.draw(st.sampled_from((2, 4, 6)))
    frames = data.draw(st.integers(3, 260))
    n_video = t * h * w // 4
    n_audio = audio_token_count(frames, n_window=config.n_window if family == "qwen3_omni" else None)
    kinds = data.draw(st.permutations(["V"] * n_video + ["A"] * n_audio))
    sp = data.draw(st.sampled_from((0.5, 1.0, 2.0, 2 / 3)))
    lead = data.draw(st.integers(0, 3))
    ids = tokens(config, " ".join(["t"] * lead + ["VS", "AS"] + kinds + ["AE", "VE", "t"]))
    positions, delta = prompt_positions(
        config,
        ids,
        video_grid_thw=[[t, h, w]],
        second_per_grid_ts=[sp],
        audio_feature_lengths=[frames],
        use_audio_in_video=True,
    )
    plain, _ = prompt_positions(
        config,
        tokens(config, " ".join(["t"] * lead + ["VS"] + ["V"] * n_video + ["VE"])),
        video_grid_thw=[[t, h, w]],
        second_per_grid_ts=[sp],
    )
    shift = 0 if family == "qwen2_5_omni" else 1  # Qwen3-Omni: audio_start takes its own position
    s = lead + 1 + shift
    block = positions[:, lead + 2 : lead + 2 + len(kinds)]
    is_video = torch.tensor([k == "V" for k in kinds])
    assert torch.equal(block[:, is_video], plain[:, lead + 1 : lead + 1 + n_video] + shift)
    assert block[:, ~is_video].tolist() == [list(range(s, s + n_audio))] * 3
    last = max(i for i, k in enumerate(kinds) if k != kinds[-1]) + 1 if len(set(kinds)) > 1 else 0
    e = int(block[:, last:].max()) + 1
    closing = [e, e] if family == "qwen2_5_omni" else [e, e + 1]
    assert positions[0, -3:].tolist() == [*closing, closing[-1] + 1]
    assert delta == int(positions.max()) + 1 - len(ids)


@given(
    seed=st.integers(0, 2**32 - 1),
    sp=st.sampled_from((1.0, 2.0, 3.0, 0.5)),
    pps=st.sampled_from((13, 2, 4)),
    use_aiv=st.booleans(),
)
def test_qwen3_omni_float_equals_integer_when_times_are_integers(seed, sp, pps, use_aiv):
    """With f*sp*pps integral, float positions (transformers' merge) equal integer ones (identity rule)."""
    assume(float(sp * pps).is_integer())
    rng = random.Random(seed)
    config = qwen3_omni(tokens_per_second=pps)
    words, images, videos, audio = ["t"] * rng.randint(0, 2), [], [], []
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(("image", "video", "audio"))
        if kind == "image":
            images.append([1, 4, 2])
            words += ["VS", "I*2", "VE"]
        elif kind == "audio":
            audio.append(rng.randint(1, 250))
            words += ["AS", f"A*{audio_token_count(audio[-1], n_window=50)}", "AE"]
        else:
            t, hw = rng.randint(1, 4), rng.choice((1, 2, 4))
            videos.append([t, 2, 2 * hw])
            if use_aiv:
                audio.append(rng.randint(1, 250))
                times = np.repeat(np.arange(t) * sp * pps, hw)
                words += ["VS", "AS", *qwen3_omni_merge(times, audio_token_count(audio[-1], n_window=50)), "AE", "VE"]
            else:
                words += ["VS", f"V*{t * hw}", "VE"]
        words += ["t"] * rng.randint(0, 2)
    ids = tokens(config, " ".join(words))
    kwargs = dict(
        image_grid_thw=images or None,
        video_grid_thw=videos or None,
        second_per_grid_ts=[sp] * len(videos) or None,
        audio_feature_lengths=audio or None,
        use_audio_in_video=use_aiv,
    )
    ints, int_delta = prompt_positions(config, ids, **kwargs)
    floats, float_delta = prompt_positions(config, ids, float_positions=True, **kwargs)
    assert floats.dtype == torch.float32 and torch.equal(floats, ints.float()) and float_delta == int_delta


@given(data=st.data())
def test_per_frame_video_equals_images(data):
    """A Qwen3-VL or GLM video frame is positioned exactly like an image of the same size in its place."""
    family = data.draw(st.sampled_from(("qwen3_vl", "glm4v")))
    config = qwen3_vl() if family == "qwen3_vl" else glm4v()
    frame = "V" if family == "qwen3_vl" else "I"
    videos = data.draw(
        st.lists(st.tuples(st.integers(1, 3), st.sampled_from((2, 4)), st.sampled_from((2, 6))), min_size=1, max_size=3)
    )
    as_video, as_images = ["t"], ["t"]
    for t, h, w in videos:
        frames = []
        for _ in range(t):
            frames += ["ts"] * data.draw(st.integers(0, 2)) + ["VS", f"{frame}*{h * w // 4}", "VE"]
        if family == "glm4v":
            as_video += ["BV", *frames, "EV"]
            as_images += ["t", *[word.replace("V*", "I*") for word in frames], "t"]
        else:
            as_video += frames
            as_images += [word.replace("V*", "I*") for word in frames]
        as_video.append("t")
        as_images.append("t")
    got = prompt_positions(config, tokens(config, " ".join(as_video)), video_grid_thw=[list(v) for v in videos])
    images = [[1, h, w] for t, h, w in videos for _ in range(t)]
    want = prompt_positions(config, tokens(config, " ".join(as_images)), image_grid_thw=images)
    assert torch.equal(got[0], want[0]) and got[1] == want[1]
