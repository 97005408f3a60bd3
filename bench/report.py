"""Results as Markdown tables (terminal and docs/benchmarks.md) and a PNG chart."""

from __future__ import annotations

MiB = 1024 * 1024


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(headers), sep, *(line(r) for r in rows)])


def _us(x: float) -> str:
    return f"{x:,.1f} us" if x < 1000 else f"{x / 1000:,.2f} ms"


def _x(x: float) -> str:
    return f"{x:,.0f}x" if x >= 10 else f"{x:,.1f}x"


def _bytes(n: int) -> str:
    if n >= 1024**3:
        return f"{n / 1024**3:,.2f} GiB"
    if n >= MiB:
        return f"{n / MiB:,.1f} MiB"
    return f"{n / 1024:,.1f} KiB"


def prompt_tables(result: dict) -> str:
    out = []
    for family in dict.fromkeys(r["family"] for r in result["rows"]):
        rows = [
            [r["case"], f"{r['num_tokens']:,}", _us(r["reference_us"]), _us(r["ours_us"]), _x(r["speedup"]),
             _us(r["floor_us"]), f"{r['vs_floor']:.2f}x", _x(r["reference_us"] / r["floor_us"])]
            for r in result["rows"] if r["family"] == family
        ]  # fmt: skip
        out.append(
            f"**{family}**: `prompt_positions` (input checks included) vs the torch reference. Write floor: allocate "
            "the (3, L) int64 output and write it once; ceiling: the speedup of a call that did only that.\n"
        )
        out.append(_table(
            ["case", "tokens", "reference", "ours", "speedup", "write floor", "ours / floor", "ceiling"], rows))  # fmt: skip
    return "\n\n".join(out)


def decode_tables(result: dict) -> str:
    per_req = _table(
        ["per-request method (256 running requests, 1 token each)", "step", "vs torch"],
        [[r["method"], _us(r["step_us"]), _x(r["speedup"])] for r in result["per_request"]],
    )
    steps = _table(
        ["whole step", "vLLM V1 design", "prepare, same batch", "speedup", "prepare, new batch", "speedup",
         "prepare_slots", "speedup"],
        [[r["step"], _us(r["v1_us"]), _us(r["prepare_us"]), _x(r["speedup_prepare"]), _us(r["prepare_new_batch_us"]),
          _x(r["speedup_prepare_new_batch"]), _us(r["prepare_slots_us"]), _x(r["speedup_slots"])]
         for r in result["steps"]],
    )  # fmt: skip
    dispatch = _table(
        ["a decode step's kernel call, 256 requests (same body)", "per call"],
        [[r["call"], _us(r["step_us"])] for r in result.get("dispatch", [])],
    )
    return per_req + "\n\n" + steps + "\n\n" + dispatch


def admission_tables(result: dict) -> str:
    names = ["tracker (ranges)", "tracker (tokens)", "V1 design", "MRV2-like"]
    rows = [[f"{r['cached_tokens']:,} of {r['prompt_tokens']:,}", *(_us(r[n]) for n in names)] for r in result["rows"]]
    growth = result["growth_32k_over_1k"]
    rows.append(["32K / 1K", *(f"{growth[n]:.2f}x" for n in names)])
    return _table(["cached prefix", *names], rows)


def scheduler_tables(result: dict) -> str:
    out = []
    for sc in result["scenarios"]:
        head = (f"**{sc['scenario']}. {sc['title']}**: {sc['requests']:,} requests, {sc['steps']:,} steps, "
                f"{sc['tokens']:,} tokens, max_num_seqs {sc['max_num_seqs']}, "
                f"max_num_batched_tokens {sc['max_num_batched_tokens']:,}\n")  # fmt: skip
        rows = [
            [d["design"], f"{d['total_ms']:,.1f} ms", _x(d["total_vs_tracker"]), _us(d["step_median_us"]),
             _x(d["step_vs_tracker"]), _bytes(d["peak_bytes"])]
            for d in sc["designs"]
        ]  # fmt: skip
        out.append(head + "\n" + _table(
            ["design", "position CPU time", "vs tracker", "median step", "vs tracker", "memory held (peak)"], rows))
    return "\n\n".join(out)


def memory_tables(result: dict) -> str:
    rows = [
        [f"{r['max_num_reqs']:,} x {r['prompt_tokens']:,}", f"{r['max_model_len']:,}", str(r["images_per_request"]),
         _bytes(r["v1_bytes"]), _bytes(r["mrv2_bytes"]), _bytes(r["tracker_request_state_bytes"]),
         _bytes(r["tracker_bytes"]), f"{r['v1_per_request_bytes']:,} B", f"{r['tracker_per_request_bytes']:,} B"]
        for r in result["rows"]
    ]  # fmt: skip
    return _table(
        ["requests x prompt", "max_model_len", "images", "vLLM V1", "MRV2-like table", "tracker: requests",
         "tracker: all buffers", "V1 per request", "tracker per request"],
        rows,
    )  # fmt: skip


FORMATTERS = {
    "prompt": prompt_tables,
    "decode": decode_tables,
    "admission": admission_tables,
    "scheduler": scheduler_tables,
    "memory": memory_tables,
}


def markdown(results: dict) -> str:
    parts = []
    for suite, result in results["suites"].items():
        parts.append(f"### {suite}\n\n{FORMATTERS[suite](result)}")
    return "\n\n".join(parts)


def plot(results: dict, path: str) -> None:
    """A chart of the headline ratios, one panel per suite that ran."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    suites = results["suites"]
    panels = [s for s in ("prompt", "decode", "scheduler", "memory") if s in suites]
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 3.6 * len(panels)), squeeze=False)
    for ax, suite in zip(axes[:, 0], panels):
        r = suites[suite]
        if suite == "prompt":
            labels = [f"{'Omni' if 'Omni' in x['family'] else 'VL'}: {x['case'].split(',')[0]}" for x in r["rows"]]
            values = [x["speedup"] for x in r["rows"]]
            ceilings = [x["reference_us"] / x["floor_us"] for x in r["rows"]]
            ax.scatter(range(len(ceilings)), ceilings, marker="_", s=400, color="#c0392b", zorder=3,
                       label="ceiling: reference / write floor")  # fmt: skip
            ax.axhline(100, color="grey", lw=0.8, ls="--")
            ax.legend(loc="upper right", fontsize=7)
            ax.set_title("prompt_positions: speedup over the torch reference (dashed: 100x)")
        elif suite == "decode":
            labels, values = [], []
            for key, tag in (("speedup_prepare", "ids, same batch"), ("speedup_prepare_new_batch", "ids, new batch"),
                             ("speedup_slots", "slots")):  # fmt: skip
                labels += [x["step"].split(",")[0] + f" / {tag}" for x in r["steps"]]
                values += [x[key] for x in r["steps"]]
            ax.axhline(15, color="grey", lw=0.8, ls=":")
            ax.axhline(50, color="grey", lw=0.8, ls="--")
            ax.set_title("one scheduler step: speedup over the vLLM V1 design (targets: 15x by ids, 50x by slots)")
        elif suite == "scheduler":
            labels, values = [], []
            for sc in r["scenarios"]:
                for d in sc["designs"][:-1]:
                    labels.append(f"{sc['scenario']}: {d['design'].split(' (')[0]}")
                    values.append(d["total_vs_tracker"])
            ax.set_title("simulated scheduler: position CPU time, design / tracker")
        else:
            labels, values = [], []
            for x in r["rows"]:
                tag = f"{x['max_num_reqs']}x{x['max_model_len'] // 1024}K, {x['images_per_request']} img"
                labels += [f"{tag}: V1", f"{tag}: MRV2", f"{tag}: tracker"]
                values += [x["v1_bytes"] / MiB, x["mrv2_bytes"] / MiB, x["tracker_request_state_bytes"] / MiB]
            ax.set_title("host memory for request positions (MiB)")
        ax.bar(range(len(values)), values, color="#3b75af")
        ax.set_yscale("log")
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels(labels, rotation=35, ha="right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
