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
  place only (an emitter a builder calls once, the prompt entries' shared
  body). A separately compiled function is a library of its own that links
  in everything it calls, and numba optimises and code-generates that whole
  closure again for the library and then inside every caller's module:
  this made a dozen two-line helpers cost more than the builders, and each
  single-call emitter cost its callee tree once more. Inlining the larger
  helpers that are called from many places (push_row, flush_text, the
  writers) made the cold compile slower instead, since numba types and
  lowers an inlined body once per call site.
- `helper_with_gil`: the short entry points of `prompt_positions`. A call is
  over in microseconds, and releasing and retaking the GIL would be a good
  part of it; the GIL they keep is also what makes sharing the caller's
  module-level scratch buffer safe.

`_nrt=False` is the one option here with a leading underscore: numba has
accepted it since long before the oldest version we support, and CI runs
the suite on the oldest and the newest numba we declare, so a release that
dropped it would fail CI (numba checks options when it compiles, not when
it decorates, so no import-time fallback could tell).
"""

import numba

jit = numba.njit(cache=True, nogil=True, boundscheck=False)
helper = numba.njit(cache=True, nogil=True, boundscheck=False, _nrt=False)
inner = numba.njit(
    cache=True, nogil=True, boundscheck=False, _nrt=False, no_cpython_wrapper=True, no_cfunc_wrapper=True
)
tiny = numba.njit(cache=True, nogil=True, boundscheck=False, _nrt=False, inline="always")
helper_with_gil = numba.njit(cache=True, nogil=False, boundscheck=False, _nrt=False)
