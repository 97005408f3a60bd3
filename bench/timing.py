"""Timing helpers: interleaved rounds, per-round samples, ratios with their spread.

The machines are shared and noisy, so absolute times mean little. Every
comparison runs its contenders in alternating rounds (A, B, A, B, ...), each
round timing a batch of calls with `perf_counter`. `measure` keeps every
round's per-call time; `compare` reports each contender's median; `ratio`
pairs the rounds of two contenders (round k of A against round k of B, which
ran moments apart) and reports the median, min and max of those ratios. All
kernels are warmed before anything is timed (`runner.run`).

On a machine shared with other work, set ``MROPE_BENCH_CLOCK=thread``: the
rounds are then timed by this thread's CPU time (`time.thread_time`), which
leaves out the time other processes hold the cores. Torch runs on one
thread in the suites that compare with it, and our kernels run on the
calling thread, so nothing timed runs elsewhere.
"""

from __future__ import annotations

import contextlib
import gc
import os
import time
from collections.abc import Callable

import torch

# The clock of `measure` and `calls_per_round` (the module docstring says when to pick the thread's CPU time).
clock = time.thread_time if os.environ.get("MROPE_BENCH_CLOCK") == "thread" else time.perf_counter


def calls_per_round(fn: Callable[[], object], target_s: float = 0.01, cap: int = 100_000) -> int:
    """How many calls make a round of about target_s (at least 1)."""
    fn()
    start = clock()
    n = 0
    while clock() - start < target_s / 10 and n < cap:
        fn()
        n += 1
    elapsed = (clock() - start) / max(n, 1)
    return max(1, min(cap, int(target_s / max(elapsed, 1e-9))))


def measure(
    contenders: dict[str, Callable[[], object]], rounds: int = 15, target_s: float = 0.01
) -> dict[str, list[float]]:
    """Seconds per call of each contender, one value per round, in interleaved rounds."""
    counts = {name: calls_per_round(fn, target_s) for name, fn in contenders.items()}
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    gc_was_enabled = gc.isenabled()
    gc.disable()  # a collection landing in one contender's round is noise
    try:
        for _ in range(rounds):
            for name, fn in contenders.items():
                n = counts[name]
                start = clock()
                for _ in range(n):
                    fn()
                samples[name].append((clock() - start) / n)
            # the young generations only: a full collection walks every object
            # torch and transformers created, which would dwarf short rounds
            gc.collect(1)
    finally:
        if gc_was_enabled:
            gc.enable()
    return samples


def compare(contenders: dict[str, Callable[[], object]], rounds: int = 15, target_s: float = 0.01) -> dict[str, float]:
    """Median seconds per call of each contender, measured in interleaved rounds."""
    return {name: _median(values) for name, values in measure(contenders, rounds, target_s).items()}


def ratio(samples: dict[str, list[float]], numerator: str, denominator: str) -> dict[str, float]:
    """numerator / denominator round by round: {"median", "min", "max"}."""
    per_round = [a / b for a, b in zip(samples[numerator], samples[denominator])]
    return {"median": _median(per_round), "min": min(per_round), "max": max(per_round)}


def medians_us(samples: dict[str, list[float]]) -> dict[str, float]:
    """Median microseconds per call of each contender."""
    return {name: _median(values) * 1e6 for name, values in samples.items()}


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])


median = _median


@contextlib.contextmanager
def torch_threads(num_threads: int = 1):
    """Run torch on `num_threads` intra-op threads, as our kernels run on one;
    the previous setting comes back afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(num_threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


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
