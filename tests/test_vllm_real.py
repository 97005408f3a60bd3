"""Inside vLLM's own code, 0.33 or 0.34 (CI stage "vllm" of .ci/run runs both; skipped without either).

- `install()` patches the real modules, and vLLM's own `DefaultModelState`
  then builds our `RopeState` through its own call to `get_rope_state`.
- vLLM's own `RopeState` (its positions from its model classes'
  ``get_mrope_input_positions``) and ours run the same random MRV2 schedules:
  admissions with prefix-cache hits and resumed outputs, chunked prefill,
  decode with speculative tokens, requests finishing without any call to
  the state and their slots admitted again, `num_computed_tokens` moved
  ahead by the device as async scheduling leaves it. The `positions`
  columns of every step must be equal. The prompts are vLLM 0.33.0's own
  (tests/data/vllm-0.33.0*.jsonl), every family both support (vLLM 0.34
  has no Keye models: those skip there). The prompt ids are what the
  installed release's scheduler hands the runner: a list on 0.33, a
  `TokenBuffer` (an int32 array.array) on 0.34.
tests/vllm_real.py says what makes vLLM's modules run on a CPU.
"""

from __future__ import annotations

import collections
import json
import os
import warnings

import numpy as np
import pytest
import torch
import vllm_features
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import examples
from triton_support import require_triton

vllm = pytest.importorskip("vllm", reason="needs vLLM 0.33 or 0.34 installed (the CI stage 'vllm' of .ci/run)")
if not vllm.__version__.startswith(vllm_features.VLLM_RELEASES):
    pytest.skip(f"these tests run vLLM 0.33's or 0.34's code, found vLLM {vllm.__version__}", allow_module_level=True)

import vllm_families  # noqa: E402
import vllm_real  # noqa: E402
from test_canvas_reference import CONFIG as CANVAS_CONFIG  # noqa: E402
from test_canvas_reference import IM_END, SL_END  # noqa: E402
from test_canvas_reference import RECORDS as CANVAS_RECORDS  # noqa: E402

from mrope_tracker import MRopeConfig  # noqa: E402
from mrope_tracker.core.config import ConfigDefaultWarning  # noqa: E402
from mrope_tracker.vllm import RopeState, get_mrope_input_positions  # noqa: E402

CPU = torch.device("cpu")


def _family_pools() -> dict[str, list[tuple[dict, list]]]:
    """Per family, the recorded prompts of its most common config, with their stand-in features."""
    vectors = [(v, vllm_features.vector_features(v)) for v in vllm_features.load_vectors()]
    with open(vllm_families.MORE_VECTORS_PATH, encoding="utf-8") as f:
        more = [json.loads(line) for line in f]
    vectors += [(v, vllm_families.vector_features(v)) for v in more]
    groups = collections.defaultdict(list)
    for vector, features in vectors:
        groups[(vector["family"], json.dumps(vector["config"], sort_keys=True))].append((vector, features))
    pools = {}
    for (family, _), group in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        pools.setdefault(family, group)
    return pools


POOLS = _family_pools()


@pytest.fixture(autouse=True)
def _runnable():
    vllm_real.check_triton()
    require_triton()


def our_config(config: dict) -> MRopeConfig:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigDefaultWarning)
        return MRopeConfig.from_hf_config(config, semantics="vllm-0.33")


def test_every_family_has_prompts():
    assert sorted(POOLS) == sorted(vllm_real.MODEL_CLASSES)


# ---------------------------------------------------------------------------------------------- the plugin
def _model_config(hf_config, max_model_len: int):
    """What `DefaultModelState` reads of vLLM's ModelConfig, its M-RoPE answers
    given by vLLM's own functions of the HF config (as ModelConfig's properties)."""
    from vllm.transformers_utils.config import mrope_num_dims, uses_mrope

    return type(
        "ModelConfigView",
        (),
        {
            "hf_config": hf_config,
            "uses_mrope": uses_mrope(hf_config),
            "mrope_num_dims": mrope_num_dims(hf_config),
            "max_model_len": max_model_len,
            "enable_prompt_embeds": False,
            "multimodal_config": None,
            "dtype": torch.float32,
            "get_inputs_embeds_size": lambda self: hf_config.get_text_config().hidden_size,
        },
    )()


def test_install_makes_vllms_default_model_state_build_ours():
    """install() patches the modules vLLM imported, and vLLM's own
    DefaultModelState.__init__ reaches our get_rope_state by its own call."""
    import transformers

    from mrope_tracker.vllm import plugin

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from vllm.v1.worker.gpu.model_states import default

    plugin.install()
    assert plugin.install() is False  # a second call (every vLLM process loads plugins) changes nothing
    for module_name, name in plugin.PATCH_TARGETS:
        patched = getattr(__import__(module_name, fromlist=[name]), name)
        assert getattr(patched, "mrope_tracker_original", None) is not None, module_name
    assert default.get_rope_state is vllm_real.rope.get_rope_state  # one function in both modules

    hf_config = transformers.Qwen2_5_VLConfig.from_dict(vllm_families.load_config("qwen2_5_vl"))  # published
    model = vllm_real.model_instance("qwen2_5_vl", hf_config)
    vllm_config = type("VllmConfigView", (), {})()
    vllm_config.model_config = _model_config(hf_config, max_model_len=4096)
    vllm_config.scheduler_config = type("S", (), {"max_num_seqs": 8, "max_num_batched_tokens": 512})()
    state = default.DefaultModelState(vllm_config, model, None, CPU)
    assert isinstance(state.rope_state, RopeState)
    assert (state.rope_state.max_num_reqs, state.rope_state.max_num_tokens) == (8, 512)
    assert state.rope_state.max_model_len == 4096 and state.rope_state.config.family == "qwen2_5_vl"
    assert state.mm_pruner is None  # no encoder cache: vLLM builds no pruner either


# ---------------------------------------------------------------------------------------------- schedules
class TwoStates:
    """vLLM's RopeState and ours, with the per-slot arrays MRV2's runner keeps."""

    def __init__(self, family: str, max_num_reqs: int, max_num_tokens: int, max_model_len: int):
        vector, _ = POOLS[family][0]
        self.config = our_config(vector["config"])
        self.model = vllm_real.model_instance(family, vllm_real.namespace(vector["config"]))
        dims = self.config.num_dims
        self.theirs = vllm_real.vllm_rope_state(dims, max_num_reqs, max_num_tokens, max_model_len)
        self.ours = RopeState(dims, max_num_reqs, max_num_tokens, max_model_len, CPU, config=self.config)
        self.max_num_reqs, self.max_num_tokens, self.max_model_len = max_num_reqs, max_num_tokens, max_model_len
        self.prefill_len = np.zeros(max_num_reqs, np.int32)
        self.num_computed = np.zeros(max_num_reqs, np.int32)
        self.live = [False] * max_num_reqs

    def admit(self, slot: int, token_ids: list[int], features, num_cached: int) -> None:
        ids = vllm_real.prefill_ids(token_ids)
        self.theirs.init_prefill_positions(slot, self.model, ids, vllm_real.real_features(features))
        self.ours.init_prefill_positions(slot, self.model, ids, vllm_real.real_features(features))
        self.prefill_len[slot], self.num_computed[slot] = len(token_ids), num_cached
        self.live[slot] = True

    def step(self, entries: list[tuple[int, int]], pad: int) -> None:
        """One step of (slot, tokens) in batch order; `pad` extra query_start_loc entries, as a padded batch."""
        self.theirs.apply_staged_writes()
        self.ours.apply_staged_writes()
        counts = np.array([n for _, n in entries], np.int32)
        query_start_loc = np.zeros(len(entries) + 1 + pad, np.int32)
        np.cumsum(counts, out=query_start_loc[1 : len(entries) + 1])
        query_start_loc[len(entries) + 1 :] = counts.sum()
        args = (
            torch.tensor([s for s, _ in entries], dtype=torch.int64),
            torch.from_numpy(query_start_loc),
            torch.from_numpy(self.prefill_len.copy()),
            torch.from_numpy(self.num_computed.copy()),
        )
        self.theirs.prepare_positions(*args)
        self.ours.prepare_positions(*args)
        total = int(counts.sum())
        want, got = self.theirs.get_positions(total), self.ours.get_positions(total)
        assert torch.equal(got, want), f"positions differ on step {entries} (computed {self.num_computed.tolist()})"


def _admit(data, states: TwoStates, family: str, slot: int) -> None:
    vector, features = data.draw(st.sampled_from(POOLS[family]), label="prompt")
    # a resumed request's prefill holds its earlier outputs too: text past the last item
    outputs = data.draw(st.lists(st.integers(1000, 1099), max_size=6), label="outputs")
    token_ids = list(vector["token_ids"]) + outputs
    cached = data.draw(st.one_of(st.just(0), st.integers(0, len(token_ids) - 1)), label="prefix-cache hit")
    states.admit(slot, token_ids, features, cached)


def _schedule(data, states: TwoStates) -> list[tuple[int, int]]:
    live = [s for s in range(states.max_num_reqs) if states.live[s]]
    order = data.draw(st.permutations(live), label="batch order")
    entries, budget = [], states.max_num_tokens
    for slot in order[: data.draw(st.integers(1, len(order)))]:
        left = int(states.prefill_len[slot] - states.num_computed[slot])
        room = states.max_model_len - int(states.num_computed[slot])
        wanted = data.draw(st.integers(1, 40)) if left > 0 else data.draw(st.integers(1, 4))  # chunk / spec decode
        n = min(wanted, left if left > 0 else room, budget)
        if n > 0:
            entries.append((slot, n))
            budget -= n
    return entries


def _advance(data, states: TwoStates, entries) -> None:
    for slot, n in entries:
        states.num_computed[slot] += n
        if states.num_computed[slot] >= states.prefill_len[slot] and data.draw(st.integers(0, 3)) == 0:
            # async scheduling: the device has moved past tokens the host has not seen yet
            ahead = data.draw(st.integers(1, 3))
            states.num_computed[slot] = min(states.num_computed[slot] + ahead, states.max_model_len - 1)


def _run_schedule(data, family: str) -> None:
    longest = max(len(v["token_ids"]) for v, _ in POOLS[family])
    states = TwoStates(family, max_num_reqs=3, max_num_tokens=64, max_model_len=longest + 32)
    for _ in range(data.draw(st.integers(3, 14), label="events")):
        free = [s for s in range(states.max_num_reqs) if not states.live[s]]
        event = data.draw(st.sampled_from(("admit", "step", "step", "finish")), label="event")
        if free and (event == "admit" or not any(states.live)):
            _admit(data, states, family, data.draw(st.sampled_from(free), label="slot"))
        elif event == "finish":
            # MRV2 tells its RopeState nothing when a request ends: the slot is simply admitted again later
            states.live[data.draw(st.sampled_from([s for s in range(states.max_num_reqs) if states.live[s]]))] = False
        if not any(states.live):
            continue
        entries = _schedule(data, states)
        if entries:
            states.step(entries, pad=data.draw(st.integers(0, 2), label="padding"))
            _advance(data, states, entries)
        for slot, _ in entries:  # a request that reached max_model_len finishes
            if states.num_computed[slot] >= states.max_model_len - 1:
                states.live[slot] = False


@pytest.mark.parametrize("family", sorted(vllm_real.MODEL_CLASSES))
@given(data=st.data())
@settings(max_examples=examples(20, minimum=5))
def test_same_positions_as_vllms_rope_state(family, data):
    vllm_real.require_served(family)
    _run_schedule(data, family)


# ---------------------------------------------------------------------------------------------- MiniCPM-V 4.7
@pytest.mark.parametrize("index", range(0, len(CANVAS_RECORDS), 4))
def test_minicpmv4_7_as_vllms_own_model_code(index):
    """vLLM's own MiniCPM-V 4.7 `get_mrope_input_positions` (0.34 changed how it reads the ids),
    given the installed release's prompt ids and vLLM's feature objects, gives the recorded
    positions (so the features are what its processor makes, not a case it falls back on), and so
    does ours from the same arguments."""
    record = CANVAS_RECORDS[index]
    hf_config = {
        "model_type": "minicpmv4_7",
        **CANVAS_CONFIG,  # the records' marker ids, with each record's mode and flag
        "downsample_mode": record["downsample_mode"],
        "uses_mrope_canvas": record["uses_mrope_canvas"],
    }
    features = vllm_real.real_features(vllm_features.canvas_features(record, (IM_END, SL_END)))
    ids = vllm_real.prefill_ids(record["token_ids"])
    theirs, their_delta = vllm_real.canvas_model(vllm_real.namespace(hf_config)).get_mrope_input_positions(
        ids, features
    )
    assert theirs.tolist() == record["positions"] and int(their_delta) == record["delta"]
    ours, our_delta = get_mrope_input_positions(our_config(hf_config), ids, features)
    assert torch.equal(ours, theirs.to(torch.int64)) and our_delta == int(their_delta)


# ---------------------------------------------------------------------------------------------- the bench's loader
def test_vllms_two_rope_files_alone_equal_its_installed_modules():
    """bench/vllm_sources.py, for a GPU machine where vLLM's package cannot be imported:
    its RopeState, run from vLLM's two files with the stand-ins, makes the installed module's positions,
    and the stand-ins leave no trace in sys.modules."""
    import sys

    from mrope_tracker.bench import suite_rope, vllm_sources, workloads

    before = {name: module for name, module in sys.modules.items() if name.startswith("vllm")}
    sources = vllm_sources.VllmRopeSources(os.path.dirname(vllm.__file__))
    assert {name: module for name, module in sys.modules.items() if name.startswith("vllm")} == before
    layouts = suite_rope._layouts(workloads.qwen2_5_vl(), 5)
    longest = max(layout.num_tokens for layout in layouts) + 8
    installed = suite_rope.VllmRope(len(layouts), longest, "cpu")
    alone = sources.rope_state(3, len(layouts), suite_rope.MAX_NUM_TOKENS, longest, CPU)
    assert type(alone).__module__ == "vllm.v1.worker.gpu.mm.rope" and type(alone) is not type(installed.state)
    for slot, layout in enumerate(layouts):
        installed.admit(slot, layout)
        positions = layout.positions()
        for d in range(3):
            alone.prefill_positions.stage_write(3 * slot + d, 0, positions[d].tolist())
        alone.prefill_delta.np[slot] = layout.delta
    installed.apply()
    alone.apply_staged_writes()
    rng = np.random.default_rng(0)
    for kind in ("decode", "mixed"):
        tensors, total = suite_rope._step(layouts, kind, "cpu", rng)
        installed.prepare_positions(*tensors)
        alone.prepare_positions(*tensors)
        assert torch.equal(alone.positions[:, :total], installed.positions[:, :total])
        assert installed.positions[:, :total].any()
