"""The vLLM plugin: Model Runner V2 builds our `RopeState` instead of its own.

MRV2 (vLLM 0.33 and 0.34) makes its M-RoPE state in one place,
``vllm.v1.worker.gpu.mm.rope.get_rope_state(model_config, model,
max_num_reqs, max_num_tokens, max_model_len, device)``, which
``vllm.v1.worker.gpu.model_states.default`` imports by name and calls when
it builds a `DefaultModelState`. `install()` replaces the name in both
modules (`PATCH_TARGETS`) with a function of the same signature that returns
`mrope_tracker.rope_state.RopeState` for every model this package knows, and
hands any other M-RoPE model to vLLM's own function. Nothing else in vLLM
changes: the runner calls the state's methods as it always does.

`install()` checks, before it changes anything, that every target exists
with the signature of vLLM 0.33 (which 0.34 keeps), and that our states
answer every public method of vLLM's `RopeState` class with its
parameters (`check_state_methods`), and raises RuntimeError naming what differs
otherwise: a vLLM that renamed or moved them is never half patched. It may
be called more than once (vLLM loads plugins in every process it starts).

With ``evs=True`` (the default) it also hooks MRV2's EVS pruner so pruned
videos get our rule's positions (vllm/evs_plugin.py); its targets are
checked before anything changes too.

The `vllm.general_plugins` entry point (pyproject.toml) calls `register()`,
which installs unless the environment sets MROPE_TRACKER_VLLM_PLUGIN=0, and
warns instead of failing when vLLM is not the version it patches.
tests/data/vllm-0.33.0-rope-api.json records these names as vLLM 0.33.0
defines them (0.34.0's sources give the same record but for three imports of
the Qwen3-VL module); tests/test_vllm_plugin.py checks `PATCH_TARGETS`
against it, and CI's vLLM stage runs `install()` in both releases.
"""

from __future__ import annotations

import importlib
import inspect
import os
import warnings

from ..core.config import MRopeConfig
from ..device import factory
from ..device.evs_rows import PrunedRopeState
from ..device.rope_state import RopeState
from ..device.warm import warm_rope_state
from .evs_plugin import check_evs_targets, install_evs

__all__ = ["PATCH_TARGETS", "GET_ROPE_STATE_PARAMS", "check_state_methods", "install", "register"]

DEFINING_MODULE = "vllm.v1.worker.gpu.mm.rope"
# imports RopeState for a type annotation only: nothing to patch there
ANNOTATION_ONLY = ("vllm.v1.worker.gpu.model_states.mm_pruning",)
PATCH_TARGETS = (
    (DEFINING_MODULE, "get_rope_state"),
    ("vllm.v1.worker.gpu.model_states.default", "get_rope_state"),  # `from ...mm.rope import get_rope_state`
)
GET_ROPE_STATE_PARAMS = ("model_config", "model", "max_num_reqs", "max_num_tokens", "max_model_len", "device")
# what our get_rope_state may return (device/factory.py): each must answer every call vLLM's runner makes
OUR_STATES = (RopeState, PrunedRopeState)
VLLM_ENV_SWITCH = "MROPE_TRACKER_VLLM_PLUGIN"


def _parameters(function) -> list[inspect.Parameter]:
    return [p for name, p in inspect.signature(function).parameters.items() if name != "self"]


def check_state_methods(vllm_state: type) -> None:
    """Every public method of vLLM's `RopeState` class (what its runner may
    call on the state) must be one of ours too, taking vLLM's parameters by
    the same names first, any more of ours keyword-only: a vLLM whose
    runner calls a method ours lacks would otherwise fail mid-request, not
    at start-up. Its `__init__` is not compared: vLLM builds the state
    through `get_rope_state`, which ours replaces. RuntimeError naming the
    first difference."""
    for name, member in vars(vllm_state).items():
        if name.startswith("_") or not inspect.isfunction(member):
            continue
        theirs = [p.name for p in _parameters(member)]
        for ours_cls in OUR_STATES:
            ours = getattr(ours_cls, name, None)
            if ours is None:
                raise RuntimeError(
                    f"mrope_tracker.vllm.install: vLLM's RopeState has a method {name}, which {ours_cls.__name__} "
                    "lacks; it patches the Model Runner V2 of vLLM 0.33 and 0.34"
                )
            params = _parameters(ours)
            if [p.name for p in params[: len(theirs)]] != theirs or any(
                p.kind is not inspect.Parameter.KEYWORD_ONLY for p in params[len(theirs) :]
            ):
                raise RuntimeError(
                    f"mrope_tracker.vllm.install: vLLM's RopeState.{name} takes {tuple(theirs)}, "
                    f"{ours_cls.__name__}.{name} {tuple(p.name for p in params)}"
                )


def _patched_get_rope_state(original, semantics: str):
    def get_rope_state(model_config, model, max_num_reqs, max_num_tokens, max_model_len, device):
        if not model_config.uses_mrope:
            return None
        try:
            config = MRopeConfig.from_hf_config(model_config.hf_config, semantics=semantics)
        except (ValueError, TypeError):
            config = None  # a model this package does not know
        # the family's position rows must be the model's (3; HunYuan-VL's 4)
        if config is None or model_config.mrope_num_dims != config.num_dims:
            return original(model_config, model, max_num_reqs, max_num_tokens, max_model_len, device)
        state = factory.get_rope_state(
            model_config, model, max_num_reqs, max_num_tokens, max_model_len, device, config=config
        )
        warm_rope_state(config)  # this model's kernels, before the first request: no other model's
        return state

    get_rope_state.mrope_tracker_original = original
    get_rope_state.__doc__ = "mrope_tracker's RopeState for the models it knows, vLLM's own for the others."
    return get_rope_state


def install(*, semantics: str = "vllm-0.33", evs: bool = True) -> bool:
    """Swap MRV2's `get_rope_state` for ours in every module of
    `PATCH_TARGETS` and, with `evs`, hook its EVS pruner
    (vllm/evs_plugin.py); returns False when it was already installed."""
    found = []
    for module_name, name in PATCH_TARGETS:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise RuntimeError(
                f"mrope_tracker.vllm.install: cannot import {module_name} ({exc}); it patches the Model "
                "Runner V2 of vLLM 0.33 and 0.34"
            ) from exc
        current = getattr(module, name, None)
        if current is None:
            raise RuntimeError(
                f"mrope_tracker.vllm.install: {module_name} has no {name}; it patches the Model Runner V2 of "
                "vLLM 0.33 and 0.34"
            )
        original = getattr(current, "mrope_tracker_original", current)
        params = tuple(inspect.signature(original).parameters)
        if params != GET_ROPE_STATE_PARAMS:
            raise RuntimeError(
                f"mrope_tracker.vllm.install: {module_name}.{name} takes {params}, not vLLM 0.33's and 0.34's "
                f"{GET_ROPE_STATE_PARAMS}"
            )
        found.append((module, name, current, original))
    vllm_state = getattr(found[0][0], "RopeState", None)
    if not isinstance(vllm_state, type):
        raise RuntimeError(f"mrope_tracker.vllm.install: {DEFINING_MODULE} has no RopeState class")
    check_state_methods(vllm_state)
    if evs:
        check_evs_targets()  # raises before anything changes
    if all(current is not original for _, _, current, original in found):
        return install_evs(semantics=semantics) if evs else False
    defining_original = found[0][3]
    patched = _patched_get_rope_state(defining_original, semantics)
    for module, name, _, _ in found:
        setattr(module, name, patched)
    if evs:
        install_evs(semantics=semantics)
    return True


def register() -> None:
    """The `vllm.general_plugins` entry point: `install()`, unless
    MROPE_TRACKER_VLLM_PLUGIN=0; a vLLM without these names gets a warning
    and is left as it is."""
    if os.environ.get(VLLM_ENV_SWITCH, "1") == "0":
        return
    try:
        install()
        return
    except RuntimeError as exc:
        failure = exc
    try:  # the state without the EVS hook: a vLLM whose pruning code differs keeps its own EVS path
        install(evs=False)
        warnings.warn(f"{failure}; vLLM's own EVS recompute stays in use", RuntimeWarning, stacklevel=2)
    except RuntimeError as exc:
        warnings.warn(f"{exc}; vLLM's own RopeState stays in use", RuntimeWarning, stacklevel=2)
