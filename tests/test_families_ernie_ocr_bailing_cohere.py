"""The families vLLM 0.33 serves beyond the first six (PaddleOCR-VL, ERNIE-4.5-VL,
GLM-OCR, Bailing-MoE-V3-VL, Cohere Compass), the model types it maps onto
classes already covered, and the text-only ones.

Random prompts laid out as each processor does (tests/family_prompts.py)
go through every entry point and must equal the torch reference; configs
are read from their published form; bad input is refused naming the
argument. vLLM 0.33.0's own positions (tests/data/vllm-0.33.0-more.jsonl)
must come out exactly through every entry point (the last part of this module).
"""

from __future__ import annotations

import json
import os
from collections import Counter

import numpy as np
import pytest
import torch
from family_prompts import CONFIG_NAMES, VLLM_FAMILIES, family_prompts, load_config
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import examples
from vllm_features import FeatureSpec, feature

from mrope_tracker import MRopeConfig, PositionTracker, PromptLayout, prompt_positions, reference
from mrope_tracker.vllm import get_mrope_input_positions, layout_from_features

SEMANTICS = ("reference", "vllm-0.33")


def _features(prompt) -> list[FeatureSpec]:
    """vLLM's features of a generated prompt: its placeholder ranges and grids, in prompt order."""
    grids = {"image": iter(prompt.image_grid_thw), "video": iter(prompt.video_grid_thw)}
    out = []
    for r in prompt.vllm_ranges:
        is_embed = None if r.is_embed is None else torch.tensor(r.is_embed)
        fields = {f"{r.modality}_grid_thw": next(grids[r.modality])}
        out.append(feature(r.modality, r.offset, r.length, is_embed, **fields))
    return out


@settings(max_examples=examples(150, minimum=30))
@given(family=st.sampled_from(VLLM_FAMILIES), semantics=st.sampled_from(SEMANTICS), data=st.data())
def test_every_entry_point_equals_the_reference(family, semantics, data):
    """Token form, from_tokens, from_ranges, the checked range form and the vLLM adapter give the
    reference's positions and delta."""
    prompt = data.draw(family_prompts(family, max_items=4))
    config = MRopeConfig.from_hf_config(prompt.config, semantics=semantics)
    expected, delta = reference.prompt_positions(config, list(prompt.token_ids), **prompt.kwargs())
    expected = expected.numpy()
    positions, got_delta = prompt_positions(config, list(prompt.token_ids), **prompt.kwargs())
    np.testing.assert_array_equal(positions, expected)
    assert got_delta == delta
    layouts = (
        PromptLayout.from_tokens(config, list(prompt.token_ids), **prompt.kwargs()),
        PromptLayout.from_ranges(config, prompt.num_tokens, **prompt.range_kwargs()),
        PromptLayout.from_ranges(config, prompt.num_tokens, token_ids=list(prompt.token_ids), **prompt.range_kwargs()),
    )
    for layout in layouts:
        np.testing.assert_array_equal(layout.positions(), expected)
        assert layout.delta == delta
    np.testing.assert_array_equal(layouts[0].rows, layouts[1].rows)
    adapted, adapted_delta = get_mrope_input_positions(config, list(prompt.token_ids), _features(prompt))
    np.testing.assert_array_equal(adapted.numpy(), expected)
    assert adapted_delta == delta


@settings(max_examples=examples(60, minimum=15))
@given(family=st.sampled_from(VLLM_FAMILIES), data=st.data())
def test_tracker_chunks_equal_the_reference(family, data):
    """A request admitted at a random cache hit and run in random chunks past its prompt."""
    prompt = data.draw(family_prompts(family, max_items=3))
    config = MRopeConfig.from_hf_config(prompt.config, semantics="vllm-0.33")
    expected, delta = reference.prompt_positions(config, list(prompt.token_ids), **prompt.kwargs())
    expected = expected.numpy()
    tracker = PositionTracker(config, max_num_reqs=1, max_num_batched_tokens=256)
    hit = data.draw(st.integers(0, prompt.num_tokens))
    if data.draw(st.booleans()):
        tracker.add_request_from_ranges("r", prompt.num_tokens, num_computed_tokens=hit, **prompt.range_kwargs())
    else:
        tracker.add_request("r", list(prompt.token_ids), num_computed_tokens=hit, **prompt.kwargs())
    done = hit
    while done < prompt.num_tokens + 2:
        n = data.draw(st.integers(1, 40))
        index = np.arange(done, done + n)
        want = np.where(index < prompt.num_tokens, expected[:, np.minimum(index, prompt.num_tokens - 1)], index + delta)
        np.testing.assert_array_equal(tracker.prepare(["r"], [n]).numpy(), want)
        done += n


# ---------------------------------------------------------------- configs


@pytest.mark.parametrize("family", VLLM_FAMILIES)
def test_published_configs_read_without_fallbacks(family, recwarn):
    for name in CONFIG_NAMES[family]:
        config = MRopeConfig.from_hf_config(load_config(name))
        assert config.family == family
    assert not [w for w in recwarn if "ConfigDefaultWarning" in type(w.message).__name__]


def test_ernie_both_config_forms():
    """vLLM's remote-code config (one placeholder, top-level conv sizes) and transformers 5's (its own
    video token, merge sizes in vision_config) give the same rules."""
    remote = MRopeConfig.from_hf_config(
        {
            "model_type": "ernie4_5_moe_vl",
            "im_patch_id": 7,
            "spatial_conv_size": 2,
            "temporal_conv_size": 2,
            "image_start_token_id": 3,
            "image_end_token_id": 4,
            "video_start_token_id": 5,
            "video_end_token_id": 6,
        }
    )
    assert (remote.image_token_id, remote.spatial_merge_size, remote.temporal_merge_size) == (7, 2, 2)
    hf5 = MRopeConfig.from_hf_config(load_config("ernie4_5_vl_moe"))
    assert (hf5.model_type, hf5.video_token_id, hf5.temporal_merge_size) == ("ernie4_5_vl_moe", 103367, 2)
    # a remote-code prompt: the image token between the video brackets is a 4-frame video
    ids = [9, 5, *[7] * 2, 6, 3, *[7] * 2, 4]
    positions, delta = prompt_positions(remote, ids, image_grid_thw=[[1, 2, 4]], video_grid_thw=[[4, 2, 2]])
    assert positions.tolist() == [[0, 1, 2, 3, 4, 5, 6, 6, 8], [0, 1, 2, 2, 4, 5, 6, 6, 8], [0, 1, 2, 2, 4, 5, 6, 7, 8]]
    assert delta == 0


VISION_25 = {"spatial_merge_size": 2, "tokens_per_second": 2}
MAPPED = [
    # (model_type, config holding its ids where its checkpoints keep them, family, image id)
    ("opencua", {"media_placeholder_token_id": 151664, "vision_config": VISION_25}, "qwen2_5_vl", 151664),
    (
        "exaone4_5",
        {"image_token_id": 67, "video_token_id": 68, "vision_config": VISION_25},
        "qwen2_5_vl",
        67,
    ),
    (
        "cosmos3_edge",
        {"image_token_id": 19, "video_token_id": 18, "vision_start_token_id": 20, "vision_end_token_id": 21},
        "qwen3_vl",
        19,
    ),
    ("cosmos3_omni", {"image_token_id": 151655, "video_token_id": 151656}, "qwen3_vl", 151655),
    ("interns1_pro", {"image_token_id": 151655, "video_token_id": 151656}, "qwen3_vl", 151655),
    ("intern_s2_preview", {"image_token_id": 248056, "video_token_id": 248057}, "qwen3_vl", 248056),
    ("interns2_mobius", {"image_token_id": 248056, "video_token_id": 248057}, "qwen3_vl", 248056),
]


@pytest.mark.filterwarnings("ignore::mrope_tracker.core.config.ConfigDefaultWarning")
@pytest.mark.parametrize("model_type, fields, family, image", MAPPED, ids=[m[0] for m in MAPPED])
def test_mapped_model_types(model_type, fields, family, image):
    """Model types vLLM 0.33 serves with a class already covered take that class's rules and ids."""
    config = MRopeConfig.from_hf_config({"model_type": model_type, **fields}, semantics="vllm-0.33")
    assert (config.family, config.model_type, config.image_token_id) == (family, model_type, image)
    if "video_token_id" in fields:
        assert config.video_token_id == fields["video_token_id"]
    # one image and one text token, positioned as the family's own model type would
    own = MRopeConfig(family=family, semantics="vllm-0.33", image_token_id=image, video_token_id=5)
    ids = [1, image, image, 2]
    got = prompt_positions(config, ids, image_grid_thw=[[1, 2, 4]])
    want = prompt_positions(own, ids, image_grid_thw=[[1, 2, 4]])
    assert got[0].tolist() == want[0].tolist() and got[1] == want[1] == 0


def test_exaone_time_scale_is_vllms_default(recwarn):
    """EXAONE-4.5's vision config has no tokens_per_second; vLLM 0.33 then scales video time by 1.0."""
    config = MRopeConfig.from_hf_config(
        {"model_type": "exaone4_5", "image_token_id": 67, "video_token_id": 68, "vision_config": {}},
        semantics="vllm-0.33",
    )
    assert config.tokens_per_second == 1.0
    assert not [w for w in recwarn if "tokens_per_second" in str(w.message)]


@pytest.mark.parametrize("model_type", ["qwen3_5_text", "qwen3_5_moe_text", "minicpmv4_6"])
def test_text_only_model_types(model_type):
    """Sequential positions on all three rows and delta 0, from tokens, ranges and the adapter
    (MiniCPM-V 4.6's vision features included, which vLLM also places at their index)."""
    config = MRopeConfig.from_hf_config({"model_type": model_type})
    assert config.family == "text_only"
    ids = list(range(50, 60))
    positions, delta = prompt_positions(config, ids)
    assert positions.tolist() == [list(range(10))] * 3 and delta == 0
    assert reference.prompt_positions(config, ids)[0].tolist() == [list(range(10))] * 3
    image = feature("image", 2, 4, image_grid_thw=[1, 4, 4])
    adapted, delta = get_mrope_input_positions(config, ids, [image])
    assert adapted.tolist() == [list(range(10))] * 3 and delta == 0


# ---------------------------------------------------------------- bad input


def _ernie() -> MRopeConfig:
    return MRopeConfig.from_hf_config(load_config("ernie4_5_moe_vl"), semantics="vllm-0.33")


@pytest.mark.parametrize("how", ["tokens", "ranges", "adapter", "reference", "tracker"])
def test_ernie_odd_frame_count_is_refused(how):
    """vLLM 0.33 lays out t*h*w/8 tokens but positions (t//2)*h'*w' of them for an odd t: refused."""
    config = _ernie()
    ids = [101306, *[100295] * 3, 101307]
    grid = [[3, 2, 4]]
    with pytest.raises(ValueError, match=r"video_grid_thw\[0\].*divisible by temporal_merge_size 2"):
        if how == "tokens":
            prompt_positions(config, ids, video_grid_thw=grid)
        elif how == "ranges":
            PromptLayout.from_ranges(config, len(ids), video_ranges=[(1, 3)], video_grid_thw=grid)
        elif how == "adapter":
            get_mrope_input_positions(config, ids, [feature("video", 1, 3, video_grid_thw=grid[0])])
        elif how == "reference":
            reference.prompt_positions(config, ids, video_grid_thw=grid)
        else:
            tracker = PositionTracker(config, max_num_reqs=1, max_num_batched_tokens=16)
            try:
                tracker.add_request("r", ids, video_grid_thw=grid)
            finally:
                assert len(tracker) == 0


@pytest.mark.parametrize("family", ["paddleocr_vl", "bailing_moe_v3_vl"])
def test_image_only_families_refuse_videos(family):
    config = MRopeConfig.from_hf_config(load_config(family))
    for call in (
        lambda: prompt_positions(config, [1, 2, 3, 4], video_grid_thw=[[2, 2, 2]]),
        lambda: PromptLayout.from_ranges(config, 4, video_ranges=[(0, 2)], video_grid_thw=[[2, 2, 2]]),
        lambda: reference.prompt_positions(config, [1, 2, 3, 4], video_grid_thw=[[2, 2, 2]]),
    ):
        with pytest.raises(ValueError, match=rf"video_grid_thw: expected None for {family} \(.*images only"):
            call()


def test_documented_examples():
    """docs/semantics.md sections 2.7 and 2.8, token for token."""
    bailing = MRopeConfig.from_hf_config(load_config("bailing_moe_v3_vl"))
    positions, delta = prompt_positions(bailing, [1, 151652, *[151655] * 6, 151653, 198, 2], image_grid_thw=[[1, 4, 6]])
    t = [0, 1, 2, 2, 2, 2, 2, 2, 5, 6, 7]
    assert positions.tolist() == [t, [0, 1, 2, 2, 2, 3, 3, 3, 5, 6, 7], [0, 1, 2, 3, 4, 2, 3, 4, 5, 6, 7]]
    assert delta == -3
    ernie = _ernie()
    ids = [1, 101306, *[100295] * 4, 101307, 101304, *[100295] * 2, 101305, 2]
    positions, delta = prompt_positions(ernie, ids, video_grid_thw=[[4, 2, 4]], image_grid_thw=[[1, 2, 4]])
    assert positions.tolist() == [
        [0, 1, 2, 2, 3, 3, 4, 5, 6, 6, 8, 9],
        [0, 1, 2, 2, 2, 2, 4, 5, 6, 6, 8, 9],
        [0, 1, 2, 3, 2, 3, 4, 5, 6, 7, 8, 9],
    ]
    assert delta == -2


# Cohere Compass's video, as transformers 5.24's processor lays it out: per frame
# "<t seconds>" text, then VS V*h'w' VE (docs/semantics.md section 2.7)
_COHERE_VIDEO_IDS = [1, 7, 7, 255028, *[255032] * 4, 255029, 7, 255028, *[255032] * 4, 255029, 2]
_COHERE_VIDEO_POSITIONS = [
    [0, 1, 2, 3, 4, 4, 4, 4, 6, 7, 8, 9, 9, 9, 9, 11, 12],
    [0, 1, 2, 3, 4, 4, 5, 5, 6, 7, 8, 9, 9, 10, 10, 11, 12],
    [0, 1, 2, 3, 4, 5, 4, 5, 6, 7, 8, 9, 10, 9, 10, 11, 12],
]


@pytest.mark.parametrize("how", ["tokens", "ranges", "adapter", "reference", "tracker"])
def test_cohere_compass_takes_per_frame_videos(how):
    """Cohere Compass's videos (transformers 5.24; vLLM 0.33 sends none): each frame its own block at
    tau = 0, the timestamps text, the video token read from the published config."""
    config = MRopeConfig.from_hf_config(load_config("cohere_compass"))
    assert config.video_token_id == 255032 and MRopeConfig(family="cohere_compass").video_token_id == 255032
    ids, grid = _COHERE_VIDEO_IDS, [[2, 4, 4]]
    embed = [False, False, False, *[True] * 4, False, False, False, *[True] * 4, False]
    if how == "tokens":
        positions, delta = prompt_positions(config, ids, video_grid_thw=grid)
    elif how == "ranges":
        layout = PromptLayout.from_ranges(config, len(ids), video_ranges=[(1, 15, embed)], video_grid_thw=grid)
        positions, delta = layout.positions(), layout.delta
    elif how == "adapter":
        video = feature("video", 1, 15, torch.tensor(embed), video_grid_thw=grid[0])
        positions, delta = get_mrope_input_positions(config, ids, [video])
    elif how == "reference":
        positions, delta = reference.prompt_positions(config, ids, video_grid_thw=grid)
    else:
        tracker = PositionTracker(config, max_num_reqs=1, max_num_batched_tokens=32)
        tracker.add_request("r", ids, video_grid_thw=grid)
        positions, delta = tracker.prepare(["r"], [len(ids)]), tracker.mrope_position_delta("r")
    assert np.asarray(positions).tolist() == _COHERE_VIDEO_POSITIONS
    assert int(delta) == -4


def test_text_only_refuses_items():
    config = MRopeConfig.from_hf_config({"model_type": "qwen3_5_text"})
    with pytest.raises(ValueError, match="image_grid_thw: expected None for text_only"):
        prompt_positions(config, [1, 2, 3, 4], image_grid_thw=[[1, 2, 2]])
    with pytest.raises(ValueError, match="image_grid_thw: expected None for text_only"):
        reference.prompt_positions(config, [1, 2, 3, 4], image_grid_thw=[[1, 2, 2]])


def test_missing_placeholder_is_named():
    """A token form whose item is missing from the tokens names the item and what was expected."""
    config = MRopeConfig.from_hf_config(load_config("cohere_compass"))
    with pytest.raises(ValueError, match=r"image_grid_thw"):
        prompt_positions(config, [255028, 7, 255029], image_grid_thw=[[1, 2, 2]])
    config = _ernie()
    # an ERNIE video whose placeholder run is one token short of its grid
    with pytest.raises(ValueError, match=r"video_grid_thw\[0\]"):
        prompt_positions(config, [101306, 100295, 100295, 101307], video_grid_thw=[[2, 2, 6]])


def test_ernie_bad_config_values():
    with pytest.raises(ValueError, match="temporal_merge_size: expected a positive int, got 0"):
        MRopeConfig(family="ernie4_5_moe_vl", temporal_merge_size=0)
    with pytest.raises(ValueError, match="temporal_merge_size: qwen2_vl does not use it"):
        MRopeConfig(family="qwen2_vl", temporal_merge_size=2)


@pytest.mark.parametrize("family", [*VLLM_FAMILIES, "text_only"])
def test_compare_samples_position_cleanly(family):
    """`mrope-tracker compare`'s sampled prompts for a family are laid out as its processor does: every one
    is positioned without error, and the images-only and text-only families get no item they refuse."""
    from mrope_tracker.hf.sample import sample_prompts

    config = MRopeConfig(family=family, semantics="vllm-0.33")
    for prompt in sample_prompts(config, num_prompts=12, seed=3):
        kwargs = {
            name: value
            for name, value in (("image_grid_thw", prompt.image_grid_thw), ("video_grid_thw", prompt.video_grid_thw))
            if value is not None
        }
        ours = prompt_positions(config, prompt.token_ids, **kwargs)
        expected = reference.prompt_positions(config, prompt.token_ids, **kwargs)
        np.testing.assert_array_equal(ours[0], expected[0].numpy())


# vLLM 0.33.0's own positions for these families, recorded (tests/data/vllm-0.33.0-more.jsonl): each line holds a
# prompt, the config fields vLLM's position code read, its multimodal features and the positions and delta
# `get_mrope_input_positions` returned.

PATH = os.path.join(os.path.dirname(__file__), "data", "vllm-0.33.0-more.jsonl")
# the file's family names -> ours
VECTOR_FAMILIES = {
    "paddleocr_vl": "paddleocr_vl",
    "ernie45_vl": "ernie4_5_moe_vl",
    "glm_ocr": "glm_ocr",
    "bailing_moe_v3_vl": "bailing_moe_v3_vl",
    "cohere_compass": "cohere_compass",
}

with open(PATH) as _f:
    ALL_VECTORS = [json.loads(line) for line in _f]
VECTORS = [v for v in ALL_VECTORS if v["family"] in VECTOR_FAMILIES]
IDS = [f"{i:03d}-{v['family']}" for i, v in enumerate(VECTORS)]
EACH = pytest.mark.parametrize("index", range(len(VECTORS)), ids=IDS)


def vector_config(vector: dict) -> MRopeConfig:
    config = MRopeConfig.from_hf_config(vector["config"], semantics="vllm-0.33")
    assert config.family == VECTOR_FAMILIES[vector["family"]]
    return config


def vector_grids(vector: dict) -> dict:
    return {name: vector[name] for name in ("image_grid_thw", "video_grid_thw") if vector[name]}


def vector_features(vector: dict) -> list[FeatureSpec]:
    """vLLM's features as the adapter reads them: int64 grids, bool is_embed masks."""
    out = []
    for f in vector["mm_features"]:
        name = f"{f['modality']}_grid_thw"
        grid = torch.tensor(f[name], dtype=torch.int64)
        out.append(feature(f["modality"], f["offset"], f["length"], f["is_embed"], **{name: grid}))
    return out


def vector_ranges(vector: dict) -> dict:
    """PromptLayout.from_ranges' keywords: (offset, length, is_embed) per item, in prompt order."""
    kw: dict = {}
    for f in vector["mm_features"]:
        kw.setdefault(f"{f['modality']}_ranges", []).append((f["offset"], f["length"], f["is_embed"]))
    return kw


def assert_vector(vector: dict, positions, delta) -> None:
    assert np.asarray(positions).tolist() == vector["positions"]
    assert delta == vector["delta"]


def test_file_holds_thirty_of_each_family():
    assert Counter(v["family"] for v in VECTORS) == {name: 30 for name in VECTOR_FAMILIES}
    # the ERNIE vectors include videos, images and both together; GLM-OCR per-frame videos
    ernie = [v for v in VECTORS if v["family"] == "ernie45_vl"]
    assert any(v["video_grid_thw"] and v["image_grid_thw"] for v in ernie)
    assert any(v["video_grid_thw"] for v in VECTORS if v["family"] == "glm_ocr")


@EACH
def test_vllm_vector_token_form(index):
    vector = VECTORS[index]
    assert_vector(vector, *prompt_positions(vector_config(vector), vector["token_ids"], **vector_grids(vector)))


@EACH
def test_vllm_vector_adapter(index):
    vector = VECTORS[index]
    positions, delta = get_mrope_input_positions(vector_config(vector), vector["token_ids"], vector_features(vector))
    assert positions.dtype == torch.int64
    assert_vector(vector, positions, delta)


@EACH
def test_vllm_vector_from_ranges(index):
    vector = VECTORS[index]
    config = vector_config(vector)
    layout = PromptLayout.from_ranges(config, len(vector["token_ids"]), **vector_grids(vector), **vector_ranges(vector))
    assert_vector(vector, layout.positions(), layout.delta)
    # the checked range form reads the tokens too
    checked = PromptLayout.from_ranges(
        config, len(vector["token_ids"]), token_ids=vector["token_ids"], **vector_grids(vector), **vector_ranges(vector)
    )
    assert_vector(vector, checked.positions(), checked.delta)
    by_adapter = layout_from_features(config, len(vector["token_ids"]), vector_features(vector))
    assert by_adapter.num_rows == layout.num_rows


@EACH
def test_vllm_vector_reference(index):
    vector = VECTORS[index]
    config = vector_config(vector)
    assert_vector(vector, *reference.prompt_positions(config, vector["token_ids"], **vector_grids(vector)))


@pytest.mark.parametrize("family", sorted(VECTOR_FAMILIES))
def test_vllm_vector_tracker_in_chunks(family):
    """Every prompt of the family admitted from tokens, from ranges and from vLLM's features, run in chunks of 7
    tokens past its end."""
    group = [v for v in VECTORS if v["family"] == family]
    config = vector_config(group[0])
    tracker = PositionTracker(config, max_num_reqs=3 * len(group), max_num_batched_tokens=4096)
    for k, vector in enumerate(group):
        tracker.add_request(f"t{k}", vector["token_ids"], **vector_grids(vector))
        num_tokens = len(vector["token_ids"])
        tracker.add_request_from_ranges(f"r{k}", num_tokens, **vector_grids(vector), **vector_ranges(vector))
        tracker.add_request_from_features(f"f{k}", vector["token_ids"], vector_features(vector))
    done = 0
    longest = max(len(v["token_ids"]) for v in group) + 3
    while done < longest:
        ids = [f"{form}{k}" for k in range(len(group)) for form in "trf"]
        got = tracker.prepare(ids, [7] * len(ids)).numpy()
        for q, req in enumerate(ids):
            vector = group[int(req[1:])]
            index = np.arange(done, done + 7)
            expected = np.asarray(vector["positions"])[:, np.minimum(index, len(vector["token_ids"]) - 1)]
            past = index >= len(vector["token_ids"])
            expected[:, past] = index[past] + vector["delta"]
            np.testing.assert_array_equal(got[:, 7 * q : 7 * q + 7], expected)
        done += 7
