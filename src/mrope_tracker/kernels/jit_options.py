"""The one place that sets numba options for every kernel in the package.

- cache=True: compiled code is written next to the modules (or to
  NUMBA_CACHE_DIR), so an engine restart loads machine code instead of
  recompiling.
- nogil=True: kernels run without the GIL, so a runner's other threads go on
  (all but the `helper_with_gil` entry points, below).
- boundscheck=False: inputs are validated by the Python wrappers before any
  kernel runs (see ..inputs).

The decorators, by who calls the function:
- `jit`: entry points that allocate, and so need numba's runtime (the NRT).
- `helper`: functions that never allocate, called from Python and from
  other kernels. They are compiled without the NRT: with it, every call
  that passes arrays updates their reference counts atomically, which costs
  more than most helpers' work; without it LLVM inlines them at link time.
- `inner`: helpers only other kernels call. numba skips the CPython and
  cfunc wrappers it would otherwise build for each, a part of a cold
  compile that nothing would use.
- `tiny`: helpers inlined into their callers' numba IR and never compiled
  on their own: those of a few lines, and those each caller calls from one
  place only (an emitter a builder calls once). A separately compiled function is a library of its own that links
  in everything it calls, and numba optimises and code-generates that whole
  closure again for the library and then inside every caller's module:
  this made a dozen two-line helpers cost more than the builders, and each
  single-call emitter cost its callee tree once more. Inlining the larger
  helpers that are called from many places (push_row, flush_text, the
  writers) made the cold compile slower instead, since numba types and
  lowers an inlined body once per call site. Large single-call bodies can
  cost more inlined than compiled apart, too: numba re-runs a callee's
  untyped passes and deep-copies its IR for each inlining, which grows
  faster than the body. `inner` suits the ranges builder's `_place_range`
  and the SGLang pass's `_vision` and `_av` (1.6 and 0.7 CPU seconds less
  on a cold compile); the token builder's item readers stay `tiny`, whose
  calls per item it would slow. An `inner` callee is compiled once per
  argument-type signature, and a bare constant argument (``0``, ``-1``)
  is a signature of its own (Literal[int]): pass ``np.int64(0)``.
- `helper_with_gil`: the token builder, `prompt_positions`' kernel. A short
  prompt is over in about a microsecond, and releasing and retaking the GIL
  would be a good part of it; the GIL it keeps is also what makes sharing
  the caller's module-level scratch buffer safe.

Three options are not in numba's documented list: `_nrt` (with its
leading underscore), `no_cpython_wrapper` and `no_cfunc_wrapper`. They only
save time (a call's reference counting; a cold compile's unused wrappers),
so each has a public fallback: without them the kernels compute the same
(tests/test_kernel_cache.py runs kernels built both ways). They are used on
the numba versions CI runs, the oldest and newest we declare
(TESTED_NUMBA); on any other, a one-off probe at import compiles a trivial
function with them (numba checks options when it compiles, not when it
decorates) and leaves them out if that fails.
MROPE_TRACKER_NUMBA_PUBLIC_ONLY=1 leaves them out everywhere.

`lighter_optimisation` (what `warmup()` compiles under) lowers numba's
documented optimisation setting (NUMBA_OPT, as `numba.config.OPT`) while it
holds numba's compiler lock, not a documented name either: without the
lock, or under MROPE_TRACKER_NUMBA_PUBLIC_ONLY=1, it leaves the level as it
is, and the kernels compile at the user's level to the same positions.

One method is numba's without being in its user documentation either:
`Dispatcher.disable_compile`, which seals an entry point after its
signatures are compiled. `set_compiling` calls it where it exists and does
nothing where it does not; then a call of another type compiles a new
specialisation instead of raising (the callers check their arguments'
types in Python first, so positions are the same either way).
"""

import contextlib
import os
import re
import threading

import numba

# The numba versions CI runs (.ci/run: OLDEST, and the newest at the time of writing), (major, minor).
TESTED_NUMBA = ((0, 60), (0, 68))
PRIVATE_OPTIONS = ("_nrt", "no_cpython_wrapper", "no_cfunc_wrapper")


def _probe():  # compiled only by the probe below
    return 0


def private_options_accepted(version: str = numba.__version__) -> bool:
    """Whether to pass PRIVATE_OPTIONS: on a tested numba, or when this numba compiles with them."""
    if _public_only():
        return False
    match = re.match(r"(\d+)\.(\d+)", version)
    if match and TESTED_NUMBA[0] <= (int(match[1]), int(match[2])) <= TESTED_NUMBA[1]:
        return True
    try:
        numba.njit(_nrt=False, no_cpython_wrapper=True, no_cfunc_wrapper=True)(_probe).compile(())
    except Exception:  # an option this numba no longer takes (numba raises KeyError naming it)
        return False
    return True


def options(**private) -> dict:
    """`private` options (of PRIVATE_OPTIONS) when this numba takes them, else none."""
    return private if PRIVATE else {}


def set_compiling(dispatcher, enabled: bool) -> bool:
    """Let `dispatcher` compile new signatures or not; False where this numba
    has no `disable_compile` (its dispatchers then always compile)."""
    switch = getattr(dispatcher, "disable_compile", None)
    if switch is None:
        return False
    switch(not enabled)
    return True


# The LLVM optimisation level warmup() compiles the kernels at (numba's
# NUMBA_OPT, 3 by default), all but the per-step ones (`full_optimisation`).
# They are memory-bound scans and writes: at level 1 the prompt, SGLang and
# admission calls ran as fast as at level 3, for a cheaper cold compile;
# the step kernel did not, so it keeps numba's level (docs/benchmarks.md,
# "Compiling at LLVM level 1").
WARMUP_OPT_LEVEL = 1
# (thread id, level it lowered from) of each `lighter_optimisation` open, innermost last.
_lowered_from: list = []


@contextlib.contextmanager
def lighter_optimisation(level: int = WARMUP_OPT_LEVEL):
    """numba's optimisation level (`numba.config.OPT`, the setting behind
    NUMBA_OPT) lowered to `level` for the compiles inside, then restored;
    yields whether it was lowered. Held under numba's compiler lock (not a
    documented name: numba.core.compiler_lock), so that no other thread of
    the process compiles at the lowered level meanwhile. Left alone where
    the user set NUMBA_OPT, where it is already at most `level`, where the
    setting is not the int numba has made of it since 0.55, where numba has
    no such lock, and under MROPE_TRACKER_NUMBA_PUBLIC_ONLY=1: the kernels
    then compile at the user's level, to the same positions.

    It lowers LLVM's optimisation passes only: the machine-code generator
    keeps the level numba started with. numba 0.60 builds its passes once,
    when its code generator starts (at the package's import), so there
    this changes nothing; 0.68 reads the setting per compile."""
    current = getattr(numba.config, "OPT", None)
    lock = None if _public_only() else numba_compiler_lock()
    if (
        lock is None
        or "NUMBA_OPT" in os.environ
        or not isinstance(current, int)
        or getattr(current, "is_opt_max", False)
        or current <= level
    ):
        yield False
        return
    with lock:
        numba.config.OPT = type(current)(level)  # (numba's own int subclass, as it makes one of NUMBA_OPT)
        _lowered_from.append((threading.get_ident(), current))
        try:
            yield True
        finally:
            _lowered_from.pop()
            numba.config.OPT = current


@contextlib.contextmanager
def full_optimisation():
    """Inside `lighter_optimisation`, in the thread that opened it: the level
    it lowered, back for the compiles inside (the kernels every scheduler
    step runs). Elsewhere nothing changes: another thread's compile waits
    for numba's lock, which the lowering thread holds, and then runs at the
    level restored."""
    if not _lowered_from or _lowered_from[-1][0] != threading.get_ident():
        yield
        return
    lowered = numba.config.OPT
    numba.config.OPT = _lowered_from[-1][1]
    try:
        yield
    finally:
        numba.config.OPT = lowered


def _public_only() -> bool:
    """Whether MROPE_TRACKER_NUMBA_PUBLIC_ONLY=1 keeps every undocumented numba name out."""
    return os.environ.get("MROPE_TRACKER_NUMBA_PUBLIC_ONLY") == "1"


def numba_compiler_lock():
    """numba's process-wide compiler lock (re-entrant; not a documented
    name: numba.core.compiler_lock), or None where this numba lacks it."""
    try:
        from numba.core.compiler_lock import global_compiler_lock
    except ImportError:
        return None
    return global_compiler_lock


PRIVATE = private_options_accepted()

jit = numba.njit(cache=True, nogil=True, boundscheck=False)
helper = numba.njit(cache=True, nogil=True, boundscheck=False, **options(_nrt=False))
inner = numba.njit(
    cache=True,
    nogil=True,
    boundscheck=False,
    **options(_nrt=False, no_cpython_wrapper=True, no_cfunc_wrapper=True),
)
tiny = numba.njit(cache=True, nogil=True, boundscheck=False, inline="always", **options(_nrt=False))
helper_with_gil = numba.njit(cache=True, nogil=False, boundscheck=False, **options(_nrt=False))
