"""The device check, as one short script for a machine with a CUDA GPU.

    python -m mrope_tracker.bench.gpu_check [--json PATH]

1. runs tests/test_gpu.py (correctness on the device, staging ring under an
   un-synchronised queue), when the tests folder is present;
2. times one scheduler step with its host-to-device copy: the tracker
   (`prepare_slots` and `prepare`) against the vLLM V1 design (pinned host
   buffer, three row copies), for a 256-request decode step and a mixed
   step. Two figures each: the host's time to enqueue the step, and the
   time until the step's positions are on the device (a synchronize inside
   every call).
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


def _time_steps(device: str) -> list[dict]:
    scenario = _step_scenario(8192)
    on_gpu = device.startswith("cuda")
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    rows = []
    for kind in ("decode", "mixed"):
        v1 = V1Design(scenario, device=device)
        tracker = PositionTracker(scenario.config, max_num_reqs=scenario.max_num_seqs, max_num_batched_tokens=8192, device=device)
        running = scenario.requests[:NUM_RUNNING]
        prefilling = {s.req_id for s in running[:4]} if kind == "mixed" else set()
        for spec in running:
            done = 0 if spec.req_id in prefilling else spec.prompt.num_tokens
            v1.admit(spec)
            v1.requests[spec.req_id][2] = done
            tracker.add_request_from_ranges(
                spec.req_id, spec.prompt.num_tokens, **spec.prompt.kwargs, **spec.prompt.ranges, num_computed_tokens=done
            )
        ids = [s.req_id for s in running]
        counts = [500 if r in prefilling else 1 for r in ids]
        slots = np.array([tracker.slot(r) for r in ids], np.int64)
        counts_np = np.array(counts, np.int64)
        prefill_states = [v1.requests[r] for r in prefilling]
        prefill_slots = [tracker.slot(r) for r in prefilling]
        if not torch.equal(v1.step(ids, counts).cpu(), tracker.prepare(ids, counts).cpu()):
            raise AssertionError(f"{kind}: tracker and V1 differ on {device}")

        # Prefilling requests are rewound after every call (the same loop for both) so each call is the same step.
        def v1_step():
            v1.step(ids, counts)
            for state in prefill_states:
                state[2] -= 500

        def tracker_step(by_slots: bool):
            tracker.prepare_slots(slots, counts_np) if by_slots else tracker.prepare(ids, counts)
            for slot in prefill_slots:
                tracker.slot_state[slot, F_NUM_COMPUTED] -= 500

        contenders = {
            "V1 design (3 row copies)": v1_step,
            "prepare": lambda: tracker_step(False),
            "prepare_slots": lambda: tracker_step(True),
        }
        enqueue = compare(contenders, rounds=15)
        landed = compare({k: (lambda fn=fn: (fn(), sync())) for k, fn in contenders.items()}, rounds=15)
        row = {"step": kind, "device": device}
        row.update({f"{k}, enqueue_us": v * 1e6 for k, v in enqueue.items()})
        row.update({f"{k}, on device_us": v * 1e6 for k, v in landed.items()})
        rows.append(row)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check", file=sys.stderr)
        return 1
    results: dict = {"device": torch.cuda.get_device_name(0)}
    tests = os.path.join(os.path.dirname(__file__), "..", "tests", "test_gpu.py")
    if os.path.exists(tests):
        proc = subprocess.run([sys.executable, "-m", "pytest", tests, "-q", "-p", "no:cacheprovider"], check=False)
        results["tests_returncode"] = proc.returncode
    warmup()
    results["steps_us"] = _time_steps("cuda") + _time_steps("cpu")
    for row in results["steps_us"]:
        print(" | ".join(f"{k}: {v:.1f}" if isinstance(v, float) else f"{k}: {v}" for k, v in row.items()))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
    return 0 if results.get("tests_returncode", 0) == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
