"""Compile in forked children: `warmup()`'s way to use several cores on a
cold cache (numba's compiler holds one lock per process, so threads would
not help). A child only compiles and writes numba's cache; whatever happens to
it costs the parent only time, never correctness.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import tempfile
import threading
import time
import warnings

from .kernels.jit_options import lighter_optimisation, numba_compiler_lock

__all__ = ["CHILD_DEADLINE_S", "MAX_TASKS", "compile_in_children", "fork_guard"]

# A task compiles in seconds; a child still running after this long is
# stuck (a lock it inherited held), and is ended.
CHILD_DEADLINE_S = 300.0
# The queue holds one byte per task.
MAX_TASKS = 256


def compile_in_children(tasks, num_children: int = 2) -> None:
    """Run `tasks` (callables, longest first) in `num_children` forked
    children at once, and wait for them all (at most CHILD_DEADLINE_S).

    The children share one queue: a pipe holding the tasks' indices, from
    which each child takes the next one whenever it is free. So the work
    balances itself whatever each task costs on this machine and in this
    plan (a fixed split into groups once left one child with a third more
    work than the other), and a kernel that one child has compiled, the
    other loads from numba's cache rather than compiling it again. A task
    that fails costs only itself: its child goes on with the next.

    The children save to numba's cache one at a time (`_serialize_saves`):
    numba's cache index has no lock, and two processes that save different
    signatures of one function at the same moment can each pick the same
    data file, leaving one signature's key on the other's machine code. A
    numba without the method to wrap compiles in the parent only.

    A child only compiles (numba and numpy; no torch, no device, no lock of
    ours) and leaves by os._exit, so no atexit handler, buffered output or
    finaliser of the parent runs twice. numba's compiler lock is held across
    each fork, so that no other thread of the parent is inside numba when
    the child is made; the child, a copy of this thread, owns it (it is
    re-entrant). Python 3.12+ warns about forking a process with threads
    (torch starts native ones); that risk is a lock held by a thread that is
    gone in the child, and the child takes no lock but numba's. Whatever
    happens to a child (a failure, the deadline, an interrupt of the
    parent), the parent reaps it and compiles what is still missing itself."""
    tasks = tuple(tasks)
    if len(tasks) > MAX_TASKS:
        raise ValueError(f"tasks: expected at most {MAX_TASKS}, got {len(tasks)}")
    guard = fork_guard()
    if guard is None or _cache_save() is None or not tasks:  # (the parent compiles everything itself)
        return
    try:
        queue, feed = os.pipe()
    except OSError:  # no file descriptors to be had: the parent compiles everything itself
        return
    children = []
    lock_path = None
    try:
        try:
            handle, lock_path = tempfile.mkstemp(prefix="mrope-tracker-compile-", suffix=".lock")
            os.close(handle)
        except OSError:
            return  # (the parent compiles everything itself)
        try:
            os.write(feed, bytes(range(len(tasks))))  # (one write under PIPE_BUF: whole, at once)
            os.set_blocking(queue, False)  # an empty queue reads as "no work left", never as a wait
        except OSError:
            return  # (the parent compiles everything itself)
        for _ in range(min(num_children, len(tasks))):
            try:
                with guard, warnings.catch_warnings():
                    warnings.simplefilter("ignore", DeprecationWarning)
                    pid = os.fork()
            except OSError:  # no process to be had: the others (or the parent) compile the rest
                break
            if pid == 0:  # pragma: no cover (the child; its work is what the parent then loads)
                status = 1
                try:
                    _serialize_saves(lock_path)
                    with lighter_optimisation():  # (the child owns numba's compiler lock: it holds it already)
                        status = _work(tasks, queue)
                finally:
                    os._exit(status)
            children.append(pid)
        _wait(children, time.monotonic() + CHILD_DEADLINE_S)
    finally:
        os.close(queue)
        os.close(feed)
        for pid in children:  # only those left: stuck past the deadline, or the parent interrupted
            _end(pid)
        if lock_path is not None:
            with contextlib.suppress(OSError):
                os.unlink(lock_path)


def _cache_save():
    """numba's class whose `save` writes one cache entry (index and data),
    not a documented name (numba.core.caching.IndexDataCacheFile), or None
    where this numba lacks it."""
    try:
        from numba.core.caching import IndexDataCacheFile
    except ImportError:
        return None
    return IndexDataCacheFile if callable(getattr(IndexDataCacheFile, "save", None)) else None


def _serialize_saves(lock_path: str) -> None:
    """In a child: numba's cache saves under an exclusive lock on `lock_path`,
    which every child opens for itself (flock excludes other open files, so
    the children exclude each other; the parent saves nothing meanwhile).
    The lock covers a save's whole read of the index, choice of a data file
    and writes."""
    cache_file = _cache_save()
    save = cache_file.save
    lock = open(lock_path, "wb")  # noqa: SIM115 (held open until the child exits)

    def locked_save(self, key, data):
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return save(self, key, data)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)

    cache_file.save = locked_save


def _work(tasks, queue: int) -> int:
    """A child's loop: run the next task from the queue until none is left; 0 if every one it ran succeeded."""
    status = 0
    while True:
        try:
            taken = os.read(queue, 1)  # (one byte: a read of a pipe takes it whole, from one reader only)
        except BlockingIOError:
            return status
        if not taken:
            return status
        try:
            tasks[taken[0]]()
        except BaseException:  # noqa: BLE001 (any failure costs the parent only time; the next task goes on)
            status = 1


def fork_guard():
    """What to hold across each fork so that no other thread of this process
    is inside numba's compiler when the child is made: numba's compiler lock
    (not a documented name: numba.core.compiler_lock), or where a numba
    lacks it, nothing while this is the process's only Python thread (the
    public path: no thread to fear), else None: no fork, the parent
    compiles everything itself."""
    lock = numba_compiler_lock()
    if lock is None:
        return contextlib.nullcontext() if threading.active_count() == 1 else None
    return lock


def _wait(children: list, deadline: float) -> None:
    """Reap the children as they finish, until none is left or the deadline."""
    while children and time.monotonic() < deadline:
        for pid in list(children):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # reaped by someone else (e.g. SIGCHLD ignored)
                done = pid
            if done:
                children.remove(pid)
        if children:
            time.sleep(0.02)


def _end(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass
