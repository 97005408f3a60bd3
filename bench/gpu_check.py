"""The device check, as one short script for a machine with a CUDA GPU.

    python -m mrope_tracker.bench.gpu_check [--copy rows|span|both] [--json PATH] [--rope-only] [--smoke]

1. runs tests/test_gpu.py (correctness on the device, staging ring under an
   un-synchronised queue) and the RopeState tests (tests/test_rope_state.py,
   tests/test_device_rows.py, tests/test_vllm_plugin.py: on CUDA, the Triton
   kernels compiled), when the tests folder is present;
2. times one scheduler step with its host-to-device copy: the tracker
   (`prepare_slots` with int32 arrays, and `prepare` with lists) against the
   vLLM V1 design (pinned host buffer, three row copies), for a 256-request
   decode step and a mixed step. Two figures each: the host's time to
   enqueue the step, and the time until the step's positions are on the
   device (a synchronize inside every call); and the bytes each step copies.
   `--copy` picks the tracker's staging copy (tracker/staging.py): "rows" (three
   copies of the step's n columns, the default), "span" (one copy of
   2 * (max_num_batched_tokens + 1) + n elements), or "both" to compare them;
3. RopeState, Model Runner V2's state on the device (bench/rope_check.py):
   its steps equal to the CPU tracker's and to vLLM's own RopeState (0.33 or 0.34)
   (where vLLM imports; else our re-statement of its table design),
   `prepare_positions` time at 256 and 1,024 requests (decode and mixed)
   against the same, device memory at 1,024 x 262,144 with every slot held,
   and the 192-frame Qwen3-VL video admitted with no knob.

It prints one table (check, figure, verdict); `--json` keeps every figure.
`--rope-only` runs part 3 alone (and its tests); `--smoke` runs part 3 at a
tiny size, on the CPU in triton's interpreter when there is no CUDA device,
to check that the script works end to end. `--sweep` times the step
kernel alone for each block size and warp count on a GPU; `--registers`
reports its registers per thread from the compiled cubin, no GPU needed.
Where vLLM's package does not import, MROPE_VLLM_SOURCES names a folder
holding its two RopeState files (bench/vllm_sources.py). First run on an
H200 on 2026-12-04: docs/benchmarks.md, "On an H200".
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch

from mrope_tracker import PositionTracker, warmup
from mrope_tracker.kernels.tracker_step import F_NUM_COMPUTED

from .baselines import V1Design
from .suite_decode import NUM_RUNNING, _step_scenario
from .timing import compare

MAX_NUM_BATCHED_TOKENS = 8192


def _time_steps(device: str, copy_modes: list[str]) -> list[dict]:
    scenario = _step_scenario(MAX_NUM_BATCHED_TOKENS)
    on_gpu = device.startswith("cuda")
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    rows = []
    for kind in ("decode", "mixed"):
        v1 = V1Design(scenario, device=device)
        tracker = PositionTracker(
            scenario.config,
            max_num_reqs=scenario.max_num_seqs,
            max_num_batched_tokens=MAX_NUM_BATCHED_TOKENS,
            device=device,
        )
        running = scenario.requests[:NUM_RUNNING]
        prefilling = {s.req_id for s in running[:4]} if kind == "mixed" else set()
        for spec in running:
            done = 0 if spec.req_id in prefilling else spec.prompt.num_tokens
            v1.admit(spec)
            v1.requests[spec.req_id][2] = done
            tracker.add_request_from_ranges(
                spec.req_id,
                spec.prompt.num_tokens,
                **spec.prompt.kwargs,
                **spec.prompt.ranges,
                num_computed_tokens=done,
            )
        ids = [s.req_id for s in running]
        counts = [500 if r in prefilling else 1 for r in ids]
        total = sum(counts)
        slots32 = np.array([tracker.slot(r) for r in ids], np.int32)
        counts32 = np.array(counts, np.int32)
        prefill_states = [v1.requests[r] for r in prefilling]
        prefill_slots = [tracker.slot(r) for r in prefilling]

        # Prefilling requests are rewound after every call (the same loop for both) so each call is the same step.
        def v1_step():
            v1.step(ids, counts)
            for state in prefill_states:
                state[2] -= 500

        def tracker_step(by_slots: bool):
            tracker.prepare_slots(slots32, counts32) if by_slots else tracker.prepare(ids, counts)
            for slot in prefill_slots:
                tracker.slot_state[slot, F_NUM_COMPUTED] -= 500

        contenders = {"V1 design (3 row copies)": v1_step}
        bytes_per_step = {"V1 design (3 row copies)": 3 * total * 8 if on_gpu else 0}
        for mode in copy_modes if on_gpu else ["no"]:
            if on_gpu:
                tracker.buffers.copy_mode = mode
            # the same positions as V1 whichever copy moved them (then both rewound)
            expected = v1.step(ids, counts).cpu()
            got = tracker.prepare_slots(slots32, counts32).cpu()
            for state, slot in zip(prefill_states, prefill_slots):
                state[2] -= 500
                tracker.slot_state[slot, F_NUM_COMPUTED] -= 500
            if not torch.equal(got, expected):
                raise AssertionError(f"{kind}: tracker ({mode} copy) and V1 differ on {device}")

            def in_mode(by_slots: bool, mode=mode):
                if on_gpu:
                    tracker.buffers.copy_mode = mode
                tracker_step(by_slots)

            for entry, by_slots in (("prepare_slots, int32", True), ("prepare, lists", False)):
                name = f"{entry}, {mode} copy"
                contenders[name] = lambda fn=in_mode, s=by_slots: fn(s)
                bytes_per_step[name] = tracker.buffers.copy_nbytes(total)
        enqueue = compare(contenders, rounds=15)
        landed = compare({k: (lambda fn=fn: (fn(), sync())) for k, fn in contenders.items()}, rounds=15)
        for name in contenders:
            rows.append(
                {
                    "step": f"{kind}: {NUM_RUNNING} requests, {total} tokens",
                    "device": device,
                    "contender": name,
                    "enqueue_us": enqueue[name] * 1e6,
                    "on_device_us": landed[name] * 1e6,
                    "bytes_copied": bytes_per_step[name],
                }
            )
    return rows


def _verdict(returncode) -> str:
    return "skipped" if returncode is None else ("passed" if returncode == 0 else f"FAILED ({returncode})")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--copy",
        choices=["rows", "span", "both"],
        default="both",
        help="the tracker's staging copy to time (default: both, to compare them)",
    )
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--no-tests", action="store_true", help="skip the test files")
    parser.add_argument("--rope-only", action="store_true", help="only RopeState's part (and its tests)")
    parser.add_argument("--smoke", action="store_true", help="RopeState's part at a tiny size (runs on a CPU too)")
    parser.add_argument("--sweep", action="store_true", help="only the step kernel's block size and warp sweep")
    parser.add_argument(
        "--registers", action="store_true", help="the step kernel's registers per block size and warps (no GPU needed)"
    )
    args = parser.parse_args(argv)
    if args.registers:
        from . import triton_compile

        keys = ("block", "prompt_block", "warps", "registers", "stack_bytes", "programs_per_sm")
        print("\n| " + " | ".join(keys) + " |\n" + "|---" * len(keys) + "|")
        for r in triton_compile.registers():
            print("| " + " | ".join(str(r[k]) for k in keys) + " |")
        return 0
    if args.sweep:
        from . import rope_check

        rows = rope_check.sweep("cuda")
        print("\n| step | variant | kernel us | equal |\n|---|---|---|---|")
        for r in rows:
            print(f"| {r['step']} | {r['variant']} | {r['us']:.2f} | {r.get('equal', '')} |")
        if args.json:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump(rows, f, indent=1)
        return 0 if all(r.get("equal", True) for r in rows) else 1
    on_cuda = torch.cuda.is_available()
    if not on_cuda and not args.smoke:
        print("no CUDA device: nothing to check (--smoke runs RopeState's part on the CPU)", file=sys.stderr)
        return 1
    if not on_cuda:
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported
    copy_modes = ["rows", "span"] if args.copy == "both" else [args.copy]
    results: dict = {"device": torch.cuda.get_device_name(0) if on_cuda else "cpu", "copy_modes": copy_modes}
    folder = os.path.join(os.path.dirname(__file__), "..", "tests")
    names = ["test_rope_state.py", "test_rope_state_serving.py", "test_device_rows.py", "test_vllm_plugin.py"]
    if not args.rope_only and on_cuda:
        names.insert(0, "test_gpu.py")
    tests = [os.path.join(folder, name) for name in names if os.path.exists(os.path.join(folder, name))]
    if tests and not args.no_tests:
        proc = subprocess.run([sys.executable, "-m", "pytest", *tests, "-q", "-p", "no:cacheprovider"], check=False)
        results["tests_returncode"] = proc.returncode
    table = [["tests on the device", " ".join(names), _verdict(results.get("tests_returncode"))]]
    warmup()
    if not args.rope_only and not args.smoke:
        results["steps"] = _time_steps("cuda", copy_modes) + _time_steps("cpu", copy_modes)
        for r in results["steps"]:
            table.append(
                [
                    f"tracker step, {r['step']}, {r['device']}",
                    f"{r['contender']}: {r['enqueue_us']:.1f} us (on device {r['on_device_us']:.1f}), "
                    f"{r['bytes_copied']:,} bytes copied",
                    "",
                ]
            )
    from . import rope_check  # imports triton (after TRITON_INTERPRET is set)

    results["rope_state"] = rope_check.run("cuda" if on_cuda else "cpu", args.smoke)
    table += rope_check.summary_rows(results["rope_state"])
    print("\n| check | figure | verdict |\n|---|---|---|")
    for row in table:
        print("| " + " | ".join(row) + " |")
    rope = results["rope_state"]
    if not all(c["equal"] for c in rope["checks"]) or not rope["long_video"]["equal"]:
        print("RopeState differs from the CPU tracker or the baseline", file=sys.stderr)
        results["tests_returncode"] = results.get("tests_returncode") or 1
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
    return 0 if results.get("tests_returncode", 0) == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
