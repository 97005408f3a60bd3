"""PositionTracker on a CUDA device: the same positions as a CPU tracker, through the pinned staging ring.

Skipped without CUDA. Every result is compared with a CPU tracker that ran
the same plan of steps and rollbacks (the CPU tracker itself is checked
against the reference in test_tracker_steps.py and the state machine).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mrope_tracker import MRopeConfig
from mrope_tracker.reference import audio_token_count
from mrope_tracker.tracker import PositionTracker

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

DEVICE = "cuda"
TEXT = 1000

CONFIGS = {
    "qwen2_vl": MRopeConfig(family="qwen2_vl"),
    "qwen2_5_vl": MRopeConfig(family="qwen2_5_vl", tokens_per_second=2),
    "qwen2_5_omni": MRopeConfig(family="qwen2_5_omni", tokens_per_second=25, seconds_per_chunk=2),
}


# --- workload -------------------------------------------------------------------------


def random_prompt(rng: np.random.Generator, config: MRopeConfig, num_items: int, max_text: int):
    """Token ids and kwargs of a valid prompt: text runs around wrapped images, videos and (Omni) audio clips."""
    ids: list[int] = []
    images, videos, sps, audio = [], [], [], []
    kinds = ["image", "video"] + (["audio"] if config.is_omni else [])
    m = config.spatial_merge_size
    for _ in range(num_items):
        ids += [TEXT] * int(rng.integers(0, max_text + 1))
        kind = kinds[int(rng.integers(len(kinds)))]
        if kind == "audio":
            frames = int(rng.integers(3, 400))
            ids += (
                [config.audio_start_token_id]
                + [config.audio_token_id] * audio_token_count(frames)
                + [config.audio_end_token_id]
            )
            audio.append(frames)
            continue
        t = 1 if kind == "image" else int(rng.integers(1, 8))
        h, w = int(rng.integers(1, 9)), int(rng.integers(1, 9))
        token = config.image_token_id if kind == "image" else config.video_token_id
        ids += [config.vision_start_token_id] + [token] * (t * h * w) + [config.vision_end_token_id]
        (images if kind == "image" else videos).append([t, h * m, w * m])
        if kind == "video":
            sps.append(float(rng.choice([0.5, 1.0, 1.3, 2.0 / 2.6])))
    ids += [TEXT] * int(rng.integers(1, max_text + 1))
    kwargs = {}
    if images:
        kwargs["image_grid_thw"] = images
    if videos:
        kwargs["video_grid_thw"] = videos
        if config.tokens_per_second is not None:
            kwargs["second_per_grid_ts"] = sps
    if audio:
        kwargs["audio_feature_lengths"] = audio
    return np.array(ids, np.int64), kwargs


def make_plan(rng: np.random.Generator, lengths: dict, max_num_batched_tokens: int, num_steps: int, decode=True):
    """A scheduler's plan: ("step", ids, counts) with chunked prefill, decode and draft tokens, and
    ("rollback", id, n) for rejected drafts and occasional preemption to zero."""
    computed = dict.fromkeys(lengths, 0)
    plan = []
    for _ in range(num_steps):
        order = list(rng.permutation(list(lengths)))
        order = order[: int(rng.integers(1, len(order) + 1))]
        ids, counts, budget = [], [], max_num_batched_tokens
        for rid in order:
            left = lengths[rid] - computed[rid]
            if left > 0:
                n = min(left, budget, int(rng.integers(1, max_num_batched_tokens + 1)))
            elif decode:
                n = min(budget, int(rng.integers(1, 5)))
            else:
                n = 0
            ids.append(rid)
            counts.append(n)
            budget -= n
            computed[rid] += n
        plan.append(("step", ids, counts))
        for rid, n in zip(ids, counts):
            if computed[rid] > lengths[rid] and n > 1 and rng.random() < 0.5:
                k = int(rng.integers(1, n))
                plan.append(("rollback", rid, k))
                computed[rid] -= k
            elif rng.random() < 0.02:
                plan.append(("rollback", rid, computed[rid]))
                computed[rid] = 0
    return plan


def build(config, prompts: dict, max_num_batched_tokens: int, device, **kwargs) -> PositionTracker:
    tracker = PositionTracker(
        config, max_num_reqs=len(prompts), max_num_batched_tokens=max_num_batched_tokens, device=device, **kwargs
    )
    for rid, (ids, kw) in prompts.items():
        tracker.add_request(rid, ids, **kw)
    return tracker


def workload(
    seed: int, family: str, num_reqs: int, num_items: int, max_text: int, max_num_batched_tokens: int, num_steps: int
):
    rng = np.random.default_rng(seed)
    config = CONFIGS[family]
    prompts = {rid: random_prompt(rng, config, num_items, max_text) for rid in range(num_reqs)}
    lengths = {rid: int(ids.shape[0]) for rid, (ids, _) in prompts.items()}
    return config, prompts, make_plan(rng, lengths, max_num_batched_tokens, num_steps)


def apply(tracker: PositionTracker, op, by_slots: bool = False):
    """Run one plan entry; a step returns the tracker's output tensor."""
    if op[0] == "rollback":
        tracker.rollback(op[1], op[2])
        return None
    _, ids, counts = op
    if by_slots:
        slots = np.array([tracker.slot(rid) for rid in ids], np.int64)
        return tracker.prepare_slots(slots, np.array(counts, np.int64))
    return tracker.prepare(ids, counts)


def cpu_results(config, prompts, plan, max_num_batched_tokens) -> list[torch.Tensor]:
    cpu = build(config, prompts, max_num_batched_tokens, "cpu")
    return [out.clone() for out in (apply(cpu, op) for op in plan) if out is not None]


def keep_gpu_busy() -> None:
    """Queue device work so the host runs ahead of the copies it enqueues."""
    if hasattr(torch.cuda, "_sleep"):
        torch.cuda._sleep(2_000_000)
    else:
        a = torch.ones((2048, 2048), device=DEVICE)
        for _ in range(4):
            a = a @ a / 2048


# --- tests ----------------------------------------------------------------------------


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_cuda_matches_cpu_random_workload(family):
    """A random workload (chunked prefill, decode, drafts, rollbacks) gives the CPU tracker's positions on the
    device."""
    config, prompts, plan = workload(
        1, family, num_reqs=8, num_items=4, max_text=40, max_num_batched_tokens=512, num_steps=150
    )
    expected = iter(cpu_results(config, prompts, plan, 512))
    gpu = build(config, prompts, 512, DEVICE)
    for k, op in enumerate(plan):
        out = apply(gpu, op, by_slots=k % 2 == 1)
        if out is not None:
            assert out.is_cuda and out.dtype == torch.int64
            assert torch.equal(out.cpu(), next(expected)), f"plan entry {k}"
    assert next(expected, None) is None


def test_output_is_device_view_of_positions():
    """The returned tensor lives on the device and is a (3, n) view of tracker.positions, the same every step."""
    config, prompts, plan = workload(
        2, "qwen2_5_vl", num_reqs=4, num_items=2, max_text=10, max_num_batched_tokens=256, num_steps=30
    )
    gpu = build(config, prompts, 256, DEVICE)
    positions = gpu.positions
    assert positions.device.type == "cuda" and tuple(positions.shape) == (3, 257)
    for op in plan:
        out = apply(gpu, op)
        if out is None:
            continue
        assert out.device == positions.device
        assert out.untyped_storage().data_ptr() == positions.untyped_storage().data_ptr()
        if out.numel():
            assert out.data_ptr() == positions.data_ptr()
            assert out.stride() == positions.stride()  # a view of the [3, max + 1] buffer, not a copy
    assert gpu.positions is positions


@pytest.mark.parametrize("num_staging_buffers", [1, 2, 4])
def test_staging_buffers_are_pinned(num_staging_buffers):
    """A CUDA tracker stages through `num_staging_buffers` pinned host buffers of the positions' shape."""
    tracker = PositionTracker(
        CONFIGS["qwen2_vl"],
        max_num_reqs=2,
        max_num_batched_tokens=128,
        device=DEVICE,
        num_staging_buffers=num_staging_buffers,
    )
    host = tracker.buffers.host_buffers()
    assert len(host) == num_staging_buffers
    for buf in host:
        assert buf.device.type == "cpu" and buf.is_pinned()
        assert tuple(buf.shape) == tuple(tracker.positions.shape) and buf.dtype == tracker.positions.dtype
    assert tracker.nbytes()["host_staging"] == num_staging_buffers * 3 * 129 * 8


@pytest.mark.parametrize("num_staging_buffers", [1, 2, 3])
def test_queued_steps_without_sync_match_cpu(num_staging_buffers):
    """100 large unsynchronised steps behind a busy device all land intact: no in-flight staging copy is overwritten."""
    max_tokens = 8192
    config, prompts, plan = workload(
        3, "qwen2_5_omni", num_reqs=8, num_items=200, max_text=800, max_num_batched_tokens=max_tokens, num_steps=100
    )
    steps = [op for op in plan if op[0] == "step"]
    assert len(steps) == 100 and sum(sum(counts) for _, _, counts in steps) > 300_000
    expected = cpu_results(config, prompts, plan, max_tokens)
    gpu = build(config, prompts, max_tokens, DEVICE, num_staging_buffers=num_staging_buffers)
    torch.cuda.synchronize()
    kept = []
    for op in plan:
        if op[0] == "step":
            keep_gpu_busy()
        out = apply(gpu, op)
        if out is not None:
            kept.append(out.clone())  # queued on the same stream, after this step's copy
    torch.cuda.synchronize()
    assert len(kept) == len(expected)
    for k, (got, want) in enumerate(zip(kept, expected)):
        assert torch.equal(got.cpu(), want), f"step {k}"


def test_int32_on_cuda():
    """dtype=torch.int32 on the device gives int32 positions equal to the CPU int64 tracker's."""
    config, prompts, plan = workload(
        4, "qwen2_5_vl", num_reqs=6, num_items=3, max_text=30, max_num_batched_tokens=300, num_steps=80
    )
    expected = iter(cpu_results(config, prompts, plan, 300))
    gpu = build(config, prompts, 300, DEVICE, dtype=torch.int32)
    assert gpu.positions.dtype == torch.int32
    assert all(buf.dtype == torch.int32 for buf in gpu.buffers.host_buffers())
    for op in plan:
        out = apply(gpu, op)
        if out is not None:
            assert out.dtype == torch.int32 and out.is_cuda
            assert torch.equal(out.cpu().to(torch.int64), next(expected))


def test_rejected_step_on_cuda_changes_nothing():
    """A rejected step on a CUDA tracker leaves later results equal to the CPU tracker's."""
    config, prompts, plan = workload(
        5, "qwen2_vl", num_reqs=4, num_items=2, max_text=20, max_num_batched_tokens=128, num_steps=20
    )
    expected = iter(cpu_results(config, prompts, plan, 128))
    gpu = build(config, prompts, 128, DEVICE)
    for op in plan:
        if op[0] == "step":
            with pytest.raises(ValueError, match="max_num_batched_tokens"):
                gpu.prepare(op[1], [129] + [0] * (len(op[1]) - 1))
        out = apply(gpu, op)
        if out is not None:
            assert torch.equal(out.cpu(), next(expected))


def test_cuda_tracker_always_stages():
    """staging=False is refused on CUDA, naming the argument; an explicit device index works."""
    with pytest.raises(ValueError, match="staging"):
        PositionTracker(CONFIGS["qwen2_vl"], max_num_reqs=1, max_num_batched_tokens=8, device=DEVICE, staging=False)
    tracker = PositionTracker(CONFIGS["qwen2_vl"], max_num_reqs=1, max_num_batched_tokens=8, device="cuda:0")
    tracker.add_request("r", [TEXT] * 5)
    assert tracker.prepare(["r"], [7]).cpu().tolist() == [list(range(7))] * 3


@pytest.mark.parametrize("copy_mode", ["rows", "span"])
def test_copy_modes_match_cpu(copy_mode):
    """Both staging copies (three row copies, or one span) land the CPU tracker's positions, also when queued
    unsynchronised."""
    config, prompts, plan = workload(
        6, "qwen2_5_omni", num_reqs=6, num_items=6, max_text=60, max_num_batched_tokens=1024, num_steps=60
    )
    expected = cpu_results(config, prompts, plan, 1024)
    gpu = build(config, prompts, 1024, DEVICE, num_staging_buffers=2)
    gpu.buffers.copy_mode = copy_mode
    kept = []
    for k, op in enumerate(plan):
        if k % 7 == 0:
            keep_gpu_busy()
        out = apply(gpu, op, by_slots=k % 2 == 0)
        if out is not None:
            kept.append(out.clone())
    torch.cuda.synchronize()
    assert len(kept) == len(expected)
    for k, (got, want) in enumerate(zip(kept, expected)):
        assert torch.equal(got.cpu(), want), f"step {k}"


def test_row_copies_scale_with_the_step():
    """A rows-mode step copies 3 n elements, a span-mode step 2 (max_num_batched_tokens + 1) + n."""
    tracker = PositionTracker(CONFIGS["qwen2_vl"], max_num_reqs=2, max_num_batched_tokens=4096, device=DEVICE)
    assert tracker.buffers.copy_mode == "rows"
    assert tracker.buffers.copy_nbytes(10) == 3 * 10 * 8
    tracker.buffers.copy_mode = "span"
    assert tracker.buffers.copy_nbytes(10) == (2 * 4097 + 10) * 8


def test_num_computed_tokens_and_int32_arrays_on_cuda():
    """Steps given num_computed_tokens as int32 arrays equal a CPU tracker that rolls back to the same counts."""
    config, prompts, _ = workload(
        7, "qwen2_5_vl", num_reqs=4, num_items=2, max_text=20, max_num_batched_tokens=4096, num_steps=1
    )
    cpu = build(config, prompts, 4096, "cpu")  # room for any catch-up step below
    gpu = build(config, prompts, 4096, DEVICE)
    rng = np.random.default_rng(7)
    ids = sorted(prompts)
    slots = np.array([gpu.slot(rid) for rid in ids], np.int32)
    for _ in range(40):
        computed = [int(rng.integers(0, cpu.prompt_len(rid) + 20)) for rid in ids]
        counts = [int(rng.integers(0, 40)) for _ in ids]
        for rid, c in zip(ids, computed):  # the CPU twin reaches each count by rollback or by a step
            done = cpu.num_computed_tokens(rid)
            if c <= done:
                cpu.rollback(rid, done - c)
            else:
                cpu.prepare([rid], [c - done])
        want = cpu.prepare(ids, counts).clone()
        got = gpu.prepare_slots(slots, np.array(counts, np.int32), np.array(computed, np.int32))
        assert got.is_cuda and torch.equal(got.cpu(), want)
