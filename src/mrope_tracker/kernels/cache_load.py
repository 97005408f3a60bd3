"""Loading our kernels from numba's cache without numba's compiler set-up.

Before it reads a cache entry, numba's loader calls the target context's
``refresh()``, which imports and installs every typing and lowering registry
numba has (linalg, random, typed containers, datetime, third-party
extensions): 0.2-0.3 s on the 2-core development VM, most of what a warm
start cost (numba 0.68). Machine code that is already compiled needs none
of that to run. It needs the symbols it links against: numba's C helpers
(registered when numba is imported), its math externals (registered when
the target context is made) and, for the kernels that allocate, the NRT,
which the loader below initialises itself. (numba registers one more set of
symbols on import, in numba.cpython.hashing, for code that hashes: dicts,
sets, strings. No kernel here does; tests/test_warmup.py loads every
kernel warmup() reaches this way in a fresh process and runs it, so one
that did would be caught.)

So for our own dispatchers the cache is read directly. A miss still returns
None, and the dispatcher then compiles, which runs numba's full set-up
first (its compiler does). If numba's private names below move, the
dispatcher keeps numba's own loader: slower to start, never wrong.
"""

from __future__ import annotations

import sys


def compiler_set_up_ran() -> bool:
    """Whether numba's compiler set-up has run in this process: it imports
    numba.np.linalg, and nothing else in numba does."""
    return "numba.np.linalg" in sys.modules


def load_without_compiler_setup(dispatcher):
    """Make `dispatcher` read numba's cache without numba's registry set-up;
    returns the dispatcher."""
    cache = getattr(dispatcher, "_cache", None)
    try:
        from numba.core.runtime import rtsys

        read = cache._load_overload
        guard = cache._guard_against_spurious_io_errors
    except (AttributeError, ImportError):
        return dispatcher

    def load_overload(sig, target_context):
        rtsys.initialize(target_context)  # the NRT; a no-op after the first time
        with guard():
            return read(sig, target_context)
        return None  # (the guard swallowed an I/O error: compile instead)

    cache.load_overload = load_overload
    return dispatcher


def with_lean_cache_loads(decorator):
    """`decorator` (a configured numba.njit) whose dispatchers load as above."""

    def decorate(function):
        return load_without_compiler_setup(decorator(function))

    return decorate
