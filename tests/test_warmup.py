"""warmup(): every kernel ready, and on a cold cache the forked compile
leaves nothing for the parent to compile (everything it needs loads from the
cache the children filled)."""

import importlib
import json
import os
import subprocess
import sys
import threading
import time

import pytest
import torch
from numba.core import event

from mrope_tracker import warmup
from mrope_tracker.cli import main

warmup_module = importlib.import_module("mrope_tracker.warmup")  # (the package's `warmup` is the function)

# Runs in a fresh process on an empty cache: the first warmup() forks (where
# it can), the second finds the cache filled. Every numba compile the parent
# itself does after the fork is recorded.
_CHILD = """
import json, sys
from numba.core import event
import mrope_tracker
from mrope_tracker import warmup

compiled = []

class Listener(event.Listener):
    def on_start(self, e):
        pass

    def on_end(self, e):
        compiled.append(e.data["dispatcher"].py_func.__qualname__)

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


def _cold_warmup(tmp_path, jobs: str) -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"))
    done = subprocess.run([sys.executable, "-c", _CHILD, jobs], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the forked compile is Linux only")
def test_cold_cache_compiles_in_two_processes_and_the_parent_only_loads(tmp_path):
    """A cold warmup(jobs=2) compiles in two children; the parent then
    compiles nothing itself (the children covered every kernel its stages
    reach), and a second warmup() forks no more."""
    result = _cold_warmup(tmp_path, "2")
    assert result["first"][0] == "compile (2 processes)"
    assert result["compiled"] == [], f"compiled in the parent after the fork: {result['compiled']}"
    assert "compile (2 processes)" not in result["second"]
    assert result["again"] == []
    assert result["control"] == ["control"]  # the listener does see a compile


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
    assert list(stages) == ["prompt_positions", "layout", "next_positions", "tracker[int64]", "tracker[int32]"]
    assert compiles.names == []


def test_a_failing_or_stuck_child_costs_only_time(monkeypatch):
    """A child that raises, or one still running at the deadline (ended),
    leaves the parent to compile in place: _compile_in_children returns."""
    monkeypatch.setattr(warmup_module, "CHILD_DEADLINE_S", 1.0)
    start = time.monotonic()
    warmup_module._compile_in_children((lambda: 1 / 0, lambda: time.sleep(60)))
    assert time.monotonic() - start < 30


_SIGCHLD_IGNORED = """
import signal, sys
import importlib
warmup_module = importlib.import_module("mrope_tracker.warmup")
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel: waitpid finds none
warmup_module._compile_in_children((lambda: None, lambda: None))
print("returned")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the forked compile is Linux only")
def test_children_reaped_elsewhere():
    done = subprocess.run([sys.executable, "-c", _SIGCHLD_IGNORED], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "returned" in done.stdout, done.stderr


def test_other_threads_keep_the_default_in_process():
    """jobs=None forks only while this is the process's one Python thread."""
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert warmup_module._num_jobs(None) == 1
        assert warmup_module._num_jobs(2) == (2 if sys.platform.startswith("linux") else 1)
    finally:
        stop.set()
        thread.join()


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
