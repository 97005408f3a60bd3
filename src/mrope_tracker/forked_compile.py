"""Compile in child processes: `warmup()`'s way to use several cores on a
cold cache (numba's compiler holds one lock per process, so threads would
not help). Forked children where this process runs one Python thread (or
the caller asks), fresh interpreters where it runs more. A child only
compiles and writes numba's cache; whatever happens to it costs the parent
only time, never correctness.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import sys
import tempfile
import threading
import time
import warnings

from .kernels.jit_options import lighter_optimisation, numba_compiler_lock

__all__ = ["CHILD_DEADLINE_S", "MAX_TASKS", "compile_in_children", "compile_in_fresh_processes", "fork_guard"]

# A task compiles in seconds; a child still running after this long is
# stuck (a lock it inherited held), and is ended.
CHILD_DEADLINE_S = 300.0
# The queue holds one byte per task.
MAX_TASKS = 256
# Where a fresh child (compile_in_fresh_processes) finds the queue's read end.
CHILD_QUEUE_FD = 3


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

    The children save to numba's cache one at a time (`serialize_saves`):
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
    if guard is None:  # (the parent compiles everything itself)
        return
    children = []
    with _task_queue(len(tasks)) as queue:
        if queue is None:
            return  # (the parent compiles everything itself)
        read_end, lock_path = queue
        try:
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
                        serialize_saves(lock_path)
                        with lighter_optimisation():  # (the child owns numba's compiler lock: it holds it already)
                            status = work(tasks, read_end)
                    finally:
                        os._exit(status)
                children.append(pid)
            _wait(children, time.monotonic() + CHILD_DEADLINE_S)
        finally:
            for pid in children:  # only those left: stuck past the deadline, or the parent interrupted
                _end(pid)


def compile_in_fresh_processes(plan: bytes, num_tasks: int, num_children: int = 2) -> list:
    """`compile_in_children` for a process that runs other threads: the
    children are fresh interpreters (``python -m
    mrope_tracker.compile_child``, started by ``os.posix_spawn``), so no lock
    another thread held can be inherited half taken, as it can by a fork.
    Each child imports the package from the parent's own folder, makes the
    tasks again from `plan` (warmup's pickled plan; the child checks it is
    the same package) and takes their indices from the same kind of queue;
    its output goes to the null device. The children pay an interpreter's
    start and the package's import (about a second) before compiling.
    Nothing is started where the platform has no ``posix_spawn``, where
    ``sys.executable`` does not look like a Python interpreter (an embedding
    program may name itself there), or where the queue cannot be made: the
    parent then compiles everything itself, as after any failure. Returns
    the exit status of each child it reaped (0 when every task it ran
    succeeded)."""
    if num_tasks > MAX_TASKS:
        raise ValueError(f"num_tasks: expected at most {MAX_TASKS}, got {num_tasks}")
    executable = sys.executable
    if not (hasattr(os, "posix_spawn") and executable and os.path.basename(executable).startswith("python")):
        return []
    children = []
    with _task_queue(num_tasks) as queue:
        if queue is None:
            return []
        read_end, lock_path = queue
        # a posix_spawn dup2 onto the same descriptor may leave it close-on-exec (C libraries from before Austin
        # Group issue 411): a queue that is already CHILD_QUEUE_FD is handed over through a copy
        source = os.dup(read_end) if read_end == CHILD_QUEUE_FD else read_end
        package = os.path.dirname(os.path.abspath(__file__))
        args = [executable, "-m", f"{__package__}.compile_child", lock_path, package, plan.hex()]
        env = _child_environment(package)
        actions = [
            (os.POSIX_SPAWN_DUP2, source, CHILD_QUEUE_FD),
            (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
            (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
        ]
        try:
            for _ in range(min(num_children, num_tasks)):
                try:
                    children.append(os.posix_spawn(executable, args, env, file_actions=actions))
                except OSError:  # no process to be had: the others (or the parent) compile the rest
                    break
            return list(_wait(children, time.monotonic() + CHILD_DEADLINE_S).values())
        finally:
            for pid in children:  # only those left: stuck past the deadline, or the parent interrupted
                _end(pid)
            if source != read_end:
                os.close(source)


def _child_environment(package: str) -> dict:
    """This process's environment, with the folder that holds the package first on the child's path (so it
    compiles the very sources this process loads; not a site-packages folder, which the child searches
    anyway and which, put first, would come before the standard library) and numba's cache folder as this
    process sees it."""
    import site

    import numba

    env = dict(os.environ)
    folder = os.path.dirname(package)
    site_folders = {os.path.abspath(path) for path in [*site.getsitepackages(), site.getusersitepackages()]}
    if folder not in site_folders:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [folder, env.get("PYTHONPATH")]))
    if numba.config.CACHE_DIR:
        env["NUMBA_CACHE_DIR"] = str(numba.config.CACHE_DIR)
    return env


@contextlib.contextmanager
def _task_queue(num_tasks: int):
    """The children's queue: (the read end of a pipe holding the task indices, non-blocking; the path of the
    file whose lock serialises their cache saves), closed and removed on leaving; None where it cannot be
    made (no file descriptor, no temporary file, a numba without the cache save to lock)."""
    if _cache_save() is None or not num_tasks:
        yield None
        return
    try:
        read_end, feed = os.pipe()
    except OSError:
        yield None
        return
    lock_path = None
    try:
        try:
            handle, lock_path = tempfile.mkstemp(prefix="mrope-tracker-compile-", suffix=".lock")
            os.close(handle)
            os.write(feed, bytes(range(num_tasks)))  # (one write under PIPE_BUF: whole, at once)
            os.set_blocking(read_end, False)  # an empty queue reads as "no work left", never as a wait
        except OSError:
            yield None
            return
        yield read_end, lock_path
    finally:
        os.close(read_end)
        os.close(feed)
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


def serialize_saves(lock_path: str) -> None:
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


def work(tasks, queue: int) -> int:
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


def _wait(children: list, deadline: float) -> dict:
    """Reap the children as they finish, until none is left or the deadline,
    taking each reaped one out of `children`; {pid: exit status} of those
    reaped (None: reaped by someone else)."""
    statuses = {}
    while children and time.monotonic() < deadline:
        for pid in list(children):
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # reaped by someone else (e.g. SIGCHLD ignored)
                done, status = pid, None
            if done:
                children.remove(pid)
                statuses[pid] = None if status is None else os.waitstatus_to_exitcode(status)
        if children:
            time.sleep(0.02)
    return statuses


def _end(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass
