"""RopeState as a served engine needs it: every request that fits max_model_len
accepted, a step that is one kernel launch, one model per state.

The long requests are driven through the plugin's `get_rope_state`, with
vLLM's signature and arguments, on the fake vLLM modules of
tests/test_vllm_plugin.py; their positions are checked against the plain torch
reference (`mrope_tracker.reference`). Without a GPU the kernels run in
triton's interpreter (tests/conftest.py), so the sizes are the issue's but
the steps few.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from triton_support import require_triton  # noqa: E402

require_triton(module_level=True)

from mrope_tracker.bench.workloads import PromptBuilder  # noqa: E402  (prompts: ids, grids and vLLM features)
from test_vllm_plugin import ModelConfig, fake_vllm  # noqa: E402, F401 (the fixture)

from mrope_tracker import MRopeConfig, PromptLayout, reference  # noqa: E402
from mrope_tracker.device.rope_state import RopeState  # noqa: E402
from mrope_tracker.vllm import plugin as vllm_plugin  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
CONFIGS = os.path.join(os.path.dirname(__file__), "data", "configs")


def hf_config(name: str) -> dict:
    with open(os.path.join(CONFIGS, f"{name}.json")) as f:
        return json.load(f)


class Model:
    """What MRV2 passes as `model`: an object whose `.config` is the HF config."""

    def __init__(self, config: dict) -> None:
        self.config = config


def index_tensors(slots, qsl, prefill, computed):
    def t(values, dtype):
        return torch.tensor(values, dtype=dtype, device=DEVICE)

    return t(slots, torch.int64), t(qsl, torch.int32), t(prefill, torch.int32), t(computed, torch.int32)


def plugin_state(name: str, max_num_reqs: int, max_num_tokens: int, max_model_len: int):
    """(state, model, config) as MRV2 gets them once the plugin is installed."""
    vllm_plugin.install()
    import sys

    get_rope_state = sys.modules["vllm.v1.worker.gpu.model_states.default"].get_rope_state
    hf = hf_config(name)
    state = get_rope_state(ModelConfig(hf), Model(hf), max_num_reqs, max_num_tokens, max_model_len, DEVICE)
    assert isinstance(state, RopeState)
    return state, Model(hf), state.config


def expected_positions(config, prompt) -> torch.Tensor:
    """The plain torch reference's positions (the reference rules: videos here have integer rates)."""
    positions, _ = reference.prompt_positions(config, prompt.token_ids, **prompt.kwargs)
    return positions


def cpu_positions(config, prompt) -> torch.Tensor:
    """The CPU path's positions under the config's semantics (vllm-0.33: vLLM's own rounding of
    fractional video rates, which the reference rules do not state)."""
    layout = PromptLayout.from_ranges(config, prompt.num_tokens, **prompt.kwargs, **prompt.ranges)
    return torch.from_numpy(layout.positions())


# ---------------------------------------------------------------- every request that fits max_model_len


@pytest.mark.slow  # 78,669 tokens through the Triton interpreter
def test_a_192_frame_video_and_4000_images_are_accepted(fake_vllm):  # noqa: F811
    """The issue's two refusals: a 192-frame Qwen3-VL video (78,669 tokens, 385
    layout rows) and 4,000 small images, in RopeState(3, 4, 8192, 131072): both
    admitted (the row pool grows), exact on every token."""
    state, model, config = plugin_state("qwen3_vl", 4, 8192, 131072)
    first = state.max_num_rows
    video = PromptBuilder(config).text(600).video(192, 40, 40).text(117).build()
    layout = PromptLayout.from_ranges(config, video.num_tokens, **video.kwargs, **video.ranges)
    assert (video.num_tokens, layout.num_rows) == (78669, 385)
    b = PromptBuilder(config)
    for _ in range(4000):
        b.text(3).image(4, 4)
    images = b.text(5).build()
    state.init_prefill_positions(1, model, video.token_list, video.features)
    state.init_prefill_positions(3, model, images.token_list, images.features)
    state.apply_staged_writes()
    assert state.max_num_rows > first  # grown on demand, no knob
    state.check_invariants()
    for slot, prompt in ((1, video), (3, images)):
        got = state.read_prefill_positions(slot, prompt.num_tokens).cpu().to(torch.int64)
        assert torch.equal(got, expected_positions(config, prompt))
    # one step through both: a chunk in the middle of the video, the images' last tokens, then decode
    want_video, want_images = expected_positions(config, video), expected_positions(config, images)
    n = images.num_tokens
    idx, qsl, prefill, computed = index_tensors(
        [3, 1], [0, 100, 4196], [0, video.num_tokens, 0, n], [0, 40000, 0, n - 100]
    )
    state.prepare_positions(idx, qsl, prefill, computed)
    got = state.get_positions(4196).cpu()
    assert torch.equal(got[:, :100], want_images[:, n - 100 :])
    assert torch.equal(got[:, 100:], want_video[:, 40000:44096])


def test_a_random_mix_filling_max_num_reqs(fake_vllm):  # noqa: F811
    """Every slot holds a request of random images, videos and text (some long), through
    the plugin; one mixed step over all of them equals the reference."""
    rng = np.random.default_rng(7)
    max_num_reqs = 12
    state, model, config = plugin_state("qwen2_5_vl", max_num_reqs, 2048, 65536)
    prompts = []
    for slot in range(max_num_reqs):
        b = PromptBuilder(config).text(int(rng.integers(1, 40)))
        for _ in range(int(rng.integers(0, 60 if slot % 4 == 0 else 6))):
            if rng.random() < 0.3:
                b.video(int(rng.integers(1, 5)) * 2, 4, 4, sp=float(rng.choice([0.5, 0.7, 1.0])))
            else:
                b.image(2 * int(rng.integers(1, 4)), 2 * int(rng.integers(1, 4)))
            b.text(int(rng.integers(0, 9)))
        prompt = b.text(1).build()
        prompts.append(prompt)
        state.init_prefill_positions(slot, model, prompt.token_list, prompt.features)
    state.apply_staged_writes()
    state.check_invariants()
    order = rng.permutation(max_num_reqs)
    counts, starts = [], []
    for slot in order.tolist():
        n = prompts[slot].num_tokens
        start = int(rng.integers(0, n))
        starts.append(start)
        counts.append(min(n - start, int(rng.integers(1, 120))))
    qsl = np.concatenate([[0], np.cumsum(counts)]).tolist()
    computed = [0] * max_num_reqs
    for slot, start in zip(order.tolist(), starts):
        computed[slot] = start
    prefill = [p.num_tokens for p in prompts]
    state.prepare_positions(*index_tensors(order.tolist(), qsl, prefill, computed))
    got = state.get_positions(qsl[-1]).cpu()
    for k, slot in enumerate(order.tolist()):
        want = cpu_positions(config, prompts[slot])[:, starts[k] : starts[k] + counts[k]]
        assert torch.equal(got[:, qsl[k] : qsl[k + 1]], want), slot


@pytest.mark.slow  # 1,024 requests admitted
def test_device_memory_of_a_typical_mix_at_1024_x_262144():
    """1,024 slots x 262,144 max_model_len, every slot holding a typical request (8
    images, or a video, in text): the device state stays under 8 MiB (vLLM's table:
    3 GiB pinned), the staging under 1 MiB."""
    config = MRopeConfig(family="qwen2_5_vl", tokens_per_second=2, semantics="vllm-0.33")
    images = PromptBuilder(config)
    for _ in range(8):
        images.text(10).image(36, 36)
    images = images.text(2000).build()
    video = PromptBuilder(config).text(50).video(64, 28, 28, sp=0.7).text(500).build()
    layouts = [
        PromptLayout.from_ranges(config, p.num_tokens, **p.kwargs, **p.ranges) for p in (images, video, images, images)
    ]
    state = RopeState(3, 1024, 8192, 262144, DEVICE, config=config, staging_bytes=2**20)
    for slot in range(1024):
        state.init_prefill_layout(slot, layouts[slot % 4])
    state.apply_staged_writes()
    state.check_invariants()
    sizes = state.nbytes()
    assert state.device_nbytes() <= 8 * 2**20, sizes
    assert sizes.get("staging_pinned", sizes.get("staging_host")) <= 3 * 2**20


# ---------------------------------------------------------------- a step is one launch


def _one_request(debug: bool):
    config = MRopeConfig(family="qwen2_vl", semantics="vllm-0.33")
    layout = PromptLayout.from_ranges(config, 20, image_ranges=[(2, 12)], image_grid_thw=[[1, 6, 8]])
    state = RopeState(3, 4, 32, 64, DEVICE, config=config, block_size=16, debug=debug)
    return state, layout


def test_pending_writes_at_a_step_are_the_runners_to_apply():
    """prepare_positions never applies staged writes (vLLM's runner calls
    apply_staged_writes): in debug mode a step with writes pending is a
    ValueError that changes nothing; otherwise the step runs on what the
    device holds (the slot, never admitted there yet, gives index + 0)."""
    step = index_tensors([1], [0, 20], [0, 20, 0, 0], [0, 0, 0, 0])
    state, layout = _one_request(debug=True)
    state.init_prefill_layout(1, layout)
    state.positions.fill_(-7)
    with pytest.raises(ValueError, match="apply_staged_writes"):
        state.prepare_positions(*step)
    assert (state.positions == -7).all()
    state.apply_staged_writes()
    state.prepare_positions(*step)
    assert torch.equal(state.get_positions(20).cpu(), torch.from_numpy(layout.positions()))
    quiet, layout = _one_request(debug=False)
    quiet.init_prefill_layout(1, layout)
    quiet.prepare_positions(*step)  # no check, no apply: the device has no rows for slot 1 yet
    assert quiet.get_positions(20).cpu().tolist() == [list(range(20))] * 3
    quiet.apply_staged_writes()
    quiet.prepare_positions(*step)
    assert torch.equal(quiet.get_positions(20).cpu(), torch.from_numpy(layout.positions()))


def test_debug_defaults_to_the_environment(monkeypatch):
    monkeypatch.setenv("MROPE_TRACKER_DEBUG", "0")
    assert _one_request(debug=None)[0].debug is False
    monkeypatch.setenv("MROPE_TRACKER_DEBUG", "1")
    assert _one_request(debug=None)[0].debug is True
    with pytest.raises(TypeError, match="debug"):
        RopeState(3, 4, 32, 64, DEVICE, debug="yes")


@pytest.mark.parametrize("debug", [False, True])
def test_the_kernel_loop_is_bounded_by_the_buffer(debug):
    """query_start_loc = [0, 2**18] (or a query starting far before the buffer): the
    kernel walks only the buffer's 33 columns, writes each one's positions, and
    nothing else (under the interpreter, a walk of 2**18 tokens took seconds)."""
    state, layout = _one_request(debug)
    state.init_prefill_layout(1, layout)
    state.apply_staged_writes()
    state.prepare_positions(*index_tensors([1], [0, 2**18], [0, 20, 0, 0], [0, 0, 0, 0]))
    want = np.concatenate([layout.positions(), np.arange(20, 33)[None, :].repeat(3, 0) + layout.delta], axis=1)
    assert torch.equal(state.positions.cpu(), torch.from_numpy(want))
    state.positions.fill_(-7)
    state.prepare_positions(*index_tensors([1], [-(2**18), 5], [0, 20, 0, 0], [0, 0, 0, 0]))
    got = state.positions.cpu()  # columns 0-4 are the query's tokens 2**18 on, past the prompt: index + delta
    assert got[:, :5].tolist() == [[2**18 + k + layout.delta for k in range(5)]] * 3 and (got[:, 5:] == -7).all()


# ---------------------------------------------------------------- one model per state


def test_a_state_refuses_another_models_config():
    """Built for one config (by get_rope_state, or by the first model it saw), a state
    refuses a model of another, naming both, and changes nothing."""
    qwen2 = MRopeConfig(family="qwen2_vl", semantics="vllm-0.33")
    qwen25 = MRopeConfig(family="qwen2_5_vl", tokens_per_second=2, semantics="vllm-0.33")
    state = RopeState(3, 2, 32, 64, DEVICE, config=qwen2)
    before = state._records.copy()  # noqa: SLF001
    for other in (qwen25, Model(hf_config("qwen2_5_vl"))):
        with pytest.raises(ValueError, match=r"model: .*qwen2_vl.*qwen2_5_vl"):
            state.init_prefill_positions(0, other, [1, 2, 3], [])
    assert (state._records == before).all() and not state._staging.pending  # noqa: SLF001
    state.init_prefill_positions(0, Model(hf_config("qwen2_vl")), [1, 2, 3], [])  # the same model: accepted
    unbound = RopeState(3, 2, 32, 64, DEVICE)
    unbound.init_prefill_positions(0, Model(hf_config("qwen2_vl")), [1, 2, 3], [])
    with pytest.raises(ValueError, match=r"model: .*qwen2_vl.*qwen2_5_vl"):
        unbound.init_prefill_positions(1, Model(hf_config("qwen2_5_vl")), [1, 2, 3], [])


def test_engine_guide_section_9_runs():
    """docs/engine.md's Model Runner V2 examples run as written (its bash block needs vLLM, and is not run)."""
    import pathlib
    import re

    text = (pathlib.Path(__file__).resolve().parent.parent / "docs" / "engine.md").read_text(encoding="utf-8")
    section = text[text.index("## 9. Model Runner V2") : text.index("## 10. Pruned videos")]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert blocks
    namespace: dict = {}
    cwd = os.getcwd()
    os.chdir(pathlib.Path(__file__).resolve().parent.parent)  # the examples name tests/data/... from the root
    try:
        for block in blocks:
            exec(compile(block, "docs/engine.md", "exec"), namespace)  # noqa: S102
    finally:
        os.chdir(cwd)
    assert namespace["state"].max_num_rows == 1024 and namespace["many"].num_rows == 601
    assert namespace["state"].get_positions(12)[0].tolist() == [0, 1, 2, 3, 3, 3, 3, 3, 3, 6, 7, 8]
