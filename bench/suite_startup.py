"""Suite `startup`: what an engine pays when it starts.

`warmup()` is timed in fresh processes:
- on an empty numba cache (`NUMBA_CACHE_DIR` set to a new folder: every
  kernel compiles), as it runs by default (the compile forked into two
  processes where the machine has two cores or more), as it runs by default
  while another Python thread runs (fresh interpreters instead of forks),
  and with `jobs=1` (all in one process);
- on the cache the default run filled (every kernel loads).

Each of the default and the filled-cache runs is repeated three times
(once with --quick) and reported as the median, with the range.

The import of `mrope_tracker` (which imports torch and numba) is timed
apart. Absolute times are the point here; they depend on the machine, which the
report names.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

_CHILD = """
import json, sys, threading, time
stop = threading.Event()
if sys.argv[1] == "threaded":  # another Python thread runs, as in an engine
    threading.Thread(target=stop.wait).start()
start = time.perf_counter()
import mrope_tracker
imported = time.perf_counter()
stages = mrope_tracker.warmup(jobs=None if sys.argv[1] in ("auto", "threaded") else int(sys.argv[1]))
done = time.perf_counter()
stop.set()
print(json.dumps({"import_s": imported - start, "warmup_s": done - imported, "stages": stages}))
"""


def _child(cache_dir: str, jobs: str = "auto") -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    out = subprocess.run([sys.executable, "-c", _CHILD, jobs], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _median_run(runs: list[dict]) -> dict:
    """The run of median warmup() time, with every run's time beside it."""
    ordered = sorted(runs, key=lambda r: r["warmup_s"])
    return dict(ordered[len(ordered) // 2], all_warmup_s=[r["warmup_s"] for r in ordered])


def run(quick: bool, progress) -> dict:
    """Cold and warm starts as the median of three runs each (one with
    --quick): single compiles on one machine vary by several percent within
    an hour, so one run says little."""
    repeats = 1 if quick else 3
    cold, warm = [], []
    for k in range(repeats):
        with tempfile.TemporaryDirectory(prefix="mrope-numba-cache-") as cache_dir:
            progress(f"startup: warmup() on an empty numba cache (compiles every kernel) ({k + 1}/{repeats})")
            cold.append(_child(cache_dir))
            if k == 0:
                progress("startup: warmup() on the cache it filled")
                warm = [_child(cache_dir) for _ in range(repeats)]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    result = {"cold": _median_run(cold), "warm": _median_run(warm), "runs": repeats, "cores": cores}
    if not quick:
        with tempfile.TemporaryDirectory(prefix="mrope-numba-cache-") as cache_dir:
            progress("startup: warmup() on an empty numba cache, another thread running (fresh processes)")
            result["cold_threaded"] = _child(cache_dir, "threaded")
        with tempfile.TemporaryDirectory(prefix="mrope-numba-cache-") as cache_dir:
            progress("startup: warmup(jobs=1) on an empty numba cache (one process)")
            result["cold_one_process"] = _child(cache_dir, "1")
    return result


def tables(result: dict) -> str:
    from .report import paragraph, table

    runs = result["runs"]
    of = f", median of {runs}" if runs > 1 else ""
    labels = {
        "cold": "cold",
        "cold_threaded": "cold, threads",
        "cold_one_process": "cold, jobs=1",
        "warm": "warm",
    }
    done = [name for name in labels if name in result]
    head = paragraph(
        f"On {result.get('cores', '?')} usable cores. cold: an empty numba cache, `warmup()` as it runs by default "
        f"(the compile forked where there are 2+ cores){of}; cold, threads: the same while another Python thread "
        f"runs, as in an engine (fresh interpreters compile instead of forks); cold, jobs=1: the same in one "
        f"process; warm: the cache the cold run filled{of}. Times in seconds."
    )
    rows = []
    for name in done:
        r = result[name]
        times = r.get("all_warmup_s", [])
        spread = f" ({times[0]:.2f}–{times[-1]:.2f})" if len(times) > 1 else ""
        rows.append(
            [
                labels[name],
                f"{r['import_s']:.2f}",
                f"**{r['warmup_s']:.2f}**{spread}",
            ]
        )
    runs_table = table(["numba cache", "import mrope_tracker", "warmup()"], rows)
    stages = list(dict.fromkeys(stage for name in done for stage in result[name]["stages"]))
    stage_rows = [
        [stage, *(f"{result[name]['stages'][stage]:.2f}" if stage in result[name]["stages"] else "–" for name in done)]
        for stage in stages
    ]
    stage_table = table(["warmup() stage", *(labels[name] for name in done)], stage_rows)
    return head + "\n\n" + runs_table + "\n\n" + stage_table
