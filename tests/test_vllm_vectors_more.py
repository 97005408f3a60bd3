"""vLLM 0.33.0's own positions for the families added after the first six
(tests/data/vllm-0.33.0-more.jsonl), against ours under ``semantics="vllm-0.33"``.

Each line holds a prompt, the config fields vLLM's position code read, vLLM's
multimodal features (placeholder ranges, is_embed masks, item data) and the
positions and delta `get_mrope_input_positions` returned. Every one must come
out exactly through the token form, the adapter (from the features alone),
`PromptLayout.from_ranges`, the tracker (in chunks) and the reference.

Only the families this module lists are checked; the file also holds
families served elsewhere.
"""

from __future__ import annotations

import json
import os
from collections import Counter

import numpy as np
import pytest
import torch
from vllm_features import FeatureSpec, feature

from mrope_tracker import MRopeConfig, PositionTracker, PromptLayout, prompt_positions, reference
from mrope_tracker.vllm import get_mrope_input_positions, layout_from_features

PATH = os.path.join(os.path.dirname(__file__), "data", "vllm-0.33.0-more.jsonl")
# the file's family names -> ours
FAMILIES = {
    "paddleocr_vl": "paddleocr_vl",
    "ernie45_vl": "ernie4_5_moe_vl",
    "glm_ocr": "glm_ocr",
    "bailing_moe_v3_vl": "bailing_moe_v3_vl",
    "cohere_compass": "cohere_compass",
}

with open(PATH) as _f:
    ALL_VECTORS = [json.loads(line) for line in _f]
VECTORS = [v for v in ALL_VECTORS if v["family"] in FAMILIES]
IDS = [f"{i:03d}-{v['family']}" for i, v in enumerate(VECTORS)]
EACH = pytest.mark.parametrize("index", range(len(VECTORS)), ids=IDS)


def config_of(vector: dict) -> MRopeConfig:
    config = MRopeConfig.from_hf_config(vector["config"], semantics="vllm-0.33")
    assert config.family == FAMILIES[vector["family"]]
    return config


def grids(vector: dict) -> dict:
    return {name: vector[name] for name in ("image_grid_thw", "video_grid_thw") if vector[name]}


def features(vector: dict) -> list[FeatureSpec]:
    """vLLM's features as the adapter reads them: int64 grids, bool is_embed masks."""
    out = []
    for f in vector["mm_features"]:
        name = f"{f['modality']}_grid_thw"
        grid = torch.tensor(f[name], dtype=torch.int64)
        out.append(feature(f["modality"], f["offset"], f["length"], f["is_embed"], **{name: grid}))
    return out


def ranges(vector: dict) -> dict:
    """PromptLayout.from_ranges' keywords: (offset, length, is_embed) per item, in prompt order."""
    kw: dict = {}
    for f in vector["mm_features"]:
        kw.setdefault(f"{f['modality']}_ranges", []).append((f["offset"], f["length"], f["is_embed"]))
    return kw


def assert_vector(vector: dict, positions, delta) -> None:
    assert np.asarray(positions).tolist() == vector["positions"]
    assert delta == vector["delta"]


def test_file_holds_thirty_of_each_family():
    assert Counter(v["family"] for v in VECTORS) == {name: 30 for name in FAMILIES}
    # the ERNIE vectors include videos, images and both together; GLM-OCR per-frame videos
    ernie = [v for v in VECTORS if v["family"] == "ernie45_vl"]
    assert any(v["video_grid_thw"] and v["image_grid_thw"] for v in ernie)
    assert any(v["video_grid_thw"] for v in VECTORS if v["family"] == "glm_ocr")


@EACH
def test_token_form(index):
    vector = VECTORS[index]
    assert_vector(vector, *prompt_positions(config_of(vector), vector["token_ids"], **grids(vector)))


@EACH
def test_adapter(index):
    vector = VECTORS[index]
    positions, delta = get_mrope_input_positions(config_of(vector), vector["token_ids"], features(vector))
    assert positions.dtype == torch.int64
    assert_vector(vector, positions, delta)


@EACH
def test_from_ranges(index):
    vector = VECTORS[index]
    config = config_of(vector)
    layout = PromptLayout.from_ranges(config, len(vector["token_ids"]), **grids(vector), **ranges(vector))
    assert_vector(vector, layout.positions(), layout.delta)
    # the checked range form reads the tokens too
    checked = PromptLayout.from_ranges(
        config, len(vector["token_ids"]), token_ids=vector["token_ids"], **grids(vector), **ranges(vector)
    )
    assert_vector(vector, checked.positions(), checked.delta)
    by_adapter = layout_from_features(config, len(vector["token_ids"]), features(vector))
    assert by_adapter.num_rows == layout.num_rows


@EACH
def test_reference(index):
    vector = VECTORS[index]
    assert_vector(vector, *reference.prompt_positions(config_of(vector), vector["token_ids"], **grids(vector)))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_tracker_in_chunks(family):
    """Every prompt of the family admitted from tokens, from ranges and from vLLM's features, run in chunks of 7
    tokens past its end."""
    group = [v for v in VECTORS if v["family"] == family]
    config = config_of(group[0])
    tracker = PositionTracker(config, max_num_reqs=3 * len(group), max_num_batched_tokens=4096)
    for k, vector in enumerate(group):
        tracker.add_request(f"t{k}", vector["token_ids"], **grids(vector))
        tracker.add_request_from_ranges(f"r{k}", len(vector["token_ids"]), **grids(vector), **ranges(vector))
        tracker.add_request_from_features(f"f{k}", vector["token_ids"], features(vector))
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
