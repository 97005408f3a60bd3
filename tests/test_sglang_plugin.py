"""`mrope_tracker.sglang.install()` against a recorded copy of SGLang 0.5.23's API.

tests/data/sglang-0.5.23-api.json was written from SGLang 0.5.23's own source
by tests/sglang_api.py (its header says how). The tests build stand-in SGLang
modules from that record (functions and methods with the recorded
parameters, bodies of our own that mark SGLang's path), so `install()` runs
without SGLang: its checks, its patches, and a request's way through the
patched processor output, batches and sessions.
"""

from __future__ import annotations

import json
import os
import sys
import types

import numpy as np
import pytest
import torch
from family_prompts import family_prompts
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import examples

from mrope_tracker import MRopeConfig, prompt_positions
from mrope_tracker import sglang as sglang_api
from mrope_tracker.sglang import hooks, plugin

RECORD_PATH = os.path.join(os.path.dirname(__file__), "data", "sglang-0.5.23-api.json")
with open(RECORD_PATH) as f:
    RECORD = json.load(f)
SGLANG = "sglang"  # what every stand-in returns: SGLang's own path was taken


def test_targets_are_the_recorded_ones():
    ours = {f"{m}:{n}": list(p) for m, n, p, _ in plugin.FUNCTIONS}
    assert ours == RECORD["functions"]
    ours = {f"{m}:{c}.{n}": (list(p), how == "static" or m == plugin.MROPE) for m, c, n, p, how in plugin.METHODS}
    assert ours == {k: (v["params"], v["staticmethod"]) for k, v in RECORD["methods"].items()}
    for fields in RECORD["fields"].values():  # the fields the adapter carries its state in
        assert {"mrope_positions", "mrope_position_delta"} <= set(fields)


def _function(name: str, params: list[str]):
    args = ", ".join(params)
    namespace: dict = {"SGLANG": SGLANG}
    exec(f"def {name}({args}):\n    return SGLANG", namespace)  # noqa: S102
    return namespace[name]


class Mode:
    def __init__(self, name):
        self.name = name

    def is_decode(self):
        return self.name == "decode"

    def is_extend(self):
        return self.name == "extend"


@pytest.fixture
def fake_sglang(monkeypatch):
    """SGLang's modules and classes as the record describes them."""
    monkeypatch.delenv(plugin.ENV_SWITCH, raising=False)
    modules = {}

    def module(name):
        if name not in modules:
            modules[name] = types.ModuleType(name)
            monkeypatch.setitem(sys.modules, name, modules[name])
        return modules[name]

    for key, params in RECORD["functions"].items():
        name, function = key.split(":")
        setattr(module(name), function, _function(function, params))
    for key, entry in RECORD["methods"].items():
        name, qualified = key.split(":")
        class_name, method = qualified.split(".")
        owner = getattr(module(name), class_name, None)
        if owner is None:
            owner = type(class_name, (), {})
            setattr(module(name), class_name, owner)
        params = entry["params"] if entry["staticmethod"] else ["self", *entry["params"]]
        function = _function(method, params)
        setattr(owner, method, staticmethod(function) if entry["staticmethod"] else function)
    schedule = modules[plugin.SCHEDULE]
    schedule.MultimodalProcessorOutput.from_dict = staticmethod(lambda d: types.SimpleNamespace(**d))

    def extend_session(self, image_inputs):  # SGLang's bookkeeping, reduced to what the adapter relies on
        if self.multimodal_inputs is None:
            self.multimodal_inputs = image_inputs
        else:
            self.multimodal_inputs.mrope_positions = image_inputs.mrope_positions

    schedule.Req._extend_session_image_inputs = extend_session
    yield modules
    plugin.uninstall()


def test_install_patches_and_uninstall_restores(fake_sglang):
    rope = fake_sglang[plugin.ROPE_INDEX]
    before = {name: getattr(rope, name) for name in hooks.DROP_INS}
    assert plugin.install(semantics="sglang-0.5") is True
    assert plugin.install() is False  # once
    for name, original in before.items():
        assert getattr(rope, name) is not original and getattr(rope, name).mrope_tracker_original is original
    forward = fake_sglang[plugin.FORWARD].ForwardBatch
    assert forward._compute_mrope_positions.mrope_tracker_original.__name__ == "_compute_mrope_positions"
    assert plugin.uninstall() is True and plugin.uninstall() is False
    assert {name: getattr(rope, name) for name in hooks.DROP_INS} == before
    assert forward._compute_mrope_positions(None, None, None) == SGLANG


def test_batch_false_patches_the_drop_ins_only(fake_sglang):
    assert plugin.install(batch=False)
    assert fake_sglang[plugin.FORWARD].ForwardBatch._compute_mrope_positions(None, None, None) == SGLANG
    assert fake_sglang[plugin.MM_UTILS].extend_mrope_positions_for_retracted_request(None, 0) == SGLANG


@pytest.mark.parametrize("target", ["function", "method", "missing"])
def test_a_changed_target_is_named_and_nothing_changes(fake_sglang, target):
    rope = fake_sglang[plugin.ROPE_INDEX]
    before = rope.get_rope_index
    if target == "function":
        rope.get_rope_index_glm4v = _function("get_rope_index_glm4v", ["input_ids", "hf_config", "**kwargs"])
        match = "get_rope_index_glm4v takes"
    elif target == "method":
        forward = fake_sglang[plugin.FORWARD].ForwardBatch
        forward.compute_spec_mrope_positions = _function("compute_spec_mrope_positions", ["self", "model_runner"])
        match = "compute_spec_mrope_positions takes"
    else:
        del fake_sglang[plugin.SCHEDULE].Req._extend_session_image_inputs
        match = "_extend_session_image_inputs is missing"
    with pytest.raises(RuntimeError, match=match):
        plugin.install()
    assert rope.get_rope_index is before and not plugin.installed()


def test_switched_off_by_the_environment(fake_sglang, monkeypatch):
    monkeypatch.setenv(plugin.ENV_SWITCH, "0")
    assert plugin.install() is False and not plugin.installed()


# ---------------------------------------------------------------------------------------------- a request's way
QWEN = {"model_type": "qwen2_5_vl", "image_token_id": 151655, "video_token_id": 151656, "vision_start_token_id": 151652}
VS, VE, IMG = 151652, 151653, 151655


def _process(fake_sglang, token_ids, grids):
    """What SGLang's Qwen processor does: get_rope_index on the prompt, then the processor output."""
    positions, delta = fake_sglang[plugin.ROPE_INDEX].get_rope_index(
        spatial_merge_size=2, image_token_id=IMG, video_token_id=151656, vision_start_token_id=VS,
        model_type="qwen2_5_vl", tokens_per_second=2, input_ids=torch.tensor([token_ids]),
        image_grid_thw=torch.tensor(grids),
    )  # fmt: skip
    d = {"mm_items": [], "input_ids": token_ids, "mrope_positions": positions.squeeze(1), "mrope_position_delta": delta}
    return fake_sglang[plugin.SCHEDULE].MultimodalProcessorOutput.from_dict(d), positions[:, 0].numpy()


class Runner:
    def __init__(self, size):
        self.req_to_token_pool = types.SimpleNamespace(
            size=size, req_generation=torch.zeros(size + 1, dtype=torch.int64)
        )
        self.device = torch.device("cpu")

    def allocate(self, row):
        self.req_to_token_pool.req_generation[row] += 1


def _req(fake_sglang, output, prompt_len):
    req = fake_sglang[plugin.SCHEDULE].Req()
    req.multimodal_inputs = output
    req.origin_input_ids = list(range(prompt_len))
    return req


def _forward(fake_sglang, mode, **fields):
    forward = fake_sglang[plugin.FORWARD].ForwardBatch()
    forward.forward_mode = Mode(mode)
    forward.__dict__.update(fields)
    return forward


def test_a_request_goes_through_processor_batches_and_session(fake_sglang):
    plugin.install(semantics="sglang-0.5")
    ids = [1, 2, VS] + [IMG] * 16 + [VE, 3, 4]
    output, expected = _process(fake_sglang, ids, [[1, 8, 8]])
    assert hooks.is_layout_tensor(output.mrope_positions)  # bytes travel, not (3, L) positions
    assert output.mrope_positions.numel() < 24 * len(ids) + 400
    runner = Runner(size=4)
    text = _req(fake_sglang, None, 5)
    req = _req(fake_sglang, output, len(ids))
    runner.allocate(1)
    runner.allocate(3)
    batch = types.SimpleNamespace(reqs=[req, text], req_pool_indices_cpu=torch.tensor([1, 3]),
                                  prefix_lens=[0, 0], extend_lens=[len(ids), 5])  # fmt: skip
    forward = _forward(fake_sglang, "extend")
    forward._compute_mrope_positions(runner, batch)
    assert (forward.mrope_positions[:, : len(ids)].numpy() == expected).all()
    assert (forward.mrope_positions[:, len(ids) :].numpy() == np.arange(5)).all()
    delta = int(expected.max()) + 1 - len(ids)
    forward = _forward(fake_sglang, "decode", seq_lens_cpu=torch.tensor([len(ids) + 1, 6]))
    forward._compute_mrope_positions(runner, batch)
    assert forward.mrope_positions[:, 0].tolist() == [len(ids) + delta] * 3 and forward.mrope_positions[0, 1] == 5
    forward = _forward(fake_sglang, "verify", req_pool_indices=torch.tensor([1, 3]))
    batch.spec_info = types.SimpleNamespace(positions=torch.tensor([30, 31, 6, 7]))
    forward.compute_spec_mrope_positions(runner, batch)
    assert forward.mrope_positions[0].tolist() == [30 + delta, 31 + delta, 6, 7]
    # a session turn: the saved prompt, 4 generated tokens, then a new image turn
    turn_ids = [5, VS] + [IMG] * 4 + [VE]
    turn, turn_positions = _process(fake_sglang, turn_ids, [[1, 4, 4]])
    req.origin_input_ids = list(range(len(ids) + 4 + len(turn_ids)))
    req._extend_session_image_inputs(turn)
    layout = hooks.layout_of_tensor(req.multimodal_inputs.mrope_positions)
    start = int(expected.max()) + 1
    want = np.concatenate([expected, np.arange(4) + start + np.zeros((3, 1), int), turn_positions + start + 4], 1)
    assert (layout.positions() == want).all() and int(req.multimodal_inputs.mrope_position_delta) == layout.delta
    retract = fake_sglang[plugin.MM_UTILS].extend_mrope_positions_for_retracted_request
    assert retract(req.multimodal_inputs.mrope_positions, 5) is req.multimodal_inputs.mrope_positions


def test_requests_it_cannot_serve_go_to_sglang(fake_sglang):
    plugin.install(semantics="sglang-0.5")
    runner = Runner(size=2)
    runner.allocate(1)
    config = MRopeConfig.from_hf_config(
        {**QWEN, "vision_end_token_id": VE, "vision_config": {"spatial_merge_size": 2, "tokens_per_second": 2}},
        semantics="sglang-0.5",
    )
    positions, _ = prompt_positions(config, [1, 2, 3])
    own = types.SimpleNamespace(mrope_positions=torch.from_numpy(positions))  # SGLang's own (3, L) positions
    batch = types.SimpleNamespace(reqs=[_req(fake_sglang, own, 3)], req_pool_indices_cpu=torch.tensor([1]),
                                  prefix_lens=[0], extend_lens=[3])  # fmt: skip
    forward = _forward(fake_sglang, "extend")
    assert forward._compute_mrope_positions(runner, batch) == SGLANG


def test_engine_guide_sglang_examples_run():
    """docs/engine.md's SGLang examples run as written, in order (their asserts are the check)."""
    import pathlib
    import re

    text = (pathlib.Path(__file__).resolve().parent.parent / "docs" / "engine.md").read_text(encoding="utf-8")
    section = text[text.index("## 11. SGLang 0.5") :]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 3
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "docs/engine.md", "exec"), namespace)  # noqa: S102
    assert not plugin.installed()


def test_a_text_request_before_any_layout_is_served_once_a_layout_comes(fake_sglang):
    plugin.install(semantics="sglang-0.5")
    runner = Runner(size=4)
    runner.allocate(2)
    text = _req(fake_sglang, None, 6)
    batch = types.SimpleNamespace(reqs=[text], req_pool_indices_cpu=torch.tensor([2]), prefix_lens=[0], extend_lens=[6])
    assert _forward(fake_sglang, "extend")._compute_mrope_positions(runner, batch) == SGLANG  # no engine yet
    ids = [1, VS] + [IMG] * 4 + [VE]
    output, expected = _process(fake_sglang, ids, [[1, 4, 4]])
    runner.allocate(1)
    batch = types.SimpleNamespace(reqs=[text, _req(fake_sglang, output, len(ids))],
                                  req_pool_indices_cpu=torch.tensor([2, 1]), prefix_lens=[6, 0],
                                  extend_lens=[1, len(ids)])  # fmt: skip
    forward = _forward(fake_sglang, "extend")
    forward._compute_mrope_positions(runner, batch)
    assert forward.mrope_positions[0, 0] == 6 and (forward.mrope_positions[:, 1:].numpy() == expected).all()


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "glm4v", "ernie4_5_moe_vl", "qwen3_omni")).flatmap(
        lambda family: family_prompts(family, config_name=None)
    )
)
def test_installed_drop_ins_return_the_plain_drop_ins_results(prompt):
    """Installed, a drop-in builds the layout first and returns its positions: the plain drop-in's, exactly."""
    config = MRopeConfig.from_hf_config(prompt.config, semantics="sglang-0.5")
    kw = prompt.kwargs()
    ids = torch.tensor([prompt.token_ids])
    images = None if "image_grid_thw" not in kw else torch.from_numpy(kw["image_grid_thw"])
    videos = None if "video_grid_thw" not in kw else torch.from_numpy(kw["video_grid_thw"])
    if prompt.family in ("glm4v", "ernie4_5_moe_vl"):
        name, args, kwargs = ("get_rope_index_glm4v" if prompt.family == "glm4v" else "get_rope_index_ernie45",
                              [ids, _namespace(prompt.config), images, videos], {})  # fmt: skip
        if prompt.family == "glm4v":
            args.append(None)
    else:
        times = kw.get("second_per_grid_ts")
        args = [config.spatial_merge_size, config.image_token_id, config.video_token_id, config.vision_start_token_id]
        args += [config.model_type, config.tokens_per_second, ids, images, videos]
        args += [None if times is None else torch.from_numpy(np.asarray(times))]
        name, kwargs = "get_rope_index", {}
        if prompt.family == "qwen3_omni":
            kwargs = {"audio_token_id": config.audio_token_id, "audio_start_token_id": config.audio_start_token_id}
            kwargs["position_id_per_seconds"] = config.tokens_per_second
            kwargs["audio_seqlens"] = kw.get("audio_feature_lengths")
            kwargs["use_audio_in_video"] = prompt.use_audio_in_video
    plain = getattr(sglang_api, name)(*args, semantics="sglang-0.5", **kwargs)
    installed = hooks.DROP_INS[name](*args, semantics="sglang-0.5", **kwargs)
    assert all(a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b) for a, b in zip(plain, installed))
    layout = hooks.take_layout(installed[0].squeeze(1))
    assert (layout is None) == (images is None and videos is None)


def _namespace(value):
    if isinstance(value, dict):
        return types.SimpleNamespace(**{key: _namespace(item) for key, item in value.items()})
    return value


# ---------------------------------------------------------------------------------------------- merge, scheduler
def _sglang_merge(self, other):
    """SGLang 0.5.23's ``MultimodalInputs.merge``, reduced to its positions: the
    two (3, L) tables concatenated as they are, the deltas stacked."""
    if self.mrope_positions is not None and other.mrope_positions is not None:
        self.mrope_positions = torch.cat([self.mrope_positions, other.mrope_positions], dim=1)
        self.mrope_position_delta = torch.cat([self.mrope_position_delta, other.mrope_position_delta], dim=0)
    self.mm_items = self.mm_items + other.mm_items


def _inputs(fake_sglang, output):
    inputs = fake_sglang[plugin.SCHEDULE].MultimodalInputs()
    inputs.__dict__.update(mm_items=["item"], mrope_positions=output.mrope_positions,
                           mrope_position_delta=output.mrope_position_delta)  # fmt: skip
    return inputs


@pytest.mark.parametrize("theirs_is_layout", [True, False])
def test_merge_concatenates_layouts_as_sglang_concatenates_tables(fake_sglang, theirs_is_layout):
    fake_sglang[plugin.SCHEDULE].MultimodalInputs.merge = _sglang_merge
    plugin.install(semantics="sglang-0.5")
    first, first_positions = _process(fake_sglang, [1, VS] + [IMG] * 16 + [VE, 2], [[1, 8, 8]])
    second, second_positions = _process(fake_sglang, [3, 4, VS] + [IMG] * 4 + [VE], [[1, 4, 4]])
    mine = _inputs(fake_sglang, first)
    other = _inputs(fake_sglang, second)
    if not theirs_is_layout:  # SGLang's own table beside a layout: the layout merges as its positions
        other.mrope_positions = torch.from_numpy(second_positions)
    sent = other.mrope_positions
    mine.merge(other)
    expected = np.concatenate([first_positions, second_positions], axis=1)
    merged = mine.mrope_positions
    assert hooks.is_layout_tensor(merged) == theirs_is_layout and other.mrope_positions is sent
    got = hooks.layout_of_tensor(merged).positions() if theirs_is_layout else merged.numpy()
    assert (got == expected).all() and mine.mm_items == ["item", "item"]


def test_merge_without_positions_on_either_side_is_sglangs(fake_sglang):
    fake_sglang[plugin.SCHEDULE].MultimodalInputs.merge = _sglang_merge
    plugin.install(semantics="sglang-0.5")
    output, _ = _process(fake_sglang, [1, VS] + [IMG] * 4 + [VE], [[1, 4, 4]])
    mine, other = _inputs(fake_sglang, output), _inputs(fake_sglang, output)
    other.mrope_positions = None
    layout = mine.mrope_positions
    mine.merge(other)
    assert mine.mrope_positions is layout


def _image_only_positions(input_len: int, offsets, grids) -> torch.Tensor:
    """Qwen-VL's image-only path of SGLang 0.5.23 (positions from item offsets, no
    get_rope_index), re-stated: text at the running position, an image's (t, h, w)
    indices after it, the running position then moved by max(t, h, w)."""
    parts, at, nxt = [], 0, 0
    for (start, end), (t, h, w) in zip(offsets, grids):
        h, w = h // 2, w // 2
        parts.append(torch.arange(start - at).expand(3, -1) + nxt)
        nxt += start - at
        grid = torch.stack(torch.meshgrid(torch.arange(t), torch.arange(h), torch.arange(w), indexing="ij"))
        parts.append(grid.reshape(3, -1) + nxt)
        nxt, at = nxt + max(t, h, w), end + 1
    parts.append(torch.arange(input_len - at).expand(3, -1) + nxt)
    return torch.cat(parts, dim=1)


class Processor:
    """The scheduler's multimodal processor: its ``compute_mrope_positions`` calls
    ``get_rope_index`` (the installed drop-in) on the prompt, as Qwen-VL's does."""

    def __init__(self, fake_sglang, grids):
        self.rope, self.grids = fake_sglang[plugin.ROPE_INDEX], grids

    def compute_mrope_positions(self, input_ids, mm_items):
        positions, delta = self.rope.get_rope_index(
            spatial_merge_size=2, image_token_id=IMG, video_token_id=151656, vision_start_token_id=VS,
            model_type="qwen2_5_vl", tokens_per_second=2, input_ids=torch.tensor([list(input_ids)]),
            image_grid_thw=torch.tensor(self.grids), video_grid_thw=None,
        )  # fmt: skip
        return positions.squeeze(1), delta


def _sglang_maybe_compute(self, req):
    """SGLang 0.5.23's ``Scheduler._maybe_compute_mrope_positions``, re-stated."""
    mm = req.multimodal_inputs
    if self._mm_processor is None or mm is None or mm.mrope_positions is not None:
        return
    mm.mrope_positions, mm.mrope_position_delta = self._mm_processor.compute_mrope_positions(
        req.origin_input_ids, mm.mm_items
    )


@pytest.mark.parametrize("case", ["offsets", "missing", "other rule", "no processor"])
def test_the_scheduler_turns_positions_made_elsewhere_into_layouts(fake_sglang, case):
    fake_sglang[plugin.SCHEDULER].Scheduler._maybe_compute_mrope_positions = _sglang_maybe_compute
    plugin.install(semantics="sglang-0.5")
    ids = [1, 2, VS] + [IMG] * 16 + [VE, 3, VS] + [IMG] * 4 + [VE, 4]
    grids = [[1, 8, 8], [1, 4, 4]]
    own = _image_only_positions(len(ids), [(3, 18), (22, 25)], [(1, 8, 8), (1, 4, 4)])
    if case == "other rule":
        own[0, -1] += 5  # positions this package does not make: SGLang's stand
    scheduler = fake_sglang[plugin.SCHEDULER].Scheduler()
    scheduler._mm_processor = None if case == "no processor" else Processor(fake_sglang, grids)
    inputs = types.SimpleNamespace(mm_items=["image", "image"], mrope_positions=None if case == "missing" else own,
                                   mrope_position_delta=torch.tensor([[int(own.max()) + 1 - len(ids)]]))  # fmt: skip
    req = _req(fake_sglang, inputs, len(ids))
    req.origin_input_ids = ids
    if case != "missing":  # (SGLang computes missing positions on the ids as they are)
        req.origin_input_ids = [1, 2, VS] + [-7] * 16 + [VE, 3, VS] + [-8] * 4 + [VE, 4]  # padded
        req.origin_input_ids_unpadded = ids
    scheduler._maybe_compute_mrope_positions(req)
    if case in ("other rule", "no processor"):
        assert inputs.mrope_positions is own
        return
    layout = hooks.layout_of_tensor(inputs.mrope_positions)
    assert (layout.positions() == own.numpy()).all() and int(inputs.mrope_position_delta) == layout.delta


def test_a_mixed_batch_gives_sglangs_code_tables_and_keeps_the_layouts(fake_sglang):
    """A request the adapter cannot serve sends the batch to SGLang's code, which
    reads every request's (3, L) table: layouts are lent as their positions."""
    seen = []

    def sglang_compute(self, model_runner, batch):  # SGLang's path, reduced to what it reads
        seen.extend(tuple(mm.mrope_positions.shape) for mm in batch.multimodal_inputs)
        return SGLANG

    fake_sglang[plugin.FORWARD].ForwardBatch._compute_mrope_positions = sglang_compute
    plugin.install(semantics="sglang-0.5")
    ids = [1, VS] + [IMG] * 4 + [VE]
    output, expected = _process(fake_sglang, ids, [[1, 4, 4]])
    own = types.SimpleNamespace(mrope_positions=torch.zeros((3, 3), dtype=torch.int64))  # SGLang's own table
    runner = Runner(size=2)
    runner.allocate(1)
    runner.allocate(2)
    reqs = [_req(fake_sglang, output, len(ids)), _req(fake_sglang, own, 3)]
    batch = types.SimpleNamespace(reqs=reqs, multimodal_inputs=[output, own], req_pool_indices_cpu=torch.tensor([1, 2]),
                                  prefix_lens=[0, 0], extend_lens=[len(ids), 3])  # fmt: skip
    layout = output.mrope_positions
    assert _forward(fake_sglang, "extend")._compute_mrope_positions(runner, batch) == SGLANG
    assert seen == [(3, len(ids)), (3, 3)] and output.mrope_positions is layout


def test_a_session_turn_with_sglangs_table_after_a_saved_layout(fake_sglang):
    """SGLang composes a turn that holds its own table; a saved layout joins as its
    positions, on a copy (the saved request's inputs stay as they were)."""
    seen = []

    def sglang_session(self, image_inputs):
        seen.append(self.multimodal_inputs.mrope_positions.clone())

    fake_sglang[plugin.SCHEDULE].Req._extend_session_image_inputs = sglang_session
    plugin.install(semantics="sglang-0.5")
    ids = [1, VS] + [IMG] * 4 + [VE]
    saved, expected = _process(fake_sglang, ids, [[1, 4, 4]])
    req = _req(fake_sglang, saved, len(ids) + 3)
    layout = saved.mrope_positions
    turn = types.SimpleNamespace(mrope_positions=torch.zeros((3, 3), dtype=torch.int64))
    req._extend_session_image_inputs(turn)
    assert (seen[0].numpy() == expected).all() and saved.mrope_positions is layout


# ---------------------------------------------------------------------------------------------- a batch's new requests
def _kind_req(kind: str, layout_bytes: torch.Tensor):
    """A scheduled request as the runner state reads it: a layout, text, or positions SGLang made itself."""
    if kind == "text":
        return types.SimpleNamespace(multimodal_inputs=None, origin_input_ids=[1, 2, 3])
    positions = layout_bytes if kind == "layout" else torch.zeros((3, 5), dtype=torch.int64)
    return types.SimpleNamespace(multimodal_inputs=types.SimpleNamespace(mrope_positions=positions),
                                 origin_input_ids=[1, 2, 3])  # fmt: skip


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.lists(st.integers(0, 5), max_size=3),  # rows SGLang allocates (its generation bump) before the batch
            st.lists(st.tuples(st.integers(0, 5), st.sampled_from(("layout", "text", "foreign"))), max_size=5),
            st.sampled_from(("tensor", "int32", "list")),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_the_test_for_new_requests_agrees_with_the_admission_pass(steps):
    """`RunnerState.serves` on the batch forms SGLang passes (one kernel pass when no request is new) gives
    what the whole admission pass gives, batch by batch, on the same SGLang tables (a tuple of rows takes
    that pass): the same rows or None, and the same admitted generations and unserved rows afterwards."""
    ids = [1, VS] + [IMG] * 4 + [VE]
    layout = hooks.layout_tensor(prompt_layout(ids))
    live = torch.zeros(6, dtype=torch.int64)
    fast, full = (hooks.RunnerState(5, 64, torch.device("cpu")) for _ in range(2))
    kinds: dict = {}  # each row's request since its last allocation
    for allocated, batch, form in steps:
        for row in allocated:
            live[row] += 1
            kinds.pop(row, None)
        for row, kind in batch:
            kinds.setdefault(row, kind)
        rows = list(dict.fromkeys(row for row, _ in batch))  # (a batch holds a row once)
        reqs = [_kind_req(kinds[row], layout) for row in rows]
        usual = {"tensor": torch.tensor(rows, dtype=torch.int64), "list": rows,
                 "int32": np.array(rows, dtype=np.int32)}[form]  # fmt: skip
        got, expected = fast.serves(usual, live, reqs), full.serves(tuple(rows), live, reqs)
        assert (got is None) == (expected is None)
        if got is not None:
            assert got.dtype == np.int64 and got.tolist() == expected.tolist() == rows
        assert (fast.generation == full.generation).all() and (fast.foreign == full.foreign).all()
        assert (fast.engine is None) == (full.engine is None)


def prompt_layout(ids):
    from mrope_tracker import PromptLayout

    config = MRopeConfig(family="qwen2_5_vl", semantics="sglang-0.5")
    return PromptLayout.from_tokens(config, np.array(ids), image_grid_thw=np.array([[1, 4, 4]]))


def test_the_view_of_sglangs_generations_follows_its_storage():
    """The state keeps its numpy view of ``req_generation`` between batches, and views it again when the
    tensor's storage moved: a request admitted since is seen as new, not missed through a stale view."""
    state = hooks.RunnerState(4, 64, torch.device("cpu"))
    layout = hooks.layout_tensor(prompt_layout([1, VS] + [IMG] * 4 + [VE]))
    live = torch.tensor([0, 1, 0, 0, 0])
    reqs = [_kind_req("layout", layout)]
    assert state.serves(torch.tensor([1]), live, reqs).tolist() == [1] and state.generation[1] == 1
    live.set_(torch.tensor([0, 2, 0, 0, 0]))  # moved storage: row 1 holds a new request
    assert state.serves(torch.tensor([1]), live, [_kind_req("foreign", layout)]) is None
    assert state.generation[1] == 2 and state.foreign[1]
    live[1] += 1  # in place (as SGLang bumps it): seen through the kept view
    assert state.serves(torch.tensor([1]), live, reqs).tolist() == [1] and state.generation[1] == 3


# ---------------------------------------------------------------------------------------------- the launcher
def _fake_sglang_package(folder) -> None:
    """An importable `sglang` package with the recorded API (functions and classes with SGLang 0.5.23's
    parameters) and a `sglang.launch_server` that reports it ran."""
    modules: dict = {}
    for key, params in RECORD["functions"].items():
        module, name = key.split(":")
        modules.setdefault(module, []).append(f"def {name}({', '.join(params)}):\n    return 'sglang'\n")
    classes: dict = {}
    for key, entry in RECORD["methods"].items():
        module, qualified = key.split(":")
        cls, name = qualified.split(".")
        params = entry["params"] if entry["staticmethod"] else ["self", *entry["params"]]
        decorator = "    @staticmethod\n" if entry["staticmethod"] else ""
        classes.setdefault((module, cls), []).append(f"{decorator}    def {name}({', '.join(params)}):\n        pass\n")
    for (module, cls), methods in classes.items():
        modules.setdefault(module, []).append(f"class {cls}:\n" + "".join(methods))
    modules["sglang.launch_server"] = ["import sys\nprint('launched', sys.argv[1:])\n"]
    for module, parts in modules.items():
        path = folder.joinpath(*module.split("."))
        for k in range(1, len(module.split("."))):
            package = folder.joinpath(*module.split(".")[:k])
            package.mkdir(parents=True, exist_ok=True)
            (package / "__init__.py").touch()
        path.with_suffix(".py").write_text("\n\n".join(parts))


@pytest.mark.slow
@pytest.mark.parametrize("switch", ["1", "0"])
def test_the_launcher_installs_warms_the_cache_and_starts_sglang(tmp_path, switch):
    """`python -m mrope_tracker.sglang.launch_server ARGS` installs the plugin, fills numba's cache with the
    tracker runner's kernels (warmup's marker is there afterwards) and runs SGLang's launch_server with ARGS;
    with MROPE_TRACKER_SGLANG=0 it only runs SGLang's."""
    import subprocess

    fake, cache = tmp_path / "fake", tmp_path / "cache"
    fake.mkdir()
    _fake_sglang_package(fake)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(fake), os.environ.get("PYTHONPATH", "")]),
               NUMBA_CACHE_DIR=str(cache), MROPE_TRACKER_SGLANG=switch)  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "mrope_tracker.sglang.launch_server", "--port", "30000"],
                          env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("launched ['--port', '30000']")
    markers = list(cache.rglob("*warmup-complete*any-tracker*")) if cache.exists() else []
    assert bool(markers) == (switch == "1")
