"""Explicit warm-up: compile (or load from numba's on-disk cache) every kernel
before the first request, with the exact argument types the hot paths use.

Without it the first `prompt_positions`, the first tracker step and so on
each pay their compilation (seconds, on a cold cache) in the middle of
serving; the seed PR compiled lazily, during the engine's profiling run.
`mrope-tracker warmup` runs this from the command line (e.g. at image build
time, so that containers start with a filled cache).

On a cold cache the compile runs in child processes, one per usable core
(at most MAX_JOBS), which take tasks (a kernel, or an entry with its
callees) from one shared queue, longest first, so that the cores share it
whatever each task costs; numba's compiler holds one lock per process, so
threads would not help. The children are forks of this process while it
runs one Python thread, and fresh interpreters while it runs more
(forked_compile.py). They only compile and write numba's cache (no device);
the parent then runs every stage, which loads what they wrote. Anything
that goes wrong in a child costs only time: the parent compiles whatever is
still missing itself.
"""

from __future__ import annotations

import os
import pickle
import sys
import threading
import time

import attrs
import numpy as np
import torch

from .core.config import MRopeConfig
from .core.inputs import as_grid, as_token_ids
from .core.layout import PromptLayout
from .core.positions import next_positions, prompt_positions
from .device.warm import canvas_prompt, cast_device_rows, device_rows, per_frame_video, pruned_prompt, pruned_rows
from .evs.pruned import PRUNABLE
from .forked_compile import compile_in_children, compile_in_fresh_processes
from .kernels import layout_codes as C
from .kernels.jit_options import full_optimisation, lighter_optimisation
from .tracker.position_tracker import PositionTracker

__all__ = ["warmup"]

# The longest task (the builder from tokens, prompt_positions' kernel) is about
# two fifths of the full warm-up's CPU time: a third child shortens the
# wall time, a fourth could not, and would compile some shared callees again.
MAX_JOBS = 3


# "tracker": PositionTracker admitting from tokens or ranges; "vllm_v1": PositionTracker as vLLM's V1 runner
# drives it (admission from features, never from tokens); "rope_state": RopeState (the vLLM plugin, MRV2)
RUNNERS = ("all", "tracker", "rope_state", "vllm_v1")


def warmup(config=None, dtypes=(torch.int64,), *, jobs: int | None = None, runner: str = "all") -> dict[str, float]:
    """Compile (or load) the kernels; returns the seconds each stage took.

    `config`: None for every kernel of every family; an `MRopeConfig` (or
    anything `MRopeConfig.from_hf_config` reads) for only those its model
    needs: MiniCPM-V 4.7's canvas kernels only for a canvas config, the
    per-frame video locator only for families whose videos are a block per
    frame, EVS's row split only for the families vLLM prunes, the SGLang
    Qwen3-Omni drop-in's one pass (`mrope_tracker.sglang`) only for a
    `float_carry` config (Qwen3-Omni under "sglang-0.5"). `runner`:
    which of this package's runners will serve: "tracker"
    (`PositionTracker` and SGLang's drop-ins: both layout builders, the one
    from tokens being `prompt_positions`' kernel, the step kernel, and
    `sglang.BatchPositions`' reader of batch fields),
    "vllm_v1" (`PositionTracker` as vLLM's V1 runner drives it:
    admission from vLLM's features, so the builder from ranges, the step
    kernel and `next_positions`, never the builder from tokens),
    "rope_state" (`RopeState`, as the vLLM plugin builds it: the builder
    from ranges and the device rows' kernels only; EVS's pruned prompts
    need nothing more), or "all". So an engine worker pays for its own
    model and runner alone (figures in docs/benchmarks.md, "startup").

    `dtypes` lists the `PositionTracker` dtypes to prepare (int64 by
    default; add torch.int32 if a tracker uses it). A sequence of dtypes
    passed first (the older form, ``warmup((torch.int32,))``) is taken as
    `dtypes`.

    `jobs` is how many processes may compile at once when numba's cache is
    cold (Linux only): None for one per usable core, at most MAX_JOBS (3):
    forked while this process runs a single Python thread, fresh
    interpreters while it runs more (an engine usually does); 2 or more to
    fork whatever threads run (at most MAX_JOBS); 1 to compile in this
    process only. With a filled cache nothing is started. The stage
    ``"compile (N processes)"`` (``"compile (N fresh processes)"``) in the
    result, when present, is the time the children's compile took; the
    other stages then mostly load."""
    if isinstance(config, (tuple, list)) and all(isinstance(d, torch.dtype) for d in config):
        config, dtypes = None, config  # the older warmup(dtypes) form
    try:
        dtypes = tuple(dtypes)
    except TypeError:
        raise TypeError(f"dtypes: expected a sequence of torch dtypes, got {dtypes!r}") from None
    for dtype in dtypes:
        if dtype not in (torch.int64, torch.int32):
            raise ValueError(f"dtypes: expected torch.int64 or torch.int32 entries, got {dtype!r}")
    if jobs is not None and (type(jobs) is not int or jobs < 1):
        raise ValueError(f"jobs: expected None or an int >= 1, got {jobs!r}")
    if runner not in RUNNERS:
        raise ValueError(f"runner: expected one of {', '.join(RUNNERS)}, got {runner!r}")
    plan = _Plan.of(None if config is None else MRopeConfig.from_hf_config(config), runner)
    omni = _omni()
    ids, kwargs, ranges = _tiny_prompt(omni)  # the kernels take no family: one small Omni prompt reaches them
    timings: dict[str, float] = {}

    def stage(name, fn):
        start = time.perf_counter()
        fn()
        timings[name] = time.perf_counter() - start

    _compile_in_children(plan, dtypes, jobs, stage)
    with lighter_optimisation():  # (what the children left, or all of it: compiled here at their level)
        if plan.tokens:
            stage("prompt_positions", lambda: _prompt_entries(omni, ids, kwargs))
        if plan.sglang_omni:
            stage("sglang_omni", sglang_omni_pass)
        if plan.tokens:
            stage("sglang_batch", sglang_batch_fields)
        stage("layout", lambda: _layouts(plan, omni, ids, kwargs, ranges))
        if plan.tracker:
            stage("next_positions", _next_positions)
            for dtype in dtypes:
                stage(
                    f"tracker[{str(dtype).replace('torch.', '')}]",
                    lambda dtype=dtype: _tracker_round(omni, ids, kwargs, ranges, dtype, plan.tokens),
                )
        if plan.rope_state:
            stage("rope_state rows", device_rows)
    _mark_warm(plan.key)
    return timings


@attrs.frozen
class _Plan:
    """Which kernels one warm-up reaches."""

    tokens: bool  # the builder from tokens (PositionTracker.add_request, prompt_positions)
    tracker: bool  # the step kernel, next_positions
    rope_state: bool  # the device rows' cast and fill
    frames: bool  # the per-frame video locator
    canvas: bool  # MiniCPM-V 4.7's canvas
    pruning: bool  # EVS's row split around pruned video tokens (the families vLLM prunes)
    sglang_omni: bool  # the SGLang Qwen3-Omni drop-in's one pass (float_carry configs; not for a RopeState)
    key: str  # names the marker of a completed warm-up of this plan

    @classmethod
    def of(cls, config: MRopeConfig | None, runner: str) -> _Plan:
        everything = config is None
        return cls(
            tokens=runner in ("all", "tracker"),
            tracker=runner in ("all", "tracker", "vllm_v1"),
            rope_state=runner in ("all", "rope_state"),
            frames=everything or config.spec.video_blocks == "frames",
            canvas=everything or config.canvas,
            pruning=everything or config.family in PRUNABLE,
            sglang_omni=runner in ("all", "tracker") and (everything or config.float_carry),
            key="all" if everything and runner == "all" else f"{config.family if config else 'any'}-{runner}",
        )

    def tasks(self, config, dtypes, ids, kwargs, ranges) -> list:
        """What the forked children compile, one kernel (or a caller with
        its callees) a task, the two builders (the longest) first: the
        children take them from one queue (forked_compile.py), so the
        builders run at once and the rest fill whichever child is free. A
        task that shares callees with an earlier one (the fill's rules,
        which the builder from tokens compiles early) mostly loads them from
        numba's cache. CPU seconds in docs/benchmarks.md, "One queue of compile tasks"."""

        def wanted(*pairs):
            return [task for needed, task in pairs if needed]

        step_tasks = [lambda sig=sig: _step_kernel(sig) for sig in _step_signatures(dtypes)]
        return wanted(
            (self.tokens, lambda: _token_entries(config, ids, kwargs)),
            (True, lambda: _bare_ranges_builder(config, ids, kwargs, ranges)),
            # the token entries' layout check and list decoders, apart: on three cores they would lengthen the
            # longest task, and here they are in the cache before that task reaches them
            (True, _layout_check),
            (True, _list_decoders),
            (self.sglang_omni, sglang_omni_pass),
            (self.tokens, sglang_batch_fields),
            (True, _fill),  # before the step kernel, which links it
            *((self.tracker, task) for task in step_tasks),
            (self.canvas, canvas_prompt),
            (self.pruning, pruned_rows),
            (self.tracker, _next_positions),
            (self.frames, _frame_locator),
            (self.rope_state, cast_device_rows),
        )


def _prompt_entries(config, ids, kwargs) -> None:
    """Items as arrays, text only, images as arrays and as lists: the builder and the list decoders."""
    image_ids = np.array([1, config.image_token_id, config.image_token_id, 2], dtype=np.int64)
    prompt_positions(config, ids, **kwargs)
    prompt_positions(config, ids[:3])
    prompt_positions(config, image_ids, image_grid_thw=np.array([[1, 2, 4]]))
    # lists (token ids, grid rows) go through the marshal decoders
    prompt_positions(config, image_ids.tolist(), image_grid_thw=[[1, 2, 4]])


def sglang_omni_pass() -> None:
    """The SGLang Qwen3-Omni drop-in's one pass (kernels/sglang_omni.py), with the argument types its lean
    path passes (sglang/rope_fast.py: views of (1, L) and (3, 1, L) arrays), on a video at 2/3 s a grid.
    numpy only (the forked children import no torch)."""
    from .kernels.sglang_omni import omni_checked_positions

    config = MRopeConfig(family="qwen3_omni", model_type="qwen3_omni_moe", semantics="sglang-0.5")
    video = [config.video_token_id] * 8
    ids = np.array([[1, config.vision_start_token_id, *video, config.vision_end_token_id, 2]], np.int64)
    out = np.empty((3, 1, ids.shape[1]), np.float32)
    grids = (np.zeros((0, 3), np.int64), np.array([[2, 4, 4]], np.int64))
    omni_checked_positions(
        out[:, 0], ids[0], config.kernel_params, *grids, np.array([2 / 3], np.float32), np.zeros(0, np.int64), False
    )


def sglang_batch_fields() -> None:
    """`sglang.BatchPositions`' reading of a batch's fields and the plugin's test for new requests
    (kernels/batch_rows.py), with their argument types."""
    from .kernels.batch_rows import batch_slots, first_outside, unseen_row

    ints = np.zeros(1, np.int64)
    batch_slots(ints, ints, ints, ints.copy(), ints.copy(), ints.copy())
    first_outside(ints, 1)
    unseen_row(ints, ints, ints, np.zeros(1, bool))


def plan_tasks(plan: _Plan, dtypes) -> list:
    """The compile tasks of `plan` for the trackers' `dtypes` (the children's queue holds their indices: a
    fresh child makes them again from the same arguments)."""
    omni = _omni()
    return plan.tasks(omni, dtypes, *_tiny_prompt(omni))


def _omni() -> MRopeConfig:
    return MRopeConfig(family="qwen2_5_omni", tokens_per_second=2, seconds_per_chunk=2)


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


def _layouts(plan, config, ids, kwargs, ranges) -> None:
    if plan.tokens:
        PromptLayout.from_tokens(config, ids, **kwargs).positions(1, 9)
    PromptLayout.from_ranges(config, len(ids), **kwargs, **ranges).positions(1, 9)
    if plan.frames:
        per_frame_video()
    if plan.canvas:
        canvas_prompt()
    if plan.pruning:
        pruned_prompt()


def _next_positions() -> None:
    buffer = np.zeros((3, 5), np.int64)
    # numba compiles one version per array layout: C, a column slice (A), Fortran; at numba's own level, as
    # a kernel a runner may call per request and step
    with full_optimisation():
        for out in (buffer, buffer[:, :4], np.asfortranarray(buffer)):
            next_positions(out, 0, -3, 9, 4)


def _tracker_round(config, ids, kwargs, ranges, dtype, tokens=True) -> None:
    """A tracker's life: admissions (from tokens only where the plan has that builder), steps, a rollback, a
    removal and an admission that compacts the pool."""

    def admit(req_id, **more):
        if tokens:
            return tracker.add_request(req_id, ids, **kwargs, **more)
        return tracker.add_request_from_ranges(req_id, len(ids), **kwargs, **ranges, **more)

    tracker = PositionTracker(config, max_num_reqs=4, max_num_batched_tokens=64, dtype=dtype, layout_rows=1)
    admit("a")
    tracker.add_request_from_ranges("b", len(ids), **kwargs, **ranges, num_computed_tokens=5)
    tracker.prepare(["a", "b"], [10, 3])
    tracker.prepare_slots(np.array([tracker.slot("b"), tracker.slot("a")]), np.array([2, 9]))
    tracker.rollback("a", 2)
    tracker.remove_request("a")
    admit("c")  # reuses the pool: compaction


# --------------------------------------------------------------------------
# Compiling on a cold cache in forked children
# --------------------------------------------------------------------------


def _token_entries(config, ids, kwargs) -> None:
    """The builder from tokens through `prompt_positions`, and
    a layout from tokens and list inputs (their layout check and list
    decoders, tasks of their own: mostly loaded here)."""
    image_ids = np.array([1, config.image_token_id, config.image_token_id, 2], dtype=np.int64)
    prompt_positions(config, ids, **kwargs)
    prompt_positions(config, image_ids, image_grid_thw=np.array([[1, 2, 4]]))
    PromptLayout.from_tokens(config, ids, **kwargs)
    _list_decoders()


def _bare_ranges_builder(config, ids, kwargs, ranges) -> None:
    """The builder from ranges run bare: no `PromptLayout`, so not its check (a task of its own)."""
    from .core.inputs import Items
    from .core.layout import build_rows_from_ranges
    from .core.ranges import Ranges

    items = Items.normalize(
        config,
        None,
        kwargs["video_grid_thw"],
        kwargs["second_per_grid_ts"],
        kwargs["audio_feature_lengths"],
        kwargs["use_audio_in_video"],
    )
    spans = Ranges(
        config,
        items,
        None,
        ranges["video_ranges"],
        ranges["audio_ranges"],
        "transformers",
        kwargs["second_per_grid_ts"],
    )
    build_rows_from_ranges(config, len(ids), items, spans)


def _layout_check() -> None:
    """The check every `PromptLayout` runs, with its argument types (read-only tables)."""
    from .kernels.layout_check import check_layout

    rows = np.zeros((1, C.NUM_COLS), np.int64)
    rows[0, C.COL_TOK_LEN] = 1
    scales = np.zeros((1, C.NUM_SCALE_COLS), np.float32)
    rows.setflags(write=False)
    scales.setflags(write=False)
    check_layout(rows, scales, 1)


def _fill() -> None:
    """The fill of a layout's rows (the positions of a `PromptLayout`, the step's prompt tokens)."""
    from numba import float32, int64

    from .kernels.layout_fill import fill_positions

    fill_positions.compile((int64[:, ::1], int64, int64[:, ::1], float32[:, ::1], int64, int64, int64, int64))


def _frame_locator() -> None:
    """The frames of a per-frame video, from its is_embed mask."""
    from .kernels.frames import locate_frames

    locate_frames(np.array([0, 1, 1, 0], np.uint8), 0, 1, 2, np.empty((1, 2), np.int64))


def _list_decoders() -> None:
    as_grid([[1, 2, 4]], "image_grid_thw")  # the list decoder of grids and ranges
    as_token_ids([1, 2])  # the list decoder of token ids


def _step_signatures(dtypes) -> list:
    """The step kernel's signatures for the trackers' `dtypes` (torch dtypes)."""
    from .kernels.tracker_step import step_signatures

    return [sig for dtype in dtypes for sig in step_signatures(np.int32 if dtype == torch.int32 else np.int64)]


def _step_kernel(signature) -> None:
    """The step kernel for one signature (no tracker, so no torch in the child)."""
    from .kernels.jit_options import set_compiling
    from .kernels.tracker_step import compile_step_signature, prepare_step

    set_compiling(prepare_step, True)  # (in this child only; the parent's stays sealed)
    compile_step_signature(signature)


def _compile_in_children(plan: _Plan, dtypes, jobs: int | None, stage) -> None:
    """On a cold cache, where more than one process may compile: the plan's tasks compiled in child
    processes (forked, or fresh interpreters while other threads run), timed as a stage."""
    num_jobs = _num_jobs(jobs)
    if num_jobs < 2 or not _cache_is_cold(plan.key):
        return
    tasks = plan_tasks(plan, dtypes)
    if _in_fresh_processes(jobs):
        spec = pickle.dumps((plan, dtypes))
        stage(f"compile ({num_jobs} fresh processes)", lambda: compile_in_fresh_processes(spec, len(tasks), num_jobs))
    else:
        stage(f"compile ({num_jobs} processes)", lambda: compile_in_children(tasks, num_jobs))


def _num_jobs(jobs: int | None) -> int:
    if not (sys.platform.startswith("linux") and hasattr(os, "fork")):
        return 1
    if jobs is None:
        jobs = len(os.sched_getaffinity(0))
    return min(jobs, MAX_JOBS)


def _in_fresh_processes(jobs: int | None) -> bool:
    """Whether the compile children are fresh interpreters rather than forks:
    by default while other Python threads run, since one of them might hold
    a lock at the fork that a forked child then waits on forever (the
    deadline would end it, but only after minutes); `jobs` of 2 or more
    forks whatever runs."""
    return jobs is None and threading.active_count() > 1


def _warm_marker(key: str = "all"):
    """The file warmup() leaves where numba caches, once every kernel is in
    (our own name, with numba's and Python's versions: a cache another
    numba or Python wrote counts as cold); the kernels' stale-cache drop
    removes it with the cache files (kernels/__init__.py)."""
    import numba

    from .kernels import WARM_MARKER_GLOB, cache_folders

    name = f"{key}-numba{numba.__version__}-py{sys.version_info[0]}{sys.version_info[1]}"
    return cache_folders()[-1] / WARM_MARKER_GLOB.replace("*", name)


def _cache_is_cold(key: str = "all") -> bool:
    """Whether no warmup() has filled numba's cache for these sources, this
    numba and this Python (the best sign of a first start). A cache filled
    otherwise (by tests, by lazy compiles) counts as cold: the children then
    mostly load, which costs a fork and a little time, never correctness;
    a cache whose files were deleted behind the marker's back counts as
    warm: nothing is forked then, which is always correct, only slower."""
    return not (_warm_marker("all").exists() or _warm_marker(key).exists())


def _mark_warm(key: str = "all") -> None:
    try:
        _warm_marker(key).touch()
    except OSError:  # a read-only cache folder: the next start forks again, which is only slower
        pass
