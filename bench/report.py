"""Results as Markdown tables (terminal and docs/benchmarks.md) and a PNG chart,
and the check of the output paths before any suite runs (`check_outputs`)."""

# Over 500 lines: one short renderer per table of every suite, beside the cell formats they share.

from __future__ import annotations

import importlib
import os
import textwrap

MiB = 1024 * 1024


def check_outputs(json_path: str | None, plot_path: str | None) -> str | None:
    """Why `--json` / `--plot` could not be written, or None when they can.

    Called before the suites run, so a bad path fails in a second instead of
    after the whole run: each path must not be a directory and its folder
    must exist and be writable; `--plot` also needs matplotlib. `--json -`
    is stdout."""
    for flag, path in (("--json", json_path), ("--plot", plot_path)):
        if path is None or (flag == "--json" and path == "-"):
            continue
        if not path or os.path.isdir(path):
            return f"{flag}: expected a file path, got {path!r} (a directory or empty)"
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            return f"{flag}: expected an existing folder for {path!r}, got no folder {folder!r}"
        if os.path.exists(path) and not os.access(path, os.W_OK):
            return f"{flag}: expected a writable file, got {path!r}, which cannot be written"
        if not os.access(folder, os.W_OK | os.X_OK):
            return f"{flag}: expected a writable folder, got {folder!r}, which cannot be written"
    if plot_path is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            return "--plot: needs matplotlib (pip install 'mrope-tracker[bench]'), which cannot be imported"
    return None


WIDTH = 120  # the widest line a report holds: tables and text fit a terminal without wrapping


def paragraph(text: str) -> str:
    """Descriptive text above a table, wrapped at WIDTH (Markdown joins the lines)."""
    return textwrap.fill(text, WIDTH, break_long_words=False, break_on_hyphens=False)


def table(headers: list[str], rows: list[list[str]]) -> str:
    """A Markdown table whose columns line up in a terminal."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(headers), sep, *(line(r) for r in rows)])


def _us(x: float) -> str:
    return f"{x:,.1f} us" if x < 1000 else f"{x / 1000:,.2f} ms"


def _x(x: float) -> str:
    return f"{x:,.0f}x" if x >= 10 else f"{x:,.1f}x" if x >= 1 else f"{x:,.2f}x"


def _spread(r: dict | None, digits: int | None = None) -> str:
    """A ratio over rounds: median (min–max)."""
    if r is None:
        return "–"
    if digits is not None:
        return f"{r['median']:.{digits}f}x ({r['min']:.{digits}f}–{r['max']:.{digits}f})"
    return f"{_x(r['median'])} ({_x(r['min'])[:-1]}–{_x(r['max'])[:-1]})"


def _bytes(n: int | None) -> str:
    if n is None:
        return "–"
    if n >= 1024**3:
        return f"{n / 1024**3:,.2f} GiB"
    if n >= MiB:
        return f"{n / MiB:,.1f} MiB"
    return f"{n / 1024:,.1f} KiB"


def _case(name: str) -> str:
    """A workload's name without its token count (the tables give that a column of its own)."""
    return name.split(",")[0]


def prompt_tables(result: dict) -> str:
    out = []
    if result.get("seed"):
        out.append(
            paragraph(
                "**Seed design (vLLM PR #16881, re-implemented in `bench/seed_design.py`) vs `prompt_positions`**, "
                "Qwen2/2.5-VL. Times: grids as numpy arrays, token ids an int64 array. Speedup: seed time / our "
                "time, same grid form for both, with grids as arrays and as lists. Floor: allocate the (3, L) int64 "
                "output and write it once. Ratios: median (min–max) over rounds. Targets: speedup >= 1.5x in both "
                "columns; ours / floor <= 2x on the three largest (*)."
            )
        )
        rows = [
            [
                _case(r["case"]) + (" *" if r["large"] else ""),
                f"{r['num_tokens']:,}",
                _us(r["seed_arrays_us"]),
                _us(r["ours_arrays_us"]),
                _spread(r["speedup_arrays"]),
                _spread(r["speedup_lists"]),
                _spread(r["ours_vs_floor"], 2),
            ]
            for r in result["seed"]
        ]
        out.append(table(["case", "tokens", "seed", "ours", "speedup", "speedup, lists", "ours / floor"], rows))
    for family in dict.fromkeys(r["family"] for r in result["rows"]):
        rows = [
            [
                _case(r["case"]),
                f"{r['num_tokens']:,}",
                _us(r["reference_us"]),
                _us(r["ours_us"]),
                _spread(r["speedup"]),
                _spread(r["vs_floor"], 2),
                _spread(r["ceiling"]),
            ]
            for r in result["rows"]
            if r["family"] == family
        ]
        out.append(
            paragraph(
                f"**{family}**: `prompt_positions` (input checks included, grids as numpy arrays) vs the torch "
                "reference on one thread. Floor: allocate the (3, L) int64 output and write it once; ceiling: the "
                "speedup of a call that only did that (reference / floor)."
            )
        )
        out.append(table(["case", "tokens", "reference", "ours", "speedup", "ours / floor", "ceiling"], rows))
    if result.get("families"):
        out += _family_tables(result["families"], result.get("transformers"))
    if result.get("more_families"):
        out += _more_family_tables(result["more_families"], result.get("transformers"))
    if result.get("input_forms"):
        out.append(input_form_tables(result["input_forms"]))
    if result.get("seed_forms"):
        out.append(seed_form_tables(result["seed_forms"], result["input_forms"]["forms"]))
    if result.get("breakdown"):
        out += _breakdown_tables(result["breakdown"])
    return "\n\n".join(out)


def _family_tables(families: list[dict], hf) -> list[str]:
    """Qwen3-VL and GLM-4.1V against the reference and transformers."""
    out = []
    hf_name = f"transformers {hf}" if hf else "transformers (not installed)"
    out.append(
        paragraph(
            f"**Qwen3-VL and GLM-4.1V**: `prompt_positions` vs the torch reference (one thread) and vs "
            f"`get_rope_index` of {hf_name} (called without a model; its tensors prepared outside the timed "
            "call). Speedups: their time / ours."
        )
    )
    rows = [
        [
            r["family"],
            _case(r["case"]),
            f"{r['num_tokens']:,}",
            _us(r["reference_us"]),
            "–" if r["transformers_us"] is None else _us(r["transformers_us"]),
            _us(r["ours_us"]),
            _spread(r["speedup"]),
            _spread(r["speedup_transformers"]),
        ]
        for r in families
    ]
    out.append(
        table(
            ["family", "case", "tokens", "reference", "transformers", "ours", "vs reference", "vs transformers"],
            rows,
        )
    )
    return out


def _more_family_tables(more: list[dict], hf) -> list[str]:
    """The families served to vLLM 0.33's rules: against the reference, and against transformers where it has them."""
    out = []
    with_hf = any(r.get("transformers_us") is not None for r in more)
    if with_hf:
        hf_note = (
            f" The second table: `get_rope_index` of transformers {hf} against ours under its preset, where it "
            "has the family (– where not)."
        )
    else:
        hf_note = f" {f'transformers {hf}' if hf else 'The installed transformers'} has none of them."
    out.append(
        paragraph(
            '**Families served to vLLM 0.33\'s rules** (`semantics="vllm-0.33"`): `prompt_positions` vs the torch '
            f"reference (one thread). Speedup: its time / ours.{hf_note}"
        )
    )
    rows = [
        [
            r["family"],
            _case(r["case"]),
            f"{r['num_tokens']:,}",
            _us(r["reference_us"]),
            _us(r["ours_us"]),
            _spread(r["speedup"]),
            _spread(r["vs_floor"]),
        ]
        for r in more
    ]
    out.append(table(["family", "case", "tokens", "reference", "ours", "vs reference", "ours / floor"], rows))
    if with_hf:
        rows = [
            [
                r["family"],
                _case(r["case"]),
                f"{r['num_tokens']:,}",
                "–" if r.get("transformers_us") is None else _us(r["transformers_us"]),
                _spread(r.get("speedup_transformers")),
            ]
            for r in more
        ]
        out.append(table(["family", "case", "tokens", "transformers", "vs transformers"], rows))
    return out


def _breakdown_tables(breakdown: list[dict]) -> list[str]:
    """Where the time of three seed cases goes."""
    out = []
    out.append(
        paragraph(
            "**Where the time goes** (Qwen2.5-VL, medians): whole calls, each design's kernel alone writing a "
            "preallocated output, allocation, and converting Python lists."
        )
    )
    cases = [_case(r["case"]) for r in breakdown]
    parts = list(dict.fromkeys(k for r in breakdown for k in r["us"]))
    rows = [[part, *(_us(r["us"][part]) if part in r["us"] else "–" for r in breakdown)] for part in parts]
    out.append(table(["part", *cases], rows))
    return out


def input_form_tables(forms: dict) -> str:
    """One table per call: a row per argument, a column per form, each cell the
    median ratio to the same call with canonical inputs."""
    out = [
        paragraph(
            f"**Input forms** ({forms['config']}): each argument in the forms callers pass, one at a time, the other "
            "arguments canonical. Each cell: the call's median time over the same call with canonical inputs "
            "(C-contiguous int64 arrays, float64 times), in interleaved rounds; `canonical` is that call's time. "
            "Integer arguments: `32-bit` an int32 array, `strided` and `read-only` int64 arrays, `tensor` torch "
            "int64, `tensor, 32-bit` torch int32; times: `32-bit` float32, `tensor` float64, `tensor, 32-bit` "
            "float32. "
            f"Cases: {forms['cases']}."
        )
    ]
    headers = ["argument", "canonical", *(label for _, label in forms["forms"])]
    for call in dict.fromkeys(r["call"] for r in forms["rows"]):
        rows = [
            [
                r["argument"],
                _us(r["canonical_us"]),
                *(
                    _x(r["vs_canonical"][form]["median"]) if form in r["vs_canonical"] else "–"
                    for form, _ in forms["forms"]
                ),
            ]
            for r in forms["rows"]
            if r["call"] == call
        ]
        out.append(f"`{call}`\n\n" + table(headers, rows))
    return "\n\n".join(out)


def seed_form_tables(rows: list[dict], forms: list) -> str:
    """The seed's cases with every argument in one form: ours over our
    canonical call, and the seed design's speedup, a column per form."""
    labels = [("canonical", "canonical"), *forms]
    out = [
        paragraph(
            "**Seed cases by form** (Qwen2.5-VL): every argument of the seed's six cases in one form at once "
            "(token ids, grids, `second_per_grid_ts`; forms as in the input-forms table). First table: our call "
            "over our call with canonical inputs; second: the seed design given the same form over our call "
            "(target >= 1.5x). Medians over rounds (the spreads are in the JSON results)."
        )
    ]
    for key, header in (("vs_canonical", "ours / canonical"), ("speedup", "speedup over the seed design")):
        body = [
            [_case(r["case"]), *(_x(r[key][form]["median"]) if form in r[key] else "–" for form, _ in labels)]
            for r in rows
        ]
        out.append(f"{header}\n\n" + table(["case", *(label for _, label in labels)], body))
    return "\n\n".join(out)


def _ratio(value) -> str:
    """A ratio given as a number, or as a spread over rounds."""
    return _spread(value) if isinstance(value, dict) else _x(value)


def _median_ratio(value) -> str:
    return _x(value["median"] if isinstance(value, dict) else value)


def decode_tables(result: dict) -> str:
    per_req = table(
        ["per-request method (256 running requests, 1 token each)", "step", "vs torch"],
        [[r["method"], _us(r["step_us"]), _ratio(r["speedup"])] for r in result["per_request"]],
    )
    steps = (
        paragraph(
            "One whole step by the vLLM V1 design and by the tracker: `prepare` with the previous step's ids (same "
            "batch) and with new ids (new batch), and `prepare_slots`. Speedups: V1's time / ours, medians (the "
            "spreads are in the table below)."
        )
        + "\n\n"
        + table(
            ["step", "V1 design", "same batch", "speedup", "new batch", "speedup", "prepare_slots", "speedup"],
            [
                [
                    r["step"],
                    _us(r["v1_us"]),
                    _us(r["prepare_us"]),
                    _median_ratio(r["speedup_prepare"]),
                    _us(r["prepare_new_batch_us"]),
                    _median_ratio(r["speedup_prepare_new_batch"]),
                    _us(r["prepare_slots_us"]),
                    _median_ratio(r["speedup_slots"]),
                ]
                for r in result["steps"]
            ],
        )
    )
    parts = [per_req, steps]
    if result.get("forms"):
        parts.append(
            table(
                ["step", "entry point and argument forms", "per step", "vs V1 design"],
                [
                    [_case(r["step"]).split(":")[0], r["entry"], _us(r["us"]), _ratio(r["speedup"])]
                    for r in result["forms"]
                ],
            )
        )
    parts.append(
        table(
            ["a decode step's kernel call, 256 requests (same body)", "per call"],
            [[r["call"], _us(r["step_us"])] for r in result.get("dispatch", [])],
        )
    )
    return "\n\n".join(parts)


def admission_tables(result: dict) -> str:
    names = ["tracker (ranges)", "tracker (tokens)", "V1 design", "MRV2-like"]
    rows = [[f"{r['cached_tokens']:,} of {r['prompt_tokens']:,}", *(_us(r[n]) for n in names)] for r in result["rows"]]
    growth = result["growth_32k_over_1k"]
    rows.append(
        ["32K / 1K", *(_spread(growth[n], 2) if isinstance(growth[n], dict) else f"{growth[n]:.2f}x" for n in names)]
    )
    out = table(["cached prefix", *names], rows)
    features = result.get("from_features")
    if features:
        ratios = features["vs_prompt_positions"]
        head = paragraph(
            f"**From vLLM's inputs**: {features['case']} ({features['prompt_tokens']:,} tokens, "
            f"{features['frames']} frame blocks), the prompt ids as a Python list and one feature whose is_embed "
            "marks the frames. Each design's time over `prompt_positions` writing the same prompt's positions from "
            "an int64 array, paired round by round: median (min–max). Target: the tracker's admission < 0.5x."
        )
        feature_rows = [[name, _us(features["us"][name]), _spread(ratios[name], 2)] for name in ratios]
        feature_rows.append(
            ["prompt_positions (int64 array)", _us(features["us"]["prompt_positions (int64 array)"]), "1.00x"]
        )
        out += "\n\n" + head + "\n\n" + table(["design", "per call", "/ prompt_positions"], feature_rows)
    return out


def scheduler_tables(result: dict) -> str:
    out = [
        paragraph(
            "CPU time: everything a design spends on positions over the whole run, admission included, the median "
            "over whole replays; / tracker: that time over mrope_tracker's, paired replay by replay: median "
            "(min–max); then the median step's over mrope_tracker's. Memory: what holds request positions, at its "
            "peak. An `ids to slots` row is the id-to-slot mapping that design leaves outside its own row."
        )
    ]
    for sc in result["scenarios"]:
        head = paragraph(
            f"**{sc['scenario']}. {sc['title']}**: {sc['requests']:,} requests, {sc['steps']:,} steps, "
            f"{sc['tokens']:,} tokens, max_num_seqs {sc['max_num_seqs']}, "
            f"max_num_batched_tokens {sc['max_num_batched_tokens']:,}"
        )
        rows = [
            [
                d["design"].replace(" (outside its row)", ""),
                f"{d['total_ms']:,.1f} ms",
                _spread(d["total_vs_tracker_spread"], 2)
                if "total_vs_tracker_spread" in d
                else _x(d["total_vs_tracker"]),
                "–" if d["admit_ms"] is None else f"{d['admit_ms']:,.1f} ms",
                _us(d["step_median_us"]),
                _x(d["step_vs_tracker"]),
                _bytes(d["peak_bytes"]),
            ]
            for d in sc["designs"] + sc.get("id_mapping", [])
        ]
        out.append(
            head
            + "\n\n"
            + table(["design", "CPU time", "/ tracker", "admission", "median step", "/ tracker", "memory"], rows)
        )
    return "\n\n".join(out)


def memory_tables(result: dict) -> str:
    rows = [
        [
            f"{r['max_num_reqs']:,} x {r['prompt_tokens']:,} ({r['max_model_len']:,})",
            str(r["images_per_request"]),
            _bytes(r["v1_bytes"]),
            _bytes(r["mrv2_bytes"]),
            _bytes(r["tracker_request_state_bytes"]),
            _bytes(r["tracker_bytes"]),
            f"{r['v1_per_request_bytes']:,} B",
            f"{r['tracker_per_request_bytes']:,} B",
        ]
        for r in result["rows"]
    ]
    device_rows = [
        [
            f"{r['max_num_reqs']:,} x {r['prompt_tokens']:,} ({r['max_model_len']:,})",
            str(r["images_per_request"]),
            _bytes(r["mrv2_bytes"]),
            _bytes(r["rope_state_device_bytes"]),
            _bytes(r["rope_state_pinned_bytes"]),
            f"{r['rope_state_rows_used']:,} / {r['rope_state_max_num_rows']:,}",
        ]
        for r in result["rows"]
        if "rope_state_device_bytes" in r
    ]
    return (
        paragraph(
            "Host memory that holds request positions. Tracker: its per-request state (slots and layout rows); all "
            "buffers: with the step buffers too. Max len: max_model_len. Per request: V1's (3, prompt) int64 "
            "positions, the tracker's slot and layout rows."
        )
        + "\n\n"
        + table(
            [
                "requests x prompt (max len)",
                "images",
                "vLLM V1",
                "MRV2-like",
                "tracker",
                "all buffers",
                "V1 / req",
                "tracker / req",
            ],
            rows,
        )
        + (
            "\n\n"
            + paragraph(
                "The device design for Model Runner V2: vLLM's own state is the MRV2-like table, in pinned host "
                "memory; RopeState keeps a fixed device state (slot records, a row pool sized by its row budget, "
                "the positions buffer, a staging copy) and two small pinned staging buffers, whatever "
                "max_model_len. Rows used: the pool rows the requests' layouts take, of its budget."
            )
            + "\n\n"
            + table(
                [
                    "requests x prompt (max len)",
                    "images",
                    "MRV2 table",
                    "RopeState",
                    "pinned",
                    "rows used",
                ],
                device_rows,
            )
            if device_rows
            else ""
        )
    )


FORMATTERS = {
    "prompt": prompt_tables,
    "decode": decode_tables,
    "admission": admission_tables,
    "scheduler": scheduler_tables,
    "memory": memory_tables,
}


def _formatter(suite: str):
    """The suite's table maker: ours above, or the suite module's own `tables`."""
    if suite in FORMATTERS:
        return FORMATTERS[suite]
    module = importlib.import_module(f"{__package__}.suite_{suite}")
    return module.tables


def markdown(results: dict) -> str:
    parts = []
    for suite, result in results["suites"].items():
        parts.append(f"### {suite}\n\n{_formatter(suite)(result)}")
    return "\n\n".join(parts)


def _med(value) -> float:
    """A ratio's median, whether it comes as a number or as a spread."""
    return value["median"] if isinstance(value, dict) else value


def _errors(spreads: list) -> list[list[float]] | None:
    """matplotlib error bars (below, above) from spreads; None if any is a number."""
    if not all(isinstance(v, dict) for v in spreads):
        return None
    return [[v["median"] - v["min"] for v in spreads], [v["max"] - v["median"] for v in spreads]]


def _title(ax, text: str) -> None:
    """A panel title wrapped to the panel's width (10 inches at matplotlib's default title size)."""
    ax.set_title("\n".join(textwrap.fill(line, 90, break_on_hyphens=False) for line in text.split("\n")))


def _plot_seed(ax, r: dict) -> None:
    """The seed panel: speedups over the seed design, grids as lists and as arrays."""
    labels = [x["case"].split(",")[0] for x in r["seed"]]
    xs = list(range(len(labels)))
    for shift, key, tag, color in (
        (-0.2, "speedup_lists", "grids as lists", "#e08e3c"),
        (0.2, "speedup_arrays", "grids as arrays", "#3b75af"),
    ):
        spreads = [x[key] for x in r["seed"]]
        ax.bar(
            [x + shift for x in xs],
            [_med(v) for v in spreads],
            width=0.4,
            color=color,
            label=tag,
            yerr=_errors(spreads),
            capsize=2,
        )
    ax.axhline(1.5, color="grey", lw=0.8, ls="--")
    ax.axhline(1.0, color="black", lw=0.6)
    ax.legend(loc="upper left", fontsize=7)
    _title(ax, "prompt_positions: speedup over the seed PR's design (dashed: 1.5x target)")
    ax.set_xticks(xs)
    ax.set_xticklabels(labels, rotation=35, ha="right", fontsize=7)


def plot(results: dict, path: str) -> None:
    """A chart of the headline ratios, one panel per suite that ran (two for
    `prompt`); error bars span the min and max over rounds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    suites = results["suites"]
    panels = []
    if "prompt" in suites:
        panels += [("seed", suites["prompt"])] if suites["prompt"].get("seed") else []
        panels += [("prompt", suites["prompt"])]
    panels += [(s, suites[s]) for s in ("decode", "scheduler", "memory") if s in suites]
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 3.6 * len(panels)), squeeze=False)
    for ax, (panel, r) in zip(axes[:, 0], panels):
        log, yerr = True, None
        if panel == "seed":
            _plot_seed(ax, r)
            continue
        if panel == "prompt":
            rows = r["rows"] + r.get("families", [])
            labels = [f"{x['family']}: {x['case'].split(',')[0]}" for x in rows]
            values = [_med(x["speedup"]) for x in rows]
            yerr = _errors([x["speedup"] for x in rows])
            ceilings = [_med(x["ceiling"]) if "ceiling" in x else x["reference_us"] / x["floor_us"] for x in rows]
            ax.scatter(
                range(len(ceilings)),
                ceilings,
                marker="_",
                s=400,
                color="#c0392b",
                zorder=3,
                label="ceiling: reference / write floor",
            )
            ax.axhline(100, color="grey", lw=0.8, ls="--")
            ax.legend(loc="upper right", fontsize=7)
            _title(ax, "prompt_positions: speedup over the torch reference, one thread (dashed: 100x)")
        elif panel == "decode":
            labels, spreads = [], []
            for key, tag in (
                ("speedup_prepare", "ids, same batch"),
                ("speedup_prepare_new_batch", "ids, new batch"),
                ("speedup_slots", "slots"),
            ):
                labels += [x["step"].split(",")[0] + f" / {tag}" for x in r["steps"] if key in x]
                spreads += [x[key] for x in r["steps"] if key in x]
            values, yerr = [_med(v) for v in spreads], _errors(spreads)
            ax.axhline(15, color="grey", lw=0.8, ls=":")
            ax.axhline(50, color="grey", lw=0.8, ls="--")
            _title(ax, "one scheduler step: speedup over the vLLM V1 design (targets: 15x by ids, 50x by slots)")
        elif panel == "scheduler":
            labels, values = [], []
            for sc in r["scenarios"]:
                for d in sc["designs"][:-1]:
                    short = d["design"].split(" (")[0] + (" slots" if "(slots)" in d["design"] else "")
                    labels.append(f"{sc['scenario']}: {short}")
                    values.append(d["total_vs_tracker"])
            _title(
                ax,
                "simulated scheduler: position CPU time, design / tracker\n"
                "(MRV2-like and tracker slots: without their id mapping)",
            )
        else:
            labels, values = [], []
            for x in r["rows"]:
                tag = f"{x['max_num_reqs']}x{x['max_model_len'] // 1024}K, {x['images_per_request']} img"
                labels += [f"{tag}: V1", f"{tag}: MRV2", f"{tag}: tracker"]
                values += [x["v1_bytes"] / MiB, x["mrv2_bytes"] / MiB, x["tracker_request_state_bytes"] / MiB]
            _title(ax, "host memory for request positions (MiB)")
        ax.bar(range(len(values)), values, color="#3b75af", yerr=yerr, capsize=2)
        if log:
            ax.set_yscale("log")
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels(labels, rotation=35, ha="right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
