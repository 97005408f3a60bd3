"""A fresh compile child (`forked_compile.compile_in_fresh_processes`).

``python -m mrope_tracker.compile_child LOCK_PATH PACKAGE PLAN`` with the
task queue's read end on file descriptor 3: the tasks of warmup's pickled
PLAN (hex) are made again here, and the child runs whichever the queue hands
it, saving to numba's cache one child at a time (the lock on LOCK_PATH).
It exits with 2, running nothing, when the package it imported is not the
parent's (PACKAGE, its folder): numba keys its cache on the source files, so
compiling others would fill the cache for nothing.
"""

from __future__ import annotations

import os
import pickle
import sys


def main(argv: list[str]) -> int:
    lock_path, package, plan = argv
    from . import forked_compile
    from .kernels.jit_options import lighter_optimisation
    from .warmup import plan_tasks  # (the package's `warmup` is the function)

    if os.path.dirname(os.path.abspath(forked_compile.__file__)) != package:
        return 2
    tasks = plan_tasks(*pickle.loads(bytes.fromhex(plan)))  # noqa: S301 (the parent's own plan)
    forked_compile.serialize_saves(lock_path)
    with lighter_optimisation():
        return forked_compile.work(tasks, forked_compile.CHILD_QUEUE_FD)


if __name__ == "__main__":  # pragma: no cover (run in the children; what they compile the parent loads)
    sys.exit(main(sys.argv[1:]))
