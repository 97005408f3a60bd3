"""The one place that sets numba options for every kernel in the package.

- cache=True: compiled code is written next to the modules (or to
  NUMBA_CACHE_DIR), so an engine restart loads machine code instead of
  recompiling.
- nogil=True: kernels run without the GIL, so a runner's other threads go on
  (all but the `helper_with_gil` entry points, below).
- boundscheck=False: inputs are validated by the Python wrappers before any
  kernel runs (see ..inputs).

`jit` is for entry points that allocate (and so need numba's runtime, the
NRT). `helper` is for functions that never allocate, mostly called by other
kernels (a few, the builders and fills, are also called from Python):
compiled without the NRT, they do no reference counting on the arrays they
receive.
With it, a call passing arrays costs ~50 ns of atomic refcount updates
(measured: 20 calls passing 4 arrays, 1250 ns; without NRT, 296 ns, the same
as inlined), which is more than most helpers' work; without it LLVM inlines
them at link time. (numba's own inline="always" removes the cost too, but
made the cold compile 5x slower.)

The entry points (`jit`, `helper`, `helper_with_gil`) load from the cache
without numba's compiler set-up (see cache_load): a warm start then costs
what loading our own machine code costs.
"""

import numba

from .cache_load import with_lean_cache_loads

jit = with_lean_cache_loads(numba.njit(cache=True, nogil=True, boundscheck=False))
helper = with_lean_cache_loads(numba.njit(cache=True, nogil=True, boundscheck=False, _nrt=False))
# `inner` helpers are only ever called from other kernels: numba skips the
# CPython and cfunc wrappers it would otherwise build for each one, and our
# pipeline skips their machine code (see link_only), which are a good part
# of a cold compile. If numba's internals have moved, numba's own pipeline.
try:
    from .link_only import LinkOnlyCompiler

    _INNER_PIPELINE = {"pipeline_class": LinkOnlyCompiler}
except (ImportError, AttributeError):  # pragma: no cover (a numba whose internals moved)
    _INNER_PIPELINE = {}
inner = numba.njit(
    cache=True,
    nogil=True,
    boundscheck=False,
    _nrt=False,
    no_cpython_wrapper=True,
    no_cfunc_wrapper=True,
    **_INNER_PIPELINE,
)
# `tiny` helpers (a few lines each) are inlined into their callers' numba IR
# and never compiled on their own: a separately compiled function is
# optimised and code-generated again inside every caller's module, which made
# a dozen two-line helpers cost more than the builders (measured: 18% less CPU
# for the first prompt_positions; inlining the larger helpers too gained
# nothing, and all of them made the cold compile 5x slower).
# For the short entry points of `prompt_positions`: releasing and retaking
# the GIL costs ~35 ns a call (measured, empty kernel: 0.146 vs 0.111 us),
# a good part of a short prompt's call; and for its list decoder, the GIL it
# keeps is what makes sharing its module-level scratch buffer safe.
helper_with_gil = with_lean_cache_loads(numba.njit(cache=True, nogil=False, boundscheck=False, _nrt=False))
tiny = numba.njit(cache=True, nogil=True, boundscheck=False, _nrt=False, inline="always")
