"""Suite `decode`: positions for a scheduler step, per request and per batch.

1. The seed's next-positions comparison: decode positions for a batch of
   running requests, one request at a time: torch arange-and-expand (vLLM
   v0.8.5), the same with cached aranges (PR #17617), numpy (vLLM V1 today,
   PR #19939), and this library's jitted `next_positions`.
2. Whole steps against today's V1 design (bench/baselines.py): a decode step
   of 256 running requests, and mixed steps (chunked prefill + decode),
   through `PositionTracker.prepare_slots` (int32 or int64 slot and count
   arrays, as an engine's input batch holds them, with or without the
   scheduler's num_computed_tokens) and `prepare` (list or tuple ids, list
   counts, with or without num_computed_tokens, the previous step's batch or
   a new one): `forms` has one row per entry point and argument form.
3. The tracker's design choice: the same decode-step body as a numba
   jitclass method, and as an njit function taking the state as arrays
   (what the tracker does), with and without numba's runtime.
"""

from __future__ import annotations

import numba
import numpy as np
import torch
from numba.experimental import jitclass

from mrope_tracker import PositionTracker, next_positions
from mrope_tracker.kernels.tracker_step import F_NUM_COMPUTED

from .baselines import V1Design, torch_lru_next_positions, torch_next_positions, v1_next_positions
from .scenarios import RequestSpec, Scenario
from .timing import compare, measure, medians_us, ratio
from .workloads import PromptBuilder, qwen2_5_vl

NUM_RUNNING = 256


def _per_request(quick: bool, progress) -> list[dict]:
    progress("decode: per-request next positions (256 requests)")
    rng = np.random.default_rng(1)
    deltas = rng.integers(-500, 0, NUM_RUNNING).tolist()
    contexts = rng.integers(600, 4000, NUM_RUNNING).tolist()
    out_t = torch.zeros((3, NUM_RUNNING + 1), dtype=torch.int64)
    out_np = np.zeros((3, NUM_RUNNING + 1), dtype=np.int64)
    pairs = list(zip(deltas, contexts))

    def with_torch():
        for i, (d, c) in enumerate(pairs):
            out_t[:, i : i + 1] = torch_next_positions(d, c, 1)

    def with_torch_lru():
        for i, (d, c) in enumerate(pairs):
            out_t[:, i : i + 1] = torch_lru_next_positions(d, c, 1)

    def with_numpy():
        for i, (d, c) in enumerate(pairs):
            v1_next_positions(out_np, i, d, c, 1)

    def with_ours():
        for i, (d, c) in enumerate(pairs):
            next_positions(out_np, i, d, c, 1)

    results = []
    for fill, out in ((with_torch, out_t), (with_torch_lru, out_t), (with_numpy, out_np), (with_ours, out_np)):
        out[:] = -1
        fill()
        results.append(np.array(out[:, :NUM_RUNNING]))
    if any(not np.array_equal(r, results[0]) for r in results):
        raise AssertionError("per-request next positions differ between methods")
    times = compare(
        {
            "torch arange+expand": with_torch,
            "torch + LRU aranges (#17617)": with_torch_lru,
            "numpy (vLLM V1)": with_numpy,
            "next_positions (ours)": with_ours,
        },
        rounds=5 if quick else 15,
    )
    base = times["torch arange+expand"]
    return [{"method": k, "step_us": v * 1e6, "speedup": base / v} for k, v in times.items()]


def _step_scenario(max_num_batched_tokens: int) -> Scenario:
    config = qwen2_5_vl()
    reqs = []
    for i in range(NUM_RUNNING + 8):
        p = PromptBuilder(config).text(100).image(36, 36).text(100).build()
        reqs.append(RequestSpec(f"r{i}", p, 200, 0))
    return Scenario("step", "", config, reqs, NUM_RUNNING + 8, max_num_batched_tokens, 32768)


# The tracker's entry points and argument forms timed against the V1 design.
# "same batch": the previous step's ids again (every decode step);
# "new batch": the order flips on every call, so the ids (and, for mixed
# steps, the counts) must be mapped and converted again.
ENTRY_POINTS = (
    "prepare_slots, int32 arrays",
    "prepare_slots, int64 arrays",
    "prepare_slots, int32 arrays + num_computed_tokens",
    "prepare, list ids + list counts",
    "prepare, tuple ids + list counts",
    "prepare, list ids + list counts + num_computed_tokens list",
    "prepare, list ids + list counts, new batch",
)


def _whole_steps(quick: bool, progress) -> tuple[list[dict], list[dict]]:
    scenario = _step_scenario(8192)
    config = scenario.config
    rows, forms = [], []
    for kind in ("decode", "mixed"):
        progress(f"decode: whole {kind} step, {NUM_RUNNING} requests")
        v1 = V1Design(scenario)
        # No max_model_len: decode requests simply keep advancing while timed.
        tracker = PositionTracker(config, max_num_reqs=scenario.max_num_seqs, max_num_batched_tokens=8192)
        running = scenario.requests[:NUM_RUNNING]
        prefilling = ("r0", "r1", "r2", "r3") if kind == "mixed" else ()
        for spec in running:
            prompt_len = spec.prompt.num_tokens
            done = 0 if spec.req_id in prefilling else prompt_len
            v1.admit(spec)
            v1.requests[spec.req_id][2] = done
            tracker.add_request_from_ranges(
                spec.req_id, prompt_len, **spec.prompt.kwargs, **spec.prompt.ranges, num_computed_tokens=done
            )
        req_ids = [s.req_id for s in running]
        req_tuple = tuple(req_ids)
        chunk = 500  # prefill chunk of each prefilling request (mixed steps)
        counts = [chunk if r in prefilling else 1 for r in req_ids]
        slots64 = np.array([tracker.slot(r) for r in req_ids], dtype=np.int64)
        counts64 = np.array(counts, dtype=np.int64)
        slots32, counts32 = slots64.astype(np.int32), counts64.astype(np.int32)
        # the scheduler's num_computed_tokens for this step: the tracker's counters now
        computed = [tracker.num_computed_tokens(r) for r in req_ids]
        computed32 = np.array(computed, dtype=np.int32)
        prefill_state = [v1.requests[r] for r in prefilling]
        prefill_slots = [tracker.slot(r) for r in prefilling]
        slot_state = tracker.slot_state

        # Prefilling requests are rewound after each call so that every call
        # is the same mixed step; every contender pays the same small loop
        # (steps given num_computed_tokens would not need it).
        def rewound(step):
            def run():
                step()
                for s in prefill_slots:
                    slot_state[s, F_NUM_COMPUTED] -= chunk

            return run

        def v1_step():
            v1.step(req_ids, counts)
            for state in prefill_state:
                state[2] -= chunk

        orders = [(list(req_ids), list(counts)), (req_ids[::-1], counts[::-1])]
        flip = [0]

        def new_batch():
            flip[0] ^= 1
            return tracker.prepare(*orders[flip[0]])

        entries = dict(
            zip(
                ENTRY_POINTS,
                (
                    lambda: tracker.prepare_slots(slots32, counts32),
                    lambda: tracker.prepare_slots(slots64, counts64),
                    lambda: tracker.prepare_slots(slots32, counts32, computed32),
                    lambda: tracker.prepare(req_ids, counts),
                    lambda: tracker.prepare(req_tuple, counts),
                    lambda: tracker.prepare(req_ids, counts, num_computed_tokens=computed),
                    new_batch,
                ),
            )
        )
        # Same state in both designs: check every entry point against a V1 step.
        for name, ours in entries.items():
            computed[:] = [tracker.num_computed_tokens(r) for r in req_ids]  # the scheduler's view, now
            computed32[:] = computed
            expected = v1.step(req_ids, counts).clone()
            flip[0] = 1  # new_batch runs the original order next
            got = ours().clone()
            for state, s in zip(prefill_state, prefill_slots):
                state[2] -= chunk
                slot_state[s, F_NUM_COMPUTED] -= chunk
            if not torch.equal(got, expected):
                raise AssertionError(f"tracker step differs from the V1 design ({kind}, {name})")
        contenders = {"V1 design": v1_step}
        contenders.update({name: rewound(fn) for name, fn in entries.items()})
        samples = measure(contenders, rounds=5 if quick else 15)
        us = medians_us(samples)
        step = f"{kind}: {NUM_RUNNING} requests, {sum(counts)} tokens"
        for name in ENTRY_POINTS:
            forms.append({"step": step, "entry": name, "us": us[name], "speedup": ratio(samples, "V1 design", name)})
        same, new, slots = ENTRY_POINTS[3], ENTRY_POINTS[6], ENTRY_POINTS[0]
        rows.append(
            {
                "step": step,
                "v1_us": us["V1 design"],
                "prepare_us": us[same],
                "prepare_new_batch_us": us[new],
                "prepare_slots_us": us[slots],
                "speedup_prepare": ratio(samples, "V1 design", same),
                "speedup_prepare_new_batch": ratio(samples, "V1 design", new),
                "speedup_slots": ratio(samples, "V1 design", slots),
            }
        )
    return rows, forms


_SLOT_STATE_SPEC = [
    ("slot_state", numba.int64[:, ::1]),
    ("pool_rows", numba.int64[:, ::1]),
    ("pool_scales", numba.float32[:, ::1]),
    ("out", numba.int64[:, ::1]),
]


@jitclass(_SLOT_STATE_SPEC)
class _StateObject:
    def __init__(self, slot_state, pool_rows, pool_scales, out):
        self.slot_state = slot_state
        self.pool_rows = pool_rows
        self.pool_scales = pool_scales
        self.out = out

    def step(self, slots, counts):
        return _decode_body(self.out, slots, counts, self.slot_state)


@numba.njit(cache=True)
def _decode_body(out, slots, counts, slot_state):
    total = 0
    for b in range(slots.shape[0]):
        s = slots[b]
        v = slot_state[s, F_NUM_COMPUTED] + slot_state[s, 3]
        out[0, b] = v
        out[1, b] = v
        out[2, b] = v
        slot_state[s, F_NUM_COMPUTED] += counts[b]
        total += counts[b]
    return total


@numba.njit(cache=True)
def _state_as_arrays(out, slots, counts, computed, slot_state, pool_rows, pool_scales, params):
    return _decode_body(out, slots, counts, slot_state)


# the same two functions compiled without numba's runtime (NRT), as the tracker's step kernel is
_decode_body_no_nrt = numba.njit(cache=True, _nrt=False)(_decode_body.py_func)


@numba.njit(cache=True, _nrt=False)
def _state_as_arrays_no_nrt(out, slots, counts, computed, slot_state, pool_rows, pool_scales, params):
    return _decode_body_no_nrt(out, slots, counts, slot_state)


def _dispatch(quick: bool, progress) -> list[dict]:
    progress("decode: jitclass method vs njit function with the state as arrays")
    slot_state = np.zeros((NUM_RUNNING, 7), np.int64)
    pool_rows = np.zeros((8 * NUM_RUNNING, 9), np.int64)
    pool_scales = np.zeros((8 * NUM_RUNNING, 2), np.float32)
    out = np.zeros((3, 8193), np.int64)
    slots = np.arange(NUM_RUNNING, dtype=np.int64)
    counts = np.ones(NUM_RUNNING, np.int64)
    computed = np.zeros(0, np.int64)
    params = np.zeros(6, np.int64)
    args = (out, slots, counts, computed, slot_state, pool_rows, pool_scales, params)
    obj = _StateObject(slot_state, pool_rows, pool_scales, out)
    if not obj.step(slots, counts) == _state_as_arrays(*args) == _state_as_arrays_no_nrt(*args):
        raise AssertionError("jitclass and njit decode bodies differ")
    times = compare(
        {
            "jitclass method (4 arrays inside)": lambda: obj.step(slots, counts),
            "njit function, 8 arguments, numba runtime": lambda: _state_as_arrays(*args),
            "njit function, 8 arguments, no numba runtime (ours)": lambda: _state_as_arrays_no_nrt(*args),
        },
        rounds=5 if quick else 15,
    )
    return [{"call": k, "step_us": v * 1e6} for k, v in times.items()]


def run(quick: bool, progress) -> dict:
    steps, forms = _whole_steps(quick, progress)
    return {
        "per_request": _per_request(quick, progress),
        "steps": steps,
        "forms": forms,
        "dispatch": _dispatch(quick, progress),
    }
