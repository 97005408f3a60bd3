"""Rejected inputs of the fast path, continued from test_validation.py: Omni audio-in-video blocks, placeholder
ranges, layout slices and writes, and a mutation test that corrupts valid prompts at random and requires the
fast path and the reference to agree (both refuse, or both return the same).

Every rejection is exactly ValueError or TypeError and its message names the argument.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from refusal_checks import from_tokens, ranges, rejects
from spec_cases import omni_toy, qwen2_5_vl, qwen2_vl, tokens
from strategies import TEXT_IDS, prompts

from mrope_tracker import prompt_positions, reference

# --------------------------------------------------------------------------
# Omni audio-in-video blocks: spec example A (toy r = 2, C = 4), video (4, 2, 4), F = 24
# --------------------------------------------------------------------------

_AV = dict(video_grid_thw=[[4, 2, 4]], audio_feature_lengths=[24], use_audio_in_video=True)
_AV_BLOCK = "VS AS V*4 A*4 V*4 A*2 AE VE"  # 18 tokens; interleave at 2 .. 15


def test_audio_in_video_valid_block_accepted(scan):
    """The well-formed block the cases below corrupt is accepted (so each rejection is the corruption's)."""
    config = omni_toy()
    scan(config, tokens(config, f"t {_AV_BLOCK} t"), **_AV)
    ranges(config, 20, video_ranges=[[3, 14]], **_AV)


@pytest.mark.parametrize(
    ("lengths", "match"),
    [(None, "audio_feature_lengths"), ([], "audio_feature_lengths")],
    ids=["none", "empty"],
)
def test_audio_in_video_without_audio(scan, lengths, match):
    """use_audio_in_video with no audio length left for the video is a ValueError naming audio_feature_lengths."""
    config = omni_toy()
    kwargs = dict(_AV, audio_feature_lengths=lengths)
    rejects(ValueError, match, scan, config, tokens(config, f"t {_AV_BLOCK} t"), **kwargs)
    rejects(ValueError, match, ranges, config, 20, video_ranges=[[3, 14]], **kwargs)


def test_audio_in_video_second_block_without_audio(scan):
    """Two audio-in-video videos with one audio length is a ValueError naming audio_feature_lengths."""
    config = omni_toy()
    kwargs = dict(_AV, video_grid_thw=[[4, 2, 4]] * 2)
    rejects(ValueError, "audio_feature_lengths", scan, config, tokens(config, f"{_AV_BLOCK} {_AV_BLOCK}"), **kwargs)
    rejects(ValueError, "audio_feature_lengths", ranges, config, 36, video_ranges=[[2, 14], [20, 14]], **kwargs)


@pytest.mark.parametrize(
    "prompt",
    [
        "t VS V*4 A*4 V*4 A*2 AE VE t",
        "t AS V*4 A*4 V*4 A*2 AE VE t",
        "t AS VS V*4 A*4 V*4 A*2 AE VE t",
        "t VS t AS V*4 A*4 V*4 A*2 AE VE t",
        "V*4 A*4 V*4 A*2 AE VE t",
        "t VS AS t V*4 A*4 V*4 A*2 AE VE t",
    ],
    ids=["no_audio_start", "no_vision_start", "swapped", "text_between", "bare_at_start", "text_before_interleave"],
)
def test_audio_in_video_not_preceded_by_vision_start_audio_start(scan, prompt):
    """With use_audio_in_video, a video not opened by vision_start audio_start is a ValueError naming token_ids."""
    config = omni_toy()
    rejects(ValueError, "token_ids", scan, config, tokens(config, prompt), **_AV)


@pytest.mark.parametrize(
    "prompt",
    [
        "t VS AS V*3 A*5 V*4 A*2 AE VE t",  # audio where a video token belongs
        "t VS AS V*4 A*3 V*5 A*2 AE VE t",  # video where an audio token belongs
        "t VS AS V*4 A*4 V*2 t V A*2 AE VE t",  # text inside
        "t VS AS V*4 A*4 V*4 A*2 VE AE t",  # eos pair swapped
        "t VS AS V*4 A*4 V*4 A*2 VE t t",  # audio_end missing
        "t VS AS V*4 A*4 V*4 A*2 AE t t",  # vision_end missing
        "t VS AS V*4 A*4 V*4 A*3 AE VE",  # one audio token too many
    ],
    ids=[
        "audio_for_video",
        "video_for_audio",
        "text",
        "eos_swapped",
        "no_audio_end",
        "no_vision_end",
        "long_audio",
    ],
)
def test_audio_in_video_wrong_token_in_block(scan, prompt):
    """A wrong token inside the interleave or in place of audio_end/vision_end is a ValueError naming token_ids."""
    config = omni_toy()
    rejects(ValueError, "token_ids", scan, config, tokens(config, prompt), **_AV)


@pytest.mark.parametrize(
    "prompt",
    ["t VS AS V*4 A*4 V*4 A*2 AE", "t VS AS V*4 A*4 V*4 A*2", "t VS AS V*4 A*4 V*2", "t VS AS V"],
    ids=["no_vision_end", "no_eos", "inside_video", "first_token"],
)
def test_audio_in_video_cut_off(scan, prompt):
    """A block cut off by the end of the prompt is a ValueError naming token_ids and saying so."""
    config = omni_toy()
    error = rejects(ValueError, "token_ids", scan, config, tokens(config, prompt), **_AV)
    assert "cut off" in str(error)


@pytest.mark.parametrize(
    ("num_tokens", "video_range", "match"),
    [
        pytest.param(20, [1, 14], r"video_ranges\[0\]", id="no_room_before"),
        pytest.param(20, [0, 14], r"video_ranges\[0\]", id="at_start"),
        pytest.param(17, [3, 14], r"video_ranges\[0\]", id="no_room_after"),
        pytest.param(16, [3, 14], r"video_ranges\[0\]", id="out_of_bounds"),
        pytest.param(20, [3, 13], r"video_ranges\[0\]", id="wrong_length"),
        pytest.param(20, [3, 8], r"video_ranges\[0\]", id="video_tokens_only"),
    ],
)
def test_audio_in_video_bad_ranges(num_tokens, video_range, match):
    """An interleave range without room for its bos/eos pairs, or of the wrong length, is a ValueError naming it."""
    rejects(ValueError, match, ranges, omni_toy(), num_tokens, video_ranges=[video_range], **_AV)


def test_audio_in_video_ranges_overlap_other_items():
    """An item inside the two tokens before an interleave (its vision_start, audio_start) is an overlap."""
    kwargs = dict(_AV, audio_feature_lengths=[20, 24])  # a 5-token clip, then the video's track
    rejects(
        ValueError,
        r"video_ranges\[0\]",
        ranges,
        omni_toy(),
        30,
        audio_ranges=[[0, 5]],
        video_ranges=[[6, 14]],
        **kwargs,
    )


# --------------------------------------------------------------------------
# ranges
# --------------------------------------------------------------------------

_IMAGE = dict(image_grid_thw=[[1, 4, 6]])  # Qwen2-VL: 6 tokens
_TWO_IMAGES = dict(image_grid_thw=[[1, 4, 6]] * 2)

Range = namedtuple("Range", ["offset", "length"])
BadRange = namedtuple("BadRange", ["offset", "length"])


@pytest.mark.parametrize(
    ("num_tokens", "kwargs", "exc", "match"),
    [
        pytest.param(
            20, dict(image_ranges=[[0, 6], [3, 6]], **_TWO_IMAGES), ValueError, r"image_ranges\[1\]", id="overlap"
        ),
        pytest.param(
            20,
            dict(image_ranges=[[0, 6], [5, 6]], **_TWO_IMAGES),
            ValueError,
            r"image_ranges\[1\]",
            id="overlap_by_one",
        ),
        pytest.param(
            20, dict(image_ranges=[[8, 6], [0, 6]], **_TWO_IMAGES), ValueError, r"image_ranges\[1\]", id="out_of_order"
        ),
        pytest.param(
            20, dict(image_ranges=[[2, 6], [2, 6]], **_TWO_IMAGES), ValueError, r"image_ranges\[1\]", id="same_range"
        ),
        pytest.param(
            20,
            dict(image_ranges=[[0, 6]], video_ranges=[[4, 8]], video_grid_thw=[[2, 4, 4]], **_IMAGE),
            ValueError,
            r"video_ranges\[0\]",
            id="overlap_across_modalities",
        ),
        pytest.param(10, dict(image_ranges=[[5, 6]], **_IMAGE), ValueError, r"image_ranges\[0\]", id="out_of_bounds"),
        pytest.param(6, dict(image_ranges=[[6, 6]], **_IMAGE), ValueError, r"image_ranges\[0\]", id="past_the_end"),
        pytest.param(
            20, dict(image_ranges=[[2**63 - 1, 6]], **_IMAGE), ValueError, r"image_ranges\[0\]", id="offset_overflow"
        ),
        pytest.param(20, dict(image_ranges=[[2, 5]], **_IMAGE), ValueError, r"image_ranges\[0\]", id="too_short"),
        pytest.param(20, dict(image_ranges=[[2, 7]], **_IMAGE), ValueError, r"image_ranges\[0\]", id="too_long"),
        pytest.param(
            20, dict(image_ranges=[[-1, 6]], **_IMAGE), ValueError, r"image_ranges\[0\]", id="negative_offset"
        ),
        pytest.param(
            20, dict(image_ranges=[[2, -6]], **_IMAGE), ValueError, r"image_ranges\[0\]", id="negative_length"
        ),
        pytest.param(20, dict(image_ranges=[[0, 6], [8, 6]], **_IMAGE), ValueError, "image_ranges", id="more_ranges"),
        pytest.param(20, dict(image_ranges=[[0, 6]], **_TWO_IMAGES), ValueError, "image_ranges", id="fewer_ranges"),
        pytest.param(20, dict(**_IMAGE), ValueError, "image_ranges", id="no_ranges"),
        pytest.param(20, dict(image_ranges=[[0, 6]]), ValueError, "image_ranges", id="no_grids"),
        pytest.param(20, dict(image_ranges=[[0, 6, 0]], **_IMAGE), ValueError, "image_ranges", id="three_columns"),
        pytest.param(20, dict(image_ranges=[0, 6], **_IMAGE), ValueError, "image_ranges", id="one_dim"),
        pytest.param(20, dict(image_ranges=[[0.0, 6.0]], **_IMAGE), TypeError, "image_ranges", id="float"),
        pytest.param(20, dict(image_ranges=[[True, 6]], **_IMAGE), TypeError, "image_ranges", id="bool_in_list"),
        pytest.param(20, dict(image_ranges="0 6", **_IMAGE), TypeError, "image_ranges", id="string"),
        pytest.param(
            20, dict(image_ranges=[BadRange("0", None)], **_IMAGE), TypeError, "image_ranges", id="bad_objects"
        ),
    ],
)
def test_bad_ranges(num_tokens, kwargs, exc, match):
    """Overlapping, unordered, out-of-bounds, negative, wrongly sized or counted ranges, or ranges
    of the wrong form, are rejected naming the range argument."""
    rejects(exc, match, ranges, qwen2_vl(), num_tokens, **kwargs)


@pytest.mark.parametrize(
    "image_ranges",
    [[[2, 6], [12, 6]], [[0, 6], [6, 6]], [[8, 6], [14, 6]], [Range(2, 6), Range(14, 6)]],
    ids=["gap", "adjacent_from_start", "to_the_end", "objects"],
)
def test_valid_ranges_accepted(image_ranges):
    """The controls of the cases above: in-order, non-overlapping, in-bounds ranges are accepted."""
    layout = ranges(qwen2_vl(), 20, image_ranges=image_ranges, **_TWO_IMAGES)
    assert layout.num_tokens == 20


# --------------------------------------------------------------------------
# layout slices
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("start", "end", "exc", "match"),
    [
        (5, 3, ValueError, "end"),
        (0, 13, ValueError, "end"),
        (13, None, ValueError, "end"),
        (-1, 4, ValueError, "start"),
        (0, -1, ValueError, "end"),
        (1.0, 4, TypeError, "start"),
        (0, 4.0, TypeError, "end"),
        (True, 4, TypeError, "start"),
    ],
)
def test_layout_positions_bad_range(start, end, exc, match):
    """positions(start, end) outside 0 <= start <= end <= num_tokens, or not ints, is rejected naming the bound."""
    layout = ranges(qwen2_vl(), 12, image_ranges=[[2, 6]], **_IMAGE)
    rejects(exc, match, layout.positions, start, end)
    out = np.zeros((3, 20), np.int64)
    rejects(exc, match, layout.write_positions, out, 0, start, 12 if end is None else end)


@pytest.mark.parametrize(
    ("out", "exc"),
    [
        pytest.param(np.zeros((3, 12), np.int32), TypeError, id="int32"),
        pytest.param(np.zeros((3, 12), np.float64), TypeError, id="float"),
        pytest.param(np.zeros((2, 12), np.int64), TypeError, id="two_rows"),
        pytest.param(np.zeros(36, np.int64), TypeError, id="one_dim"),
        pytest.param(torch.zeros((3, 12), dtype=torch.int64), TypeError, id="tensor"),
        pytest.param(np.zeros((3, 24), np.int64)[:, ::2], ValueError, id="non_contiguous"),
        pytest.param(np.asfortranarray(np.zeros((3, 12), np.int64)), ValueError, id="fortran"),
        pytest.param(np.zeros((3, 11), np.int64), ValueError, id="too_small"),
    ],
)
def test_write_positions_bad_out(out, exc):
    """write_positions into an out of the wrong dtype, shape or layout, or too small, is rejected naming out."""
    layout = ranges(qwen2_vl(), 12, image_ranges=[[2, 6]], **_IMAGE)
    rejects(exc, "out", layout.write_positions, out, 0, 0, 12)


def test_write_positions_read_only_out():
    """write_positions into a read-only array is a ValueError naming out."""
    layout = ranges(qwen2_vl(), 12, image_ranges=[[2, 6]], **_IMAGE)
    out = np.zeros((3, 12), np.int64)
    out.flags.writeable = False
    rejects(ValueError, "out", layout.write_positions, out, 0, 0, 12)


@pytest.mark.parametrize(("offset", "exc"), [(-1, ValueError), (1, ValueError), (0.0, TypeError)])
def test_write_positions_bad_offset(offset, exc):
    """A negative, non-int or too large out_offset is rejected naming out_offset."""
    layout = ranges(qwen2_vl(), 12, image_ranges=[[2, 6]], **_IMAGE)
    rejects(exc, "out_offset", layout.write_positions, np.zeros((3, 12), np.int64), offset, 0, 12)


# --------------------------------------------------------------------------
# mutation: fast path and reference agree on corrupted prompts
# --------------------------------------------------------------------------

_GRIDS = ("image_grid_thw", "video_grid_thw")


def _canonical_kwargs(prompt) -> dict:
    kwargs = dict(prompt.kwargs())
    for name in _GRIDS:
        kwargs.setdefault(name, np.zeros((0, 3), np.int64))
    kwargs.setdefault("use_audio_in_video", False)
    return {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}


@st.composite
def corrupted_prompts(draw):
    """A valid prompt with one random corruption: (config, token ids, kwargs, description)."""
    prompt = draw(prompts(max_items=3, max_text=4))
    config = prompt.config
    ids = prompt.token_ids.tolist()
    kwargs = _canonical_kwargs(prompt)
    specials = [config.image_token_id, config.video_token_id, config.vision_start_token_id, config.vision_end_token_id]
    if config.is_omni:
        specials += [config.audio_token_id, config.audio_start_token_id, config.audio_end_token_id]
    token = st.sampled_from(specials + TEXT_IDS[:2].tolist())
    choices = ["drop_token", "insert_token", "replace_token", "add_grid_row", "flip_audio_in_video"]
    if any(len(kwargs[name]) for name in _GRIDS):
        choices += ["grid_dim", "drop_grid_row"]
    if kwargs.get("audio_feature_lengths") is not None:
        choices += ["audio_length", "drop_audio_length"]
    else:
        choices += ["add_audio_length"]
    if kwargs.get("second_per_grid_ts") is not None:
        choices += ["sp_value"]
    kind = draw(st.sampled_from(choices))
    if kind == "drop_token":
        del ids[draw(st.integers(0, len(ids) - 1))]
    elif kind == "insert_token":
        ids.insert(draw(st.integers(0, len(ids))), draw(token))
    elif kind == "replace_token":
        ids[draw(st.integers(0, len(ids) - 1))] = draw(token)
    elif kind in ("grid_dim", "drop_grid_row"):
        name = draw(st.sampled_from([n for n in _GRIDS if len(kwargs[n])]))
        grid = kwargs[name]
        row = draw(st.integers(0, len(grid) - 1))
        if kind == "grid_dim":
            grid[row, draw(st.integers(0, 2))] = draw(st.integers(-1, 9))
        else:
            kwargs[name] = np.delete(grid, row, axis=0)
            if name == "video_grid_thw" and kwargs.get("second_per_grid_ts") is not None and draw(st.booleans()):
                kwargs["second_per_grid_ts"] = np.delete(kwargs["second_per_grid_ts"], row)
    elif kind == "add_grid_row":
        name = draw(st.sampled_from(_GRIDS))
        row = [draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 4))]
        at = draw(st.integers(0, len(kwargs[name])))
        kwargs[name] = np.insert(kwargs[name], at, row, axis=0)
    elif kind == "audio_length":
        lengths = kwargs["audio_feature_lengths"]
        lengths[draw(st.integers(0, len(lengths) - 1))] = draw(st.integers(-3, 200))
    elif kind == "drop_audio_length":
        lengths = kwargs["audio_feature_lengths"]
        kwargs["audio_feature_lengths"] = np.delete(lengths, draw(st.integers(0, len(lengths) - 1)))
    elif kind == "add_audio_length":
        kwargs["audio_feature_lengths"] = np.array([draw(st.integers(0, 60))], dtype=np.int64)
    elif kind == "sp_value":
        sp = kwargs["second_per_grid_ts"]
        sp[draw(st.integers(0, len(sp) - 1))] = draw(st.sampled_from([np.nan, np.inf, -1.0, 0.0, 0.3, 7.5, 1e12]))
    else:
        kwargs["use_audio_in_video"] = not kwargs["use_audio_in_video"]
    return config, ids, kwargs, kind


def _outcome(function):
    try:
        positions, delta = function()
    except (ValueError, TypeError) as exc:
        return ("rejected", type(exc).__name__)
    positions = positions.numpy() if isinstance(positions, torch.Tensor) else positions
    return ("accepted", positions.tolist(), int(delta))


@given(corrupted_prompts())
def test_mutation_fast_path_and_reference_agree(case):
    """After one random corruption of a valid prompt, the fast path (prompt_positions and
    PromptLayout.from_tokens) and the reference both refuse it, or both return the same."""
    config, ids, kwargs, kind = case
    fast = _outcome(lambda: prompt_positions(config, ids, **kwargs))
    layout = _outcome(lambda: from_tokens(config, ids, **kwargs))
    ref = _outcome(lambda: reference.prompt_positions(config, ids, **kwargs))
    assert fast[0] == ref[0], f"{kind}: fast path {fast[0]}, reference {ref[0]}"
    if fast[0] == "accepted":
        assert fast == ref and layout == fast, kind
    else:
        assert layout[0] == "rejected", kind


def test_masked_arrays_are_refused_and_other_subclasses_read_as_plain_arrays():
    """numba compiles for plain ndarrays only: a masked array (whose mask has
    no meaning for positions) is a TypeError naming the argument, on the
    fast path and the checked one alike, and any other subclass is read as
    the plain array it views."""
    config = qwen2_5_vl()
    ids = np.array(
        [1, config.vision_start_token_id, config.image_token_id, config.image_token_id, config.vision_end_token_id, 2]
    )
    expected = prompt_positions(config, ids, image_grid_thw=[[1, 2, 4]])

    class Tagged(np.ndarray):
        pass

    for grid in ([[1, 2, 4]], np.array([[1, 2, 4]]), [[1, 2, 8]]):  # the last one is refused by the fast kernel
        with pytest.raises(TypeError, match="token_ids: expected a plain numpy array, got a masked array"):
            prompt_positions(config, np.ma.masked_array(ids), image_grid_thw=grid)
    with pytest.raises(TypeError, match="image_grid_thw: expected a plain numpy array, got a masked array"):
        prompt_positions(config, ids, image_grid_thw=np.ma.masked_array(np.array([[1, 2, 4]])))
    positions, delta = prompt_positions(config, ids.view(Tagged), image_grid_thw=np.array([[1, 2, 4]]).view(Tagged))
    assert type(positions) is np.ndarray
    assert positions.tolist() == expected[0].tolist() and delta == expected[1]


def test_every_layout_error_code_has_a_message():
    """A builder code without a message would surface as a RuntimeError naming no argument."""
    from mrope_tracker.core.errors import _MESSAGES
    from mrope_tracker.kernels import layout_codes as C

    codes = {name: value for name, value in vars(C).items() if name.startswith("ERR_")}
    assert codes, "layout_codes defines no ERR_* codes"
    assert len(set(codes.values())) == len(codes), "two ERR_* codes share a value"
    missing = sorted(name for name, value in codes.items() if value not in _MESSAGES)
    assert not missing, f"codes without a message in core/errors.py: {missing}"
