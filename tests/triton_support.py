"""One place that says whether RopeState's Triton kernels can run in these tests."""

from __future__ import annotations

import pytest


def require_triton(module_level: bool = False) -> None:
    """Skip the calling test (or, with `module_level`, the importing module)
    unless triton is installed, at 3.0 or later: without a GPU the kernels run
    in its CPU interpreter, which older triton lacks (the oldest CI
    environment's torch 2.1.2 brings triton 2.1)."""
    triton = pytest.importorskip("triton", reason="RopeState's kernels need triton")
    if int(triton.__version__.split(".")[0]) < 3:
        reason = f"needs triton >= 3.0 for its CPU interpreter, found {triton.__version__}"
        pytest.skip(reason, allow_module_level=module_level)
