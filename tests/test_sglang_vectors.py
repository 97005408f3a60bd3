"""SGLang 0.5.23's own positions (tests/data/sglang-0.5.23.jsonl) against the
``sglang-0.5`` preset, without downloading SGLang.

The file holds 200 prompts of the 16 model types SGLang serves with
mrope_rope_index.py and this repository knows (tests/sglang_calls.py), with the
positions and delta SGLang's function returned, recorded by
tests/record_sglang_vectors.py. Under the preset, `prompt_positions`, the
layout, the tracker and the reference must give those positions; the delta is
the integer positions' max + 1 - L, which equals SGLang's truncated delta except
on Qwen3-Omni prompts whose float delta is negative and fractional (defect 1).
Where SGLang raised, it must be defect 2 (intern_s2_preview, a video of two or
more frames), and the preset must position the prompt as Qwen3.5's rule.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter

import numpy as np
import pytest
from sglang_calls import SERVED

from mrope_tracker import MRopeConfig, PositionTracker, PromptLayout, prompt_positions, reference

PATH = os.path.join(os.path.dirname(__file__), "data", "sglang-0.5.23.jsonl")
with open(PATH, encoding="utf-8") as _f:
    VECTORS = [json.loads(line) for line in _f]
ITEMS = ("image_grid_thw", "video_grid_thw", "second_per_grid_ts", "audio_feature_lengths")


def _kwargs(vector: dict) -> dict:
    kwargs = {name: vector[name] for name in ITEMS if vector[name] is not None}
    if vector["use_audio_in_video"]:
        kwargs["use_audio_in_video"] = True
    return kwargs


def _ours(vector: dict, config: MRopeConfig):
    ids, kwargs = vector["token_ids"], _kwargs(vector)
    positions, delta = prompt_positions(config, ids, **kwargs)
    expected, expected_delta = reference.prompt_positions(config, ids, **kwargs)
    np.testing.assert_array_equal(positions, expected.numpy())
    layout = PromptLayout.from_tokens(config, ids, **kwargs)
    np.testing.assert_array_equal(layout.positions(), positions)
    tracker = PositionTracker(config, max_num_reqs=1, max_num_batched_tokens=len(ids) + 4)
    tracker.add_request("r", ids, **kwargs)
    decoded = tracker.prepare(["r"], [len(ids) + 2]).numpy()
    np.testing.assert_array_equal(decoded[:, : len(ids)], positions)
    assert decoded[0, len(ids) :].tolist() == [len(ids) + delta, len(ids) + delta + 1]
    assert delta == expected_delta == layout.delta
    return positions, delta


@pytest.mark.parametrize(
    "index", range(len(VECTORS)), ids=[f"{i:03d}-{v['model_type']}" for i, v in enumerate(VECTORS)]
)
def test_vector(index):
    vector = VECTORS[index]
    config = MRopeConfig.from_hf_config(vector["config"], semantics="sglang-0.5")
    assert config.family == SERVED[vector["model_type"]][0]
    positions, delta = _ours(vector, config)
    if vector["raised"] is not None:  # defect 2 only; the preset takes Qwen3.5's rule there
        assert vector["model_type"] == "intern_s2_preview" and vector["raised"] == "IndexError"
        assert any(t > 1 for t, _, _ in vector["video_grid_thw"])
        qwen35 = MRopeConfig.from_hf_config({**vector["config"], "model_type": "qwen3_5"}, semantics="sglang-0.5")
        np.testing.assert_array_equal(positions, prompt_positions(qwen35, vector["token_ids"], **_kwargs(vector))[0])
        return
    np.testing.assert_array_equal(positions, np.array(vector["positions"], np.int64))
    assert delta == max(map(max, vector["positions"])) + 1 - len(vector["token_ids"])
    theirs = vector["delta"]
    defect_1 = theirs < 0 and theirs != math.floor(theirs)  # SGLang's decode: one position past ours
    assert int(theirs) == delta + defect_1
    assert not defect_1 or vector["model_type"] == "qwen3_omni_moe"


def test_the_file_covers_every_model_type():
    """Every served model type has vectors; Qwen3-Omni's include fractional times
    carried across items, audio, audio in video, and defect 1."""
    counts = Counter(v["model_type"] for v in VECTORS)
    assert set(counts) == set(SERVED) and min(counts.values()) >= 10
    omni = [v for v in VECTORS if v["model_type"] == "qwen3_omni_moe"]
    assert any(v["delta"] != math.floor(v["delta"]) for v in omni)
    assert any(v["delta"] < 0 and v["delta"] != math.floor(v["delta"]) for v in omni)
    assert any(v["use_audio_in_video"] for v in omni) and any(v["audio_feature_lengths"] for v in omni)
