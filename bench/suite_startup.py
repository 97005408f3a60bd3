"""Suite `startup`: what an engine pays when it starts.

`warmup()` is timed in fresh processes, first on an empty numba cache
(`NUMBA_CACHE_DIR` set to a new folder: every kernel compiles) and then on
the cache that run filled (every kernel loads). The import of
`mrope_tracker` (which imports torch and numba) is timed apart. Absolute
times are the point here; they depend on the machine, which the report
names.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

_CHILD = """
import json, time
start = time.perf_counter()
import mrope_tracker
imported = time.perf_counter()
stages = mrope_tracker.warmup()
done = time.perf_counter()
print(json.dumps({"import_s": imported - start, "warmup_s": done - imported, "stages": stages}))
"""


def _child(cache_dir: str) -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(quick: bool, progress) -> dict:
    with tempfile.TemporaryDirectory(prefix="mrope-numba-cache-") as cache_dir:
        progress("startup: warmup() on an empty numba cache (compiles every kernel)")
        cold = _child(cache_dir)
        progress("startup: warmup() on the cache it filled")
        warm = [_child(cache_dir) for _ in range(1 if quick else 3)]
    warm.sort(key=lambda r: r["warmup_s"])
    return {"cold": cold, "warm": warm[len(warm) // 2], "warm_runs": len(warm)}


def tables(result: dict) -> str:
    lines = [
        "| numba cache | import mrope_tracker (s) | warmup() (s) | stages (s) |",
        "|---|---|---|---|",
    ]
    for name, label in (("cold", "empty (everything compiles)"), ("warm", f"filled (median of {result['warm_runs']})")):
        r = result[name]
        stages = ", ".join(f"{k} {v:.2f}" for k, v in r["stages"].items())
        lines.append(f"| {label} | {r['import_s']:.2f} | **{r['warmup_s']:.2f}** | {stages} |")
    return "\n".join(lines)
