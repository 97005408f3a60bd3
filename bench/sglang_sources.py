"""SGLang 0.5.23's own files, loaded by path without the sglang package.

Two files of the released wheel, named by environment variables (CI's SGLang
stage unpacks both, .ci/run):

- ``sglang/srt/layers/rotary_embedding/mrope_rope_index.py``
  (MROPE_SGLANG_ROPE_INDEX): the ``get_rope_index*`` position functions. It
  imports only the standard library and torch.
- ``sglang/srt/model_executor/forward_batch_info.py``
  (MROPE_SGLANG_FORWARD_BATCH): ``ForwardBatch``, whose position methods
  (``_compute_mrope_positions`` with its extend and decode paths,
  ``_expand_mrope_from_input``, ``compute_spec_mrope_positions``) make a
  batch's positions from each request's stored (3, L) table. The sglang
  modules it imports are stand-ins while the file runs: every name they are
  asked for is a new empty class, except `runtime_context.get_exec`, which
  answers the two switches the position methods read (no RL on-policy
  target, no MIS). None of the other names is used by those methods, which
  run as SGLang wrote them.

The bench's `sglang` suite and the SGLang oracle tests use them. Nothing of
SGLang's is copied here.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import sys
import types

ROPE_INDEX_ENV = "MROPE_SGLANG_ROPE_INDEX"
FORWARD_BATCH_ENV = "MROPE_SGLANG_FORWARD_BATCH"


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


def load_rope_index(path: str | None = None) -> types.ModuleType | None:
    """mrope_rope_index.py as the module ``sglang_mrope_rope_index``; from MROPE_SGLANG_ROPE_INDEX when
    `path` is None (None when that is unset)."""
    path = path or os.environ.get(ROPE_INDEX_ENV)
    if not path:
        return None
    spec = importlib.util.spec_from_file_location("sglang_mrope_rope_index", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_forward_batch(path: str | None = None) -> types.ModuleType | None:
    """forward_batch_info.py as the module ``sglang_forward_batch_info`` (its ForwardBatch, ForwardMode);
    from MROPE_SGLANG_FORWARD_BATCH when `path` is None (None when that is unset)."""
    path = path or os.environ.get(FORWARD_BATCH_ENV)
    if not path:
        return None
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
