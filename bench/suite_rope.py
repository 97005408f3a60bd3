"""Suite `rope`: host time per `RopeState.prepare_positions` call, ours against vLLM's own.

MRV2's step calls `prepare_positions` once; vLLM's launches one kernel. Ours
launches one kernel too (its host checks run only in debug mode). Measured at
256 and 1,024 requests, a decode step (one token each) and a mixed one (four
prefill chunks among the decodes), on the same inputs (MRV2's dtypes: int64
`idx_mapping`, int32 counts), the positions checked equal first.

The baseline is vLLM's own (0.33 or 0.34) `vllm.v1.worker.gpu.mm.rope.RopeState` where
vLLM imports (on a CPU its pinned table takes vLLM's no-UVA fallback), else
`rope_check.TableKernel`, our Triton re-statement of its table design. On a
CPU both run in triton's interpreter (TRITON_INTERPRET=1, set by the CLI):
the figure is then the interpreted kernel's time, for both alike; on CUDA it
is the launch's host time. A third contender, ours in debug mode, shows what
the host checks cost.
"""

from __future__ import annotations

import os

import numpy as np
import torch

from mrope_tracker import PromptLayout

from .timing import compare
from .workloads import PromptBuilder, qwen2_5_vl

SIZES = (256, 1024)
SIZES_ENV = "MROPE_TRACKER_ROPE_SIZES"  # e.g. "8,32": smaller sizes for a quick look
MAX_NUM_TOKENS = 8192


class VllmRope:
    """vLLM's own RopeState, its table filled with the layouts' positions (what its
    `init_prefill_positions` stages from the model's get_mrope_input_positions)."""

    def __init__(self, num_reqs: int, max_model_len: int, device: str) -> None:
        try:
            import vllm
            from vllm.v1.worker.gpu import buffer_utils
            from vllm.v1.worker.gpu.mm import rope

            if device == "cpu":  # vLLM's own fallback without UVA: its table in plain device memory
                buffer_utils.is_uva_available = lambda: False
            make = rope.RopeState
            self.name = f"vLLM {vllm.__version__} RopeState"
        except ImportError:  # vLLM's two files alone, where its package cannot be imported (bench/vllm_sources.py)
            from . import vllm_sources

            if not os.environ.get(vllm_sources.ENV):
                raise
            sources = vllm_sources.VllmRopeSources(os.environ[vllm_sources.ENV])
            make = sources.rope_state
            self.name = f"vLLM {sources.version} RopeState (its 2 files, no UVA)"
        self.state = make(3, num_reqs, MAX_NUM_TOKENS, max_model_len, torch.device(device))
        self.positions = self.state.positions

    def admit(self, slot: int, layout: PromptLayout) -> None:
        positions = layout.positions()
        for d in range(3):
            self.state.prefill_positions.stage_write(3 * slot + d, 0, positions[d].tolist())
        self.state.prefill_delta.np[slot] = layout.delta

    def apply(self) -> None:
        self.state.apply_staged_writes()

    def prepare_positions(self, *args) -> None:
        self.state.prepare_positions(*args)


class TableRestatement:
    """The table design re-stated in Triton (bench/rope_check.py), where vLLM is not installed."""

    name = "table design (re-stated)"

    def __init__(self, num_reqs: int, max_model_len: int, device: str) -> None:
        from .rope_check import TableKernel

        self.kernel = TableKernel(num_reqs, MAX_NUM_TOKENS, max_model_len, device)
        self.positions = self.kernel.positions

    def admit(self, slot: int, layout: PromptLayout) -> None:
        self.kernel.admit(slot, layout)

    def apply(self) -> None:
        pass

    def prepare_positions(self, *args) -> None:
        self.kernel.prepare_positions(*args)


def baseline(num_reqs: int, max_model_len: int, device: str):
    try:
        return VllmRope(num_reqs, max_model_len, device)
    except ImportError:
        return TableRestatement(num_reqs, max_model_len, device)


def _layouts(config, num: int) -> list[PromptLayout]:
    out = []
    for i in range(num):
        b = PromptBuilder(config).text(20 + i % 7).image(16, 16).text(8)
        p = b.video(4, 8, 8, sp=0.5 if i % 2 else 1.0).text(30).build()
        out.append(PromptLayout.from_ranges(config, p.num_tokens, **p.kwargs, **p.ranges))
    return out


def _step(layouts, kind: str, device: str, rng) -> tuple:
    """MRV2's four tensors for a decode or mixed step over every slot, in a shuffled order."""
    num_reqs = len(layouts)
    slots = rng.permutation(num_reqs).astype(np.int64)
    counts = np.ones(num_reqs, np.int32)
    computed = np.array([layout.num_tokens + 3 for layout in layouts], np.int32)
    if kind == "mixed":
        for s in slots[:4].tolist():
            computed[s] = 5
            counts[s] = min(64, layouts[s].num_tokens - 5)
    qsl = np.zeros(num_reqs + 1, np.int32)
    np.cumsum(counts, out=qsl[1:])
    prefill = np.array([layout.num_tokens for layout in layouts], np.int32)
    tensors = (slots, qsl, prefill, computed)
    return tuple(torch.from_numpy(t).to(device) for t in tensors), int(qsl[-1])


def run(quick: bool, progress) -> dict:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from mrope_tracker.device.rope_state import RopeState

    config = qwen2_5_vl()
    rng = np.random.default_rng(0)
    max_model_len = 4096
    rows = []
    sizes = [int(n) for n in os.environ[SIZES_ENV].split(",")] if os.environ.get(SIZES_ENV) else SIZES
    for num_reqs in sizes:
        progress(f"rope: {num_reqs} requests")
        layouts = _layouts(config, num_reqs)
        ours = RopeState(3, num_reqs, MAX_NUM_TOKENS, max_model_len, device, config=config, debug=False)
        checked = RopeState(3, num_reqs, MAX_NUM_TOKENS, max_model_len, device, config=config, debug=True)
        base = baseline(num_reqs, max_model_len, device)
        for slot, layout in enumerate(layouts):
            for state in (ours, checked, base):
                (state.init_prefill_layout if state is not base else state.admit)(slot, layout)
        for state in (ours, checked):
            state.apply_staged_writes()
        base.apply()
        for kind in ("decode",) if quick and device == "cpu" else ("decode", "mixed"):
            args, total = _step(layouts, kind, device, rng)
            ours.prepare_positions(*args)
            base.prepare_positions(*args)
            equal = torch.equal(ours.positions[:, :total].cpu(), base.positions[:, :total].cpu())
            contenders = {
                "RopeState (ours)": lambda a=args: ours.prepare_positions(*a),
                "RopeState (ours, debug)": lambda a=args: checked.prepare_positions(*a),
                base.name: lambda a=args: base.prepare_positions(*a),
            }
            # under the interpreter a call takes seconds: one round of one call each
            rounds = 1 if device == "cpu" else (5 if quick else 15)
            times = compare(contenders, rounds=rounds, target_s=0.001 if device == "cpu" else 0.01)
            rows.append(
                {
                    "step": kind,
                    "requests": num_reqs,
                    "tokens": total,
                    "device": device,
                    "baseline": base.name,
                    "equal": equal,
                    "us": {name: t * 1e6 for name, t in times.items()},
                }
            )
    return {"rows": rows}


def tables(result: dict) -> str:
    lines = [
        "| step | requests | tokens | baseline | equal | ours | ours, debug | baseline | ours / baseline |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        us = r["us"]
        ours, debug, base = us["RopeState (ours)"], us["RopeState (ours, debug)"], us[r["baseline"]]
        lines.append(
            f"| {r['step']} | {r['requests']:,} | {r['tokens']:,} | {r['baseline']} | {'yes' if r['equal'] else 'NO'} "
            f"| {ours:,.0f} us | {debug:,.0f} us | {base:,.0f} us | {ours / base:.2f}x |"
        )
    where = result["rows"][0]["device"] if result["rows"] else "cpu"
    note = "Host time per prepare_positions call" + (
        " under triton's CPU interpreter (the kernel runs on the host)." if where == "cpu" else " on CUDA."
    )
    return note + "\n\n" + "\n".join(lines)
