"""The vLLM plugin against a recorded copy of vLLM 0.33.0's API.

tests/data/vllm-0.33.0-rope-api.json was written from vLLM 0.33.0's own
source by tests/vllm_rope_api.py (its header says how). The tests build fake
vLLM modules from that record, so `install()` runs without vLLM, and check
that what it patches, and the RopeState it installs, are what the record
says vLLM has: a rename on either side fails here.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import json
import os
import subprocess
import sys
import types

import pytest
from fake_vllm_evs import add_evs_fakes

from mrope_tracker.device.rope_state import RopeState
from mrope_tracker.vllm import plugin as vllm_plugin

RECORD_PATH = os.path.join(os.path.dirname(__file__), "data", "vllm-0.33.0-rope-api.json")
with open(RECORD_PATH) as f:
    RECORD = json.load(f)
CONFIG_PATH = os.path.join(os.path.dirname(__file__), "data", "configs", "qwen2_vl.json")


def test_patch_targets_are_the_recorded_importers():
    """Every vLLM module that imports get_rope_state by name is patched, with the defining
    one; the others import RopeState only for annotations."""
    assert vllm_plugin.DEFINING_MODULE == RECORD["defining_module"]
    importers = {m for m, names in RECORD["importers"].items() if "get_rope_state" in names}
    assert {m for m, _ in vllm_plugin.PATCH_TARGETS} == importers | {RECORD["defining_module"]}
    assert {name for _, name in vllm_plugin.PATCH_TARGETS} == {"get_rope_state"}
    others = {m for m, names in RECORD["importers"].items() if "get_rope_state" not in names}
    assert others == set(vllm_plugin.ANNOTATION_ONLY)
    assert list(vllm_plugin.GET_ROPE_STATE_PARAMS) == RECORD["get_rope_state"]


def test_rope_state_has_vllms_methods():
    """Our RopeState takes every recorded method's parameters, by the same names, first."""
    for name, params in RECORD["RopeState"].items():
        ours = [p for p in inspect.signature(getattr(RopeState, name)).parameters if p != "self"]
        assert ours[: len(params)] == params, name
        extra = [inspect.signature(getattr(RopeState, name)).parameters[p] for p in ours[len(params) :]]
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in extra), name


@pytest.fixture
def fake_vllm(monkeypatch):
    """vLLM's modules as the record describes them: get_rope_state defined in one, imported in the others."""
    params = RECORD["get_rope_state"]
    namespace: dict = {}
    exec(f"def get_rope_state({', '.join(params)}):\n    return ('vllm', model_config)", namespace)  # noqa: S102
    original = namespace["get_rope_state"]
    methods = [f"    def {name}(self, {', '.join(args)}):\n        pass" for name, args in RECORD["RopeState"].items()]
    exec("class RopeState:\n" + "\n".join(methods), namespace)  # noqa: S102 (vLLM's methods, recorded)
    modules = {}
    for name in [RECORD["defining_module"], *RECORD["importers"]]:
        module = types.ModuleType(name)
        if "get_rope_state" in RECORD["importers"].get(name, ["get_rope_state"]):
            module.get_rope_state = original
        if name == RECORD["defining_module"]:
            module.RopeState = namespace["RopeState"]
        modules[name] = module
        monkeypatch.setitem(sys.modules, name, module)
    add_evs_fakes(modules, monkeypatch)  # the EVS hook's targets (fake_vllm_evs.py)
    return modules, original


class ModelConfig:
    def __init__(self, hf_config, uses_mrope=True, num_dims=3):
        self.hf_config = hf_config
        self.uses_mrope = uses_mrope
        self.mrope_num_dims = num_dims


def test_install_patches_every_target_once(fake_vllm):
    modules, original = fake_vllm
    assert vllm_plugin.install() is True
    patched = modules[RECORD["defining_module"]].get_rope_state
    assert patched is not original and patched.mrope_tracker_original is original
    for name, _ in vllm_plugin.PATCH_TARGETS:
        assert modules[name].get_rope_state is patched
    assert list(inspect.signature(patched).parameters) == RECORD["get_rope_state"]
    assert vllm_plugin.install() is False  # vLLM loads plugins in every process, maybe twice
    assert modules[RECORD["defining_module"]].get_rope_state is patched


def test_unknown_models_keep_vllms_state(fake_vllm):
    modules, _ = fake_vllm
    vllm_plugin.install()
    patched = modules[RECORD["defining_module"]].get_rope_state
    assert patched(ModelConfig({"model_type": "qwen2_vl"}, uses_mrope=False), None, 4, 8, 64, "cpu") is None
    unknown = ModelConfig({"model_type": "some_future_vl"})
    assert patched(unknown, None, 4, 8, 64, "cpu") == ("vllm", unknown)
    with open(CONFIG_PATH) as f:
        four_dims = ModelConfig(json.load(f), num_dims=4)
    assert patched(four_dims, None, 4, 8, 64, "cpu") == ("vllm", four_dims)


def test_known_models_get_our_state(fake_vllm):
    pytest.importorskip("triton", reason="RopeState's kernels need triton")
    modules, _ = fake_vllm
    vllm_plugin.install()
    with open(CONFIG_PATH) as f:
        model_config = ModelConfig(json.load(f))
    state = modules["vllm.v1.worker.gpu.model_states.default"].get_rope_state(model_config, None, 4, 8, 64, "cpu")
    assert isinstance(state, RopeState) and state.config.semantics == "vllm-0.33"


@pytest.mark.parametrize("breakage", ["renamed", "signature", "missing_module", "state_method", "state_signature"])
def test_a_vllm_that_differs_fails_loudly_and_is_left_alone(fake_vllm, monkeypatch, breakage):
    modules, original = fake_vllm
    importer = "vllm.v1.worker.gpu.model_states.default"
    vllm_state = modules[RECORD["defining_module"]].RopeState
    expected = {
        "missing_module": "cannot import",
        "state_method": "remove_slot",
        "state_signature": "prepare_positions",
    }
    if breakage == "state_method":  # a runner that calls a method ours lacks
        vllm_state.remove_slot = lambda self, req_idx: None
    elif breakage == "state_signature":  # ... or passes one more argument

        def prepare_positions(self, idx_mapping, query_start_loc, prefill_lens, num_computed_tokens, num_tokens):
            pass

        vllm_state.prepare_positions = prepare_positions
    elif breakage == "renamed":
        del modules[importer].get_rope_state
    elif breakage == "signature":

        def get_rope_state(model_config, model, max_num_reqs, max_num_tokens, device):
            return None

        modules[importer].get_rope_state = get_rope_state
    else:
        monkeypatch.setitem(sys.modules, importer, None)
    with pytest.raises(RuntimeError, match=expected.get(breakage, importer)):
        vllm_plugin.install()
    assert modules[RECORD["defining_module"]].get_rope_state is original
    with pytest.warns(RuntimeWarning, match="vLLM's own RopeState stays in use"):
        vllm_plugin.register()
    assert modules[RECORD["defining_module"]].get_rope_state is original


def test_register_can_be_switched_off(fake_vllm, monkeypatch):
    modules, original = fake_vllm
    monkeypatch.setenv(vllm_plugin.VLLM_ENV_SWITCH, "0")
    vllm_plugin.register()
    assert modules[RECORD["defining_module"]].get_rope_state is original
    monkeypatch.delenv(vllm_plugin.VLLM_ENV_SWITCH)
    vllm_plugin.register()
    assert modules[RECORD["defining_module"]].get_rope_state is not original


def test_entry_point_is_declared():
    """pyproject.toml declares the vllm.general_plugins entry point (as installed)."""
    points = importlib.metadata.entry_points(group="vllm.general_plugins")
    assert [p.value for p in points if p.name == "mrope_tracker"] == ["mrope_tracker.vllm.plugin:register"]


@pytest.mark.slow  # a child process imports torch and the package
def test_the_package_imports_without_triton():
    """`import mrope_tracker` and `mrope_tracker.vllm` need no triton; RopeState says it needs it."""
    code = (
        "import sys; sys.modules['triton'] = None\n"
        "import mrope_tracker, mrope_tracker.vllm\n"
        "from mrope_tracker.vllm import RopeState, get_rope_state, install\n"
        "try:\n"
        "    RopeState(3, 2, 8, 64, 'cpu')\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert "needs the `triton` package" in out.stdout


def test_a_vllm_whose_pruning_code_differs_keeps_its_evs_path_and_gets_our_state(fake_vllm):
    """register(): the RopeState is installed without the EVS hook, with a warning."""
    modules, original = fake_vllm
    pruner = modules["vllm.v1.worker.gpu.model_states.mm_pruning"].MultiModalPruner
    own_recompute = pruner.recompute
    pruner._num_window_embeds = lambda self, req_id: 0  # a vLLM whose pruner changed
    with pytest.raises(RuntimeError, match="_num_window_embeds"):
        vllm_plugin.install()
    assert modules[RECORD["defining_module"]].get_rope_state is original  # nothing half patched
    with pytest.warns(RuntimeWarning, match="vLLM's own EVS recompute stays in use"):
        vllm_plugin.register()
    assert modules[RECORD["defining_module"]].get_rope_state is not original
    assert pruner.recompute is own_recompute
