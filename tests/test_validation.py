"""Rejected inputs of the fast path: `prompt_positions`, `PromptLayout.from_tokens`
and, where the input applies, `PromptLayout.from_ranges`.

Every rejection is exactly ValueError or TypeError (never IndexError,
AssertionError or a numba error) and its message names the argument. This
module: placeholder runs against grids, grid values and forms, token ids,
second_per_grid_ts and audio; test_validation_ranges.py has audio-in-video
blocks, ranges, layout slices and the mutation test.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from refusal_checks import ranges, rejects
from spec_cases import omni, qwen2_5_vl, qwen2_vl, tokens

from mrope_tracker import prompt_positions

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
