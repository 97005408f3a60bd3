"""What one worker's warm-up plan covers: after `warmup(config, runner=...)`,
the calls that worker makes find every kernel they reach already there, and
none of them touches the builder from tokens.

Each check runs in a fresh process (numba dispatchers hold every version
compiled or loaded in the process, so only a fresh one shows what a worker
reaches): warm-up, a count of every kernel's versions, the worker's calls,
a second count. A kernel the calls reach that the plan left out would gain a
version (compiled, or loaded from a cache some other process filled)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from triton_support import require_triton
from vllm_features import feature

from mrope_tracker import MRopeConfig, PositionTracker
from mrope_tracker.core import layout as core_layout
from mrope_tracker.core import positions as core_positions
from mrope_tracker.evs import PrunedPrompt
from mrope_tracker.evs.recompute import EvsRecompute, pruned_prompt_from_features, write_identity_columns

TESTS = os.path.dirname(__file__)
CONFIGS = os.path.join(TESTS, "data", "configs")

# Served calls of one worker, by name: each builds its requests from vLLM-shaped features (tests/vllm_features.py)
_CHILD = """
import json, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import torch
from numba.core.dispatcher import Dispatcher
from vllm_features import feature

import mrope_tracker
from mrope_tracker import MRopeConfig, PositionTracker, next_positions, warmup
from mrope_tracker.evs.recompute import EvsRecompute, write_identity_columns
from mrope_tracker.vllm import get_mrope_input_positions

config_path, runner, semantics = sys.argv[2], sys.argv[3], sys.argv[4]


def versions():
    found = {}
    for name, module in list(sys.modules.items()):
        if name.startswith("mrope_tracker."):
            for value in list(vars(module).values()):
                if isinstance(value, Dispatcher):
                    key = f"{value.py_func.__module__}.{value.py_func.__qualname__}"
                    found[key] = len(value.signatures)
    return found


config = MRopeConfig.from_hf_config(json.load(open(config_path)), semantics=semantics)
vs, ve, image, video = (config.vision_start_token_id, config.vision_end_token_id, config.image_token_id,
                        config.video_token_id)
m = config.spatial_merge_size
mask = np.array([1, 1, 1, 1, 0, 1, 1, 0], bool)  # a video of 2 frames of 2x2 merged tokens, 6 kept
sp = {"second_per_grid_ts": torch.tensor(1.5, dtype=torch.float32)} if config.family == "qwen2_5_vl" else {}
if config.family == "qwen3_vl":  # a frame's timestamp text, its tokens; the pruned frame 1 an empty pair
    ids = [1, vs, image, image, image, image, ve, 2, vs, 7, vs] + [video] * 6 + [ve, 8, vs, ve, ve, 3]
    video_range = (9, 14)
else:
    ids = [1, vs, image, image, image, image, ve, 2, vs] + [video] * 6 + [ve, 3]
    video_range = (9, 6)
features = [
    feature("image", 2, 4, image_grid_thw=[1, 2 * m, 2 * m]),
    feature("video", *video_range, video_grid_thw=[2, 2 * m, 2 * m], **sp),
]
unpruned = [1, vs, image, image, image, image, ve, 2, vs] + [video] * 8 + [ve, 3]
plain = [
    feature("image", 2, 4, image_grid_thw=[1, 2 * m, 2 * m]),
    feature("video", 9, 8, video_grid_thw=[2, 2 * m, 2 * m], **sp),
]

warmup(config_path, runner=runner, jobs=1)
before = versions()
if runner == "vllm_v1":
    # vLLM's V1 runner: the model's get_mrope_input_positions, a tracker admitting from features, its steps,
    # decode positions in the runner's own buffer, and EVS (the model's recompute, ours)
    get_mrope_input_positions(config, unpruned, plain)
    tracker = PositionTracker(config, max_num_reqs=4, max_num_batched_tokens=64)
    tracker.add_request_from_features("a", unpruned, plain)
    tracker.prepare(["a"], [len(unpruned)])
    tracker.prepare_slots(np.array([tracker.slot("a")], np.int32), np.array([1], np.int32))
    buffer = np.zeros((3, 8), np.int64)
    next_positions(buffer, 0, 5, len(unpruned), 4)
    if config.family == "qwen2_5_vl":
        recompute = EvsRecompute.from_features(config, ids, features)
        rows = write_identity_columns(torch.zeros(6, 20), torch.from_numpy(mask), family=config.family)
        recompute.recompute_mrope_positions(ids, [torch.zeros(4, 20), rows], torch.zeros(3, len(ids)), 0)
else:
    # Model Runner V2 with the plugin: RopeState admitting from features, pruned videos (EVS) included
    from mrope_tracker.device.evs_rows import PrunedRopeState

    state = PrunedRopeState(3, 2, 64, 256, "cpu", config=config, block_size=16)
    state.init_prefill_positions(0, config, unpruned[:8], plain[:1])  # no video: admitted unpruned
    state.init_prefill_positions(1, config, ids, features)
    state.set_retention_mask(1, 0, mask)
    state.apply_staged_writes()
    state.read_prefill_positions(1, len(ids))
after = versions()
print(json.dumps({"before": before, "after": after}))
"""


def _served(config_name: str, runner: str, semantics: str = "vllm-0.33") -> dict:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, TESTS, os.path.join(CONFIGS, config_name), runner, semantics],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


TOKEN_BUILDER = "mrope_tracker.kernels.layout_build.build_from_tokens"


@pytest.mark.parametrize(
    "config_name, runner",
    [
        ("qwen2_5_vl.json", "vllm_v1"),
        ("qwen2_5_vl.json", "rope_state"),
        pytest.param("qwen3_vl.json", "vllm_v1", marks=pytest.mark.slow),
        pytest.param("qwen3_vl.json", "rope_state", marks=pytest.mark.slow),
    ],
)
def test_a_worker_plan_covers_its_served_calls_without_the_token_builder(config_name, runner):
    """After warmup(config, runner=...) the worker's calls (EVS's pruned prompts included) add no kernel
    version, and the builder from tokens was never compiled or loaded."""
    if runner == "rope_state":
        require_triton()  # the served calls run RopeState's kernels, on the CPU in triton's interpreter
    result = _served(config_name, runner)
    grown = {k: (result["before"].get(k, 0), n) for k, n in result["after"].items() if n > result["before"].get(k, 0)}
    assert grown == {}, f"kernels the {runner} plan left out: {grown}"
    assert result["after"].get(TOKEN_BUILDER, 0) == 0
    assert result["after"]["mrope_tracker.kernels.layout_ranges.build_from_ranges"] > 0  # (the count sees kernels)


def _no_token_builder(monkeypatch):
    """Every Python-level way into the builder from tokens raises (`prompt_positions` and the layouts call it)."""

    def refused(*args, **kwargs):
        raise AssertionError("the builder from tokens was called")

    monkeypatch.setattr(core_layout, "build_from_tokens", refused)
    monkeypatch.setattr(core_positions, "build_from_tokens", refused)


VS, VE, VIDEO, IMAGE = 151652, 151653, 151656, 151655


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl"])
def test_pruned_prompts_never_call_the_token_builder(monkeypatch, family):
    """PrunedPrompt, the tracker's pruned admission and the recompute from vLLM's features build the
    unpruned layout from ranges: the same positions as the token builder's layout of the unpruned prompt."""
    config = MRopeConfig(family=family, tokens_per_second=2 if family == "qwen2_5_vl" else None)
    mask = np.array([1, 1, 1, 1, 0, 1, 1, 0], bool)
    if family == "qwen3_vl":
        ids = [1, VS, IMAGE, IMAGE, IMAGE, IMAGE, VE, 2, VS, 7, VS] + [VIDEO] * 6 + [VE, 8, VS, VE, VE, 3]
        unpruned = ids[:11] + [VIDEO] * 4 + [VE, 8, VS] + [VIDEO] * 4 + [VE, VE, 3]
        video_range, sp = (9, 14), {}
    else:
        ids = [1, VS, IMAGE, IMAGE, IMAGE, IMAGE, VE, 2, VS] + [VIDEO] * 6 + [VE, 3]
        unpruned = ids[:9] + [VIDEO] * 8 + [VE, 3]
        video_range, sp = (9, 6), {"second_per_grid_ts": [1.5]}
    grids = {"image_grid_thw": [[1, 4, 4]], "video_grid_thw": [[2, 4, 4]]}
    expected = core_layout.PromptLayout.from_tokens(config, unpruned, **grids, **sp).positions()[
        :, _keep(unpruned, mask)
    ]
    _no_token_builder(monkeypatch)
    prompt = PrunedPrompt(config, ids, **grids, **sp)
    np.testing.assert_array_equal(prompt.layout([mask]).positions(), expected)
    tracker = PositionTracker(config, max_num_reqs=2, max_num_batched_tokens=64)
    tracker.add_request_pruned("r", prompt, retention_masks=[mask])
    np.testing.assert_array_equal(tracker.prepare(["r"], [len(ids)]).numpy(), expected)
    fields = {"second_per_grid_ts": torch.tensor(1.5)} if sp else {}
    features = [
        feature("image", 2, 4, image_grid_thw=[1, 4, 4]),
        feature("video", *video_range, video_grid_thw=[2, 4, 4], **fields),
    ]
    from_features, _ = pruned_prompt_from_features(config, ids, features)
    np.testing.assert_array_equal(from_features.layout([mask]).positions(), expected)
    if family == "qwen2_5_vl":  # the recompute: the chunk's identity channels give the mask
        rows = write_identity_columns(torch.zeros(6, 20), torch.from_numpy(mask), family=family)
        recompute = EvsRecompute.from_features(config, ids, features)
        _, positions, _ = recompute.recompute_mrope_positions(
            ids, [torch.zeros(4, 20), rows], torch.zeros(3, len(ids), dtype=torch.int64), 0
        )
        np.testing.assert_array_equal(positions.numpy(), expected)


def _keep(unpruned, mask) -> np.ndarray:
    """Which tokens of the unpruned prompt survive: the video tokens, frame-major, as `mask` says."""
    keep = np.ones(len(unpruned), bool)
    keep[np.flatnonzero(np.array(unpruned) == VIDEO)] = mask
    return keep


@pytest.mark.parametrize(
    "ids, grids, message",
    [
        ([1, VS, IMAGE, IMAGE, VE, VS, VIDEO, VE], [[1, 4, 4]], r"token_ids: expected image 0's 4 tokens .* got 2"),
        (
            [1, VS, IMAGE, IMAGE, 5, IMAGE, IMAGE, VE, VS, VIDEO, VE],
            [[1, 4, 4]],
            r"token_ids: expected image 0's 4 tokens .* in one run from index 2",
        ),
        ([1, VS, IMAGE, VE, VS, VIDEO, VE], None, r"token_ids: expected 0 image tokens \(image_grid_thw: 0 images\)"),
    ],
)
def test_pruned_prompt_refuses_image_tokens_that_do_not_match_the_grids(ids, grids, message):
    config = MRopeConfig(family="qwen2_5_vl", tokens_per_second=2)
    with pytest.raises(ValueError, match=message):
        PrunedPrompt(config, ids, image_grid_thw=grids, video_grid_thw=[[1, 2, 2]], second_per_grid_ts=[1.0])
