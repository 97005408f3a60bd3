"""Timing helpers: medians of interleaved rounds, ratios within one process.

The machines are shared and noisy, so absolute times mean little. Every
comparison runs its contenders in alternating rounds (A, B, A, B, ...), each
round timing a batch of calls with `perf_counter`, and reports the median
per-call time of each and the ratio of medians. All kernels are warmed first.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable


def calls_per_round(fn: Callable[[], object], target_s: float = 0.01, cap: int = 100_000) -> int:
    """How many calls make a round of about target_s (at least 1)."""
    fn()
    start = time.perf_counter()
    n = 0
    while time.perf_counter() - start < target_s / 10 and n < cap:
        fn()
        n += 1
    elapsed = (time.perf_counter() - start) / max(n, 1)
    return max(1, min(cap, int(target_s / max(elapsed, 1e-9))))


def compare(contenders: dict[str, Callable[[], object]], rounds: int = 15, target_s: float = 0.01) -> dict[str, float]:
    """Median seconds per call of each contender, measured in interleaved rounds."""
    counts = {name: calls_per_round(fn, target_s) for name, fn in contenders.items()}
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    gc_was_enabled = gc.isenabled()
    gc.disable()  # a collection landing in one contender's round is noise
    try:
        for _ in range(rounds):
            for name, fn in contenders.items():
                n = counts[name]
                start = time.perf_counter()
                for _ in range(n):
                    fn()
                samples[name].append((time.perf_counter() - start) / n)
            gc.collect()
    finally:
        if gc_was_enabled:
            gc.enable()
    return {name: _median(values) for name, values in samples.items()}


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])


median = _median


class Stopwatch:
    """Accumulates time spent inside `with watch:` blocks, and each block's duration."""

    def __init__(self) -> None:
        self.total = 0.0
        self.laps: list[float] = []
        self._start = 0.0

    def __enter__(self):
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        lap = time.perf_counter() - self._start
        self.total += lap
        self.laps.append(lap)
