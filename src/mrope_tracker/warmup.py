"""Explicit warm-up: compile (or load from numba's on-disk cache) every kernel
before the first request, with the exact argument types the hot paths use.

Without it the first `prompt_positions`, the first tracker step and so on
each pay their compilation (seconds, on a cold cache) in the middle of
serving; the seed PR compiled lazily, during the engine's profiling run.
`mrope-tracker warmup` runs this from the command line (e.g. at image build
time, so that containers start with a filled cache).

On a cold cache the compile is split in two groups (the builder from tokens
and the prompt kernels that call it; the builder from ranges with the step,
decode, fill and pool kernels), each compiled in a forked child process, so
that two cores share it; numba's compiler holds one lock per process, so
threads would not help. The children only compile and write numba's cache (no torch,
no device); the parent then runs every stage, which loads what they wrote.
Anything that goes wrong in a child costs only time: the parent compiles
whatever is still missing itself.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import warnings

import numpy as np
import torch

from .core.config import MRopeConfig
from .core.inputs import as_grid, as_token_ids
from .core.layout import PromptLayout
from .core.positions import next_positions, prompt_positions
from .kernels import layout_codes as C
from .tracker.position_tracker import PositionTracker

__all__ = ["warmup"]

# The work splits into two groups (the builders and the prompt entries that
# call them; the rest); a third process would only repeat the helpers the
# groups share (docs/benchmarks.md has the groups' compile times).
MAX_JOBS = 2


def warmup(dtypes=(torch.int64,), *, jobs: int | None = None) -> dict[str, float]:
    """Compile every kernel; returns the seconds each stage took.

    `dtypes` lists the `PositionTracker` dtypes to prepare (int64 by
    default; add torch.int32 if a tracker uses it). The kernels do not depend
    on the model family, so one small Omni workload reaches all of them.

    `jobs` is how many processes may compile at once when numba's cache is
    cold (Linux only): None for one per usable core, at most 2, and only
    while this process runs a single Python thread; 2 to fork whatever
    threads run; 1 to compile in this process only. With a filled cache
    nothing is forked. The stage ``"compile (N processes)"`` in the result,
    when present, is the time the forked compile took; the other stages then
    mostly load."""
    try:
        dtypes = tuple(dtypes)
    except TypeError:
        raise TypeError(f"dtypes: expected a sequence of torch dtypes, got {dtypes!r}") from None
    for dtype in dtypes:
        if dtype not in (torch.int64, torch.int32):
            raise ValueError(f"dtypes: expected torch.int64 or torch.int32 entries, got {dtype!r}")
    if jobs is not None and (type(jobs) is not int or jobs < 1):
        raise ValueError(f"jobs: expected None or an int >= 1, got {jobs!r}")
    config = MRopeConfig(family="qwen2_5_omni", tokens_per_second=2, seconds_per_chunk=2)
    ids, kwargs, ranges = _tiny_prompt(config)
    timings: dict[str, float] = {}

    def stage(name, fn):
        start = time.perf_counter()
        fn()
        timings[name] = time.perf_counter() - start

    num_jobs = _num_jobs(jobs)
    if num_jobs > 1 and _cache_is_cold():
        groups = (
            lambda: _token_builder_group(config, ids, kwargs, ranges),
            lambda: _other_kernels_group(config, dtypes, ids, kwargs, ranges),
        )
        stage(f"compile ({num_jobs} processes)", lambda: _compile_in_children(groups))

    image_ids = np.array([1, config.image_token_id, config.image_token_id, 2], dtype=np.int64)
    stage(
        "prompt_positions",
        lambda: (  # items as arrays, text only, images as arrays and as lists: the kernels' two entries
            prompt_positions(config, ids, **kwargs),
            prompt_positions(config, ids[:3]),
            prompt_positions(config, image_ids, image_grid_thw=np.array([[1, 2, 4]])),
            # lists (token ids, grid rows) go through the marshal decoders
            prompt_positions(config, image_ids.tolist(), image_grid_thw=[[1, 2, 4]]),
        ),
    )
    stage("layout", lambda: _layouts(config, ids, kwargs, ranges))
    stage("next_positions", _next_positions)
    for dtype in dtypes:
        stage(
            f"tracker[{str(dtype).replace('torch.', '')}]",
            lambda dtype=dtype: _tracker_round(config, ids, kwargs, ranges, dtype),
        )
    return timings


def _tiny_prompt(config: MRopeConfig):
    """t VS AS [V V][A A A A][V V] AE VE t A A t: an interleave, audio and text."""
    v, a = config.video_token_id, config.audio_token_id
    vs, ve, as_, ae = (
        config.vision_start_token_id,
        config.vision_end_token_id,
        config.audio_start_token_id,
        config.audio_end_token_id,
    )
    ids = np.array([1, vs, as_, v, v, a, a, a, a, v, v, ae, ve, 2, a, a, 3], dtype=np.int64)
    kwargs = dict(
        video_grid_thw=np.array([[2, 2, 4]]),
        second_per_grid_ts=np.array([2.0], np.float32),
        audio_feature_lengths=np.array([16, 8]),  # 4 audio tokens in the video, 2 alone
        use_audio_in_video=True,
    )
    ranges = dict(video_ranges=np.array([[3, 8]]), audio_ranges=np.array([[14, 2]]))
    return ids, kwargs, ranges


def _layouts(config, ids, kwargs, ranges) -> None:
    PromptLayout.from_tokens(config, ids, **kwargs).positions(1, 9)
    _range_layouts(config, ids, kwargs, ranges)


def _range_layouts(config, ids, kwargs, ranges) -> None:
    PromptLayout.from_ranges(config, len(ids), **kwargs, **ranges).positions(1, 9)
    _per_frame_video()
    _canvas_prompt()


def _canvas_prompt() -> None:
    """A MiniCPM-V 4.7 picture, a thumbnail and one slice (core/canvas.py: the
    layout check of hand-made rows, the CANVAS rows' fill)."""
    from .core.canvas import canvas_layout

    config = MRopeConfig(
        family="minicpmv4_7",
        vision_start_token_id=10,
        vision_end_token_id=11,
        slice_start_token_id=12,
        slice_end_token_id=13,
        newline_token_id=14,
    )
    ids = [1, 10, 5, 5, 5, 5, 11, 12, 5, 5, 5, 5, 13, 14, 2]
    kinds = [0, 0, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 0, 0, 0]
    canvas_layout(config, ids, kinds, target_sizes=[[8, 8], [8, 8]]).positions(1, 9)


def _per_frame_video() -> None:
    """A per-frame video whose frames the is_embed mask locates (kernels/frames.py)."""
    PromptLayout.from_ranges(
        MRopeConfig(family="qwen3_vl"),
        8,
        video_ranges=[(1, 6, np.array([0, 1, 0, 0, 1, 0], bool))],
        video_grid_thw=[[2, 2, 2]],
    )


def _next_positions() -> None:
    buffer = np.zeros((3, 5), np.int64)
    # numba compiles one version per array layout: C, a column slice (A), Fortran
    for out in (buffer, buffer[:, :4], np.asfortranarray(buffer)):
        next_positions(out, 0, -3, 9, 4)


def _tracker_round(config, ids, kwargs, ranges, dtype) -> None:
    tracker = PositionTracker(config, max_num_reqs=4, max_num_batched_tokens=64, dtype=dtype, layout_rows=1)
    tracker.add_request("a", ids, **kwargs)
    tracker.add_request_from_ranges("b", len(ids), **kwargs, **ranges, num_computed_tokens=5)
    tracker.prepare(["a", "b"], [10, 3])
    tracker.prepare_slots(np.array([tracker.slot("b"), tracker.slot("a")]), np.array([2, 9]))
    tracker.rollback("a", 2)
    tracker.remove_request("a")
    tracker.add_request("c", ids, **kwargs)  # reuses the pool: compaction


# --------------------------------------------------------------------------
# Compiling on a cold cache in two processes
# --------------------------------------------------------------------------


def _token_builder_group(config, ids, kwargs, ranges) -> None:
    """Group 1: the builder from tokens and the prompt entries, which call
    it (not through `positions()`, the other group's fill). This is the
    longer group."""
    PromptLayout.from_tokens(config, ids, **kwargs)
    image_ids = [1, config.image_token_id, config.image_token_id, 2]
    prompt_positions(config, np.array(image_ids), image_grid_thw=np.array([[1, 2, 4]]))
    prompt_positions(config, np.array(image_ids), image_grid_thw=[[1, 2, 4]])


def _other_kernels_group(config, dtypes, ids, kwargs, ranges) -> None:
    """Group 2: the builder from ranges (its emitters, shared with the
    builder from tokens, compile in both groups: the groups balance better
    so), the list decoders, the frame locator, the decode kernel, and from
    their signatures (no tracker, so no torch in the child) the step kernel,
    the pool compaction and the fill of a layout's rows."""
    from numba import float32, int64

    from .kernels.device_cast import cast_rows
    from .kernels.frames import locate_frames
    from .kernels.layout_fill import fill_positions
    from .kernels.pool import compact_pool
    from .kernels.tracker_step import prepare_step, step_signatures

    PromptLayout.from_ranges(config, len(ids), **kwargs, **ranges)
    _canvas_prompt()
    as_grid([[1, 2, 4]], "image_grid_thw")  # the list decoder of grids and ranges
    as_token_ids([1, 2])  # the list decoder of token ids
    locate_frames(np.array([0, 1, 1, 0], np.uint8), 0, 1, 2, np.empty((1, 2), np.int64))  # a per-frame video's frames
    cast_rows(np.zeros((1, C.NUM_COLS), np.int64), np.empty((1, C.NUM_COLS + 2), np.int32))  # RopeState's admission
    _next_positions()
    prepare_step.disable_compile(False)  # (in this child only; the parent's stays sealed)
    for dtype in dtypes:
        for signature in step_signatures(np.int32 if dtype == torch.int32 else np.int64):
            prepare_step.compile(signature)
    compact_pool.compile((int64[:, ::1], float32[:, ::1], int64[:, ::1]))
    # (the step kernel's int64 version has compiled it already: a layout
    # fills from the writable tables behind its read-only views)
    fill_positions.compile((int64[:, ::1], int64, int64[:, ::1], float32[:, ::1], int64, int64, int64, int64))


def _num_jobs(jobs: int | None) -> int:
    if not (sys.platform.startswith("linux") and hasattr(os, "fork")):
        return 1
    if jobs is None:
        # Other Python threads might hold a lock at the fork that a child
        # then waits on forever (the deadline below would end it, but only
        # after minutes): by default such a process compiles in place.
        if threading.active_count() > 1:
            return 1
        jobs = len(os.sched_getaffinity(0))
    return min(jobs, MAX_JOBS)


def _cache_is_cold() -> bool:
    """Whether numba's cache lacks an index file for any of the main entry
    points: the prompt entry, both builders, the step kernel (the best
    sign of a first start; a cache lacking only lesser kernels is completed
    in process). numba names its index files ``<module>.<function>-<line>.
    py<version>.nbi``, in the folder numba uses (the last of
    `kernels.cache_folders()`). An index written on another machine or numba
    counts as warm: nothing is forked then, which is always correct, only
    slower."""
    from .kernels import cache_folders, layout_build, prompt, tracker_step

    folder = cache_folders()[-1]
    suffix = f"py{sys.version_info[0]}{sys.version_info[1]}.nbi"
    for module, names in (
        (prompt, ("prompt_from_arrays",)),
        (layout_build, ("build_from_tokens", "build_from_ranges")),
        (tracker_step, ("prepare_step",)),
    ):
        stem = module.__name__.rsplit(".", 1)[-1]
        for name in names:
            if not any(folder.glob(f"{stem}.{name}-*.{suffix}")):
                return True
    return False


# A group compiles in seconds; a child still running after this long is
# stuck (a lock it inherited held), and is ended.
CHILD_DEADLINE_S = 300.0


def _compile_in_children(groups) -> None:
    """Run each group in a forked child at once, and wait for them all (at
    most CHILD_DEADLINE_S).

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
    try:  # numba's compiler lock: not a documented name, so without it nothing is forked
        from numba.core.compiler_lock import global_compiler_lock
    except ImportError:  # pragma: no cover (a numba that moved it: the parent compiles everything)
        return
    children = []
    try:
        for group in groups:
            try:
                with global_compiler_lock, warnings.catch_warnings():
                    warnings.simplefilter("ignore", DeprecationWarning)
                    pid = os.fork()
            except OSError:  # no process to be had: the parent compiles the rest
                break
            if pid == 0:  # pragma: no cover (the child; its work is what the parent then loads)
                status = 1
                try:
                    group()
                    status = 0
                finally:
                    os._exit(status)
            children.append(pid)
        _wait(children, time.monotonic() + CHILD_DEADLINE_S)
    finally:
        for pid in children:  # only those left: stuck past the deadline, or the parent interrupted
            _end(pid)


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
