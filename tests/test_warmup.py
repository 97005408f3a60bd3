"""warmup(): every kernel ready, and on a cold cache the forked compile
leaves nothing for the parent to compile (everything it needs loads from the
cache the children filled)."""

import importlib
import json
import os
import pickle
import site
import subprocess
import sys
import threading
import time

import numba
import pytest
import torch
from numba.core import event

from mrope_tracker import warmup
from mrope_tracker.cli import main

warmup_module = importlib.import_module("mrope_tracker.warmup")  # (the package's `warmup` is the function)
forked = importlib.import_module("mrope_tracker.forked_compile")

# The start of every child process below: each numba compile it does
# (not a cache load) is recorded in `compiled`.
_RECORD_COMPILES = """
import json, sys
from numba.core import event

compiled = []

class Listener(event.Listener):
    def on_start(self, e):
        pass

    def on_end(self, e):
        compiled.append(e.data["dispatcher"].py_func.__qualname__)
"""

# Runs in a fresh process on an empty cache: the first warmup() forks (where
# it can), the second finds the cache filled. Every numba compile the parent
# itself does after the fork is recorded.
_CHILD = (
    _RECORD_COMPILES
    + """
import mrope_tracker
from mrope_tracker import warmup

jobs = None if sys.argv[1] == "none" else int(sys.argv[1])
with event.install_listener("numba:compile", Listener()):
    first = warmup(jobs=jobs)
    after_first = list(compiled)
    second = warmup(jobs=jobs)
    again = compiled[len(after_first):]

    # the listener's positive control: a function nobody compiled yet is seen
    import numba

    @numba.njit
    def control(x):
        return x + 1

    control(1)
print(json.dumps({"first": list(first), "second": list(second), "compiled": after_first, "again": again,
                  "control": compiled[-1:]}))
"""
)


def _run(code: str, cache_dir, *args: str) -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache_dir))
    done = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def cold_cache(tmp_path_factory):
    """A numba cache filled by a cold warmup(jobs=2) in a fresh process, and
    what that process saw."""
    cache_dir = tmp_path_factory.mktemp("numba-cache")
    return cache_dir, _run(_CHILD, cache_dir, "2")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the forked compile is Linux only")
@pytest.mark.slow
def test_cold_cache_compiles_in_two_processes_and_the_parent_only_loads(cold_cache):
    """A cold warmup(jobs=2) compiles in two children; the parent then
    compiles nothing itself (the children covered every kernel its stages
    reach), and a second warmup() forks no more."""
    _, result = cold_cache
    assert result["first"][0] == "compile (2 processes)"
    assert result["compiled"] == [], f"compiled in the parent after the fork: {result['compiled']}"
    assert "compile (2 processes)" not in result["second"]
    assert result["again"] == []
    assert result["control"] == ["control"]  # the listener does see a compile


# A fresh process on a filled cache: warmup() loads every kernel and
# compiles none, and what it loaded gives the reference's positions, before
# and after a compile of something else in the same process.
_WARM_CHILD = (
    _RECORD_COMPILES
    + """
import numba
import numpy as np
import mrope_tracker
from mrope_tracker import MRopeConfig, PositionTracker, PromptLayout, prompt_positions, reference, warmup

def equal(got, expected):
    return bool(np.array_equal(np.asarray(got[0]), expected[0].numpy()) and int(got[1]) == int(expected[1]))

def checks():
    omni = MRopeConfig(family="qwen2_5_omni", tokens_per_second=2, seconds_per_chunk=2)
    ids, kwargs, ranges = sys.modules["mrope_tracker.warmup"]._tiny_prompt(omni)
    expected = reference.prompt_positions(omni, ids, **kwargs)
    vl = MRopeConfig(family="qwen2_5_vl", tokens_per_second=2)
    image_ids = [7, vl.vision_start_token_id] + [vl.image_token_id] * 6 + [vl.vision_end_token_id, 8]
    video_ids = [vl.vision_start_token_id] + [vl.video_token_id] * 8 + [vl.vision_end_token_id, 9]
    # a pool of one row per request: the second admission compacts it (an NRT kernel, as next_positions is)
    tracker = PositionTracker(omni, max_num_reqs=2, max_num_batched_tokens=32, layout_rows=1)
    tracker.add_request("a", ids, **kwargs)
    tracker.add_request("b", ids, **kwargs)
    tracker.remove_request("a")
    tracker.add_request("c", ids, **kwargs)
    step = tracker.prepare(["c"], [len(ids)])
    decode = np.zeros((3, 4), np.int64)
    mrope_tracker.next_positions(decode, 1, -3, 9, 2)
    return {
        "next_positions": decode.tolist() == [[0, 6, 7, 0]] * 3,
        "general builder": equal(prompt_positions(omni, ids, **kwargs), expected),
        "image list": equal(prompt_positions(vl, image_ids, image_grid_thw=[[1, 4, 6]]),
                            reference.prompt_positions(vl, image_ids, image_grid_thw=[[1, 4, 6]])),
        "video arrays": equal(prompt_positions(vl, np.array(video_ids), video_grid_thw=np.array([[2, 4, 4]]),
                                               second_per_grid_ts=np.array([1.5])),
                              reference.prompt_positions(vl, video_ids, video_grid_thw=[[2, 4, 4]],
                                                         second_per_grid_ts=[1.5])),
        "layout from ranges": bool(np.array_equal(
            PromptLayout.from_ranges(omni, len(ids), **kwargs, **ranges).positions(0, len(ids)),
            expected[0].numpy())),
        "tracker step": bool(np.array_equal(step.cpu().numpy(), expected[0].numpy())),
    }

with event.install_listener("numba:compile", Listener()):
    stages = warmup()
    before = checks()

    @numba.njit
    def control(x):
        return x + 1

    control(1)
    after = checks()
print(json.dumps({"stages": list(stages), "compiled": compiled, "before": before, "after": after}))
"""
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the forked compile is Linux only")
@pytest.mark.slow
def test_warm_start_loads_everything_and_compiles_nothing(cold_cache):
    """On the cache a cold start filled, a fresh process forks nothing,
    compiles nothing of ours, and what it loaded gives the reference's positions."""
    cache_dir, _ = cold_cache
    result = _run(_WARM_CHILD, cache_dir)
    assert "compile (2 processes)" not in result["stages"]
    assert result["compiled"] == ["control"]  # nothing of ours compiled: it all loaded
    assert all(result["before"].values()), result["before"]
    assert all(result["after"].values()), result["after"]


# A cold warm-up of one worker's plan in a fresh process: what the parent itself compiles after the fork.
_PLAN_CHILD = (
    _RECORD_COMPILES
    + """
import threading
from mrope_tracker import warmup

threaded = sys.argv[3] == "threaded"  # another Python thread runs, as in an engine: the default call
stop = threading.Event()
if threaded:
    threading.Thread(target=stop.wait).start()
with event.install_listener("numba:compile", Listener()):
    stages = warmup(sys.argv[1], runner=sys.argv[2], jobs=None if threaded else 2)
stop.set()
print(json.dumps({"stages": list(stages), "compiled": compiled}))
"""
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the forked compile is Linux only")
@pytest.mark.slow
@pytest.mark.parametrize("runner", ["rope_state", "vllm_v1"])
def test_a_cold_worker_plan_compiles_in_two_processes(tmp_path, runner):
    """warmup(config, runner=...) on a cold cache: the two children compile everything the plan's stages
    reach, so the parent compiles nothing itself."""
    result = _run(_PLAN_CHILD, tmp_path, "tests/data/configs/qwen2_5_vl.json", runner, "forked")
    assert result["stages"][0] == "compile (2 processes)"
    assert result["compiled"] == [], f"compiled in the parent after the fork: {result['compiled']}"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the children's compile is Linux only")
@pytest.mark.skipif(len(getattr(os, "sched_getaffinity", lambda _: ())(0)) < 2, reason="needs 2 usable cores")
@pytest.mark.slow
def test_a_cold_plan_in_a_threaded_process_compiles_in_fresh_processes(tmp_path):
    """warmup() in a process that runs other Python threads starts fresh interpreters instead of forking;
    they compile everything the plan's stages reach (their tasks made again from the pickled plan, from the
    parent's own sources), so the parent compiles nothing itself."""
    result = _run(_PLAN_CHILD, tmp_path, "tests/data/configs/qwen2_5_vl.json", "rope_state", "threaded")
    assert result["stages"][0].startswith("compile (") and result["stages"][0].endswith(" fresh processes)")
    assert result["compiled"] == [], f"compiled in the parent after the children: {result['compiled']}"


class _Compiles(event.Listener):
    def __init__(self):
        self.names = []

    def on_start(self, e):
        pass

    def on_end(self, e):
        self.names.append(e.data["dispatcher"].py_func.__qualname__)


def test_warm_process_neither_forks_nor_compiles():
    """With every kernel compiled or cached (the first call sees to it),
    warmup() reports its stages only and compiles nothing."""
    warmup(dtypes=(torch.int64, torch.int32), jobs=1)
    compiles = _Compiles()
    with event.install_listener("numba:compile", compiles):
        stages = warmup(dtypes=(torch.int64, torch.int32))
    assert list(stages) == [
        "prompt_positions",
        "sglang_omni",
        "sglang_batch",
        "layout",
        "next_positions",
        "tracker[int64]",
        "tracker[int32]",
        "rope_state rows",
    ]
    assert compiles.names == []


@pytest.mark.slow
def test_a_failing_or_stuck_child_costs_only_time(monkeypatch):
    """A child that raises, or one still running at the deadline (ended),
    leaves the parent to compile in place: compile_in_children returns."""
    monkeypatch.setattr(forked, "CHILD_DEADLINE_S", 1.0)
    start = time.monotonic()
    forked.compile_in_children((lambda: 1 / 0, lambda: time.sleep(60)))
    assert time.monotonic() - start < 30


def _leave_marker(folder, name):
    def task():
        (folder / name).write_text(str(os.getpid()))

    return task


def _fail():
    raise RuntimeError("a task that fails")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the forked compile is Linux only")
@pytest.mark.parametrize("num_children", [1, 2, 3])
def test_the_children_share_one_queue_and_run_every_task_once(tmp_path, num_children):
    """Each task runs once, in whichever child is free; one that fails stops neither its child nor the others."""
    names = [f"task{i}" for i in range(7)]
    tasks = [_leave_marker(tmp_path, name) for name in names]
    tasks.insert(2, _fail)
    forked.compile_in_children(tasks, num_children)
    assert sorted(p.name for p in tmp_path.iterdir()) == names
    pids = {(tmp_path / name).read_text() for name in names}
    assert str(os.getpid()) not in pids and len(pids) <= num_children


def test_without_a_pipe_the_parent_compiles_everything(monkeypatch):
    """No file descriptor to be had for the queue: nothing is forked, nothing escapes (the parent compiles)."""

    def no_pipe():
        raise OSError(24, "Too many open files")

    ran = []
    monkeypatch.setattr(forked.os, "pipe", no_pipe)
    forked.compile_in_children([lambda: ran.append(1)], 2)
    assert ran == []


# Two children each compile one signature of a cached function, their cache saves forced to interleave the
# worst way: both read the empty index, the first writes index and data-file name first, the second writes the
# index last and its data first, so the first's data would land last in the file the second's key names.
_SAVES_RACE = """
import importlib, os, sys, time
sys.path.insert(0, sys.argv[1])
from numba import int32, int64
from numba.core import caching
import kern
forked = importlib.import_module("mrope_tracker.forked_compile")
delays = {"index": 0.0, "data": 0.0}
save_index, save_data = caching.IndexDataCacheFile._save_index, caching.IndexDataCacheFile._save_data

def slow_index(self, overloads):
    time.sleep(delays["index"])
    save_index(self, overloads)

def slow_data(self, name, data):
    time.sleep(delays["data"])
    save_data(self, name, data)

caching.IndexDataCacheFile._save_index, caching.IndexDataCacheFile._save_data = slow_index, slow_data

def compile_for(signature, index_delay, data_delay):
    def task():
        delays.update(index=index_delay, data=data_delay)
        kern.add.compile(signature)
    return task

forked.compile_in_children(
    [compile_for((int64[::1], int64[::1]), 0.3, 0.6), compile_for((int32[::1], int32[::1]), 0.6, 0.0)], 2
)
"""

_LOAD = """
import json, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import kern
out = {}
for dtype in ("int64", "int32"):
    a = np.arange(3, dtype=dtype)
    try:
        out[dtype] = kern.add(a, a).tolist()
    except Exception as exc:
        out[dtype] = type(exc).__name__
print(json.dumps(out))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the forked compile is Linux only")
def test_the_children_save_to_numbas_cache_one_at_a_time(tmp_path):
    """Without the children's lock on numba's cache saves, the int32 signature's key would name the int64 code
    (numba's index has no lock of its own); with it, both signatures load as compiled."""
    (tmp_path / "kern.py").write_text("import numba\n\n@numba.njit(cache=True)\ndef add(a, b):\n    return a + b\n")
    cache = tmp_path / "cache"
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
    done = subprocess.run([sys.executable, "-c", _SAVES_RACE, str(tmp_path)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert len(list(cache.rglob("*.nbc"))) == 2  # both signatures saved, each to its own file
    loaded = _run(_LOAD, cache, str(tmp_path))
    assert loaded == {"int64": [0, 2, 4], "int32": [0, 2, 4]}


def test_a_numba_without_the_cache_save_to_lock_compiles_in_the_parent(monkeypatch):
    """numba.core.caching.IndexDataCacheFile is no documented name: where it is missing, the children could not
    save one at a time, so nothing is forked and the parent compiles everything."""
    monkeypatch.setitem(sys.modules, "numba.core.caching", None)  # any import of it raises ImportError
    ran = []
    forked.compile_in_children([lambda: ran.append(1)], 2)
    assert ran == []


def test_too_many_tasks_are_refused_before_any_fork():
    with pytest.raises(ValueError, match=r"tasks: expected at most 256, got 257"):
        forked.compile_in_children([lambda: None] * 257)


_SIGCHLD_IGNORED = """
import signal, sys
import importlib
forked = importlib.import_module("mrope_tracker.forked_compile")
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel: waitpid finds none
forked.compile_in_children((lambda: None, lambda: None))
print("returned")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the forked compile is Linux only")
@pytest.mark.slow
def test_children_reaped_elsewhere():
    done = subprocess.run([sys.executable, "-c", _SIGCHLD_IGNORED], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "returned" in done.stdout, done.stderr


def test_other_threads_turn_the_default_to_fresh_processes():
    """jobs=None forks only while this is the process's one Python thread, and starts fresh interpreters
    while others run; jobs=2 forks whatever runs."""
    linux = sys.platform.startswith("linux")
    cores = min(len(os.sched_getaffinity(0)), warmup_module.MAX_JOBS) if linux else 1
    assert not warmup_module._in_fresh_processes(None)
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert warmup_module._num_jobs(None) == cores and warmup_module._in_fresh_processes(None)
        assert warmup_module._num_jobs(2) == (2 if linux else 1) and not warmup_module._in_fresh_processes(2)
    finally:
        stop.set()
        thread.join()


def test_fresh_children_that_fail_cost_only_time():
    """Children that cannot read their plan exit at once, having run nothing: the call returns (the parent
    then compiles in place), long before the deadline."""
    start = time.monotonic()
    statuses = forked.compile_in_fresh_processes(b"not a pickled plan", 2, 2)
    assert time.monotonic() - start < 60
    assert len(statuses) == 2 and all(status not in (0, None) for status in statuses)


# A cold cache, and the queue's read end on the descriptor the fresh children read it from: the children still
# take and compile every task of a worker's plan. (Since Austin Group issue 411, a posix_spawn dup2 onto the same
# descriptor clears its close-on-exec flag, as this machine's glibc 2.36 does; C libraries from before it may
# leave the flag set. compile_in_fresh_processes hands such a queue over through a copy, which this test
# exercises but, on a C library of the newer kind, would pass without.)
_QUEUE_ON_3 = (
    _RECORD_COMPILES
    + """
import os
os.closerange(3, 1024)  # (before the imports: nothing of the interpreter's is open there yet)
import pickle
import torch
from mrope_tracker import MRopeConfig, forked_compile, warmup
from mrope_tracker.warmup import _Plan, plan_tasks

pipes = []
real_pipe = forked_compile.os.pipe
def pipe():
    ends = real_pipe()
    pipes.append(ends[0])
    return ends
forked_compile.os.pipe = pipe
plan = _Plan.of(MRopeConfig(family="qwen2_5_vl"), "rope_state")
statuses = forked_compile.compile_in_fresh_processes(
    pickle.dumps((plan, (torch.int64,))), len(plan_tasks(plan, (torch.int64,))), 2
)
with event.install_listener("numba:compile", Listener()):
    warmup(MRopeConfig(family="qwen2_5_vl"), runner="rope_state", jobs=1)
print(json.dumps({"queue": pipes, "statuses": statuses, "compiled": compiled}))
"""
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the children's compile is Linux only")
@pytest.mark.slow
def test_fresh_children_read_a_queue_already_on_their_descriptor(tmp_path):
    result = _run(_QUEUE_ON_3, tmp_path)
    assert result["queue"] == [forked.CHILD_QUEUE_FD]
    assert result["statuses"] == [0, 0]
    assert result["compiled"] == [], f"compiled in the parent after the children: {result['compiled']}"


def test_a_fresh_child_refuses_another_packages_sources(tmp_path):
    """numba keys its cache on the source files: a child that imported the package from elsewhere than the
    parent's folder runs no task (exit status 2)."""
    compile_child = importlib.import_module("mrope_tracker.compile_child")
    plan = pickle.dumps((warmup_module._Plan.of(None, "all"), (torch.int64,)))
    assert compile_child.main([str(tmp_path / "lock"), str(tmp_path), plan.hex()]) == 2


def test_fresh_children_import_the_parents_package_and_cache(monkeypatch, tmp_path):
    """The children's path starts with the folder holding this very package (unless that is a site-packages
    folder, which they search anyway), and they cache where numba caches here, even when that was set in this
    process rather than in its environment."""
    package = os.path.dirname(forked.__file__)
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", "elsewhere")
    env = forked._child_environment(package)
    assert env["PYTHONPATH"].split(os.pathsep) == [os.path.dirname(package), "elsewhere"]
    assert env["NUMBA_CACHE_DIR"] == str(tmp_path)
    # an installed package: its site-packages folder stays where the interpreter puts it, after the stdlib
    installed = os.path.join(site.getsitepackages()[0], "mrope_tracker")
    assert forked._child_environment(installed)["PYTHONPATH"] == "elsewhere"


def test_an_embedding_programs_executable_starts_nothing(monkeypatch):
    """Where sys.executable does not look like a Python interpreter (a program embedding Python may name
    itself there), no child is started: the parent compiles in place."""

    def no_spawn(*args, **kwargs):
        raise AssertionError("a child was started")

    monkeypatch.setattr(forked.sys, "executable", "/usr/bin/uwsgi")
    monkeypatch.setattr(forked.os, "posix_spawn", no_spawn, raising=False)
    forked.compile_in_fresh_processes(b"", 1, 2)
    with pytest.raises(ValueError, match="num_tasks"):
        forked.compile_in_fresh_processes(b"", forked.MAX_TASKS + 1, 2)


def test_without_numbas_compiler_lock_only_a_lone_thread_forks(monkeypatch):
    """numba.core.compiler_lock is no documented name: where it is missing, the fork holds nothing while
    this is the only Python thread (nothing to keep out of numba), and with other threads nothing forks."""
    assert forked.fork_guard() is not None  # this numba has it
    monkeypatch.setitem(sys.modules, "numba.core.compiler_lock", None)  # any import of it raises ImportError
    with forked.fork_guard():  # a null context: the fork goes ahead
        pass
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert forked.fork_guard() is None
        forked.compile_in_children((lambda: 1 / 0,))  # no guard: returns at once, forking nothing
    finally:
        stop.set()
        thread.join()


def test_the_warm_marker_follows_a_full_warmup(tmp_path, monkeypatch):
    """warmup() leaves its marker where numba caches; without it the cache counts as cold."""
    monkeypatch.setattr(warmup_module, "_warm_marker", lambda key="all": tmp_path / f"warmup-complete-{key}")
    assert warmup_module._cache_is_cold()
    warmup(jobs=1)
    assert not warmup_module._cache_is_cold() and not warmup_module._cache_is_cold("qwen2_vl-rope_state")
    assert warmup_module._warm_marker().exists()


def test_warmup_for_one_model_and_runner_runs_only_its_stages(monkeypatch):
    """warmup(config, runner="rope_state") runs no prompt entry, no tracker; the canvas and per-frame
    workloads only for a model that uses them; the older warmup(dtypes) form still works."""
    from mrope_tracker import MRopeConfig
    from mrope_tracker.device import warm

    stages = warmup(MRopeConfig(family="qwen2_vl"), runner="rope_state", jobs=1)
    assert set(stages) == {"layout", "rope_state rows"}
    stages = warmup("tests/data/configs/qwen3_vl.json", runner="tracker", jobs=1)
    assert "prompt_positions" in stages and "tracker[int64]" in stages and "rope_state rows" not in stages
    assert "sglang_omni" not in stages  # the SGLang Qwen3-Omni pass: only for a float_carry config
    sglang_omni = MRopeConfig(family="qwen3_omni", model_type="qwen3_omni_moe", semantics="sglang-0.5")
    assert "sglang_omni" in warmup(sglang_omni, runner="tracker", jobs=1)
    assert "sglang_omni" not in warmup(sglang_omni, runner="rope_state", jobs=1)
    assert "tracker[int32]" in warmup((torch.int64, torch.int32), jobs=1)

    def refused(*args):
        raise AssertionError("a workload this model does not need")

    monkeypatch.setattr(warm, "canvas_prompt", refused)
    monkeypatch.setattr(warm, "per_frame_video", refused)
    assert warm.warm_rope_state(MRopeConfig(family="qwen2_5_vl")) >= 0
    with pytest.raises(AssertionError):
        warm.warm_rope_state(MRopeConfig(family="qwen3_vl"))  # per-frame videos: the locator runs
    with pytest.raises(ValueError, match="runner: expected one of all, tracker, rope_state, vllm_v1, got 'engine'"):
        warmup(runner="engine")
    stages = warmup("tests/data/configs/qwen2_5_vl.json", runner="vllm_v1", jobs=1)
    assert set(stages) == {"layout", "next_positions", "tracker[int64]"}  # no prompt entry, no device rows


@pytest.mark.parametrize("jobs", [0, -1, 1.5, "2", True])
def test_bad_jobs(jobs):
    with pytest.raises(ValueError, match="jobs: expected None or an int >= 1"):
        warmup(jobs=jobs)


def test_bad_dtypes():
    with pytest.raises(ValueError, match="dtypes: expected torch.int64 or torch.int32"):
        warmup(dtypes=(torch.float32,))
    with pytest.raises(TypeError, match="dtypes: expected a sequence of torch dtypes"):
        warmup(dtypes=torch.int64)


def test_cli_warmup_refuses_bad_jobs(capsys):
    assert main(["warmup", "--jobs", "0"]) == 2
    assert "jobs" in capsys.readouterr().err


# A cold warmup in one process, every compile recorded: which functions numba
# compiled for more than one argument-type signature.
_SIGNATURES_CHILD = (
    _RECORD_COMPILES
    + """
import collections
from mrope_tracker import warmup

signatures = collections.defaultdict(set)

class Signatures(event.Listener):
    def on_start(self, e):
        pass

    def on_end(self, e):
        function = e.data["dispatcher"].py_func
        if function.__module__.startswith("mrope_tracker"):  # (not numba's own overloads: max, min)
            signatures[function.__qualname__].add(str(e.data["args"]))

with event.install_listener("numba:compile", Signatures()):
    warmup(jobs=1)
print(json.dumps({name: sorted(found) for name, found in signatures.items() if len(found) > 1}))
"""
)

# Compiled twice on purpose, each with its reason:
_SEVERAL_SIGNATURES = {
    # the builder from ranges writes no positions (out=None): its emitters compile without the position rules
    "push_row",
    "flush_text",
    "emit_grid",
    "av_run",
    # next_positions takes C, Fortran and sliced (A) outputs
    "next_positions_kernel",
    # the tracker's step takes int32 (vLLM's runner) or int64 index arrays
    "prepare_step",
}


@pytest.mark.slow
def test_a_cold_warmup_compiles_each_kernel_once_per_argument_form(tmp_path):
    """A second signature of a kernel is a whole compile more on every cold
    start. Read-only vs writable tables and bare literal constants (numba
    compiles a callee once per Literal[int] it is passed) once doubled the
    layout check, the device cast and the canvas helpers."""
    several = _run(_SIGNATURES_CHILD, tmp_path)
    assert set(several) <= _SEVERAL_SIGNATURES, {k: v for k, v in several.items() if k not in _SEVERAL_SIGNATURES}
