"""RopeState on the device: exact against vLLM's own, step time against vLLM's kernel, memory, a long video.

Run by bench/gpu_check.py (`--rope-only` runs only this part, `--smoke` a
tiny version that also runs on a CPU, in triton's interpreter). Four parts:

1. exactness: MRV2-like decode and mixed steps (unsorted `idx_mapping`,
   per-slot int32 counts, as MRV2 passes them) on the device, equal to
   `PositionTracker` on the CPU and to the baseline: vLLM's own (0.33 or 0.34)
   `RopeState` where vLLM imports (bench/suite_rope.py), else `TableKernel`,
   our Triton re-statement of its table design (a [slots * 3,
   max_model_len] int32 table, a gather while the prefill lasts, index +
   delta after);
2. time per `prepare_positions` at 256 and 1,024 requests, decode steps and
   mixed steps (a few 512-token prefill chunks among decodes), against the
   same baseline: host time to enqueue, and time until the positions are on
   the device (a synchronize per call);
3. device memory at 1,024 slots x 262,144 max_model_len with every slot
   holding a typical request (measured by the CUDA allocator where there is
   one), against the table design's 3 GiB;
4. the 192-frame Qwen3-VL video in RopeState(3, 4, 8192, 131072): accepted
   with no knob (the row pool grows), every token exact.
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from mrope_tracker import PositionTracker, PromptLayout
from mrope_tracker.device.rope_state import RopeState

from .timing import compare
from .workloads import PromptBuilder, qwen2_5_vl, qwen3_vl


@triton.jit
def _table_kernel(
    out_ptr,
    out_stride,
    table_ptr,
    table_stride,
    delta_ptr,
    idx_mapping_ptr,
    query_start_loc_ptr,
    prefill_lens_ptr,
    num_computed_ptr,
    BLOCK_SIZE: tl.constexpr,
):
    b = tl.program_id(0)
    slot = tl.load(idx_mapping_ptr + b)
    first = tl.load(query_start_loc_ptr + b)
    count = tl.load(query_start_loc_ptr + b + 1) - first
    done = tl.load(num_computed_ptr + slot)
    prefilling = done < tl.load(prefill_lens_ptr + slot)
    delta = tl.load(delta_ptr + slot).to(tl.int64)
    rows = table_ptr + slot * 3 * table_stride
    for i in range(0, count, BLOCK_SIZE):
        k = i + tl.arange(0, BLOCK_SIZE)
        lanes = k < count
        index = done + k
        for d in tl.static_range(3):
            if prefilling:
                value = tl.load(rows + d * table_stride + index, mask=lanes).to(tl.int64)
            else:
                value = index.to(tl.int64) + delta
            tl.store(out_ptr + d * out_stride + first + k, value, mask=lanes)


class TableKernel:
    """The table design: every slot's prefill positions in a dense int32 table."""

    def __init__(self, max_num_reqs: int, max_num_tokens: int, max_model_len: int, device) -> None:
        self.table = torch.zeros((max_num_reqs * 3, max_model_len), dtype=torch.int32, device=device)
        self.delta = torch.zeros(max_num_reqs, dtype=torch.int32, device=device)
        self.positions = torch.zeros((3, max_num_tokens + 1), dtype=torch.int64, device=device)

    def admit(self, slot: int, layout: PromptLayout) -> None:
        positions = torch.from_numpy(layout.positions()).to(torch.int32)
        self.table[3 * slot : 3 * slot + 3, : layout.num_tokens] = positions.to(self.table.device)
        self.delta[slot] = layout.delta

    def prepare_positions(self, idx_mapping, query_start_loc, prefill_lens, num_computed_tokens) -> None:
        _table_kernel[(idx_mapping.shape[0],)](
            self.positions,
            self.positions.stride(0),
            self.table,
            self.table.stride(0),
            self.delta,
            idx_mapping,
            query_start_loc,
            prefill_lens,
            num_computed_tokens,
            BLOCK_SIZE=1024,
        )


def _layouts(config, num: int, smoke: bool) -> list[PromptLayout]:
    """Prompts of text, images and a video (two frame rates: a tau step and a tau table)."""
    layouts = []
    for i in range(num):
        b = PromptBuilder(config).text(20 + i % 7)
        if smoke:
            b.image(8, 8).text(5).video(4, 8, 8, sp=0.7 if i % 2 else 1.0).text(3)
        else:
            b.image(36, 36).text(40).video(16, 28, 28, sp=0.7 if i % 2 else 1.0).text(60).image(28, 56).text(30)
        p = b.build()
        layouts.append(PromptLayout.from_ranges(config, p.num_tokens, **p.kwargs, **p.ranges))
    return layouts


def _steps(num_reqs: int, layouts, kind: str, chunk: int, rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(idx_mapping, counts, num_computed per slot) of a decode or mixed step over every slot."""
    slots = rng.permutation(num_reqs).astype(np.int64)
    counts = np.ones(num_reqs, np.int32)
    computed = np.array([layout.num_tokens + 5 + s % 9 for s, layout in enumerate(layouts)], np.int32)
    if kind in ("mixed", "long"):  # a few prefill chunks among the decodes: 4 of `chunk`, or 2 of 2,048 tokens
        size = chunk if kind == "mixed" else 2048
        for s in slots[: 4 if kind == "mixed" else 2].tolist():
            n = layouts[s].num_tokens
            length = min(size, n)
            start = int(rng.integers(0, max(1, n - length)))
            computed[s] = start
            counts[s] = min(length, n - start)
    return slots, counts, computed


def _step_tensors(slots, counts, computed, prefill, device) -> tuple[tuple, int]:
    """MRV2's four step tensors on `device` (idx_mapping int64, query_start_loc,
    prefill_lens and num_computed_tokens int32) and the step's token count."""
    qsl = np.zeros(slots.shape[0] + 1, np.int32)
    np.cumsum(counts, out=qsl[1:])
    idx_mapping, query_start_loc, num_computed = (torch.from_numpy(a).to(device) for a in (slots, qsl, computed))
    return (idx_mapping, query_start_loc, prefill, num_computed), int(qsl[-1])


def run(device: str, smoke: bool) -> dict:
    from .suite_rope import baseline

    on_cuda = device.startswith("cuda")
    sync = torch.cuda.synchronize if on_cuda else (lambda: None)
    config = qwen2_5_vl()
    rng = np.random.default_rng(0)
    sizes = (8,) if smoke else (256, 1024)
    chunk = 16 if smoke else 512
    max_num_tokens = 8192
    max_model_len = 4096 if smoke else 16384
    results: dict = {"device": device, "steps": [], "checks": []}
    for num_reqs in sizes:
        layouts = _layouts(config, num_reqs, smoke)
        state = RopeState(3, num_reqs, max_num_tokens, max_model_len, device, config=config, debug=False)
        base = baseline(num_reqs, max_model_len, device)  # vLLM's own RopeState where vLLM imports
        tracker = PositionTracker(config, max_num_reqs=num_reqs, max_num_batched_tokens=max_num_tokens)
        for slot, layout in enumerate(layouts):
            state.init_prefill_layout(slot, layout)
            base.admit(slot, layout)
            tracker.add_request_layout(slot, layout)
        state.apply_staged_writes()
        base.apply()
        prefill = torch.tensor([layout.num_tokens for layout in layouts], dtype=torch.int32, device=device)
        for kind in ("decode", "mixed"):
            slots, counts, computed = _steps(num_reqs, layouts, kind, chunk, rng)
            args, total = _step_tensors(slots, counts, computed, prefill, device)
            state.prepare_positions(*args)
            base.prepare_positions(*args)
            tracker_slots = np.array([tracker.slot(s) for s in slots.tolist()], np.int64)
            expected = tracker.prepare_slots(tracker_slots, counts.astype(np.int64), computed[slots].astype(np.int64))
            ours = state.get_positions(total).cpu()
            same = torch.equal(ours, expected) and torch.equal(base.positions[:, :total].cpu(), expected)
            results["checks"].append(
                {"requests": num_reqs, "step": kind, "tokens": total, "equal": same, "baseline": base.name}
            )
            contenders = {
                "RopeState (ours)": lambda a=args, s=state: s.prepare_positions(*a),
                base.name: lambda a=args, b=base: b.prepare_positions(*a),
            }
            rounds = 1 if smoke else 15
            target = 0.001 if smoke else 0.01
            enqueue = compare(contenders, rounds=rounds, target_s=target)
            landed = compare(
                {k: (lambda fn=fn: (fn(), sync())) for k, fn in contenders.items()}, rounds=rounds, target_s=target
            )
            kernel = {}
            if on_cuda:  # the kernels alone: launches captured in a CUDA graph, timed by events
                for warps in (4, 8, 16):
                    state._num_warps = warps
                    kernel[f"ours, {warps} warps"] = _graph_time(contenders["RopeState (ours)"])
                state._num_warps = 4
                kernel[base.name] = _graph_time(contenders[base.name])
            for name in contenders:
                results["steps"].append(
                    {
                        "step": f"{kind}: {num_reqs} requests, {total} tokens",
                        "contender": name,
                        "enqueue_us": enqueue[name] * 1e6,
                        "on_device_us": landed[name] * 1e6,
                    }
                )
            if kernel:
                results.setdefault("kernel_us", []).append(
                    {"step": f"{kind}: {num_reqs} requests, {total} tokens", **{k: v * 1e6 for k, v in kernel.items()}}
                )
        del state, base, contenders  # free the device before the next size
    results["memory"] = _memory(device, smoke)
    results["long_video"] = _long_video(device, smoke)
    return results


def sweep(device: str, sizes: tuple[int, ...] = (256, 1024)) -> list[dict]:
    """The step kernel's device time (CUDA graph) for each block size, prompt
    block and warp count, decode, mixed and long-chunk steps at 256 and 1,024 requests, each
    variant's positions checked equal to the baseline's first (registers:
    `registers`, from the cubin)."""
    from .suite_rope import baseline

    config = qwen2_5_vl()
    rng = np.random.default_rng(1)
    out = []
    for num_reqs in sizes:
        layouts = _layouts(config, num_reqs, False)
        base = baseline(num_reqs, 16384, device)
        for slot, layout in enumerate(layouts):
            base.admit(slot, layout)
        base.apply()
        prefill = torch.tensor([layout.num_tokens for layout in layouts], dtype=torch.int32, device=device)
        steps = {}
        for kind in ("decode", "mixed", "long"):
            args, total = _step_tensors(*_steps(num_reqs, layouts, kind, 512, rng), prefill, device)
            base.prepare_positions(*args)
            expected = base.positions[:, :total].clone()
            name = f"{kind}, {num_reqs} requests, {total} tokens"
            steps[name] = (args, expected)
            out.append(
                {"step": name, "variant": base.name, "us": _graph_time(lambda a=args: base.prepare_positions(*a)) * 1e6}
            )
        shapes = [(block, block) for block in (128, 256, 512, 1024)] + [(1024, 128), (1024, 256), (512, 128)]
        for block, prompt_block in shapes:
            shape = {"block_size": block, "prompt_block": prompt_block}
            state = RopeState(3, num_reqs, 8192, 16384, device, config=config, debug=False, **shape)
            for slot, layout in enumerate(layouts):
                state.init_prefill_layout(slot, layout)
            state.apply_staged_writes()
            for warps in (1, 2, 4, 8, 16):
                state._num_warps = warps
                for name, (args, expected) in steps.items():
                    state.positions.zero_()
                    state.prepare_positions(*args)
                    equal = torch.equal(state.positions[:, : expected.shape[1]], expected)
                    us = _graph_time(lambda a=args, s=state: s.prepare_positions(*a)) * 1e6
                    out.append(
                        {
                            "step": name,
                            "variant": f"block {block}, prompt block {prompt_block}, {warps} warps",
                            "us": us,
                            "equal": equal,
                        }
                    )
            del state
    return out


def _graph_time(fn, launches: int = 20, replays: int = 20) -> float:
    """Seconds of device time per call of `fn` (one kernel launch): `launches`
    calls captured in a CUDA graph, the graph replayed `replays` times between
    two events, the median of 5 such timings. No host launch cost is in it."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()  # compiled and warm before capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(launches):
            fn()
    graph.replay()
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / (launches * replays))
    return float(np.median(times))


def _memory(device: str, smoke: bool) -> dict:
    """Bytes at 1,024 slots x 262,144 max_model_len, every slot holding a typical
    request (8 images in text, or a video); vLLM's table: 12 bytes per token per slot."""
    max_num_reqs, max_model_len, max_num_tokens = 1024, 262144, 8192
    config = qwen2_5_vl()
    b = PromptBuilder(config)
    for _ in range(8):
        b.text(10).image(36, 36)
    images = b.text(2000).build()
    video = PromptBuilder(config).text(50).video(64, 28, 28, sp=0.7).text(500).build()
    layouts = [PromptLayout.from_ranges(config, p.num_tokens, **p.kwargs, **p.ranges) for p in (images, video)]
    on_cuda = device.startswith("cuda")
    if on_cuda:
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
    state = RopeState(3, max_num_reqs, max_num_tokens, max_model_len, device, config=config)
    for slot in range(max_num_reqs):
        state.init_prefill_layout(slot, layouts[int(slot % 4 == 1)])
    state.apply_staged_writes()
    out = {
        "max_num_reqs": max_num_reqs,
        "max_model_len": max_model_len,
        "rope_state_device_bytes": state.device_nbytes(),
        "rope_state_pinned_bytes": state.pinned_nbytes(),
        "rope_state_breakdown": state.nbytes(),
        "table_design_pinned_bytes": max_num_reqs * 3 * max_model_len * 4,
        "max_num_rows": state.max_num_rows,
    }
    if on_cuda:
        torch.cuda.synchronize()
        out["cuda_allocator_bytes"] = torch.cuda.memory_allocated() - before
    return out


def _long_video(device: str, smoke: bool) -> dict:
    """The 192-frame Qwen3-VL video (78,669 tokens; 24 frames with --smoke) in
    RopeState(3, 4, 8192, 131072), admitted from vLLM-shaped features with no
    knob: accepted, and every token equal to the CPU path's."""
    config = qwen3_vl()
    frames = 24 if smoke else 192
    prompt = PromptBuilder(config).text(600).video(frames, 40, 40).text(117).build()
    layout = PromptLayout.from_ranges(config, prompt.num_tokens, **prompt.kwargs, **prompt.ranges)
    state = RopeState(3, 4, 8192, 131072, device, config=config)
    first = state.max_num_rows
    state.init_prefill_positions(1, config, prompt.token_list, prompt.features)
    state.apply_staged_writes()
    got = state.read_prefill_positions(1, prompt.num_tokens).cpu().numpy()
    return {
        "tokens": prompt.num_tokens,
        "layout_rows": layout.num_rows,
        "rows_at_start": first,
        "rows_after": state.max_num_rows,
        "equal": bool((got == layout.positions()).all()),
    }


def summary_rows(results: dict) -> list[list[str]]:
    """RopeState's part of gpu_check's one table: (check, figure, verdict) rows."""
    rows = []
    for c in results["checks"]:
        rows.append(
            [
                f"exact, {c['step']} step, {c['requests']} requests",
                f"{c['tokens']} tokens vs CPU tracker and {c['baseline']}",
                "equal" if c["equal"] else "DIFFERENT",
            ]
        )
    by_step: dict[str, dict] = {}
    for r in results["steps"]:
        by_step.setdefault(r["step"], {})[r["contender"]] = r
    for step, contenders in by_step.items():
        ours = contenders.pop("RopeState (ours)")
        (name, base), *_ = contenders.items()
        rows.append(
            [
                f"prepare_positions, {step}",
                f"ours {ours['enqueue_us']:.1f} us (on device {ours['on_device_us']:.1f}); {name} "
                f"{base['enqueue_us']:.1f} us (on device {base['on_device_us']:.1f})",
                f"{ours['enqueue_us'] / base['enqueue_us']:.2f}x",
            ]
        )
    for k in results.get("kernel_us", []):
        figures = "; ".join(f"{name} {us:.2f} us" for name, us in k.items() if name != "step")
        rows.append([f"kernel alone (CUDA graph), {k['step']}", figures, ""])
    m = results["memory"]
    rows.append(
        [
            f"device memory, {m['max_num_reqs']} x {m['max_model_len']}, every slot held",
            f"{m['rope_state_device_bytes'] / 2**20:.2f} MiB device, {m['rope_state_pinned_bytes'] / 2**20:.2f} MiB "
            f"pinned ({m['max_num_rows']} rows); vLLM's table {m['table_design_pinned_bytes'] / 2**30:.0f} GiB",
            "ok" if m["rope_state_device_bytes"] <= 8 * 2**20 else "OVER 8 MiB",
        ]
    )
    v = results["long_video"]
    rows.append(
        [
            "long video, RopeState(3, 4, 8192, 131072)",
            f"{v['tokens']:,} tokens, {v['layout_rows']} layout rows; "
            f"pool {v['rows_at_start']} -> {v['rows_after']} rows",
            "accepted, equal" if v["equal"] else "DIFFERENT",
        ]
    )
    return rows
