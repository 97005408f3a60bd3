"""SGLang 0.5.23's forward-batch code, loaded from its file without the sglang package.

`load(path)` executes ``sglang/srt/model_executor/forward_batch_info.py``
(unpacked from the released wheel) as a module of its own. The sglang modules
it imports are stand-ins for the time of the import: every name they are asked
for is a new empty class, except `runtime_context.get_exec`, which answers the
two switches the position methods read (no RL on-policy target, no MIS). None
of the other names is used by ``ForwardBatch``'s position methods
(``_compute_mrope_positions`` with its extend and decode paths,
``_expand_mrope_from_input``, ``compute_spec_mrope_positions``), which run as
SGLang wrote them. Nothing of SGLang's is copied here.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
import types


class _StandIn(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        value = type(name, (), {})
        setattr(self, name, value)
        return value


def _get_exec():
    return types.SimpleNamespace(
        deterministic=types.SimpleNamespace(rl_on_policy_target=None), features=types.SimpleNamespace(enable_mis=False)
    )


def _imported_sglang_modules(source: str) -> list[str]:
    """Every sglang module the file imports at its top level, with the packages above each."""
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "sglang":
            parts = node.module.split(".")
            names.update(".".join(parts[: k + 1]) for k in range(len(parts)))
    return sorted(names)


def load(path: str) -> types.ModuleType:
    """forward_batch_info.py as the module ``sglang_forward_batch_info`` (its ForwardBatch, ForwardMode)."""
    with open(path) as f:
        source = f.read()
    saved = {name: sys.modules.get(name) for name in _imported_sglang_modules(source)}
    for name in saved:
        sys.modules[name] = _StandIn(name)
    sys.modules["sglang.srt.runtime_context"].get_exec = _get_exec
    spec = importlib.util.spec_from_file_location("sglang_forward_batch_info", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (dataclasses read their module while the file runs)
    try:
        spec.loader.exec_module(module)
    finally:
        for name, previous in saved.items():
            if previous is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = previous
    return module
