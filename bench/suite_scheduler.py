"""Suite `scheduler`: a simulated engine running the four designs side by side.

The schedule is computed once per scenario, the way vLLM's V1 scheduler
batches: running requests first (a prefill chunk of what is left of the
prompt, or one decode token), then waiting requests while fewer than
max_num_seqs run and the token budget lasts; admission starts a request at
its prefix-cache hit; a finished prefill samples the first output token;
a request leaves once it has all its output tokens.

Every design then replays the same schedule in lockstep, step by step:
admissions, the step's positions, removals, the designs taking turns to go
first. Only those calls are timed. Admission gets what vLLM's runners hold:
the prompt ids as a Python list and one feature per item (bench/baselines.py
says how each design uses them). The whole replay runs three times
(once with --quick), fresh designs each time: times are medians over the
replays, and a design's ratio to the tracker pairs the totals of each replay.
The MRV2-like design maps the batch's request ids to slots before its step,
outside its timed row, as real MRV2 finds them in its shared input batch;
that mapping is timed on its own and shown as a row of its own. After each
step every design's positions are compared with the tracker's. torch runs
on one thread, as our kernels do.
"""

from __future__ import annotations

import gc
from collections import deque

import attrs
import torch

from .baselines import DESIGNS
from .scenarios import RequestSpec, Scenario, scenarios
from .timing import Stopwatch, median, torch_threads


@attrs.frozen
class Step:
    admissions: list[RequestSpec]
    req_ids: list[str]
    counts: list[int]
    finished: list[str]


def schedule(scenario: Scenario) -> list[Step]:
    waiting = deque(scenario.requests)
    running: list[list] = []  # [spec, computed, generated]
    steps = []
    while waiting or running:
        budget = scenario.max_num_batched_tokens
        req_ids, counts, admissions = [], [], []
        for state in running:
            if budget == 0:
                break
            spec, computed, _ = state
            left = spec.prompt.num_tokens - computed
            n = min(left, budget) if left > 0 else 1
            req_ids.append(spec.req_id)
            counts.append(n)
            budget -= n
        while waiting and len(running) < scenario.max_num_seqs and budget > 0:
            spec = waiting.popleft()
            n = min(spec.prompt.num_tokens - spec.prefix_hit, budget)
            running.append([spec, spec.prefix_hit, 0])
            admissions.append(spec)
            req_ids.append(spec.req_id)
            counts.append(n)
            budget -= n
        scheduled = dict(zip(req_ids, counts))
        finished = []
        for state in running:
            n = scheduled.get(state[0].req_id, 0)
            if not n:
                continue
            state[1] += n
            if state[1] >= state[0].prompt.num_tokens:
                state[2] += 1  # a token is sampled once the prompt is done
            if state[2] >= state[0].output_len:
                finished.append(state[0].req_id)
        running = [s for s in running if s[0].req_id not in set(finished)]
        steps.append(Step(admissions, req_ids, counts, finished))
    return steps


def _replay_once(scenario: Scenario, steps: list[Step], progress) -> tuple[list, dict, dict, dict]:
    """One lockstep replay with fresh designs: their names, stopwatches,
    id-mapping stopwatches and peak bytes."""
    designs = [cls(scenario) for cls in DESIGNS]
    reference_name = designs[-1].name  # the tracker
    watches = {d.name: {"admit": Stopwatch(), "step": Stopwatch(), "finish": Stopwatch()} for d in designs}
    id_mapping = {d.name: Stopwatch() for d in designs if hasattr(d, "map_ids")}
    peak = {d.name: 0 for d in designs}
    for k, step in enumerate(steps):
        if k % 200 == 0:
            progress(f"scheduler {scenario.key}: step {k}/{len(steps)}")
        outputs = {}
        # lockstep: each design does this step in turn, starting with a
        # different one every step, so that none always runs just after a
        # design that swept the caches (MRV2's table writes slowed the next
        # design's admission markedly when the order was fixed)
        first = k % len(designs)
        for d in designs[first:] + designs[:first]:
            w = watches[d.name]
            with w["admit"]:
                for spec in step.admissions:
                    d.admit(spec)
            if d.name in id_mapping:  # done by the engine's input batch, not by the design's step
                with id_mapping[d.name]:
                    d.map_ids(step.req_ids, step.counts)
            with w["step"]:
                out = d.step(step.req_ids, step.counts)
            outputs[d.name] = out
            peak[d.name] = max(peak[d.name], d.nbytes())
            with w["finish"]:
                for req_id in step.finished:
                    d.finish(req_id)
        if k % 64 == 63:
            gc.collect(1)  # the young generations, outside every timed call
        expected = outputs[reference_name]
        for name, out in outputs.items():
            if not torch.equal(out, expected):
                raise AssertionError(f"scenario {scenario.key}, step {k}: {name} positions differ from the tracker's")
    return [d.name for d in designs], watches, id_mapping, peak


def _spread(values: list[float]) -> dict:
    return {"median": median(values), "min": min(values), "max": max(values)}


def replay(scenario: Scenario, steps: list[Step], progress, repeats: int = 1) -> dict:
    """Replay the schedule `repeats` times, fresh designs each time. Times are
    medians over the repeats; a design's ratio to the tracker pairs the two
    totals of each repeat (which ran in the same lockstep) and gives the
    median, min and max of those ratios."""
    runs = []
    gc_was_enabled = gc.isenabled()
    gc.disable()  # a collection landing in one design's timed call is noise (bench/timing.py)
    try:
        for _ in range(repeats):
            runs.append(_replay_once(scenario, steps, progress))
            gc.collect()
    finally:
        if gc_was_enabled:
            gc.enable()
    names = runs[0][0]
    tracker = names[-1]

    def totals(name: str) -> list[float]:
        return [sum(w.total for w in watches[name].values()) for _, watches, _, _ in runs]

    tracker_totals = totals(tracker)
    tracker_steps = [median(watches[tracker]["step"].laps) for _, watches, _, _ in runs]
    results = []
    for name in names:
        total = totals(name)
        step_medians = [median(watches[name]["step"].laps) for _, watches, _, _ in runs]
        ratios = [a / b for a, b in zip(total, tracker_totals)]
        results.append(
            {
                "design": name,
                "total_ms": median(total) * 1e3,
                "admit_ms": median([watches[name]["admit"].total for _, watches, _, _ in runs]) * 1e3,
                "steps_ms": median([watches[name]["step"].total for _, watches, _, _ in runs]) * 1e3,
                "step_median_us": median(step_medians) * 1e6,
                "peak_bytes": max(peak[name] for _, _, _, peak in runs),
                "total_vs_tracker": median(ratios),
                "total_vs_tracker_spread": _spread(ratios),
                "step_vs_tracker": median([a / b for a, b in zip(step_medians, tracker_steps)]),
            }
        )
    mapping_rows = []
    for name in runs[0][2]:
        total = [mapping[name].total for _, _, mapping, _ in runs]
        step_medians = [median(mapping[name].laps) for _, _, mapping, _ in runs]
        ratios = [a / b for a, b in zip(total, tracker_totals)]
        mapping_rows.append(
            {
                "design": f"{name}: ids to slots (outside its row)",
                "total_ms": median(total) * 1e3,
                "admit_ms": None,
                "steps_ms": median(total) * 1e3,
                "step_median_us": median(step_medians) * 1e6,
                "peak_bytes": None,
                "id_mapping": True,
                "total_vs_tracker": median(ratios),
                "total_vs_tracker_spread": _spread(ratios),
                "step_vs_tracker": median([a / b for a, b in zip(step_medians, tracker_steps)]),
            }
        )
    return {
        "scenario": scenario.key,
        "title": scenario.title,
        "requests": len(scenario.requests),
        "steps": len(steps),
        "tokens": sum(sum(s.counts) for s in steps),
        "max_num_seqs": scenario.max_num_seqs,
        "max_num_batched_tokens": scenario.max_num_batched_tokens,
        "repeats": repeats,
        "designs": results,
        "id_mapping": mapping_rows,
    }


REPEATS = 3  # whole replays per scenario (1 with --quick): the machines are shared and noisy


def run(quick: bool, progress) -> dict:
    out = []
    with torch_threads(1):
        for scenario in scenarios(quick):
            progress(f"scheduler {scenario.key}: scheduling {len(scenario.requests)} requests")
            out.append(replay(scenario, schedule(scenario), progress, repeats=1 if quick else REPEATS))
    return {"scenarios": out, "torch_threads": 1, "repeats": 1 if quick else REPEATS}
