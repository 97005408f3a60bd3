"""Rejected inputs of the fast path: `prompt_positions`, `PromptLayout.from_tokens`
and, where the input applies, `PromptLayout.from_ranges`.

Every rejection is exactly ValueError or TypeError (never IndexError,
AssertionError or a numba error) and its message names the argument. The
mutation test at the end corrupts valid prompts at random and requires the
fast path and the reference to agree: both refuse, or both return the same.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from spec_cases import omni, omni_toy, qwen2_5_vl, qwen2_vl, tokens
from strategies import TEXT_IDS, prompts

from mrope_tracker import PromptLayout, prompt_positions, reference


def _from_tokens(config, token_ids, **kwargs):
    layout = PromptLayout.from_tokens(config, token_ids, **kwargs)
    return layout.positions(), layout.delta


SCANNERS = {"prompt_positions": prompt_positions, "from_tokens": _from_tokens}


@pytest.fixture(params=sorted(SCANNERS))
def scan(request):
    """A token-scanning entry point of the fast path (same inputs, same rules)."""
    return SCANNERS[request.param]


def rejects(exc: type, match: str, function, *args, **kwargs) -> BaseException:
    """Call function(*args, **kwargs); it must raise exactly `exc` with `match` in its message."""
    with pytest.raises(Exception) as info:
        function(*args, **kwargs)
    assert type(info.value) is exc, f"expected {exc.__name__}, got {type(info.value).__name__}: {info.value}"
    info.match(match)
    return info.value


def ranges(config, num_tokens, **kwargs):
    return PromptLayout.from_ranges(config, num_tokens, **kwargs)


# --------------------------------------------------------------------------
# placeholder runs that do not match the grids
# --------------------------------------------------------------------------

# (config, prompt, kwargs, argument the message must name); Qwen2-VL image (1, 4, 6)
# is 1 x 2 x 3 = 6 tokens, video (2, 4, 4) is 2 x 2 x 2 = 8, Omni F = 20 is 5 audio tokens.
_RUN_MISMATCH = [
    pytest.param(
        qwen2_vl, "VS I*5 t I VE", dict(image_grid_thw=[[1, 4, 6]]), r"image_grid_thw\[0\]", id="image_interrupted"
    ),
    pytest.param(qwen2_vl, "VS I*5 VE t", dict(image_grid_thw=[[1, 4, 6]]), r"image_grid_thw\[0\]", id="image_short"),
    pytest.param(qwen2_vl, "VS I*7 VE", dict(image_grid_thw=[[1, 4, 6]]), r"image_grid_thw", id="image_long"),
    pytest.param(qwen2_vl, "VS V*7 VE t", dict(video_grid_thw=[[2, 4, 4]]), r"video_grid_thw\[0\]", id="video_short"),
    pytest.param(qwen2_vl, "VS V*9 VE", dict(video_grid_thw=[[2, 4, 4]]), r"video_grid_thw", id="video_long"),
    pytest.param(
        qwen2_vl,
        "VS I*6 VE VS I*3 V I*2 VE",
        dict(image_grid_thw=[[1, 4, 6]] * 2),
        r"image_grid_thw\[1\]",
        id="second_image",
    ),
    pytest.param(
        omni, "AS A*4 t AE", dict(audio_feature_lengths=[20]), r"audio_feature_lengths\[0\]", id="audio_short"
    ),
    pytest.param(omni, "AS A*6 AE", dict(audio_feature_lengths=[20]), r"audio_feature_lengths", id="audio_long"),
]


@pytest.mark.parametrize(("config", "prompt", "kwargs", "match"), _RUN_MISMATCH)
def test_placeholder_count_does_not_match_grid(scan, config, prompt, kwargs, match):
    """A placeholder run shorter or longer than its grid's token count is a ValueError naming the item."""
    rejects(ValueError, match, scan, config(), tokens(config(), prompt), **kwargs)


_ITEM_COUNT = [
    pytest.param(qwen2_vl, "VS I*6 VE VS I*6 VE", dict(image_grid_thw=[[1, 4, 6]]), "image_grid_thw", id="more_images"),
    pytest.param(qwen2_vl, "VS I*6 VE", dict(image_grid_thw=[[1, 4, 6]] * 2), "image_grid_thw", id="fewer_images"),
    pytest.param(qwen2_vl, "V*8 V*8", dict(video_grid_thw=[[2, 4, 4]]), "video_grid_thw", id="more_videos"),
    pytest.param(qwen2_vl, "t V*8", dict(video_grid_thw=[[2, 4, 4]] * 2), "video_grid_thw", id="fewer_videos"),
    pytest.param(omni, "A*5 t A*5", dict(audio_feature_lengths=[20]), "audio_feature_lengths", id="more_audio"),
    pytest.param(omni, "t A*5 t", dict(audio_feature_lengths=[20, 20]), "audio_feature_lengths", id="fewer_audio"),
    pytest.param(qwen2_vl, "t I*6 t", {}, "image_grid_thw", id="image_without_grids"),
    pytest.param(qwen2_5_vl, "t V*8 t", {}, "video_grid_thw", id="video_without_grids"),
    pytest.param(omni, "t A*5 t", {}, "audio_feature_lengths", id="audio_without_lengths"),
    pytest.param(qwen2_vl, "t t", dict(image_grid_thw=[[1, 4, 6]]), "image_grid_thw", id="grid_without_placeholder"),
]


@pytest.mark.parametrize(("config", "prompt", "kwargs", "match"), _ITEM_COUNT)
def test_item_count_does_not_match_grids(scan, config, prompt, kwargs, match):
    """More or fewer items in the prompt than grid rows / audio lengths is a ValueError naming them."""
    rejects(ValueError, match, scan, config(), tokens(config(), prompt), **kwargs)


@pytest.mark.parametrize(
    ("config", "prompt", "kwargs", "match"),
    [
        pytest.param(qwen2_vl, "t VS I*4", dict(image_grid_thw=[[1, 4, 6]]), r"image_grid_thw\[0\]", id="image"),
        pytest.param(qwen2_vl, "t V*5", dict(video_grid_thw=[[2, 4, 4]]), r"video_grid_thw\[0\]", id="video"),
        pytest.param(omni, "t AS A*3", dict(audio_feature_lengths=[20]), r"audio_feature_lengths\[0\]", id="audio"),
    ],
)
def test_item_cut_off_by_end_of_prompt(scan, config, prompt, kwargs, match):
    """An item whose placeholder run reaches past the last token is a ValueError saying so."""
    error = rejects(ValueError, match, scan, config(), tokens(config(), prompt), **kwargs)
    assert "cut off" in str(error)


# --------------------------------------------------------------------------
# grid values and forms
# --------------------------------------------------------------------------

# Qwen2-VL (merge 2), one item of each modality in a prompt that fits a (1|2, 4, 6) grid.
_BAD_GRIDS = [
    pytest.param("image_grid_thw", [1, 3, 6], "divisible", id="image_h_not_divisible"),
    pytest.param("image_grid_thw", [1, 4, 5], "divisible", id="image_w_not_divisible"),
    pytest.param("image_grid_thw", [0, 4, 6], "positive", id="image_t_zero"),
    pytest.param("image_grid_thw", [1, 0, 6], "positive", id="image_h_zero"),
    pytest.param("image_grid_thw", [1, 4, -6], "positive", id="image_w_negative"),
    pytest.param("image_grid_thw", [2, 4, 6], "t == 1", id="image_t_two"),
    pytest.param("video_grid_thw", [2, 4, 3], "divisible", id="video_w_not_divisible"),
    pytest.param("video_grid_thw", [0, 4, 6], "positive", id="video_t_zero"),
    pytest.param("video_grid_thw", [-1, 4, 6], "positive", id="video_t_negative"),
    pytest.param("video_grid_thw", [2, -4, 6], "positive", id="video_h_negative"),
]


def _grid_prompt(config, name: str) -> list[int]:
    symbol = "I" if name == "image_grid_thw" else "V"
    return tokens(config, f"t VS {symbol}*12 VE t")


@pytest.mark.parametrize(("name", "grid", "what"), _BAD_GRIDS)
def test_bad_grid_values(scan, name, grid, what):
    """Non-positive dims, h or w not divisible by the merge size, or image t != 1 is a ValueError naming the row."""
    config = qwen2_vl()
    error = rejects(ValueError, rf"{name}\[0\]", scan, config, _grid_prompt(config, name), **{name: [grid]})
    assert what in str(error)


@pytest.mark.parametrize(("name", "grid", "what"), _BAD_GRIDS)
def test_bad_grid_values_from_ranges(name, grid, what):
    """from_ranges checks grid values the same way."""
    modality = name.split("_")[0]
    kwargs = {name: [grid], f"{modality}_ranges": [[2, 12]]}
    error = rejects(ValueError, rf"{name}\[0\]", ranges, qwen2_vl(), 15, **kwargs)
    assert what in str(error)


def test_bad_grid_row_is_named():
    """A bad second grid row is reported with its index."""
    config = qwen2_vl()
    ids = tokens(config, "VS I*6 VE VS I*6 VE")
    rejects(ValueError, r"image_grid_thw\[1\]", prompt_positions, config, ids, image_grid_thw=[[1, 4, 6], [1, 3, 6]])


# (value, exception): wrong dtype -> TypeError, wrong shape -> ValueError
_BAD_GRID_FORMS = [
    pytest.param([[1.0, 4.0, 6.0]], TypeError, id="float_list"),
    pytest.param(np.array([[1.0, 4.0, 6.0]]), TypeError, id="float_array"),
    pytest.param(torch.tensor([[1.0, 4.0, 6.0]]), TypeError, id="float_tensor"),
    pytest.param(np.ones((1, 3), dtype=bool), TypeError, id="bool_array"),
    pytest.param([[True, 4, 12]], TypeError, id="bool_in_list"),  # accepted as (1, 4, 12) would fit
    pytest.param([["1", "4", "6"]], TypeError, id="strings"),
    pytest.param("146", TypeError, id="string"),
    pytest.param(7, TypeError, id="int"),
    pytest.param([1, 4, 6], ValueError, id="one_dim"),
    pytest.param([[1, 4]], ValueError, id="two_columns"),
    pytest.param([[1, 4, 6, 1]], ValueError, id="four_columns"),
    pytest.param(np.ones((1, 3, 1), dtype=np.int64), ValueError, id="three_dim"),
    pytest.param([[1, 4, 6], [1, 4]], ValueError, id="ragged"),
    pytest.param(np.array([[2**64 - 1, 4, 6]], dtype=np.uint64), ValueError, id="uint64_overflow"),
    # tensors numpy cannot read: no torch error may escape
    pytest.param(torch.ones((1, 3), dtype=torch.int64, device="meta"), TypeError, id="meta_tensor"),
    pytest.param(torch.tensor([[1, 4, 6]], dtype=torch.bfloat16), TypeError, id="bfloat16_tensor"),
    pytest.param(torch.tensor([[1, 4, 6]], dtype=torch.bool), TypeError, id="bool_tensor"),
    pytest.param(torch.tensor([1, 4, 6]), ValueError, id="one_dim_tensor"),
    pytest.param(torch.tensor([[1, 4, 6]]).t(), ValueError, id="transposed_tensor"),
    pytest.param(torch.empty((0, 5), dtype=torch.int64), ValueError, id="empty_tensor_of_five_columns"),
]


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param(dict(image_grid_thw=torch.empty((0, 5), dtype=torch.int64)), id="image_grid"),
        pytest.param(dict(video_grid_thw=torch.empty((0, 5), dtype=torch.int64)), id="video_grid"),
        pytest.param(dict(video_grid_thw=[], second_per_grid_ts=torch.empty((0, 7))), id="times"),
    ],
)
def test_empty_tensor_of_the_wrong_shape_on_text(scan, kwargs):
    """An empty tensor says by its shape alone that it is no grid (or no
    times), even on a prompt with no items: refused, as the same numpy array is."""
    name = next(iter(k for k in kwargs if torch.is_tensor(kwargs[k])))
    rejects(ValueError, name, scan, qwen2_5_vl(), [1, 2, 3], **kwargs)
    as_array = {k: v.numpy() if torch.is_tensor(v) else v for k, v in kwargs.items()}
    rejects(ValueError, name, scan, qwen2_5_vl(), [1, 2, 3], **as_array)


@pytest.mark.parametrize("name", ["image_grid_thw", "video_grid_thw"])
@pytest.mark.parametrize(("grid", "exc"), _BAD_GRID_FORMS)
def test_grid_wrong_form(scan, name, grid, exc):
    """Grids of a non-integer dtype are a TypeError, of the wrong shape a ValueError, naming the grid."""
    config = qwen2_vl()
    rejects(exc, name, scan, config, _grid_prompt(config, name), **{name: grid})


@pytest.mark.parametrize("name", ["image_grid_thw", "video_grid_thw"])
@pytest.mark.parametrize(("grid", "exc"), _BAD_GRID_FORMS)
def test_grid_wrong_form_from_ranges(name, grid, exc):
    """from_ranges rejects the same grid forms."""
    modality = name.split("_")[0]
    rejects(exc, name, ranges, qwen2_vl(), 15, **{name: grid, f"{modality}_ranges": [[2, 12]]})


# --------------------------------------------------------------------------
# token ids
# --------------------------------------------------------------------------

_BAD_TOKEN_IDS = [
    pytest.param([1.0, 2.0], TypeError, id="float_list"),
    pytest.param(np.array([1.5, 2.0]), TypeError, id="float_array"),
    pytest.param(torch.tensor([1.0, 2.0]), TypeError, id="float_tensor"),
    pytest.param(np.array([True, False]), TypeError, id="bool_array"),
    pytest.param(torch.tensor([True]), TypeError, id="bool_tensor"),
    pytest.param([True, 5], TypeError, id="bool_in_list"),
    pytest.param(np.array([1 + 2j]), TypeError, id="complex"),
    pytest.param("abc", TypeError, id="string"),
    pytest.param(["a", "b"], TypeError, id="string_list"),
    pytest.param(7, TypeError, id="int"),
    pytest.param(None, TypeError, id="none"),
    pytest.param({1: 2}, TypeError, id="dict"),
    pytest.param([[1, 2], [3, 4]], ValueError, id="two_dim"),
    pytest.param(np.array(5), ValueError, id="zero_dim"),
    pytest.param(torch.ones((2, 2), dtype=torch.int64), ValueError, id="two_dim_tensor"),
    pytest.param([[1], [2, 3]], ValueError, id="ragged"),
    pytest.param(np.array([2**64 - 1], dtype=np.uint64), ValueError, id="uint64_overflow"),
]


@pytest.mark.parametrize(("ids", "exc"), _BAD_TOKEN_IDS)
def test_token_ids_wrong_form(scan, ids, exc):
    """Token ids that are not 1-D integers are a TypeError (dtype) or ValueError (shape) naming token_ids."""
    rejects(exc, "token_ids", scan, qwen2_vl(), ids)


@pytest.mark.parametrize(
    "ids", [[], (), np.zeros(0, np.int64), torch.zeros(0, dtype=torch.int64)], ids=["list", "tuple", "numpy", "torch"]
)
def test_empty_prompt(scan, family_config, ids):
    """An empty prompt is a ValueError naming token_ids."""
    rejects(ValueError, "token_ids", scan, family_config, ids)


@pytest.mark.parametrize("num_tokens", [0, -3])
def test_empty_prompt_from_ranges(family_config, num_tokens):
    """from_ranges with no tokens is a ValueError naming num_tokens."""
    rejects(ValueError, "num_tokens", ranges, family_config, num_tokens)


@pytest.mark.parametrize(
    ("num_tokens", "exc"), [(12.0, TypeError), (True, TypeError), ("12", TypeError), (None, TypeError)]
)
def test_num_tokens_wrong_type(num_tokens, exc):
    """A non-int num_tokens is a TypeError naming it."""
    rejects(exc, "num_tokens", ranges, qwen2_vl(), num_tokens)


# --------------------------------------------------------------------------
# second_per_grid_ts
# --------------------------------------------------------------------------

_VIDEO = dict(video_grid_thw=[[4, 2, 4]])  # Qwen2.5-VL (merge 2): 4 x 1 x 2 = 8 tokens


@pytest.mark.parametrize(
    ("sp", "exc"),
    [
        pytest.param([1.0, 1.0], ValueError, id="too_many"),
        pytest.param([], ValueError, id="too_few"),
        pytest.param([-0.5], ValueError, id="negative"),
        pytest.param([float("nan")], ValueError, id="nan"),
        pytest.param([float("inf")], ValueError, id="inf"),
        pytest.param([float("-inf")], ValueError, id="minus_inf"),
        pytest.param([1e30], ValueError, id="tau_overflow"),
        pytest.param(np.array([np.nan], dtype=np.float32), ValueError, id="nan_float32"),
        pytest.param(torch.tensor([-1.0]), ValueError, id="negative_tensor"),
        pytest.param([[1.0]], ValueError, id="two_dim"),
        pytest.param(["1.0"], TypeError, id="strings"),
        pytest.param(np.array([True]), TypeError, id="bool_array"),
        # tensors: each refused as the checked conversion refuses it, though tolist() could read them
        pytest.param(torch.tensor([1.0], dtype=torch.bfloat16), TypeError, id="bfloat16_tensor"),
        pytest.param(torch.tensor([-1.0])._neg_view(), TypeError, id="negative_bit_view"),  # reads as 1.0
        pytest.param(torch.empty((0, 7)), ValueError, id="empty_two_dim_tensor"),
        pytest.param(torch.tensor([True]), TypeError, id="bool_tensor"),
    ],
)
def test_bad_second_per_grid_ts(scan, sp, exc):
    """A wrong count, a negative, NaN, infinite or too large value, or a wrong form is rejected naming
    second_per_grid_ts."""
    config = qwen2_5_vl()
    rejects(exc, "second_per_grid_ts", scan, config, tokens(config, "t VS V*8 VE t"), second_per_grid_ts=sp, **_VIDEO)


@pytest.mark.parametrize(
    "sp", [[1.0, 1.0], [-0.5], [float("nan")], [float("inf")]], ids=["too_many", "negative", "nan", "inf"]
)
def test_bad_second_per_grid_ts_from_ranges(sp):
    """from_ranges rejects the same second_per_grid_ts values."""
    rejects(
        ValueError,
        "second_per_grid_ts",
        ranges,
        qwen2_5_vl(),
        11,
        video_ranges=[[2, 8]],
        second_per_grid_ts=sp,
        **_VIDEO,
    )


@pytest.mark.parametrize("sp", [[1.0], [], np.ones(1, np.float32)], ids=["list", "empty", "array"])
def test_qwen2_vl_refuses_second_per_grid_ts(scan, sp):
    """Qwen2-VL numbers frames 0, 1, 2, ...: any second_per_grid_ts is a ValueError naming it."""
    config = qwen2_vl()
    rejects(
        ValueError, "second_per_grid_ts", scan, config, tokens(config, "t VS V*8 VE t"), second_per_grid_ts=sp, **_VIDEO
    )
    rejects(
        ValueError, "second_per_grid_ts", ranges, config, 11, video_ranges=[[2, 8]], second_per_grid_ts=sp, **_VIDEO
    )


# --------------------------------------------------------------------------
# audio
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lengths", "exc", "match"),
    [
        pytest.param([20, 20], ValueError, "audio_feature_lengths", id="too_many"),
        pytest.param([-20], ValueError, r"audio_feature_lengths\[0\]", id="negative"),
        pytest.param([0], ValueError, r"audio_feature_lengths\[0\]", id="zero"),
        pytest.param([2], ValueError, r"audio_feature_lengths\[0\]", id="two_frames"),
        pytest.param([20.0], TypeError, "audio_feature_lengths", id="float"),
        pytest.param([[20]], ValueError, "audio_feature_lengths", id="two_dim"),
        pytest.param(np.array([True]), TypeError, "audio_feature_lengths", id="bool_array"),
    ],
)
def test_bad_audio_feature_lengths(scan, lengths, exc, match):
    """A wrong count, a track under 3 mel frames, or a wrong form is rejected naming audio_feature_lengths."""
    config = omni()
    rejects(exc, match, scan, config, tokens(config, "t AS A*5 AE t"), audio_feature_lengths=lengths)


@pytest.mark.parametrize(
    ("lengths", "match"),
    [
        ([20, 20], "audio_feature_lengths"),
        ([], "audio_feature_lengths"),
        ([-20], r"audio_feature_lengths\[0\]"),
        ([2], r"audio_feature_lengths\[0\]"),
    ],
    ids=["too_many", "too_few", "negative", "two_frames"],
)
def test_bad_audio_feature_lengths_from_ranges(lengths, match):
    """from_ranges rejects the same audio lengths (count checked against the audio ranges)."""
    rejects(ValueError, match, ranges, omni(), 9, audio_ranges=[[2, 5]], audio_feature_lengths=lengths)


def test_audio_range_length_does_not_match():
    """An audio range whose length is not n_a(F) (F = 20 -> 5 tokens) is a ValueError naming it."""
    rejects(ValueError, r"audio_ranges\[0\]", ranges, omni(), 9, audio_ranges=[[2, 4]], audio_feature_lengths=[20])


@pytest.mark.parametrize("config", [qwen2_vl, qwen2_5_vl])
def test_audio_arguments_refused_for_vl_families(scan, config):
    """audio_feature_lengths and use_audio_in_video=True are ValueErrors naming them for VL families."""
    ids = tokens(config(), "t t t")
    rejects(ValueError, "audio_feature_lengths", scan, config(), ids, audio_feature_lengths=[20])
    rejects(ValueError, "use_audio_in_video", scan, config(), ids, use_audio_in_video=True)
    rejects(ValueError, "audio_feature_lengths", ranges, config(), 3, audio_feature_lengths=[20])
    rejects(ValueError, "use_audio_in_video", ranges, config(), 3, use_audio_in_video=True)


@pytest.mark.parametrize("flag", [None, "yes", 2, 1.0, [True]], ids=["none", "string", "two", "float", "list"])
def test_use_audio_in_video_not_a_bool(scan, flag):
    """A use_audio_in_video that is not a bool is a TypeError naming it."""
    config = omni()
    rejects(TypeError, "use_audio_in_video", scan, config, tokens(config, "t t"), use_audio_in_video=flag)
    rejects(TypeError, "use_audio_in_video", ranges, config, 2, use_audio_in_video=flag)


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
    layout = _outcome(lambda: _from_tokens(config, ids, **kwargs))
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
