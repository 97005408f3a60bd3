"""`mrope-tracker` command line: `bench` (the main job), `warmup`, and `compare`.

`bench` and `compare` share one output convention: Markdown tables on
stdout, and with `--json PATH` the full result as JSON in PATH too; `--json -`
(or a bare `--json`) puts the JSON on stdout and the tables on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch


def _progress_printer():
    start = time.perf_counter()

    def progress(message: str) -> None:
        print(f"[{time.perf_counter() - start:6.1f}s] {message}", file=sys.stderr, flush=True)

    return progress


def _write_json(result: dict, path: str) -> None:
    """The result as JSON in `path`, or on stdout for "-"."""
    text = json.dumps(result, indent=1)
    if path == "-":
        print(text)
        return
    with open(path, "w", encoding="utf-8") as f:
        f.write(text + "\n")


def _json_path_problem(path: str | None) -> str | None:
    """Why `--json` could not be written, or None (the check `bench` makes)."""
    from .bench.report import check_outputs

    return check_outputs(path, None)


def _add_json_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--json",
        nargs="?",
        const="-",
        metavar="PATH",
        help=f"also write {what} as JSON to PATH; '-' (or no PATH): the JSON on stdout, the tables on stderr",
    )


def _bench(args) -> int:
    if not torch.cuda.is_available():
        # RopeState's Triton kernels then run in triton's CPU interpreter (the admission suite), which
        # triton reads when first imported: before the suites import transformers, which may import it
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from .bench import report, runner  # the suites import matplotlib only to plot

    suites = list(runner.SUITES) if not args.suite else []
    for item in args.suite or []:
        for name in item.split(","):
            if name not in runner.SUITES:
                print(f"--suite: expected one of {', '.join(runner.SUITES)}, got {name!r}", file=sys.stderr)
                return 2
            suites.append(name)
    problem = report.check_outputs(args.json, args.plot)  # before minutes of benchmarks, not after
    if problem:
        print(problem, file=sys.stderr)
        return 2
    results = runner.run(list(dict.fromkeys(suites)), args.quick, _progress_printer())
    m = results["machine"]
    tables = sys.stderr if args.json == "-" else sys.stdout  # stdout is the JSON's alone
    print(
        f"\nmrope-tracker bench{' --quick' if args.quick else ''}: {m['cpu']}, {m['cores']} cores, "
        f"torch {m['torch']}, numba {m['numba']}, {results['elapsed_s']:.0f} s\n",
        file=tables,
    )
    print(report.markdown(results), file=tables)
    if args.json:
        _write_json(results, args.json)
        if args.json != "-":
            print(f"\nresults: {args.json}", file=sys.stderr)
    if args.plot:
        report.plot(results, args.plot)
        print(f"chart: {args.plot}", file=sys.stderr)
    return 0


def _warmup(args) -> int:
    from . import warmup

    try:
        timings = warmup(jobs=args.jobs)
    except ValueError as exc:
        print(f"mrope-tracker warmup: {exc}", file=sys.stderr)
        return 2
    for stage, seconds in timings.items():
        print(f"{stage:24s} {seconds:7.3f} s")
    print(f"{'total':24s} {sum(timings.values()):7.3f} s")
    return 0


def _compare(args) -> int:
    from .families import SEMANTICS
    from .hf import compare as hf_compare

    presets = [p for item in args.presets.split(",") for p in [item.strip()] if p] if args.presets else list(SEMANTICS)
    problem = _json_path_problem(args.json)  # before the comparison runs, not after
    if problem:
        print(f"mrope-tracker compare: {problem}", file=sys.stderr)
        return 2
    try:
        prompts = hf_compare.read_prompts(args.prompts) if args.prompts else None
        result = hf_compare.compare(args.config, prompts, presets, num_prompts=args.num_prompts, seed=args.seed)
    except (ValueError, TypeError, KeyError) as exc:
        print(f"mrope-tracker compare: {exc}", file=sys.stderr)
        return 2
    print(hf_compare.markdown(result), file=sys.stderr if args.json == "-" else sys.stdout)
    if args.json:
        _write_json(result, args.json)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="mrope-tracker", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    bench = sub.add_parser(
        "bench",
        help="run the benchmark suites on the built-in workloads",
        description="Benchmarks against the torch reference and re-implementations of vLLM's designs, "
        "measured as ratios in one process.",
    )
    bench.add_argument(
        "--suite",
        action="append",
        metavar="NAME",
        help="prompt, decode, admission, scheduler, memory, hf, startup, evs or rope "
        "(repeat or comma-separate; default: all)",
    )
    bench.add_argument("--quick", action="store_true", help="smaller workloads and fewer rounds (under a minute)")
    _add_json_option(bench, "every result and ratio")
    bench.add_argument("--plot", metavar="PATH", help="draw a PNG chart (needs matplotlib)")
    bench.set_defaults(handler=_bench)
    warm = sub.add_parser("warmup", help="compile every kernel into numba's cache (e.g. at image build time)")
    warm.add_argument(
        "--jobs",
        type=int,
        metavar="N",
        help="processes that may compile at once on a cold cache (default: one per core, at most 2; 1: no fork)",
    )
    warm.set_defaults(handler=_warmup)
    comp = sub.add_parser(
        "compare",
        help="where the semantics presets disagree on a model's prompts, and why",
        description="Positions every prompt under each semantics preset and reports, per pair of presets, the share "
        "of prompts that differ, the first differing token of an example, and the divergences (D1, D2, ...) that "
        "explain the differences.",
    )
    comp.add_argument("config", help="a config.json path, a model folder, or a model type (e.g. qwen2_5_vl)")
    comp.add_argument(
        "--prompts",
        metavar="PATH",
        help="JSONL, one prompt a line: token_ids and image_grid_thw, video_grid_thw, second_per_grid_ts, "
        "audio_feature_lengths, use_audio_in_video as needed (default: a built-in random sample)",
    )
    comp.add_argument("--presets", metavar="LIST", help="comma-separated presets (default: all four)")
    comp.add_argument("--num-prompts", type=int, default=200, metavar="N", help="size of the built-in sample (200)")
    comp.add_argument("--seed", type=int, default=0, help="seed of the built-in sample (0)")
    _add_json_option(comp, "the comparison")
    comp.set_defaults(handler=_compare)
    args = parser.parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
