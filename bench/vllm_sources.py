"""vLLM's own `RopeState` from its source files, where the vllm package cannot be imported.

A GPU machine may hold torch, triton and numpy but not vLLM's long list of
dependencies (pydantic, zmq, openai, xgrammar, ...), and nothing can be
installed there. Model Runner V2's position state needs none of them: it is
two files of vLLM 0.33 or 0.34, `v1/worker/gpu/mm/rope.py` (the state and its kernel)
and `v1/worker/gpu/buffer_utils.py` (the staged writes and the pinned table).

`VllmRopeSources(folder)` runs those two files, unchanged, from `folder` (the `vllm`
package folder of an unpacked wheel, or a copy holding just those two files
at their paths), with the few names they import from the rest of vLLM
stood in for:

- `vllm.config.ModelConfig` and `SupportsMRoPE`: used only in type hints and
  `init_prefill_positions`' model call, which the bench does not use;
- `vllm.triton_utils`: the real `triton` and `triton.language`;
- `vllm.logger.init_logger`: a logging logger with `warning_once`;
- `is_uva_available`: False, so the table takes vLLM's own no-UVA fallback
  (plain device memory). Its UVA view needs vLLM's compiled `_C` extension,
  which is built for one torch version;
- `vllm.platforms.current_platform`: only its `device_type` (and, for
  vLLM 0.34, `is_confidential_compute()`: False);
- `async_tensor_h2d`: a non-blocking host-to-device copy through a pinned
  tensor where CUDA is present, what vLLM's helper of that name does;
- for vLLM 0.34's `buffer_utils.py` also: `is_pin_memory_available` (whether
  CUDA is present), the torch-dtype-to-`array` typecode table (int32 "i",
  int64 "q", float32 "f", as vLLM's) and `register_inplace_h2d_target` (a
  Confidential Computing hook: nothing to do outside it).

The stand-ins are in `sys.modules` only while the two files run, while a
state is built and while it applies its staged writes (where 0.34 makes
its upload buffers), so nothing else in the process sees a `vllm` package. Set
`MROPE_VLLM_SOURCES` to the folder and `bench/suite_rope.py` uses this when
`import vllm` fails.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import re
import sys
import types

import numpy as np
import torch

ENV = "MROPE_VLLM_SOURCES"
FILES = {"buffer_utils": ("v1", "worker", "gpu", "buffer_utils.py"), "rope": ("v1", "worker", "gpu", "mm", "rope.py")}


def _h2d(data, device=None, dtype=None, out=None) -> torch.Tensor:
    if dtype is None and out is not None:
        dtype = out.dtype
    if isinstance(data, np.ndarray):
        data = torch.from_numpy(data)
    pin = torch.cuda.is_available()
    if isinstance(data, torch.Tensor):
        host = data.to(dtype or data.dtype)
        host = host.pin_memory() if pin else host
    else:
        host = torch.tensor(data, dtype=dtype, pin_memory=pin)
    if out is not None:
        return out.copy_(host, non_blocking=True)
    return host.to(device=device, non_blocking=True)


_LOGGED_ONCE: set[tuple[str, str]] = set()  # across every load of the two files, as vLLM's once per process


def _logger(name: str) -> logging.Logger:
    """A logger with vLLM's `warning_once` and `info_once`: each message logged once per process."""
    logger = logging.getLogger(name)
    seen = _LOGGED_ONCE

    def once(level: str):
        def log(message, *args, **kwargs):
            if (level, message) not in seen:
                seen.add((level, message))
                getattr(logger, level)(message, *args, **kwargs)

        return log

    logger.warning_once = once("warning")  # type: ignore[attr-defined]
    logger.info_once = once("info")  # type: ignore[attr-defined]
    return logger


def _stand_ins() -> dict[str, types.ModuleType]:
    import triton
    import triton.language as tl

    cuda = torch.cuda.is_available()

    def module(name: str, **attrs) -> types.ModuleType:
        m = types.ModuleType(name)
        m.__path__ = []  # a package, so submodules resolve
        m.__dict__.update(attrs)
        return m

    return {
        "vllm": module("vllm"),
        "vllm.config": module("vllm.config", ModelConfig=object),
        "vllm.model_executor": module("vllm.model_executor"),
        "vllm.model_executor.models": module("vllm.model_executor.models"),
        "vllm.model_executor.models.interfaces": module("vllm.model_executor.models.interfaces", SupportsMRoPE=object),
        "vllm.triton_utils": module("vllm.triton_utils", triton=triton, tl=tl),
        "vllm.logger": module("vllm.logger", init_logger=_logger),
        "vllm.platforms": module(
            "vllm.platforms",
            current_platform=types.SimpleNamespace(
                device_type="cuda" if cuda else "cpu", is_confidential_compute=lambda: False
            ),
        ),
        "vllm.utils": module("vllm.utils"),
        "vllm.utils.platform_utils": module(
            "vllm.utils.platform_utils", is_uva_available=lambda: False, is_pin_memory_available=lambda: cuda
        ),
        "vllm.utils.torch_utils": module(
            "vllm.utils.torch_utils",
            async_tensor_h2d=_h2d,
            get_accelerator_view_from_cpu_tensor=None,  # never called: UVA is reported unavailable
            TORCH_DTYPE_TO_ARRAY_TYPECODE={torch.int32: "i", torch.int64: "q", torch.float32: "f"},
        ),
        "vllm.v1": module("vllm.v1"),
        "vllm.v1.conf_compute_utils": module("vllm.v1.conf_compute_utils", register_inplace_h2d_target=lambda t: None),
        "vllm.v1.worker": module("vllm.v1.worker"),
        "vllm.v1.worker.gpu": module("vllm.v1.worker.gpu"),
        "vllm.v1.worker.gpu.mm": module("vllm.v1.worker.gpu.mm"),
    }


@contextlib.contextmanager
def installed(modules: dict[str, types.ModuleType], also: tuple[str, ...] = ()):
    """`modules` in sys.modules for the block's duration; those names and `also`
    (modules the block imports) hold what they held before, after it."""
    names = (*modules, *also)
    saved = {name: sys.modules[name] for name in names if name in sys.modules}
    try:
        sys.modules.update(modules)
        yield
    finally:
        for name in names:
            sys.modules.pop(name, None)
        sys.modules.update(saved)


def release(folder: str) -> str:
    """The release `folder` holds, from the wheel's generated `_version.py` ("?" where it is not there)."""
    try:
        with open(os.path.join(folder, "_version.py"), encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return "?"
    match = re.search(r"^__version__ = version = '([^']+)'", text, re.M)
    return match[1] if match else "?"


class VllmRopeSources:
    """vLLM's two modules, run from `folder`; `rope_state(...)` builds its RopeState
    (its buffers import `vllm.platforms` when they are made, so the stand-ins go back in then)."""

    def __init__(self, folder: str) -> None:
        paths = {key: os.path.join(folder, *parts) for key, parts in FILES.items()}
        missing = [p for p in paths.values() if not os.path.isfile(p)]
        if missing:
            raise ImportError(f"{ENV}: expected vLLM's sources at {missing}")
        self.modules = _stand_ins()
        names = {"buffer_utils": "vllm.v1.worker.gpu.buffer_utils", "rope": "vllm.v1.worker.gpu.mm.rope"}
        with installed(self.modules, also=tuple(names.values())):
            for key, name in names.items():
                spec = importlib.util.spec_from_file_location(name, paths[key])
                module = importlib.util.module_from_spec(spec)
                sys.modules[name] = module
                spec.loader.exec_module(module)
                self.modules[name] = module
        self.buffer_utils = self.modules["vllm.v1.worker.gpu.buffer_utils"]
        self.rope = self.modules["vllm.v1.worker.gpu.mm.rope"]
        self.version = release(folder)

    def rope_state(self, *args):
        with installed(self.modules):
            state = self.rope.RopeState(*args)
        apply = state.apply_staged_writes

        def apply_staged_writes():  # (vLLM 0.34 grows its upload buffers here, importing vllm.platforms)
            with installed(self.modules):
                apply()

        state.apply_staged_writes = apply_staged_writes  # (prepare_positions, the step the bench times, stays bare)
        return state
