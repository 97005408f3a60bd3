"""SGLang 0.5.23's own files, loaded by path without the sglang package.

MROPE_SGLANG_ROPE_INDEX names ``sglang/srt/layers/rotary_embedding/
mrope_rope_index.py`` inside a folder where the released wheel (or those
files of it) was unpacked; CI's SGLang stage unpacks four (.ci/run):

- ``mrope_rope_index.py``: the ``get_rope_index*`` position functions. It
  imports only the standard library and torch.
- ``sglang/srt/model_executor/forward_batch_info.py``: ``ForwardBatch``,
  whose position methods (``_compute_mrope_positions`` with its extend and
  decode paths, ``_expand_mrope_from_input``, ``compute_spec_mrope_positions``)
  make a batch's positions from each request's stored (3, L) table.
- ``sglang/srt/managers/schedule_batch.py``: ``Req`` and ``MultimodalInputs``,
  whose ``_extend_session_image_inputs`` and ``merge`` compose a session's
  positions turn by turn.
- ``sglang/srt/managers/mm_utils.py``: ``extend_mrope_positions_for_retracted_request``,
  which extends a retracted request's table over the tokens it generated.

The others are read from the same folder as the first, when there. What
they import from sglang, and any package of their imports this environment
lacks (msgspec), is a stand-in while the file runs: a module whose every
name is a new class, itself answering any attribute, subscript or union
with another (enough for their class bodies, decorators and annotations),
except `runtime_context.get_exec`, which answers the two switches the
position methods read (no RL on-policy target, no MIS). The methods named
above use none of those names, and run as SGLang wrote them.

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
ROPE_INDEX_FILE = "sglang/srt/layers/rotary_embedding/mrope_rope_index.py"
FORWARD_BATCH_FILE = "sglang/srt/model_executor/forward_batch_info.py"
SCHEDULE_BATCH_FILE = "sglang/srt/managers/schedule_batch.py"
MM_UTILS_FILE = "sglang/srt/managers/mm_utils.py"


def _stand_in(owner, name: str):
    """A new stand-in class for `owner`'s attribute `name` (kept on `owner`); dunder names stay missing."""
    if name.startswith("__"):
        raise AttributeError(name)
    value = _AnyName(name, (_StandInBase,), {})
    setattr(owner, name, value)
    return value


class _AnyName(type):
    """A stand-in class: any attribute is another stand-in class, and so is a subscript or a union."""

    __getattr__ = _stand_in

    def __getitem__(cls, item):
        return cls

    def __or__(cls, other):
        return cls

    def __ror__(cls, other):
        return cls

    def __call__(cls, *args, **kwargs):  # (an instance, whatever the arguments)
        return super().__call__()


class _StandInBase(metaclass=_AnyName):
    def __init_subclass__(cls, **options):  # (msgspec.Struct's class options)
        pass


class _StandInModule(types.ModuleType):
    __getattr__ = _stand_in


def _get_exec():
    return types.SimpleNamespace(
        deterministic=types.SimpleNamespace(rl_on_policy_target=None), features=types.SimpleNamespace(enable_mis=False)
    )


def _stood_in(source: str) -> list[str]:
    """The modules a file imports at its top level that it gets stand-ins for: every sglang one, and those of
    packages this environment lacks, each with the packages above it."""
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
        elif isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        else:
            continue
        for module in modules:
            top = module.split(".")[0]
            if top == "sglang" or importlib.util.find_spec(top) is None:
                parts = module.split(".")
                names.update(".".join(parts[: k + 1]) for k in range(len(parts)))
    return sorted(names)


def wheel_file(relative: str) -> str | None:
    """The path of `relative` (a file of the wheel) in the folder MROPE_SGLANG_ROPE_INDEX points into, or
    None where that is unset or the file is not there."""
    rope_index = os.environ.get(ROPE_INDEX_ENV)
    if not rope_index:
        return None
    rope_index = os.path.abspath(rope_index)
    suffix = os.path.normpath(ROPE_INDEX_FILE)
    if relative == ROPE_INDEX_FILE:
        return rope_index
    if not rope_index.endswith(os.sep + suffix):
        return None
    path = os.path.join(rope_index[: -len(suffix)], relative)
    return path if os.path.isfile(path) else None


def _load(path: str, name: str) -> types.ModuleType:
    with open(path) as f:
        source = f.read()
    saved = {module: sys.modules.get(module) for module in _stood_in(source)}
    for module in saved:
        sys.modules[module] = _StandInModule(module)
    if "sglang.srt.runtime_context" in saved:
        sys.modules["sglang.srt.runtime_context"].get_exec = _get_exec
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # (dataclasses read their module while the file runs)
    try:
        spec.loader.exec_module(module)
    finally:
        for stood_in, previous in saved.items():
            if previous is None:
                sys.modules.pop(stood_in, None)
            else:
                sys.modules[stood_in] = previous
    return module


def load_rope_index(path: str | None = None) -> types.ModuleType | None:
    """mrope_rope_index.py (`path`, else MROPE_SGLANG_ROPE_INDEX's) as ``sglang_mrope_rope_index``; None
    without either."""
    path = path or wheel_file(ROPE_INDEX_FILE)
    return None if path is None else _load(path, "sglang_mrope_rope_index")


def load_forward_batch(path: str | None = None) -> types.ModuleType | None:
    """forward_batch_info.py (`path`, else beside MROPE_SGLANG_ROPE_INDEX's file) as
    ``sglang_forward_batch_info``: its ForwardBatch and ForwardMode; None where there is none."""
    path = path or wheel_file(FORWARD_BATCH_FILE)
    return None if path is None else _load(path, "sglang_forward_batch_info")


def load_schedule_batch(path: str | None = None) -> types.ModuleType | None:
    """schedule_batch.py (`path`, else beside MROPE_SGLANG_ROPE_INDEX's file) as ``sglang_schedule_batch``:
    its Req and MultimodalInputs; None where there is none."""
    path = path or wheel_file(SCHEDULE_BATCH_FILE)
    return None if path is None else _load(path, "sglang_schedule_batch")


def load_mm_utils(path: str | None = None) -> types.ModuleType | None:
    """mm_utils.py (`path`, else beside MROPE_SGLANG_ROPE_INDEX's file) as ``sglang_mm_utils``; None where
    there is none."""
    path = path or wheel_file(MM_UTILS_FILE)
    return None if path is None else _load(path, "sglang_mm_utils")
