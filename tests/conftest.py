"""Test configuration: hypothesis profiles and shared fixtures (`family_config`, `scan`).

Shared helpers live in plain modules beside the tests: vllm_features.py (the
one builder of stand-in vLLM features, and the recorded vLLM vectors),
tracker_cases.py (the tracker tests' prompts), refusal_checks.py, strategies.py,
spec_cases.py, family_prompts.py.

Profiles: "dev" (default, quick: 40 examples a test, so that a plain run
stays under two minutes on two cores), "ci" (300; .ci/run selects it with
HYPOTHESIS_PROFILE=ci, so CI runs every test at the full count), "stress"
(5,000 examples a test, for a long hunt on one module). None has a deadline: the first example of a
run may include numba loading compiled kernels from its cache. A test that
sets its own count takes it from `strategies.examples`, scaled by the profile.

Without CUDA, TRITON_INTERPRET=1 is set before anything imports triton, so
the Triton kernels run in triton's interpreter on CPU tensors.
MROPE_TRACKER_DEBUG=1 turns on RopeState's host checks of each step.

Tests marked `slow` (the subprocess warm-ups, the state machines at length,
the heaviest Triton-interpreter and subprocess cases) are left
out of a plain run (pyproject's addopts: -m "not slow"); `python -m pytest
-m slow` runs only them and `python -m pytest -m ""` runs everything.
"""

import os

import pytest
import torch
from hypothesis import HealthCheck, settings
from refusal_checks import SCANNERS

from mrope_tracker import MRopeConfig

# Without a GPU, Triton kernels (RopeState) run in triton's interpreter. It
# reads this when triton is first imported, which any test module may do
# (transformers and torch import it on their own), so it is set here first.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
# RopeState checks every step's tensors on the host, and that the runner applied its staged writes,
# only in debug mode (a served engine's step is one kernel launch); the tests run with it on
os.environ.setdefault("MROPE_TRACKER_DEBUG", "1")

settings.register_profile("dev", max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("stress", max_examples=5000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.fixture(params=["qwen2_vl", "qwen2_5_vl", "qwen2_5_omni"])
def family_config(request) -> MRopeConfig:
    """A published-value config of each supported family."""
    if request.param == "qwen2_vl":
        return MRopeConfig(family="qwen2_vl")
    if request.param == "qwen2_5_vl":
        return MRopeConfig(family="qwen2_5_vl", tokens_per_second=2)
    return MRopeConfig(family="qwen2_5_omni", tokens_per_second=25, seconds_per_chunk=2)


@pytest.fixture(params=sorted(SCANNERS))
def scan(request):
    """A token-scanning entry point of the fast path (same inputs, same rules): `prompt_positions`, or
    `PromptLayout.from_tokens` read back as (positions, delta)."""
    return SCANNERS[request.param]


@pytest.fixture
def python_builder_signatures():
    """A function listing the token builder's compiled signatures that Python callers reach: all but the
    transformers batch kernel's (hf_batch.py, whose `out` is a strided view, layout A). Every fast path must
    reach one and the same (kernels/layout_build.py)."""
    from mrope_tracker.kernels.layout_build import build_from_tokens

    return lambda: [signature for signature in build_from_tokens.signatures if signature[3].layout == "C"]
