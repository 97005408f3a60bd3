"""The device check, as one short script for a machine with a CUDA GPU.

    python -m mrope_tracker.bench.gpu_check [--json PATH]

1. runs tests/test_gpu.py (correctness on the device, staging ring under an
   un-synchronised queue), when the tests folder is present;
2. times one scheduler step with its host-to-device copy: the tracker
   (`prepare_slots` and `prepare`) against the vLLM V1 design with its three
   row copies, for a 256-request decode step and a mixed step. Wall time
   per step on the host, the copies enqueued but not waited for, with one
   synchronisation per round, so the device's own copy time appears only
   when it falls behind the host.
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

from .baselines import V1Design
from .suite_decode import NUM_RUNNING, _step_scenario
from .timing import compare


def _time_steps(device: str) -> list[dict]:
    scenario = _step_scenario(8192)
    rows = []
    for kind in ("decode", "mixed"):
        v1 = V1Design(scenario)
        v1.device = v1.device.to(device)
        tracker = PositionTracker(scenario.config, max_num_reqs=scenario.max_num_seqs, max_num_batched_tokens=8192, device=device)
        running = scenario.requests[:NUM_RUNNING]
        for k, spec in enumerate(running):
            done = 0 if (kind == "mixed" and k < 4) else spec.prompt.num_tokens
            v1.admit(spec)
            v1.requests[spec.req_id][2] = done
            tracker.add_request_from_ranges(
                spec.req_id, spec.prompt.num_tokens, **spec.prompt.kwargs, **spec.prompt.ranges, num_computed_tokens=done
            )
        ids = [s.req_id for s in running]
        counts = [500 if (kind == "mixed" and k < 4) else 1 for k in range(NUM_RUNNING)]
        slots = np.array([tracker.slot(r) for r in ids], np.int64)
        counts_np = np.array(counts, np.int64)
        if not torch.equal(v1.step(ids, counts).cpu(), tracker.prepare(ids, counts).cpu()):
            raise AssertionError(f"{kind}: tracker and V1 differ on {device}")
        # Prefilling requests stay in prefill: rewind them after every call, the same way for both.
        prefill = ids[:4] if kind == "mixed" else []

        def rewind_v1():
            for r in prefill:
                v1.requests[r][2] -= 500

        def rewind_tracker():
            for r in prefill:
                tracker.slot_state[tracker.slot(r), 1] -= 500

        times = compare({
            "V1 design (3 row copies)": lambda: (v1.step(ids, counts), rewind_v1()),
            "prepare": lambda: (tracker.prepare(ids, counts), rewind_tracker()),
            "prepare_slots": lambda: (tracker.prepare_slots(slots, counts_np), rewind_tracker()),
            "sync": torch.cuda.synchronize if device.startswith("cuda") else (lambda: None),
        }, rounds=15)  # fmt: skip
        rows.append({"step": kind, "device": device, **{k: v * 1e6 for k, v in times.items()}})
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
