"""The plugin's EVS hook (`mrope_tracker.vllm.evs_plugin`) on stand-ins of vLLM 0.33's
pruner and pruning models (fake_vllm_evs.py), driven chunk by chunk as Model
Runner V2 drives them: the positions staged are our rule's (the reference's)
whatever the schedule, and models whose pruner the hook did not see built
keep vLLM's own code.
"""

from __future__ import annotations

import inspect
import json
import os
import types

import fake_vllm_evs
import numpy as np
import pytest
import torch
from fake_vllm_evs import PRUNER_MODULE, QWEN2_5_MODULE, QWEN3_MODULE, add_evs_fakes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import examples
from test_evs import IMAGE, RECORDS, VIDEO, VS, _reference, pruned_prompts
from test_evs_recompute import _placeholders
from triton_support import require_triton
from vllm_features import feature

from mrope_tracker import MRopeConfig
from mrope_tracker.device.evs_rows import PrunedRopeState
from mrope_tracker.evs import PendingPrune, PrunedPrompt
from mrope_tracker.vllm import evs_plugin as vllm_evs_plugin

RECORD_PATH = os.path.join(os.path.dirname(__file__), "data", "vllm-0.33.0-rope-api.json")
with open(RECORD_PATH) as f:
    API = json.load(f)
HIDDEN = 3


def test_targets_are_vllms():
    """What the hook patches is what vLLM 0.33.0's source defines (recorded with ast)."""
    pruner = API["evs_pruner"]
    assert pruner["module"] == vllm_evs_plugin.PRUNER_MODULE
    for name, params in vllm_evs_plugin.PRUNER_METHODS.items():
        assert pruner["methods"][name] == list(params), name
    assert "copy_mm_embedding_modality" in pruner["imports"]
    recorded = {(m["module"], m["class"]): m for m in API["evs_models"]}
    for module, cls, mask_functions in vllm_evs_plugin.MODEL_CLASSES:
        model = recorded[(module, cls)]
        assert model["methods"][vllm_evs_plugin.POSTPROCESS] == list(vllm_evs_plugin.POSTPROCESS_PARAMS)
        assert set(mask_functions) <= set(model["imports"])
    # the stand-ins take the same parameters
    for name, params in vllm_evs_plugin.PRUNER_METHODS.items():
        assert tuple(inspect.signature(getattr(fake_vllm_evs.MultiModalPruner, name)).parameters)[1:] == params


@pytest.fixture(params=["reference", "vllm-0.33"])
def fake(monkeypatch, request):
    modules: dict = {}
    masks = add_evs_fakes(modules, monkeypatch)
    assert vllm_evs_plugin.install_evs(semantics=request.param) is True
    assert vllm_evs_plugin.install_evs() is False  # once only
    return modules, masks, request.param


class RopeStore:
    """Plays MRV2's RopeState for one request: read and update its prefill positions."""

    def __init__(self, positions):
        self.positions = torch.as_tensor(positions, dtype=torch.int32)
        self.delta = None

    def read_prefill_positions(self, req_idx, length):
        return self.positions[:, :length].clone()

    def update_prefill_positions(self, req_idx, positions, delta):
        self.positions = positions.to(torch.int32)
        self.delta = delta


def _hf_config(config: MRopeConfig) -> dict:
    vision = {"spatial_merge_size": config.spatial_merge_size}
    if config.family == "qwen2_5_vl":
        vision["tokens_per_second"] = config.tokens_per_second
    ids = {name: getattr(config, name) for name in ("image_token_id", "video_token_id")}
    ids.update({name: getattr(config, name) for name in ("vision_start_token_id", "vision_end_token_id")})
    return {"model_type": config.family, "vision_config": vision, **ids}


def _case_of_record(record) -> dict:
    return {
        "hf_config": record["config"],
        "ids": record["token_ids"],
        "grids": record["video_grid_thw"],
        "masks": record["retention_masks"],
        "sps": record.get("second_per_grid_ts"),
        "images": None,
    }


def _features(case, placeholders):
    """vLLM's features (stand-ins), one per placeholder in prompt order."""
    ids = case["ids"]
    videos, images = iter(range(len(case["grids"]))), iter(range(len(case["images"] or [])))
    features = []
    for offset, length in placeholders:
        if ids[offset] == IMAGE:
            features.append(feature("image", offset, length, image_grid_thw=case["images"][next(images)]))
            continue
        k = next(videos)
        fields = {"video_grid_thw": case["grids"][k]}
        if case["sps"] is not None:
            fields["second_per_grid_ts"] = torch.tensor(case["sps"][k], dtype=torch.float32)
        features.append(feature("video", offset, length, **fields))
    return features


def _frame_text(ids, offset, length, frames):
    """Qwen3-VL: each frame's text rows before its kept tokens (vision end of the
    frame before, timestamp, vision start)."""
    span = [t for t in ids[offset : offset + length] if t != VIDEO]
    starts = [i for i, t in enumerate(span) if t == VS]
    return [starts[0] + 1] + [starts[f] - starts[f - 1] for f in range(1, frames)]


def _drive(modules, masks, case, boundaries, semantics, store):
    """Admission, the encoder, then Model Runner V2's pruner chunk by chunk;
    returns the positions each chunk's tokens had when it ran, and the store."""
    config = MRopeConfig.from_hf_config(case["hf_config"], semantics=semantics)
    family = config.family
    module = modules[QWEN2_5_MODULE if family == "qwen2_5_vl" else QWEN3_MODULE]
    cls = getattr(
        module, "Qwen2_5_VLForConditionalGeneration" if family == "qwen2_5_vl" else "Qwen3VLForConditionalGeneration"
    )
    model = cls(case["hf_config"])
    ids = case["ids"]
    prompt = PrunedPrompt(
        config, ids, video_grid_thw=case["grids"], second_per_grid_ts=case["sps"], image_grid_thw=case["images"]
    )
    placeholders = _placeholders(prompt, ids)
    features = _features(case, placeholders)
    if store == "ours":  # our RopeState, admitting as MRV2's add_request does with pruning on
        rope = PrunedRopeState(3, 2, len(ids) + 8, len(ids) + 64, "cpu", config=config)
        rope.init_prefill_positions(0, model, ids, features)
        rope.apply_staged_writes()
    else:
        rope = RopeStore(PendingPrune(prompt).layout().positions())  # our rule's admission, masks to come
    cache = types.SimpleNamespace(mm_features={"r": features})
    pruner = modules[PRUNER_MODULE].MultiModalPruner(model, rope, cache, HIDDEN)
    # the encoder: unpruned rows, pruned by the model as vLLM does; images keep theirs, with vLLM's channels
    masks.masks = list(case["masks"])
    merge = config.spatial_merge_size
    split = [torch.randn(t * h * w // merge**2, HIDDEN, dtype=torch.bfloat16) for t, h, w in case["grids"]]
    video_input = {"video_grid_thw": case["grids"]}
    video_places = [(o, n) for o, n in placeholders if ids[o] != IMAGE]
    if family == "qwen3_vl":
        video_input["frame_text"] = [_frame_text(ids, o, n, g[0]) for (o, n), g in zip(video_places, case["grids"])]
    videos = iter(model._postprocess_video_embeds_evs(split, video_input))
    extra = 4 if family == "qwen2_5_vl" else 5
    outputs = [
        torch.randn(n, HIDDEN + extra, dtype=torch.bfloat16) if ids[o] == IMAGE else next(videos)
        for o, n in placeholders
    ]
    assert [o.shape[0] for o in outputs] == [n for _, n in placeholders]
    req_states = types.SimpleNamespace(all_token_ids=types.SimpleNamespace(gpu=torch.tensor([ids])))
    used = []
    for a, b in zip(boundaries[:-1], boundaries[1:]):
        window = [
            out[max(a - o, 0) : min(b - o, n)] for (o, n), out in zip(placeholders, outputs) if o < b and o + n > a
        ]
        if window:
            batch = types.SimpleNamespace(
                req_ids=["r"],
                idx_mapping_np=np.array([0]),
                prefill_len_np=np.array([len(ids)]),
                num_computed_prefill_tokens_np=np.array([a]),
                num_scheduled_tokens=np.array([b - a]),
            )
            cleaned = pruner.recompute(window, batch, req_states)
            assert [c.shape for c in cleaned] == [(w.shape[0], HIDDEN) for w in window]
            if store == "ours":
                rope.apply_staged_writes()
        used.append(rope.read_prefill_positions(0, len(ids))[:, a:b].numpy().copy())
    return np.concatenate(used, axis=1), rope


def _expected(case, semantics):
    config = MRopeConfig.from_hf_config(case["hf_config"], semantics=semantics)
    prompt = PrunedPrompt(
        config, case["ids"], video_grid_thw=case["grids"], second_per_grid_ts=case["sps"], image_grid_thw=case["images"]
    )
    layout = prompt.layout(case["masks"])
    return layout.positions(), layout.delta


STORES = ["fake", "ours"]


# the fixture's patched stand-ins hold no state between examples (each drive builds its own model and pruner)
@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(range(len(RECORDS))), st.sampled_from(STORES), st.data())
def test_pruner_stages_our_rule_for_any_schedule(fake, index, store, data):
    modules, masks, semantics = fake
    if store == "ours":
        require_triton()
    record = RECORDS[index]
    case = _case_of_record(record)
    n = len(record["token_ids"])
    cuts = data.draw(st.lists(st.integers(1, n - 1), max_size=5, unique=True), label="cuts")
    used, rope = _drive(modules, masks, case, [0, *sorted(cuts), n], semantics, store)
    expected, delta = _expected(case, semantics)
    if semantics == "reference":
        np.testing.assert_array_equal(expected, _reference(record)[0].numpy())
    elif record["chunk_independent"]:  # vLLM's own result where it does not depend on chunking
        np.testing.assert_array_equal(expected, np.asarray(record["positions"]))
    np.testing.assert_array_equal(used, expected)
    if store == "fake":
        assert rope.delta == delta


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pruned_prompts(), st.data())
def test_pruner_with_images_and_any_mask(fake, case, data):
    """Random prompts: images beside the videos (their rows stripped, their positions
    left as admitted), masks that may prune the first frame too (VidCom2's)."""
    modules, masks, semantics = fake
    config, ids, grids, video_masks, sps, images = case
    case = {"hf_config": _hf_config(config), "ids": ids, "grids": grids, "masks": video_masks, "sps": sps}
    case["images"] = images
    cuts = data.draw(st.lists(st.integers(1, len(ids) - 1), max_size=5, unique=True), label="cuts")
    used, rope = _drive(modules, masks, case, [0, *sorted(cuts), len(ids)], semantics, "fake")
    expected, delta = _expected(case, semantics)
    np.testing.assert_array_equal(used, expected)
    assert rope.delta == delta


def test_requests_with_images_only_keep_their_positions(fake):
    modules, _, _ = fake
    config = RECORDS[0]["config"]  # Qwen2.5-VL's released ids
    assert config["model_type"] == "qwen2_5_vl"
    model = modules[QWEN2_5_MODULE].Qwen2_5_VLForConditionalGeneration(config)
    ids = [1, 2, VS] + [IMAGE] * 4 + [151653, 3]
    features = [feature("image", 3, 4, image_grid_thw=[1, 4, 4])]
    rope = RopeStore(torch.arange(len(ids)).repeat(3, 1))
    before = rope.positions.clone()
    pruner = modules[PRUNER_MODULE].MultiModalPruner(
        model, rope, types.SimpleNamespace(mm_features={"r": features}), HIDDEN
    )
    batch = types.SimpleNamespace(
        req_ids=["r"],
        idx_mapping_np=np.array([0]),
        prefill_len_np=np.array([len(ids)]),
        num_computed_prefill_tokens_np=np.array([0]),
        num_scheduled_tokens=np.array([len(ids)]),
    )
    req_states = types.SimpleNamespace(all_token_ids=types.SimpleNamespace(gpu=torch.tensor([ids])))
    cleaned = pruner.recompute([torch.randn(4, HIDDEN + 4)], batch, req_states)
    assert [c.shape for c in cleaned] == [(4, HIDDEN)]
    assert torch.equal(rope.positions, before) and rope.delta is None


def test_models_the_hook_did_not_see_keep_vllms_code(fake):
    modules, masks, _ = fake
    record = next(r for r in RECORDS if r["family"] == "qwen2_5_vl")
    model = modules[QWEN2_5_MODULE].Qwen2_5_VLForConditionalGeneration(record["config"])
    # no pruner built for it (vLLM's V1 runner): vLLM's channels stay as they are
    masks.masks = list(record["retention_masks"])
    grids = record["video_grid_thw"]
    split = [torch.randn(t * h * w // 4, HIDDEN) for t, h, w in grids]
    outputs = model._postprocess_video_embeds_evs(split, {"video_grid_thw": grids})
    assert all(torch.equal(o[:, -4:], torch.zeros(o.shape[0], 4)) for o in outputs)
    # a model the plugin does not serve: its pruner is vLLM's
    other = types.SimpleNamespace(config={"model_type": "nemotron_nano_vl"})
    pruner = modules[PRUNER_MODULE].MultiModalPruner(other, None, None, HIDDEN)
    assert pruner.recompute([], None, None) == "vllm's own recompute"
    assert not hasattr(model, vllm_evs_plugin.MARK)


def test_a_vllm_without_the_targets_is_left_alone(monkeypatch):
    modules: dict = {}
    add_evs_fakes(modules, monkeypatch)
    original = modules[PRUNER_MODULE].MultiModalPruner.recompute
    del modules[QWEN3_MODULE].vidcom2_compute_retention_mask
    with pytest.raises(RuntimeError, match="vidcom2_compute_retention_mask"):
        vllm_evs_plugin.install_evs()
    assert modules[PRUNER_MODULE].MultiModalPruner.recompute is original
    monkeypatch.setitem(__import__("sys").modules, PRUNER_MODULE, None)
    with pytest.raises(RuntimeError, match="cannot import"):
        vllm_evs_plugin.install_evs()
