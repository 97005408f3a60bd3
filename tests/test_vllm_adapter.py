"""The vLLM adapter (`mrope_tracker.vllm`): features read by duck typing, errors, pairing.

The stand-ins for vLLM's features come from tests/vllm_features.py;
test_vllm_vectors.py builds them from the recorded vLLM placeholder ranges.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from strategies import prompts
from vllm_features import (
    FeatureSpec,
    FieldElem,
    PlaceholderRange,
    feature,
    first_vector,
    prompt_features,
    vector_features,
    vllm_config,
)

from mrope_tracker import MRopeConfig, prompt_positions
from mrope_tracker.vllm import get_mrope_input_positions, layout_from_features

QWEN3_VL_VIDEO = first_vector(lambda v: v["family"] == "qwen3_vl" and v["video_grid_thw"] and v["image_grid_thw"])
GLM_VIDEO = first_vector(lambda v: v["family"] == "glm4_1v" and v["video_grid_thw"])
OMNI_AV_TWO = first_vector(
    lambda v: v["family"] == "qwen2_5_omni" and v["use_audio_in_video"] and len(v["video_grid_thw"] or []) >= 2
)
QWEN3_OMNI_AV = first_vector(lambda v: v["family"] == "qwen3_omni" and v["use_audio_in_video"] and v["video_grid_thw"])
QWEN25_VL_VIDEO = first_vector(lambda v: v["family"] == "qwen2_5_vl" and v["video_grid_thw"] and v["image_grid_thw"])


def adapter(vector: dict, features, semantics: str = "vllm-0.33"):
    return get_mrope_input_positions(vllm_config(vector, semantics), vector["token_ids"], features)


def assert_vector(vector: dict, result) -> None:
    positions, delta = result
    assert positions.tolist() == vector["positions"]
    assert delta == vector["delta"]


# ---------------------------------------------------------------- agreement


@given(
    prompt=prompts(use_audio_in_video=False),
    semantics=st.sampled_from(("reference", "vllm-0.33")),
    data=st.data(),
)
def test_adapter_equals_token_form(prompt, semantics, data):
    """Features in any order give the positions and delta the token scan gives."""
    config = MRopeConfig.from_hf_config(prompt.config, semantics=semantics)
    order = data.draw(
        st.permutations(range(len(prompt.image_ranges) + len(prompt.video_ranges) + len(prompt.audio_ranges)))
    )
    features = prompt_features(prompt, lambda n: order)
    positions, delta = get_mrope_input_positions(config, prompt.token_ids.tolist(), features)
    expected, expected_delta = prompt_positions(config, prompt.token_ids, **prompt.kwargs())
    assert positions.dtype == torch.int64 and tuple(positions.shape) == (3, prompt.num_tokens)
    assert isinstance(delta, int)
    np.testing.assert_array_equal(positions.numpy(), expected)
    assert delta == expected_delta


def test_text_only_prompt_is_arange():
    """No features: every row is 0..L-1 and delta is 0."""
    config = MRopeConfig(family="qwen2_vl")
    positions, delta = get_mrope_input_positions(config, [5, 6, 7, 8], [])
    assert positions.tolist() == [[0, 1, 2, 3]] * 3
    assert delta == 0


def test_layout_from_features_serves_any_slice():
    """layout_from_features gives a PromptLayout whose slices are the whole prompt's columns."""
    vector = QWEN25_VL_VIDEO
    layout = layout_from_features(vllm_config(vector), len(vector["token_ids"]), vector_features(vector))
    whole = np.array(vector["positions"])
    np.testing.assert_array_equal(layout.positions(3, 17), whole[:, 3:17])
    assert layout.delta == vector["delta"]


@pytest.mark.parametrize("form", ["list", "numpy", "tensor"])
@pytest.mark.parametrize("vector", [QWEN3_VL_VIDEO, GLM_VIDEO], ids=["qwen3_vl", "glm4v"])
def test_is_embed_forms(vector, form):
    """is_embed as a bool list, numpy array or torch tensor gives vLLM's positions."""
    assert_vector(vector, adapter(vector, vector_features(vector, form)))


def test_is_embed_as_zero_one_ints():
    """An integer 0/1 is_embed mask reads like the bool one."""
    features = vector_features(GLM_VIDEO)
    for f in features:
        if f.mm_position.is_embed is not None:
            f.mm_position.is_embed = f.mm_position.is_embed.to(torch.uint8)
    assert_vector(GLM_VIDEO, adapter(GLM_VIDEO, features))


@pytest.mark.parametrize(
    "vector", [QWEN3_VL_VIDEO, OMNI_AV_TWO, QWEN3_OMNI_AV], ids=["qwen3_vl", "qwen2_5_omni", "qwen3_omni"]
)
def test_features_out_of_order(vector):
    """Reversed feature lists give the same positions (the adapter sorts by offset, as vLLM)."""
    assert_vector(vector, adapter(vector, vector_features(vector)[::-1]))


def test_timestamps_field_is_ignored():
    """Qwen3-VL's timestamps are text tokens: dropping the field changes nothing."""
    features = vector_features(QWEN3_VL_VIDEO)
    for f in features:
        f.data.pop("timestamps", None)
    assert_vector(QWEN3_VL_VIDEO, adapter(QWEN3_VL_VIDEO, features))


def test_missing_second_per_grid_ts_is_the_family_default():
    """A Qwen3-Omni video without second_per_grid_ts is read as vLLM's default 2.0 s."""
    vector = first_vector(
        lambda v: v["family"] == "qwen3_omni" and v["video_grid_thw"] and 2.0 in v["second_per_grid_ts"]
    )
    features = vector_features(vector)
    for f in features:
        if f.modality == "video" and float(f.data["second_per_grid_ts"].data) == 2.0:
            del f.data["second_per_grid_ts"]
    assert_vector(vector, adapter(vector, features))


# ---------------------------------------------------------------- Omni pairing


def test_omni_pairing_by_shared_range():
    """Each audio-in-video video takes the audio feature with its own range, whatever the list order."""
    features = vector_features(OMNI_AV_TWO)
    videos = [f for f in features if f.modality == "video"]
    audios = [f for f in features if f.modality == "audio"]
    shuffled = audios[::-1] + [f for f in features if f.modality == "image"] + videos[::-1]
    assert_vector(OMNI_AV_TWO, adapter(OMNI_AV_TWO, shuffled))


def test_omni_interleave_lengths_come_from_the_audio_feature():
    """Swapping two tracks' mel-frame counts no longer fits the ranges and is refused."""
    features = vector_features(OMNI_AV_TWO)
    audios = sorted((f for f in features if f.modality == "audio"), key=lambda f: f.mm_position.offset)
    audios[0].data, audios[1].data = audios[1].data, audios[0].data
    with pytest.raises(ValueError):
        adapter(OMNI_AV_TWO, features)


def test_omni_video_without_audio_track_is_refused():
    """An audio-in-video video with no audio feature at its offset raises, naming the video."""
    features = [f for f in vector_features(QWEN3_OMNI_AV) if f.modality != "audio"]
    index = next(i for i, f in enumerate(features) if f.modality == "video")
    with pytest.raises(ValueError, match=rf"mm_features\[{index}\].*same range"):
        adapter(QWEN3_OMNI_AV, features)


def test_omni_audio_track_of_other_length_is_refused():
    """The paired audio feature must cover the video's range exactly."""
    features = vector_features(QWEN3_OMNI_AV)
    audio_index = next(i for i, f in enumerate(features) if f.modality == "audio")
    position = features[audio_index].mm_position
    position.length -= 1
    position.is_embed = position.is_embed[:-1]
    with pytest.raises(ValueError, match=rf"mm_features\[{audio_index}\]\.mm_position\.length"):
        adapter(QWEN3_OMNI_AV, features)


def test_mixed_audio_in_video_flags_are_refused():
    """One video with use_audio_in_video and one without: refused, naming the odd one."""
    features = vector_features(OMNI_AV_TWO)
    video_indices = [i for i, f in enumerate(features) if f.modality == "video"]
    features[video_indices[1]].data["use_audio_in_video"] = FieldElem(torch.tensor(False))
    with pytest.raises(ValueError, match=rf"mm_features\[{video_indices[1]}\]\.data\['use_audio_in_video'\]"):
        adapter(OMNI_AV_TWO, features)


def test_audio_in_video_on_a_vision_model_is_refused():
    """use_audio_in_video on a Qwen2.5-VL video raises a ValueError naming the field."""
    features = vector_features(QWEN25_VL_VIDEO)
    index = next(i for i, f in enumerate(features) if f.modality == "video")
    features[index].data["use_audio_in_video"] = FieldElem(torch.tensor(True))
    with pytest.raises(ValueError, match="use_audio_in_video"):
        adapter(QWEN25_VL_VIDEO, features)


# ---------------------------------------------------------------- malformed features


def _image(offset=1, length=4, grid=(1, 4, 4), is_embed=None):
    return feature("image", offset, length, is_embed, mask_form="raw", image_grid_thw=grid)


IMAGE_PROMPT = [7, 151652] + [151655] * 4 + [151653, 8]


def _positions(features, tokens=IMAGE_PROMPT):
    return get_mrope_input_positions(MRopeConfig(family="qwen2_vl"), tokens, features)


def test_well_formed_image_feature():
    """The baseline feature the error tests below break one field at a time."""
    positions, delta = _positions([_image(offset=2)])
    assert positions[0].tolist() == [0, 1, 2, 2, 2, 2, 4, 5]
    assert delta == -2


@pytest.mark.parametrize(
    ("feature", "error", "match"),
    [
        (object(), TypeError, r"mm_features\[0\]: expected a MultiModalFeatureSpec-like object with \.modality"),
        (feature("pixels", 2, 4), ValueError, r"mm_features\[0\]\.modality"),
        (FeatureSpec("image", object(), {}), TypeError, r"mm_features\[0\]\.mm_position"),
        (_image(offset=-1), ValueError, r"mm_features\[0\]\.mm_position\.offset: expected an int >= 0"),
        (_image(offset=2.0), TypeError, r"mm_features\[0\]\.mm_position\.offset: expected an int"),
        (_image(length=0), ValueError, r"mm_features\[0\]\.mm_position\.length"),
        (_image(is_embed=[True] * 3), ValueError, r"is_embed: expected 4 flags"),
        (_image(is_embed=[0.5] * 4), TypeError, r"is_embed: expected bools"),
        (
            FeatureSpec("image", PlaceholderRange(2, 4), [1, 4, 4]),
            TypeError,
            r"mm_features\[0\]\.data: expected a mapping",
        ),
        (feature("image", 2, 4), ValueError, r"data\['image_grid_thw'\]: a image feature needs"),
        (
            FeatureSpec("image", PlaceholderRange(2, 4), {"image_grid_thw": [1, 4, 4]}),
            TypeError,
            r"field element with \.data",
        ),
        (_image(grid=(4, 4)), ValueError, r"data\['image_grid_thw'\]: expected 3 ints"),
        (_image(grid=(1.0, 4.0, 4.0)), ValueError, r"data\['image_grid_thw'\]: expected 3 ints"),
    ],
)
def test_malformed_feature_is_named(feature, error, match):
    """A malformed feature raises TypeError/ValueError naming its index and field."""
    with pytest.raises(error, match=match):
        _positions([feature])


def test_error_names_the_index_in_the_callers_list():
    """The index in the message is the feature's place in the caller's list, not in offset order."""
    late = _image(offset=2)
    broken = feature("image", 0, 1)
    with pytest.raises(ValueError, match=r"mm_features\[1\]"):
        _positions([late, broken])


def test_audio_feature_needs_its_length():
    """An audio feature without audio_feature_lengths raises, naming the field."""
    audio = feature("audio", 1, 5)
    with pytest.raises(ValueError, match=r"mm_features\[0\]\.data\['audio_feature_lengths'\]"):
        get_mrope_input_positions(MRopeConfig(family="qwen2_5_omni"), list(range(8)), [audio])


def test_audio_length_must_be_a_positive_int():
    """A float or zero mel-frame count is refused."""
    config = MRopeConfig(family="qwen2_5_omni")
    for frames, error in ((torch.tensor(20.0), ValueError), (torch.tensor(0), ValueError)):
        audio = feature("audio", 1, 5, audio_feature_lengths=frames)
        with pytest.raises(error, match=r"audio_feature_lengths"):
            get_mrope_input_positions(config, list(range(8)), [audio])


@pytest.mark.parametrize(("features", "error"), [("image", TypeError), (None, TypeError), (_image(), TypeError)])
def test_mm_features_must_be_a_list(features, error):
    """mm_features that is not a list of features raises a TypeError naming it."""
    with pytest.raises(error, match="mm_features"):
        _positions(features)


@pytest.mark.parametrize(("tokens", "error"), [([], ValueError), (5, TypeError), ("abc", TypeError)])
def test_input_tokens_must_be_a_nonempty_sequence(tokens, error):
    """Empty or non-sequence input_tokens raise, naming input_tokens."""
    with pytest.raises(error, match="input_tokens"):
        get_mrope_input_positions(MRopeConfig(family="qwen2_vl"), tokens, [])
