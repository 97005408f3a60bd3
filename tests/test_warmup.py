"""warmup(): every kernel ready, and on a cold cache the forked compile
leaves nothing for the parent to compile (everything it needs loads from the
cache the children filled)."""

import json
import os
import subprocess
import sys

import pytest
import torch

from mrope_tracker import warmup
from mrope_tracker.cli import main

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
print(json.dumps({"first": list(first), "second": list(second), "compiled": after_first, "again": compiled[len(after_first):]}))
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


def test_warm_process_neither_forks_nor_compiles():
    """With the cache filled (by the test session's own kernels), warmup()
    reports its stages only."""
    warmup()
    stages = warmup(dtypes=(torch.int64, torch.int32))
    assert list(stages) == ["prompt_positions", "layout", "next_positions", "tracker[int64]", "tracker[int32]"]


@pytest.mark.parametrize("jobs", [0, -1, 1.5, "2", True])
def test_bad_jobs(jobs):
    with pytest.raises(ValueError, match="jobs: expected None or an int >= 1"):
        warmup(jobs=jobs)


def test_bad_dtypes():
    with pytest.raises(ValueError, match="dtypes: expected torch.int64 or torch.int32"):
        warmup(dtypes=(torch.float32,))


def test_cli_warmup_refuses_bad_jobs(capsys):
    assert main(["warmup", "--jobs", "0"]) == 2
    assert "jobs" in capsys.readouterr().err
