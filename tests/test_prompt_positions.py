"""The fast path (`prompt_positions`, `PromptLayout`) against `mrope_tracker.reference`.

Differential tests over the shared random prompts (tests/strategies.py), the
layout's two builders and slice writers, every accepted input form, and
focused prompt families (images, fractional-fps videos, Omni audio and
audio-in-video with chunk boundaries). Reference semantics: docs/semantics.md
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from family_prompts import TEXT_IDS as FAMILY_TEXT_IDS
from family_prompts import prompts_of
from hypothesis import given
from hypothesis import strategies as st
from spec_cases import tokens
from strategies import FPS_VALUES, TEXT_IDS, Prompt, audio_tokens, configs, interleave_kinds, prompts, tau_values
from vllm_features import PlaceholderRange

from mrope_tracker import MRopeConfig, PromptLayout, prompt_positions, reference

# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------


def _reference(prompt: Prompt) -> tuple[np.ndarray, int]:
    positions, delta = reference.prompt_positions(prompt.config, prompt.token_ids, **prompt.kwargs())
    return positions.numpy(), delta


def _assert_fast_matches_reference(prompt: Prompt) -> tuple[np.ndarray, int]:
    """Run both implementations on `prompt`, check they agree, return the fast result."""
    expected, expected_delta = _reference(prompt)
    positions, delta = prompt_positions(prompt.config, prompt.token_ids, **prompt.kwargs())
    assert isinstance(positions, np.ndarray) and positions.dtype == np.int64
    assert positions.shape == (3, prompt.num_tokens)
    np.testing.assert_array_equal(positions, expected)
    assert type(delta) is int and delta == expected_delta
    return positions, delta


def _layouts(prompt: Prompt) -> tuple[PromptLayout, PromptLayout]:
    from_tokens = PromptLayout.from_tokens(prompt.config, prompt.token_ids, **prompt.kwargs())
    from_ranges = PromptLayout.from_ranges(prompt.config, prompt.num_tokens, **prompt.range_kwargs())
    return from_tokens, from_ranges


# Segments of a hand-built prompt (h', w' are LLM grid sizes, after merging):
#   ("text", n) | ("image", h', w', wrap) | ("video", t, h', w', sp, wrap)
#   | ("audio", frames, wrap) | ("av", t, h', w', sp, frames)
# sp is None for Qwen2-VL (no time scale). "av" segments make the prompt
# use_audio_in_video, and then every video must be one.


def build_prompt(config: MRopeConfig, segments) -> Prompt:
    """A valid Prompt from a segment list (layouts as the processors write them)."""
    merge = config.spatial_merge_size
    av = any(seg[0] == "av" for seg in segments)
    ids: list[int] = []
    images, videos, sps, audio_lengths = [], [], [], []
    ranges = {"image": [], "video": [], "audio": []}
    text = 0

    def wrapped(open_id, close_id, wrap, kind, run):
        if wrap:
            ids.append(open_id)
        ranges[kind].append((len(ids), len(run)))
        ids.extend(run)
        if wrap:
            ids.append(close_id)

    for seg in segments:
        kind = seg[0]
        if kind == "text":
            for _ in range(seg[1]):
                ids.append(int(TEXT_IDS[text % len(TEXT_IDS)]))
                text += 1
        elif kind == "image":
            _, h, w, wrap = seg
            images.append((1, h * merge, w * merge))
            wrapped(
                config.vision_start_token_id,
                config.vision_end_token_id,
                wrap,
                "image",
                [config.image_token_id] * (h * w),
            )
        elif kind == "audio":
            _, frames, wrap = seg
            audio_lengths.append(frames)
            run = [config.audio_token_id] * audio_tokens(frames)
            wrapped(config.audio_start_token_id, config.audio_end_token_id, wrap, "audio", run)
        elif kind == "video":
            assert not av, "with use_audio_in_video every video is an audio-in-video block"
            _, t, h, w, sp, wrap = seg
            videos.append((t, h * merge, w * merge))
            sps.append(sp)
            wrapped(
                config.vision_start_token_id,
                config.vision_end_token_id,
                wrap,
                "video",
                [config.video_token_id] * (t * h * w),
            )
        else:  # "av"
            _, t, h, w, sp, frames = seg
            videos.append((t, h * merge, w * merge))
            sps.append(sp)
            audio_lengths.append(frames)
            tau = tau_values(t, np.float32(sp), config.tokens_per_second)
            order = interleave_kinds(tau, h * w, audio_tokens(frames), config.audio_chunk_positions)
            ids.extend([config.vision_start_token_id, config.audio_start_token_id])
            run = [config.video_token_id if k == "V" else config.audio_token_id for k in order]
            ranges["video"].append((len(ids), len(run)))
            ids.extend(run)
            ids.extend([config.audio_end_token_id, config.vision_end_token_id])
    assert ids, "a prompt needs at least one token"
    scaled = config.tokens_per_second is not None
    assert all((sp is None) == (not scaled) for sp in sps)
    return Prompt(
        config=config,
        token_ids=np.array(ids, dtype=np.int64),
        image_grid_thw=np.array(images, dtype=np.int64).reshape(-1, 3),
        video_grid_thw=np.array(videos, dtype=np.int64).reshape(-1, 3),
        second_per_grid_ts=np.array(sps, dtype=np.float32) if sps and scaled else None,
        audio_feature_lengths=np.array(audio_lengths, dtype=np.int64) if audio_lengths else None,
        use_audio_in_video=av,
        image_ranges=np.array(ranges["image"], dtype=np.int64).reshape(-1, 2),
        video_ranges=np.array(ranges["video"], dtype=np.int64).reshape(-1, 2),
        audio_ranges=np.array(ranges["audio"], dtype=np.int64).reshape(-1, 2),
    )


def _sp_from_fps():
    """second_per_grid_ts = temporal_patch_size / fps, as the HF processor computes it."""
    return st.sampled_from(FPS_VALUES).map(lambda fps: float(np.float32(2.0 / fps)))


@st.composite
def segment_lists(draw, config, kinds, max_items=4, max_text=5, min_text=0, text_at_ends=True):
    """Items of the given kinds with text runs of min_text..max_text tokens between them."""
    scaled = config.tokens_per_second is not None
    items = draw(st.lists(st.sampled_from(kinds), min_size=1, max_size=max_items))
    segments = []

    def text(lo):
        segments.append(("text", draw(st.integers(lo, max(lo, max_text)))))

    if text_at_ends:
        text(0)
    for n, kind in enumerate(items):
        if n:
            text(min_text)
        sp = draw(_sp_from_fps()) if scaled else None
        if kind == "image":
            segments.append(("image", draw(st.integers(1, 4)), draw(st.integers(1, 4)), draw(st.booleans())))
        elif kind == "video":
            t, h, w = draw(st.integers(1, 6)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
            segments.append(("video", t, h, w, sp, draw(st.booleans())))
        elif kind == "audio":
            segments.append(("audio", draw(st.integers(3, 80)), draw(st.booleans())))
        else:
            t, h, w = draw(st.integers(1, 6)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
            segments.append(("av", t, h, w, sp, draw(st.integers(3, 60))))
    if text_at_ends:
        text(0)
    return segments


# Omni configs with small interleave chunks C = int(r * seconds_per_chunk), so
# small grids cross chunk boundaries; fps < 1 then leaves chunks empty.
_OMNI_TOY = [(1, 1), (2, 1), (2, 2), (3, 1), (2.5, 2), (13, 0.5), (25, 2)]


def omni_configs():
    return st.builds(
        lambda rs, merge: MRopeConfig(
            family="qwen2_5_omni", spatial_merge_size=merge, tokens_per_second=rs[0], seconds_per_chunk=rs[1]
        ),
        st.sampled_from(_OMNI_TOY),
        st.sampled_from((1, 2)),
    )


# --------------------------------------------------------------------------
# differential tests over the shared random prompts
# --------------------------------------------------------------------------


@given(prompts())
def test_fast_path_matches_reference(prompt):
    """prompt_positions returns the reference's int64 (3, L) positions and its int delta."""
    _assert_fast_matches_reference(prompt)


@given(prompts())
def test_layout_builders_agree(prompt):
    """PromptLayout.from_tokens and .from_ranges build identical rows, scales and delta,
    and both produce the prompt's positions."""
    expected, delta = prompt_positions(prompt.config, prompt.token_ids, **prompt.kwargs())
    from_tokens, from_ranges = _layouts(prompt)
    np.testing.assert_array_equal(from_tokens.rows, from_ranges.rows)
    np.testing.assert_array_equal(from_tokens.scales, from_ranges.scales)
    for layout in (from_tokens, from_ranges):
        assert layout.num_tokens == prompt.num_tokens
        assert type(layout.delta) is int and layout.delta == delta
        positions = layout.positions()
        assert positions.dtype == np.int64
        np.testing.assert_array_equal(positions, expected)


@given(st.data())
def test_positions_slice(data):
    """layout.positions(start, end) equals the [start, end) columns of the whole prompt."""
    prompt = data.draw(prompts())
    expected, _ = prompt_positions(prompt.config, prompt.token_ids, **prompt.kwargs())
    start = data.draw(st.integers(0, prompt.num_tokens), label="start")
    end = data.draw(st.integers(start, prompt.num_tokens), label="end")
    for layout in _layouts(prompt):
        got = layout.positions(start, end)
        assert got.dtype == np.int64 and got.shape == (3, end - start)
        np.testing.assert_array_equal(got, expected[:, start:end])
        np.testing.assert_array_equal(layout.positions(start), expected[:, start:])


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl"])
def test_every_slice_of_a_grid(family):
    """Every [start, end) of a prompt holding one image and one multi-frame
    video (slices that start at a frame or row edge and end inside a row, the
    cases random slices rarely draw) equals the whole prompt's columns."""
    config = MRopeConfig(family=family)
    prompt = build_prompt(
        config,
        [
            ("text", 2),
            ("image", 3, 4, True),
            ("video", 3, 3, 4, None if family == "qwen2_vl" else 2.0, True),
            ("text", 1),
        ],
    )
    expected, _ = _reference(prompt)
    for layout in _layouts(prompt):
        for start in range(prompt.num_tokens + 1):
            for end in range(start, prompt.num_tokens + 1):
                np.testing.assert_array_equal(layout.positions(start, end), expected[:, start:end])


@given(st.data())
def test_rows_of_a_huge_frame(data):
    """Grid tokens take their row from a float reciprocal below 2**50 tokens
    into a frame, and from integer division past it (where the float would
    be wrong: this test fails with the bound lifted). Slices of a frame of
    2**56 tokens (a layout from ranges reads no tokens), below the bound and
    past it, equal the integer formula, whatever the row width."""
    config = MRopeConfig(family="qwen2_vl")
    w = data.draw(st.sampled_from([2**28 + 1, 2**28 - 1, 3 * 2**25 + 5, 2**14 + 3, 18, 7]), label="w")
    h = (2**56 + w - 1) // w
    layout = PromptLayout.from_ranges(config, 1 + h * w, image_ranges=[(1, h * w)], image_grid_thw=[[1, 2 * h, 2 * w]])
    # slices around the end of a row: below the bound, near it, far past it, the frame's last
    row_end = data.draw(st.sampled_from([7, 2**50 // w - 1, 2**50 // w + 1, 2**53 // w, h // 3, h]), label="row") * w
    start = 1 + min(h * w, max(0, row_end + data.draw(st.integers(-300, 3), label="from row end")))
    end = start + data.draw(st.integers(0, min(600, 1 + h * w - start)), label="count")
    m = np.arange(start - 1, end - 1, dtype=np.int64)  # grid token index
    got = layout.positions(start, end)
    np.testing.assert_array_equal(got[0], np.ones_like(m))
    np.testing.assert_array_equal(got[1], 1 + m // w)
    np.testing.assert_array_equal(got[2], 1 + m % w)


@given(st.data())
def test_long_videos_of_small_frames(data):
    """A video's H and W rows are written for its first frame and copied
    forward, in blocks that double and then stay near a thousand tokens: long
    videos of frames whose size does not divide that, from the start and
    from a slice that starts mid-frame, equal the reference."""
    config = MRopeConfig(family="qwen2_5_vl", tokens_per_second=2.0)
    t, h, w = data.draw(st.sampled_from([(1500, 2, 6), (300, 6, 10), (40, 26, 34), (700, 2, 2)]), label="grid")
    size = t * (h // 2) * (w // 2)
    ids = [5] + [config.vision_start_token_id] + [config.video_token_id] * size + [config.vision_end_token_id, 6]
    kwargs = dict(video_grid_thw=[[t, h, w]], second_per_grid_ts=[0.5])
    expected, expected_delta = reference.prompt_positions(config, ids, **kwargs)
    positions, delta = prompt_positions(config, ids, **kwargs)
    np.testing.assert_array_equal(positions, expected.numpy())
    assert delta == expected_delta
    layout = PromptLayout.from_ranges(config, len(ids), video_ranges=[(2, size)], **kwargs)
    start = data.draw(st.integers(0, len(ids)), label="start")
    end = data.draw(st.integers(start, len(ids)), label="end")
    np.testing.assert_array_equal(layout.positions(start, end), expected.numpy()[:, start:end])


@given(st.data())
def test_write_positions_into_offset_buffer(data):
    """write_positions fills out[:, off:off + end - start] with the slice and leaves the rest alone."""
    prompt = data.draw(prompts())
    expected, _ = prompt_positions(prompt.config, prompt.token_ids, **prompt.kwargs())
    start = data.draw(st.integers(0, prompt.num_tokens), label="start")
    end = data.draw(st.integers(start, prompt.num_tokens), label="end")
    offset = data.draw(st.integers(0, 5), label="out_offset")
    tail = data.draw(st.integers(0, 3), label="tail")
    sentinel = -7
    for layout in _layouts(prompt):
        out = np.full((3, offset + end - start + tail), sentinel, dtype=np.int64)
        layout.write_positions(out, offset, start, end)
        np.testing.assert_array_equal(out[:, offset : offset + end - start], expected[:, start:end])
        assert (out[:, :offset] == sentinel).all() and (out[:, offset + end - start :] == sentinel).all()


# --------------------------------------------------------------------------
# input forms
# --------------------------------------------------------------------------


def _strided(array: np.ndarray) -> np.ndarray:
    """The same values as a non-contiguous view (every other row of a doubled array)."""
    view = np.repeat(array, 2, axis=0)[::2]
    assert not view.flags.c_contiguous or view.shape[0] <= 1
    return view


def _read_only(array: np.ndarray) -> np.ndarray:
    view = array.copy()
    view.flags.writeable = False
    return view


# form -> converter of an int64 (token ids, grids, lengths, ranges) and a float32 (sp) array
FORMS = {
    "list": (lambda a: a.tolist(), lambda a: a.tolist()),
    "tuple": (lambda a: tuple(map(tuple, a)) if a.ndim == 2 else tuple(a.tolist()), lambda a: tuple(a.tolist())),
    "numpy_narrow": (lambda a: a.astype(np.int32), lambda a: a.astype(np.float64)),
    "numpy_strided": (_strided, _strided),
    "numpy_read_only": (_read_only, _read_only),
    "numpy_fortran": (lambda a: np.asfortranarray(a) if a.ndim == 2 else _strided(a), _strided),
    "torch": (lambda a: torch.from_numpy(a.copy()), lambda a: torch.from_numpy(a.copy())),
    "torch_narrow": (lambda a: torch.from_numpy(a.astype(np.int32)), lambda a: torch.from_numpy(a.astype(np.float64))),
    "torch_strided": (
        lambda a: torch.from_numpy(np.repeat(a, 2, axis=0))[::2],
        lambda a: torch.from_numpy(np.repeat(a, 2))[::2],
    ),
}

_INT_ARGS = (
    "image_grid_thw",
    "video_grid_thw",
    "audio_feature_lengths",
    "image_ranges",
    "video_ranges",
    "audio_ranges",
)


def _convert(kwargs: dict, form: str) -> dict:
    to_int, to_float = FORMS[form]
    out = {}
    for name, value in kwargs.items():
        if name in _INT_ARGS:
            out[name] = to_int(value)
        elif name == "second_per_grid_ts":
            out[name] = to_float(value)
        else:
            out[name] = value
    return out


def _values(value) -> np.ndarray:
    """A copy of an input's values as a numpy array (tensors included)."""
    return value.numpy().copy() if isinstance(value, torch.Tensor) else np.array(value, copy=True)


@pytest.mark.parametrize("form", sorted(FORMS))
@given(prompt=prompts(max_items=3))
def test_input_forms_agree(form, prompt):
    """Lists, tuples, narrow dtypes, non-contiguous, read-only and torch inputs (token ids,
    grids, sp, audio lengths, ranges) give the same results as int64 numpy arrays."""
    expected, delta = prompt_positions(prompt.config, prompt.token_ids, **prompt.kwargs())
    canonical = PromptLayout.from_tokens(prompt.config, prompt.token_ids, **prompt.kwargs())
    ids = FORMS[form][0](prompt.token_ids)
    kwargs = _convert(prompt.kwargs(), form)
    range_kwargs = _convert(prompt.range_kwargs(), form)
    snapshot = [_values(v) for v in [ids, *kwargs.values(), *range_kwargs.values()]]
    positions, got = prompt_positions(prompt.config, ids, **kwargs)
    np.testing.assert_array_equal(positions, expected)
    assert got == delta
    from_tokens = PromptLayout.from_tokens(prompt.config, ids, **kwargs)
    from_ranges = PromptLayout.from_ranges(prompt.config, prompt.num_tokens, **range_kwargs)
    for layout in (from_tokens, from_ranges):
        np.testing.assert_array_equal(layout.rows, canonical.rows)
        assert layout.delta == delta
    # the inputs are never written
    for before, after in zip(snapshot, [ids, *kwargs.values(), *range_kwargs.values()]):
        np.testing.assert_array_equal(_values(after), before)


@given(prompts(max_items=3))
def test_ranges_as_objects(prompt):
    """Ranges given as objects with .offset/.length (vLLM's PlaceholderRange) equal (n, 2) arrays."""
    kwargs = prompt.range_kwargs()
    for name in ("image_ranges", "video_ranges", "audio_ranges"):
        kwargs[name] = [PlaceholderRange(int(o), int(n)) for o, n in kwargs[name]]
    canonical = PromptLayout.from_ranges(prompt.config, prompt.num_tokens, **prompt.range_kwargs())
    layout = PromptLayout.from_ranges(prompt.config, np.int64(prompt.num_tokens), **kwargs)
    np.testing.assert_array_equal(layout.rows, canonical.rows)
    assert layout.delta == canonical.delta


def test_config_given_as_hf_dict():
    """Every entry point accepts a config.json dict in place of an MRopeConfig."""
    hf = {
        "model_type": "qwen2_5_vl",
        "image_token_id": 151655,
        "video_token_id": 151656,
        "vision_start_token_id": 151652,
        "vision_end_token_id": 151653,
        "vision_config": {"spatial_merge_size": 2, "tokens_per_second": 2},
    }
    config = MRopeConfig.from_hf_config(hf)
    prompt = build_prompt(config, [("text", 2), ("video", 3, 1, 2, 0.5, True), ("text", 1)])
    expected, delta = prompt_positions(config, prompt.token_ids, **prompt.kwargs())
    positions, got = prompt_positions(hf, prompt.token_ids, **prompt.kwargs())
    np.testing.assert_array_equal(positions, expected)
    assert got == delta
    assert PromptLayout.from_tokens(hf, prompt.token_ids, **prompt.kwargs()).delta == delta
    assert PromptLayout.from_ranges(hf, prompt.num_tokens, **prompt.range_kwargs()).delta == delta


# --------------------------------------------------------------------------
# focused prompt families
# --------------------------------------------------------------------------


@given(st.data())
def test_images_only(data):
    """Prompts of images (wrapped or bare) and text match the reference in every family."""
    config = data.draw(configs())
    prompt = build_prompt(config, data.draw(segment_lists(config, ("image",))))
    _assert_fast_matches_reference(prompt)


@pytest.mark.parametrize("r", [2, 4])
@given(st.data())
def test_videos_fractional_fps(r, data):
    """Qwen2.5-VL videos at the frame rates that expose float32 rounding (divergence D3 in docs/semantics.md) match
    the reference, and their T rows are s + trunc(float32(float32(f * sp) * r))."""
    config = MRopeConfig(
        family="qwen2_5_vl", spatial_merge_size=data.draw(st.sampled_from((1, 2))), tokens_per_second=r
    )
    fps = data.draw(st.sampled_from(FPS_VALUES), label="fps")
    sp = np.float32(2.0 / fps)
    t, h, w = data.draw(st.integers(1, 12)), data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2))
    lead = data.draw(st.integers(0, 3))
    prompt = build_prompt(config, [("text", lead), ("video", t, h, w, float(sp), True), ("text", 2)])
    positions, _ = _assert_fast_matches_reference(prompt)
    s = lead + 1  # text 0 .. lead-1 and vision_start at lead: the block starts at token and position lead + 1
    frame_t = positions[0, s : s + t * h * w : h * w]
    np.testing.assert_array_equal(frame_t - s, tau_values(t, sp, r))


@pytest.mark.parametrize(
    ("r", "tau"),
    [
        # sp = float32(2 / 1.2) = 1.66666663. r = 2: T5, tau 0, 3, 6, 10.
        (2, [0, 3, 6, 10]),
        # r = 4: f = 1: float32(1.66666663 * 4) = 6.6666665 -> 6; f = 2: 3.33333325 * 4 =
        # 13.333333 -> 13; f = 3: 3 * 1.66666663 = 4.99999988, rounded to float32 5.0,
        # * 4 = 20 -> 20 (float64 would give 19.9999995 -> 19).
        (4, [0, 6, 13, 20]),
    ],
)
def test_fps_1_2_float32_rounding(r, tau):
    """At fps 1.2 the temporal indices follow float32 products (derived by hand above)."""
    config = MRopeConfig(family="qwen2_5_vl", tokens_per_second=r)
    prompt = build_prompt(config, [("text", 1), ("video", 4, 1, 2, float(np.float32(2 / 1.2)), True), ("text", 1)])
    positions, _ = _assert_fast_matches_reference(prompt)
    assert positions[0, 2:10].tolist() == [2 + x for x in tau for _ in range(2)]


@given(st.data())
def test_omni_audio(data):
    """Omni standalone audio (with images and plain videos) matches the reference."""
    config = data.draw(omni_configs())
    prompt = build_prompt(config, data.draw(segment_lists(config, ("audio", "audio", "image", "video"))))
    _assert_fast_matches_reference(prompt)


@given(st.data())
def test_omni_audio_in_video(data):
    """Omni audio-in-video blocks (small chunks, fps < 1 leaving chunks empty, several blocks,
    audio clips and images between) match the reference; both layout builders agree."""
    config = data.draw(omni_configs())
    prompt = build_prompt(config, data.draw(segment_lists(config, ("av", "av", "audio", "image"))))
    positions, delta = _assert_fast_matches_reference(prompt)
    from_tokens, from_ranges = _layouts(prompt)
    np.testing.assert_array_equal(from_tokens.rows, from_ranges.rows)
    for layout in (from_tokens, from_ranges):
        np.testing.assert_array_equal(layout.positions(), positions)
        assert layout.delta == delta


# Toy Omni config r = 2, seconds_per_chunk = 1 -> chunk C = 2; F = 12 mel frames -> n_a = 3
# audio tokens, audio chunks [0, 2), [2, 3) (values 0, 1 | 2). Prompt t VS AS <...> AE VE t:
# t at 0, VS = AS = b = 1, block base s = 2, audio token a at s + a.
_AV_HAND = [
    pytest.param(
        # video (2, 2, 2) -> t' = 2 frames of 1 x 1, sp = 2.0 -> tau = 0, trunc(1 * 2 * 2) = 4.
        # Video values 0 | 4: the walker closes a chunk at 4 >= 2, so chunks [0, 1), [1, 2)
        # (frame 1 belongs to vLLM's chunk 2; chunk 1 is empty there). Layout V A A V A.
        # V0 = (2, 2, 2), A = 2, 3, V1 = (2 + 4, 2, 2), A = 4. The last chunk is audio
        # (max 4) -> AE = VE = 5, t = 6. max = 6 -> delta = 6 + 1 - 11 = -4.
        "t VS AS V A A V A AE VE t",
        [2, 2, 2],
        (
            (0, 1, 1, 2, 2, 3, 6, 4, 5, 5, 6),
            (0, 1, 1, 2, 2, 3, 2, 4, 5, 5, 6),
            (0, 1, 1, 2, 2, 3, 2, 4, 5, 5, 6),
        ),
        -4,
        id="chunk_skipped_audio_last",
    ),
    pytest.param(
        # video (2, 2, 4) -> t' = 2 frames of 1 x 2, sp = 2.0 -> tau = 0, 4. Video values
        # 0 0 | 4 | 4: at the first token of frame 1, 4 >= 1*2 closes a chunk; at the second,
        # 4 >= 2*2 closes another, so frame 1 is split into one-token chunks (HF walker).
        # Layout V V A A V A V. Frame 0: (2,2,2), (2,2,3); A = 2, 3; frame 1: (6,2,2); A = 4;
        # (6,2,3). The last chunk is video (max 6) -> AE = VE = 7, t = 8; delta = 8 + 1 - 13 = -4.
        "t VS AS V V A A V A V AE VE t",
        [2, 2, 4],
        (
            (0, 1, 1, 2, 2, 2, 3, 6, 4, 6, 7, 7, 8),
            (0, 1, 1, 2, 2, 2, 3, 2, 4, 2, 7, 7, 8),
            (0, 1, 1, 2, 3, 2, 3, 2, 4, 3, 7, 7, 8),
        ),
        -4,
        id="frame_split_video_last",
    ),
]


@pytest.mark.parametrize(("prompt", "grid", "rows", "delta"), _AV_HAND)
def test_audio_in_video_chunk_walker(prompt, grid, rows, delta):
    """Audio-in-video chunks follow transformers' walker, eos pair at 1 + max of the last
    chunk (derived by hand above), in both implementations and both layout builders."""
    config = MRopeConfig(family="qwen2_5_omni", tokens_per_second=2, seconds_per_chunk=1)
    ids = tokens(config, prompt)
    kwargs = dict(video_grid_thw=[grid], second_per_grid_ts=[2.0], audio_feature_lengths=[12], use_audio_in_video=True)
    expected = [list(row) for row in rows]
    positions, got = prompt_positions(config, ids, **kwargs)
    assert positions.tolist() == expected and got == delta
    ref, ref_delta = reference.prompt_positions(config, ids, **kwargs)
    assert ref.tolist() == expected and ref_delta == delta
    layout = PromptLayout.from_ranges(config, len(ids), video_ranges=[[3, len(ids) - 6]], **kwargs)
    assert layout.positions().tolist() == expected and layout.delta == delta
    # the strategies' literal walker lays the block out the same way
    t, h, w = grid
    built = build_prompt(config, [("text", 1), ("av", t, h // 2, w // 2, 2.0, 12), ("text", 1)])
    assert built.token_ids[1:-1].tolist() == ids[1:-1]


def _item_kinds(config: MRopeConfig, av: bool) -> tuple[str, ...]:
    if not config.is_omni:
        return ("image", "video")
    return ("image", "audio", "av") if av else ("image", "audio", "video")


@given(st.data())
def test_adjacent_items(data):
    """Items with no text between them (bare or wrapped) match the reference."""
    config = data.draw(configs())
    av = config.is_omni and data.draw(st.booleans())
    segments = data.draw(segment_lists(config, _item_kinds(config, av), max_items=5, max_text=0))
    prompt = build_prompt(config, segments)
    _assert_fast_matches_reference(prompt)
    from_tokens, from_ranges = _layouts(prompt)
    np.testing.assert_array_equal(from_tokens.rows, from_ranges.rows)


@given(st.data())
def test_items_at_prompt_edges(data):
    """A prompt that starts and ends inside items (no text at either end) matches the reference."""
    config = data.draw(configs())
    av = config.is_omni and data.draw(st.booleans())
    segments = data.draw(segment_lists(config, _item_kinds(config, av), max_items=3, text_at_ends=False))
    prompt = build_prompt(config, segments)
    ids = prompt.token_ids
    edge_ids = {
        config.image_token_id,
        config.video_token_id,
        config.audio_token_id,
        config.vision_start_token_id,
        config.vision_end_token_id,
        config.audio_start_token_id,
        config.audio_end_token_id,
    }
    assert ids[0] in edge_ids and ids[-1] in edge_ids
    positions, delta = _assert_fast_matches_reference(prompt)
    for layout in _layouts(prompt):
        np.testing.assert_array_equal(layout.positions(), positions)
        assert layout.delta == delta


def test_single_bare_item_is_whole_prompt(family_config):
    """A prompt made of one bare item and nothing else matches the reference, for each kind."""
    sp = None if family_config.tokens_per_second is None else 0.5
    segments = [("image", 2, 3, False), ("video", 3, 2, 2, sp, False)]
    if family_config.is_omni:
        segments.append(("audio", 20, False))
    for segment in segments:
        prompt = build_prompt(family_config, [segment])
        # 1 x 2 x 3 image, 3 x 2 x 2 video, F = 20 -> 5 audio tokens
        assert prompt.num_tokens == {"image": 6, "video": 12, "audio": 5}[segment[0]]
        _assert_fast_matches_reference(prompt)


@given(st.data())
def test_text_only(data):
    """A prompt without placeholders gets 0 .. L-1 on every row and delta 0,
    also with vision/audio start and end tokens and empty grids."""
    config = data.draw(configs())
    specials = [config.vision_start_token_id, config.vision_end_token_id]
    if config.is_omni:
        specials += [config.audio_start_token_id, config.audio_end_token_id]
    ids = data.draw(st.lists(st.sampled_from(TEXT_IDS.tolist() + specials), min_size=1, max_size=40))
    kwargs = {}
    if data.draw(st.booleans()):
        kwargs = dict(image_grid_thw=[], video_grid_thw=np.zeros((0, 3), np.int64))
    if config.is_omni and data.draw(st.booleans()):
        kwargs["use_audio_in_video"] = True
    expected = np.tile(np.arange(len(ids), dtype=np.int64), (3, 1))
    positions, delta = prompt_positions(config, ids, **kwargs)
    np.testing.assert_array_equal(positions, expected)
    assert delta == 0
    ref, ref_delta = reference.prompt_positions(config, ids, **kwargs)
    np.testing.assert_array_equal(ref.numpy(), expected)
    assert ref_delta == 0
    layout = PromptLayout.from_tokens(config, ids, **kwargs)
    assert layout.delta == 0 and layout.num_rows == 1
    np.testing.assert_array_equal(PromptLayout.from_ranges(config, len(ids), **kwargs).positions(), expected)


@given(prompts())
def test_delta_is_max_plus_one_minus_length(prompt):
    """delta = max(P) + 1 - L and every position is a non-negative int64."""
    positions, delta = prompt_positions(prompt.config, prompt.token_ids, **prompt.kwargs())
    assert positions.dtype == np.int64
    assert int(positions.min()) >= 0
    assert delta == int(positions.max()) + 1 - prompt.num_tokens
    layout = PromptLayout.from_ranges(prompt.config, prompt.num_tokens, **prompt.range_kwargs())
    assert layout.max_position == int(positions.max())


def test_processor_float64_interleave_follows_identity():
    """An Omni interleave laid out on float64 times (transformers' processor), which crosses a chunk
    boundary before the float32 tau does (fps 1.3, frame 39), is accepted: every token takes the position
    of what it is, as in the reference, and the range form rebuilds the layout from the float64 times."""
    config = MRopeConfig(family="qwen2_5_omni", tokens_per_second=25, seconds_per_chunk=2)
    chunk = config.audio_chunk_positions  # 50
    frames, sp64 = 45, 2.0 / 1.3
    sp32 = np.float32(sp64)
    num_audio = 1800
    mel = 4 * num_audio  # n_a(4n) = n
    assert ((mel - 1) // 2 + 1 - 2) // 2 + 1 == num_audio

    # one token per frame (h' = w' = 1): the processor walks float64 times, positions the float32 tau
    processor = interleave_kinds(np.arange(frames) * sp64 * 25.0, 1, num_audio, chunk)
    model = interleave_kinds(tau_values(frames, sp32, 25.0), 1, num_audio, chunk)
    assert processor != model  # frame 39: 1499.9999... vs 1500
    ids = [100, config.vision_start_token_id, config.audio_start_token_id]
    ids += [config.video_token_id if k == "V" else config.audio_token_id for k in processor]
    ids += [config.audio_end_token_id, config.vision_end_token_id, 101]
    kwargs = dict(video_grid_thw=[[frames, 2, 2]], audio_feature_lengths=[mel], use_audio_in_video=True)
    positions, delta = prompt_positions(config, ids, second_per_grid_ts=[float(sp32)], **kwargs)
    ref, ref_delta = reference.prompt_positions(config, ids, second_per_grid_ts=[float(sp32)], **kwargs)
    np.testing.assert_array_equal(positions, ref.numpy())
    assert delta == ref_delta
    # the k-th video token is frame k (one token per frame), whatever chunk it was laid out in
    video_at = [i for i, tok in enumerate(ids) if tok == config.video_token_id]
    np.testing.assert_array_equal(positions[0, video_at], 2 + tau_values(frames, sp32, 25.0))
    layout = PromptLayout.from_ranges(
        config,
        len(ids),
        video_ranges=[[3, len(ids) - 6]],
        second_per_grid_ts=[sp64],
        interleave="transformers",
        **kwargs,
    )
    np.testing.assert_array_equal(layout.positions(), positions)


@given(prompt=prompts_of(), data=st.data())
def test_negative_token_ids_are_text(prompt, data):
    """Kernels pass -1 for a token a family does not have (Qwen2.5-VL's audio,
    say); a token id of -1 in a prompt is still text, as in the reference and
    in transformers, not that absent token. (Found while reworking the token
    scan: the scan matched -1 tokens as audio placeholders.)"""
    config = MRopeConfig.from_hf_config(prompt.config)
    ids = list(prompt.token_ids)
    text = [k for k, tok in enumerate(ids) if tok in FAMILY_TEXT_IDS]
    for k in data.draw(st.lists(st.sampled_from(text), unique=True, max_size=8)) if text else []:
        ids[k] = data.draw(st.sampled_from((-1, -2, -(2**63))))
    kwargs = prompt.kwargs()
    expected, expected_delta = reference.prompt_positions(config, ids, **kwargs)
    lists = {key: value.tolist() if isinstance(value, np.ndarray) else value for key, value in kwargs.items()}
    for token_ids, items in ((ids, kwargs), (np.array(ids), kwargs), (np.array(ids), lists)):
        positions, delta = prompt_positions(config, token_ids, **items)
        np.testing.assert_array_equal(positions, expected.numpy())
        assert delta == expected_delta
    layout = PromptLayout.from_tokens(config, ids, **kwargs)
    np.testing.assert_array_equal(layout.positions(), expected.numpy())
