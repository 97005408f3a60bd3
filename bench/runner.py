"""Runs the benchmark suites and gathers their results with the context
needed to read them (machine, versions, command)."""

from __future__ import annotations

import datetime
import os
import platform
import sys
import time

import numba
import numpy as np
import torch

from mrope_tracker import warmup

from . import (
    baselines,
    suite_admission,
    suite_decode,
    suite_evs,
    suite_hf,
    suite_memory,
    suite_prompt,
    suite_rope,
    suite_scheduler,
    suite_startup,
)

SUITES = {
    "prompt": suite_prompt.run,
    "decode": suite_decode.run,
    "admission": suite_admission.run,
    "scheduler": suite_scheduler.run,
    "memory": suite_memory.run,
    "hf": suite_hf.run,
    "startup": suite_startup.run,
    "evs": suite_evs.run,
    "rope": suite_rope.run,
}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict:
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": numba.__version__,
        "torch": torch.__version__,
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
    }


def run(suites: list[str], quick: bool, progress) -> dict:
    start = time.perf_counter()
    progress("warming up the kernels (compiles on a cold cache, loads them otherwise)")
    warm = warmup()
    baselines.warm_up()
    results = {"machine": machine(), "quick": quick, "warmup_s": warm, "suites": {}}
    for name in suites:
        results["suites"][name] = SUITES[name](quick, progress)
    results["elapsed_s"] = time.perf_counter() - start
    return results
