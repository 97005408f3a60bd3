"""Keye-VL, Keye-VL-1.5, Isaac and openPangu-VL: vLLM 0.33.0's own positions
(tests/data/vllm-0.33.0-more.jsonl, 30 prompts each) through every entry
point, random prompts of each against the reference, and their bad input.

These families have no transformers implementation: vLLM 0.33's rule is the
only one, so "reference" and "vllm-0.33" give the same positions
(docs/semantics.md). openPangu-VL's and Keye-VL-1.5's special ids are
unknown: the vectors' configs carry stand-ins (`*_STANDIN`), which change
token ids only; the range form and the adapter need no id.
"""

from __future__ import annotations

import warnings

import attrs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import examples
from vllm_families import (
    FAMILIES,
    flat_video_grid,
    load_config,
    load_more_vectors,
    prompts,
    token_config,
    vector_features,
)
from vllm_features import feature

from mrope_tracker import MRopeConfig, PositionTracker, PromptLayout, prompt_positions, reference
from mrope_tracker.core.config import SEMANTICS, ConfigDefaultWarning
from mrope_tracker.kernels import layout_codes as C
from mrope_tracker.vllm import get_mrope_input_positions, layout_from_features

VECTORS = load_more_vectors()
IDS = [f"{i:03d}-{v['family']}" for i, v in enumerate(VECTORS)]
ALL = pytest.mark.parametrize("index", range(len(VECTORS)), ids=IDS)


def range_config(vector_or_config: dict, semantics: str = "vllm-0.33") -> MRopeConfig:
    config = vector_or_config.get("config", vector_or_config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigDefaultWarning)
        return MRopeConfig.from_hf_config(config, semantics=semantics)


def token_kwargs(vector: dict) -> dict:
    kw = {}
    if vector["image_grid_thw"]:
        kw["image_grid_thw"] = vector["image_grid_thw"]
    if vector["video_grid_thw"]:
        kw["video_grid_thw"] = flat_video_grid(vector)
    return kw


def expected(vector: dict) -> tuple[np.ndarray, int]:
    return np.array(vector["positions"], np.int64), vector["delta"]


def assert_same(got, want) -> None:
    positions, delta = got
    np.testing.assert_array_equal(np.asarray(positions), want[0])
    assert int(delta) == want[1]


def test_vectors_hold_30_prompts_of_each_family():
    counts = {family: sum(v["family"] == family for v in VECTORS) for family in FAMILIES}
    assert counts == dict.fromkeys(FAMILIES, 30)
    assert all(range_config(v).family == v["family"] for v in VECTORS)


@ALL
@pytest.mark.parametrize("semantics", ["vllm-0.33", "reference"])
def test_adapter_reproduces_vllm(index, semantics):
    """get_mrope_input_positions on vLLM's features (no token read, no id needed) gives vLLM 0.33.0's result."""
    vector = VECTORS[index]
    got = get_mrope_input_positions(range_config(vector, semantics), vector["token_ids"], vector_features(vector))
    assert_same(got, expected(vector))


@ALL
def test_token_form_and_reference_reproduce_vllm(index):
    """prompt_positions and the torch reference, with openPangu's stand-in ids given, give vLLM's result."""
    vector = VECTORS[index]
    config = token_config(vector["config"])
    assert_same(prompt_positions(config, vector["token_ids"], **token_kwargs(vector)), expected(vector))
    assert_same(reference.prompt_positions(config, vector["token_ids"], **token_kwargs(vector)), expected(vector))
    layout = PromptLayout.from_tokens(config, vector["token_ids"], **token_kwargs(vector))
    assert_same((layout.positions(), layout.delta), expected(vector))


@ALL
def test_tracker_reproduces_vllm_in_chunks(index):
    """The tracker, admitted from the adapter's layout and from tokens, writes vLLM's positions chunk by chunk."""
    vector = VECTORS[index]
    config = token_config(vector["config"])
    positions, delta = expected(vector)
    num_tokens = len(vector["token_ids"])
    tracker = PositionTracker(config, max_num_reqs=3, max_num_batched_tokens=96)
    tracker.add_request("tokens", vector["token_ids"], **token_kwargs(vector))
    layout = layout_from_features(config, num_tokens, vector_features(vector))
    tracker.add_request_layout("ranges", layout)
    tracker.add_request_from_features("features", vector["token_ids"], vector_features(vector))
    done, chunk = 0, 7 + index % 23
    while done < num_tokens + 3:
        n = min(chunk, 32)
        got = tracker.prepare(["tokens", "ranges", "features"], [n, n, n]).numpy()
        index_ = np.arange(done, done + n)
        want = np.where(index_ < num_tokens, positions[:, np.minimum(index_, num_tokens - 1)], index_ + delta)
        for k in range(3):
            np.testing.assert_array_equal(got[:, k * n : (k + 1) * n], want)
        done += n
    tracker.check_invariants()


def test_openpangu_token_form_names_the_unknown_id():
    """Without its ids (none published), openPangu's token form refuses, naming the id and the range form."""
    vector = next(v for v in VECTORS if v["family"] == "openpangu_vl" and v["image_grid_thw"])
    config = range_config(vector)
    assert config.image_token_id is None and config.video_token_id is None
    for call in (
        lambda: prompt_positions(config, vector["token_ids"], **token_kwargs(vector)),
        lambda: PromptLayout.from_tokens(config, vector["token_ids"], **token_kwargs(vector)),
        lambda: PositionTracker(config, max_num_reqs=1, max_num_batched_tokens=8).add_request(
            "r", vector["token_ids"], **token_kwargs(vector)
        ),
    ):
        with pytest.raises(ValueError, match=r"image_token_id: unknown for openpangu_vl.*from_ranges"):
            call()
    video = next(
        v for v in VECTORS if v["family"] == "openpangu_vl" and v["video_grid_thw"] and not v["image_grid_thw"]
    )
    with pytest.raises(ValueError, match=r"video_token_id: unknown for openpangu_vl"):
        prompt_positions(config, video["token_ids"], video_grid_thw=video["video_grid_thw"])
    with pytest.raises(ValueError, match=r"config.image_token_id: expected a value for openpangu_vl"):
        reference.prompt_positions(config, vector["token_ids"], **token_kwargs(vector))
    # a text prompt needs no id
    positions, delta = prompt_positions(config, [5, 6, 7])
    assert positions.tolist() == [[0, 1, 2]] * 3 and delta == 0


def test_config_reading():
    """from_hf_config reads each model type's fields; openPangu's unknown ids stay None without a warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pangu = MRopeConfig.from_hf_config(load_config("openpangu_vl"))
        isaac = MRopeConfig.from_hf_config(load_config("isaac"))
    assert (pangu.family, pangu.image_token_id, pangu.spatial_merge_size) == ("openpangu_vl", None, 2)
    assert (isaac.family, isaac.image_token_id, isaac.spatial_merge_size) == ("isaac", 151655, 2)
    assert isaac.video_token_id is None and isaac.vision_start_token_id is None
    small = {"model_type": "isaac", "vision_config": {"pixel_shuffle_scale_factor": 1}, "image_token_id": 7}
    assert MRopeConfig.from_hf_config(small).spatial_merge_size == 1
    with pytest.warns(ConfigDefaultWarning, match="pixel_shuffle_scale_factor 2"):
        MRopeConfig.from_hf_config({"model_type": "isaac", "image_token_id": 7, "vision_config": {}})
    for model_type, family in (("keye", "keye"), ("KeyeVL1_5", "keye_vl1_5"), ("keye_vl1_5", "keye_vl1_5")):
        config = MRopeConfig.from_hf_config({**load_config(family), "model_type": model_type})
        assert (config.family, config.image_token_id, config.video_token_id) == (family, 151655, 151656)
    given_ids = {**load_config("openpangu_vl"), "image_token_id": 11, "video_token_id": 12}
    assert MRopeConfig.from_hf_config(given_ids).video_token_id == 12


# ------------------------------------------------------------------ random prompts


@pytest.mark.parametrize("family", FAMILIES)
@settings(max_examples=examples(200, minimum=60))
@given(data=st.data(), semantics=st.sampled_from(SEMANTICS))
def test_every_form_equals_the_reference(family, data, semantics):
    """Token form, PromptLayout from tokens and from ranges, and the adapter equal the torch reference."""
    prompt = data.draw(prompts(families=(family,)))
    config = token_config(prompt.config, semantics)
    want_positions, want_delta = reference.prompt_positions(config, prompt.token_ids, **prompt.kwargs())
    want = (want_positions.numpy(), int(want_delta))
    assert_same(prompt_positions(config, prompt.token_ids, **prompt.kwargs()), want)
    layout = PromptLayout.from_tokens(config, prompt.token_ids, **prompt.kwargs())
    assert_same((layout.positions(), layout.delta), want)
    no_ids = range_config(prompt.config, semantics)  # openPangu: no ids at all
    layout = PromptLayout.from_ranges(no_ids, prompt.num_tokens, **prompt.range_kwargs())
    assert_same((layout.positions(), layout.delta), want)
    assert_same(get_mrope_input_positions(no_ids, prompt.token_ids, prompt.features[::-1]), want)


@pytest.mark.parametrize("family", FAMILIES)
@settings(max_examples=examples(100, minimum=30))
@given(data=st.data())
def test_tracker_equals_the_reference(family, data):
    """A request admitted at a random cache hit from tokens, ranges or a serialised layout, advanced in random
    chunks, equals the reference, then index + delta past the prompt."""
    prompt = data.draw(prompts(families=(family,), max_items=3))
    config = token_config(prompt.config)
    positions, delta = reference.prompt_positions(config, prompt.token_ids, **prompt.kwargs())
    positions = positions.numpy()
    tracker = PositionTracker(config, max_num_reqs=1, max_num_batched_tokens=128)
    hit = data.draw(st.integers(0, prompt.num_tokens))
    form = data.draw(st.sampled_from(("tokens", "ranges", "bytes")))
    if form == "tokens":
        tracker.add_request("r", prompt.token_ids, num_computed_tokens=hit, **prompt.kwargs())
    elif form == "ranges":
        tracker.add_request_from_ranges("r", prompt.num_tokens, num_computed_tokens=hit, **prompt.range_kwargs())
    else:
        layout = layout_from_features(config, prompt.num_tokens, prompt.features)
        tracker.add_request_layout("r", PromptLayout.from_bytes(layout.to_bytes()), num_computed_tokens=hit)
    done = hit
    while done < prompt.num_tokens + 2:
        n = data.draw(st.integers(1, 40))
        index = np.arange(done, done + n)
        want = np.where(
            index < prompt.num_tokens, positions[:, np.minimum(index, prompt.num_tokens - 1)], index + int(delta)
        )
        np.testing.assert_array_equal(tracker.prepare(["r"], [n]).numpy(), want)
        done += n
    tracker.check_invariants()


# ------------------------------------------------------------------ the rules, worked


def test_isaac_trailing_text_reuses_positions():
    """Isaac: H and W are raw indices; text between images follows the block maximum, trailing text the last T."""
    config = token_config(load_config("isaac"))
    image = config.image_token_id
    # text, an image of 3x4 merged patches at s = 1, text, an image of 1x1, text
    ids = [9] + [image] * 12 + [9, 9] + [image] + [9, 9]
    positions, delta = prompt_positions(config, ids, image_grid_thw=[[1, 6, 8], [1, 2, 2]])
    assert positions[:, 0].tolist() == [0, 0, 0]
    assert positions[:, 1:13].tolist() == [[1] * 12, [0] * 4 + [1] * 4 + [2] * 4, [0, 1, 2, 3] * 3]
    assert positions[:, 13].tolist() == [4, 4, 4]  # 1 + max(1, 2, 3)
    assert positions[:, 15].tolist() == [6, 0, 0]
    assert positions[:, 16:].tolist() == [[7, 8]] * 3  # after the last image's T, not its maximum
    assert delta == 8 + 1 - len(ids)
    rows = PromptLayout.from_tokens(config, ids, image_grid_thw=[[1, 6, 8], [1, 2, 2]]).rows
    assert rows[:, C.COL_KIND].tolist().count(C.KIND_GRID_RAW) == 2
    # the trailing rule reuses positions: the last text may sit below the block's maximum
    ids = [image] * 12 + [9]
    positions, delta = prompt_positions(config, ids, image_grid_thw=[[1, 6, 8]])
    assert positions[:, -1].tolist() == [1, 1, 1] and delta == 3 + 1 - len(ids)


def test_keye_frames_advance_by_the_larger_side():
    """Keye: a (t, h, w) video is t blocks back to back, each one past the previous frame's maximum."""
    config = token_config(load_config("keye"))
    ids = [9] + [config.video_token_id] * 12 + [9]
    positions, _ = prompt_positions(config, ids, video_grid_thw=[[2, 4, 6]])  # 2 frames of 2x3
    assert positions[0, 1:13].tolist() == [1] * 6 + [4] * 6  # T advances by max(2, 3)
    assert positions[:, 13].tolist() == [7, 7, 7]


def test_openpangu_separators_are_text_between_frames():
    config = token_config(load_config("openpangu_vl"))
    v, vs, ve = config.video_token_id, config.vision_start_token_id, config.vision_end_token_id
    ids = [vs] + [v] * 4 + [ve, vs] + [v] * 4 + [ve]
    positions, delta = prompt_positions(config, ids, video_grid_thw=[[2, 4, 4]])
    assert positions[0].tolist() == [0, 1, 1, 1, 1, 3, 4, 5, 5, 5, 5, 7]
    assert positions[1].tolist() == [0, 1, 1, 2, 2, 3, 4, 5, 5, 6, 6, 7]
    # the range form without is_embed: frames 2 tokens apart
    layout = PromptLayout.from_ranges(range_config(load_config("openpangu_vl")), len(ids), video_ranges=[(1, 10)],
                                      video_grid_thw=[[2, 4, 4]])  # fmt: skip
    assert_same((layout.positions(), layout.delta), (positions, delta))


# ------------------------------------------------------------------ bad input


def test_isaac_refuses_videos():
    config = token_config(load_config("isaac"))
    for call in (
        lambda: prompt_positions(config, [1, 2, 3], video_grid_thw=[[1, 2, 2]]),
        lambda: prompt_positions(config, np.array([1, 2, 3]), video_grid_thw=np.array([[1, 2, 2]])),
        lambda: PromptLayout.from_ranges(config, 3, video_ranges=[(0, 1)], video_grid_thw=[[1, 2, 2]]),
        lambda: reference.prompt_positions(config, [1, 2, 3], video_grid_thw=[[1, 2, 2]]),
    ):
        with pytest.raises(ValueError, match="video_grid_thw: .*isaac"):
            call()
    video = feature("video", 0, 1, video_grid_thw=[1, 2, 2])
    with pytest.raises(ValueError, match=r"video_grid_thw: expected None for isaac \(images only"):
        get_mrope_input_positions(config, [1, 2, 3], [video])


def test_isaac_placeholder_count_is_checked():
    config = token_config(load_config("isaac"))
    ids = [config.image_token_id] * 3 + [9]
    with pytest.raises(ValueError, match=r"more image placeholders than image_grid_thw describes"):
        prompt_positions(config, ids, image_grid_thw=[[1, 2, 4]])  # 2 placeholders expected, 3 found
    with pytest.raises(ValueError, match=r"image_grid_thw\[0\]"):
        prompt_positions(config, ids[:1] + [9], image_grid_thw=[[1, 2, 4]])
    with pytest.raises(ValueError, match=r"image_ranges"):
        PromptLayout.from_ranges(config, 4, image_ranges=[(0, 3)], image_grid_thw=[[1, 2, 4]])


def _keye15_feature(rows, is_embed, offset=0):
    length = len(is_embed) if is_embed else 4
    return feature("video", offset, length, is_embed, video_grid_thw=rows, num_frames=len(rows))


def test_keye_vl1_5_frames_must_match_the_embed_runs():
    config = range_config(load_config("keye_vl1_5"))
    ok = _keye15_feature([[1, 2, 2], [1, 4, 2]], [0, 1, 0, 1, 1])
    positions, _ = get_mrope_input_positions(config, [0] * 6, [ok])
    assert positions[0].tolist() == [0, 1, 2, 3, 3, 5]
    for rows, mask, match in (
        ([[1, 2, 2], [1, 4, 2]], [0, 1, 1, 0, 1], r"is_embed: expected runs of \[1, 2\] embedding tokens"),
        ([[1, 2, 2]], [1, 0, 1, 0], r"is_embed: expected runs of \[1\]"),
        ([[1, 3, 2]], [1, 0, 1, 0], r"video_grid_thw'\]\[0\]: expected positive \(t, h, w\) with h and w divisible"),
        ([[[1, 2, 2]]], [1, 0, 1, 0], r"expected \(n, 3\) ints"),
    ):
        with pytest.raises(ValueError, match=match):
            get_mrope_input_positions(config, [0] * 6, [_keye15_feature(rows, mask)])


def test_openpangu_range_without_mask_must_fit_the_gaps():
    config = range_config(load_config("openpangu_vl"))
    with pytest.raises(ValueError, match=r"video_ranges\[0\]: without is_embed, .* 2 tokens apart \(length 10\)"):
        PromptLayout.from_ranges(config, 12, video_ranges=[(1, 8)], video_grid_thw=[[2, 4, 4]])


def test_checked_ranges_need_the_ids():
    """from_ranges(token_ids=...) checks ranges against tokens, which openPangu's unknown ids cannot."""
    vector = next(v for v in VECTORS if v["family"] == "openpangu_vl" and v["image_grid_thw"])
    features = vector_features(vector)
    ranges = [(f.mm_position.offset, f.mm_position.length) for f in features if f.modality == "image"]
    kwargs = {"image_ranges": ranges, "image_grid_thw": vector["image_grid_thw"]}
    if vector["video_grid_thw"]:
        kwargs["video_grid_thw"] = vector["video_grid_thw"]
        kwargs["video_ranges"] = [
            (f.mm_position.offset, f.mm_position.length, f.mm_position.is_embed)
            for f in features
            if f.modality == "video"
        ]
    num_tokens = len(vector["token_ids"])
    with pytest.raises(ValueError, match=r"token_ids: image_ranges\[0\] cannot be checked.*image_token_id is unknown"):
        PromptLayout.from_ranges(range_config(vector), num_tokens, token_ids=vector["token_ids"], **kwargs)
    layout = PromptLayout.from_ranges(
        token_config(vector["config"]), num_tokens, token_ids=vector["token_ids"], **kwargs
    )
    assert_same((layout.positions(), layout.delta), expected(vector))


def test_raw_grid_rows_are_checked():
    """A GRID_RAW row that did not come from a builder is checked like a GRID row."""
    config = token_config(load_config("isaac"))
    layout = PromptLayout.from_tokens(config, [7] + [config.image_token_id] * 4, image_grid_thw=[[1, 4, 4]])
    rows = layout.rows.copy()
    assert rows[1, C.COL_KIND] == C.KIND_GRID_RAW
    again = attrs.evolve(layout, rows=rows, scales=layout.scales.copy())
    assert_same((again.positions(), again.delta), (layout.positions(), layout.delta))
    rows[1, C.COL_H] = 0
    with pytest.raises(ValueError, match="rows"):
        attrs.evolve(layout, rows=rows, scales=layout.scales.copy())


@pytest.mark.parametrize(
    "change, error, match",
    [
        ({"frame_gap": -1}, ValueError, "frame_gap: expected 0, or a positive int"),
        ({"frame_gap": 2, "video_blocks": "block"}, ValueError, "frame_gap: expected 0"),
        ({"frame_gap": 1.0}, TypeError, "frame_gap: expected an int"),
        ({"frame_gap": 0, "per_frame_grids": True, "video_blocks": "block"}, ValueError, "per_frame_grids: expected"),
        ({"raw_spatial": 1}, TypeError, "raw_spatial: expected a bool"),
    ],
)
def test_new_family_fields_are_validated(change, error, match):
    from mrope_tracker.families import FAMILIES as RECORDS

    with pytest.raises(error, match=match):
        attrs.evolve(RECORDS["openpangu_vl"], **change)


def test_keye_vl1_5_wild_frame_count_is_refused_at_once():
    """A Keye-VL-1.5 feature announcing far more frames than its range holds is refused before any
    per-frame list is made (a frame count of 10**9 must not build a billion-entry list)."""
    config = MRopeConfig(family="keye_vl1_5", semantics="vllm-0.33")
    video = feature("video", 2, 8, video_grid_thw=[[10**9, 2, 2]])
    with pytest.raises(ValueError, match=r"expected at most 8 frames in all \(the range's length\), got 1000000000"):
        layout_from_features(config, 16, [video])
