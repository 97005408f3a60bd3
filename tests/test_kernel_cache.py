"""The kernels' cache is dropped when any kernel source changes, beside the
modules and under NUMBA_CACHE_DIR alike (numba itself checks only each entry
point's own file)."""

import os
import pathlib
import subprocess
import sys
import threading

import pytest

import mrope_tracker.kernels as kernels


def _numba_subfolder(cache_dir: pathlib.Path, monkeypatch) -> pathlib.Path:
    """A stand-in for the folder numba reports under NUMBA_CACHE_DIR (numba reads that variable at import,
    so the real report is checked in a fresh process below)."""
    folder = cache_dir / "kernels_digest"
    monkeypatch.setattr(kernels, "_numba_cache_folder", lambda: folder)
    beside, under = kernels.cache_folders()
    assert beside == pathlib.Path(kernels.SOURCE_FOLDER, "__pycache__")
    return under


@pytest.mark.slow  # a fresh compile in a child process
def test_numba_cache_dir_folder_is_the_one_numba_writes(tmp_path):
    """The folder numba reports (and the stale-cache drop cleans) is where it writes a compile under
    NUMBA_CACHE_DIR."""
    script = (
        "import numpy as np; from mrope_tracker import next_positions; import mrope_tracker.kernels as k; "
        "next_positions(np.zeros((3, 2), np.int64), 0, 0, 0, 2); print(k.cache_folders()[-1])"
    )
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=300, capture_output=True)
    folder = pathlib.Path(out.stdout.decode().strip())
    assert folder.parent == tmp_path and list(folder.glob("next_positions.*.nbi"))
    assert (folder / "kernels-source.sha256").exists()


def test_without_numbas_report_the_folder_beside_is_cleaned(monkeypatch):
    """A numba that cannot say where it caches: the __pycache__ beside the sources, numba's default."""

    def no_report(*args, **kwargs):
        raise AttributeError("stats")

    monkeypatch.setattr(kernels.numba, "njit", no_report)
    assert kernels._numba_cache_folder() is None
    assert kernels.cache_folders() == [pathlib.Path(kernels.SOURCE_FOLDER, "__pycache__")]


def test_stale_entries_are_dropped_in_both_folders(tmp_path, monkeypatch):
    """A stamp from other sources drops the cached entries and writes the current digest."""
    folder = _numba_subfolder(tmp_path, monkeypatch)
    folder.mkdir()
    (folder / "kernels-source.sha256").write_text("an older digest")
    stale = [folder / "prompt.prompt_from_arrays-40.py311.nbi", folder / "prompt.prompt_from_arrays-40.py311.1.nbc"]
    for path in stale:
        path.write_bytes(b"stale")
    stale.append(folder / "warmup-complete-numba0.60.0-py311")  # warmup()'s marker goes with the entries
    for path in stale:
        path.write_bytes(b"stale")
    kept = folder / "unrelated.txt"
    kept.write_text("kept")
    kernels._drop_stale_cache()
    assert not any(path.exists() for path in stale)
    assert kept.exists()
    stamp = (folder / "kernels-source.sha256").read_text()
    assert stamp == pathlib.Path(kernels.SOURCE_FOLDER, "__pycache__", "kernels-source.sha256").read_text()
    # with the digest current, nothing is dropped
    stale[0].write_bytes(b"fresh")
    kernels._drop_stale_cache()
    assert stale[0].exists()


def test_private_numba_options_only_where_tested_or_accepted(monkeypatch):
    """The private options are passed on the numba versions CI runs without a probe; on another, only if
    a probe compile takes them; never with MROPE_TRACKER_NUMBA_PUBLIC_ONLY=1."""
    from mrope_tracker.kernels import jit_options

    calls = []

    def refusing_njit(*args, **kwargs):
        calls.append(kwargs)
        raise KeyError("Unrecognized options: {'_nrt'}")

    monkeypatch.setattr(jit_options.numba, "njit", refusing_njit)
    oldest, newest = jit_options.TESTED_NUMBA
    assert jit_options.private_options_accepted(f"{oldest[0]}.{oldest[1]}.0")
    assert jit_options.private_options_accepted(f"{newest[0]}.{newest[1]}.1rc1")
    assert not calls  # no probe on a tested version
    assert not jit_options.private_options_accepted(f"{newest[0]}.{newest[1] + 1}.0")
    assert calls and set(calls[0]) == set(jit_options.PRIVATE_OPTIONS)
    monkeypatch.setenv("MROPE_TRACKER_NUMBA_PUBLIC_ONLY", "1")
    assert not jit_options.private_options_accepted(f"{oldest[0]}.{oldest[1]}.0")
    monkeypatch.setattr(jit_options, "PRIVATE", False)
    assert jit_options.options(_nrt=False) == {}


@pytest.mark.slow
def test_the_public_path_gives_the_same_positions(tmp_path):
    """With MROPE_TRACKER_NUMBA_PUBLIC_ONLY=1 (no private numba option: what a numba that dropped them
    gets) and with numba's dispatchers stripped of `disable_compile` (no sealing), the kernels compile on
    an empty cache and give the torch reference's positions."""
    script = """
import numpy as np, torch
from numba.core import dispatcher
del dispatcher._DispatcherBase.disable_compile  # what a numba without the method looks like
from mrope_tracker import MRopeConfig, PositionTracker, prompt_positions, reference
from mrope_tracker.kernels import jit_options
assert not jit_options.PRIVATE
config = MRopeConfig(family="qwen2_vl")
ids = np.array([1, config.vision_start_token_id] + [config.image_token_id] * 6 + [config.vision_end_token_id, 2])
positions, delta = prompt_positions(config, ids, image_grid_thw=[[1, 4, 6]])
expected, expected_delta = reference.prompt_positions(config, torch.from_numpy(ids), image_grid_thw=[[1, 4, 6]])
assert (positions == expected.numpy()).all() and delta == expected_delta
tracker = PositionTracker(config, max_num_reqs=2, max_num_batched_tokens=16)
tracker.add_request("a", ids, image_grid_thw=[[1, 4, 6]])
assert (tracker.prepare(["a"], [10]).numpy() == positions).all()
assert (tracker.prepare(["a"], [1]).numpy() == positions[:, -1:] + 1).all()
print("ok")
"""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path), "MROPE_TRACKER_NUMBA_PUBLIC_ONLY": "1"}
    out = subprocess.run([sys.executable, "-c", script], env=env, timeout=900, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]


def test_set_compiling_uses_disable_compile_where_numba_has_it():
    from mrope_tracker.kernels.jit_options import set_compiling

    class Sealable:
        def __init__(self):
            self.calls = []

        def disable_compile(self, value):
            self.calls.append(value)

    sealable = Sealable()
    assert set_compiling(sealable, False) and set_compiling(sealable, True)
    assert sealable.calls == [True, False]
    assert set_compiling(object(), False) is False  # a numba without it: nothing to switch, no error


def test_lighter_optimisation_lowers_numbas_level_inside_and_restores_it(monkeypatch):
    """Inside, numba.config.OPT is WARMUP_OPT_LEVEL and numba's compiler lock is held (no other thread
    compiles at that level); after, even when the body raises, the level is the one before."""
    import numba
    from numba.core.compiler_lock import global_compiler_lock

    from mrope_tracker.kernels import jit_options

    monkeypatch.delenv("NUMBA_OPT", raising=False)
    monkeypatch.delenv("MROPE_TRACKER_NUMBA_PUBLIC_ONLY", raising=False)
    monkeypatch.setattr(numba.config, "OPT", type(numba.config.OPT)(3))
    before = numba.config.OPT
    with jit_options.lighter_optimisation() as lowered:
        assert lowered and numba.config.OPT == jit_options.WARMUP_OPT_LEVEL
        assert type(numba.config.OPT) is type(before)  # (numba asks it for is_opt_max)
        assert global_compiler_lock.is_locked()
    assert numba.config.OPT is before and not global_compiler_lock.is_locked()
    with pytest.raises(RuntimeError), jit_options.lighter_optimisation():
        raise RuntimeError("a failing compile")
    assert numba.config.OPT is before


def test_full_optimisation_restores_the_lowered_level_inside_only(monkeypatch):
    """The step kernel's compile: numba's level inside lighter_optimisation, the lighter one again after;
    outside any, nothing changes."""
    import numba

    from mrope_tracker.kernels import jit_options

    monkeypatch.delenv("NUMBA_OPT", raising=False)
    monkeypatch.delenv("MROPE_TRACKER_NUMBA_PUBLIC_ONLY", raising=False)
    monkeypatch.setattr(numba.config, "OPT", type(numba.config.OPT)(3))
    before = numba.config.OPT
    with jit_options.full_optimisation():
        assert numba.config.OPT is before
    with jit_options.lighter_optimisation():
        with jit_options.full_optimisation():
            assert numba.config.OPT is before
        assert numba.config.OPT == jit_options.WARMUP_OPT_LEVEL
        # another thread (its compile waits for the lock this one holds) leaves the lowered level alone
        seen = []

        def other():
            with jit_options.full_optimisation():
                seen.append(int(numba.config.OPT))

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        assert seen == [jit_options.WARMUP_OPT_LEVEL] and numba.config.OPT == jit_options.WARMUP_OPT_LEVEL
    assert numba.config.OPT is before


@pytest.mark.parametrize("case", ["user NUMBA_OPT", "already low", "public only", "max", "no compiler lock"])
def test_lighter_optimisation_leaves_a_level_it_should_not_touch(monkeypatch, case):
    import numba

    from mrope_tracker.kernels import jit_options

    monkeypatch.delenv("NUMBA_OPT", raising=False)
    monkeypatch.delenv("MROPE_TRACKER_NUMBA_PUBLIC_ONLY", raising=False)
    level = type(numba.config.OPT)
    monkeypatch.setattr(numba.config, "OPT", level(3))
    if case == "user NUMBA_OPT":
        monkeypatch.setenv("NUMBA_OPT", "3")
    elif case == "already low":
        monkeypatch.setattr(numba.config, "OPT", level(0))
    elif case == "public only":
        monkeypatch.setenv("MROPE_TRACKER_NUMBA_PUBLIC_ONLY", "1")
    elif case == "no compiler lock":  # a numba without numba.core.compiler_lock: any import of it fails
        monkeypatch.setitem(sys.modules, "numba.core.compiler_lock", None)
    else:
        monkeypatch.setattr(numba.config, "OPT", level("max"))
    before = numba.config.OPT
    with jit_options.lighter_optimisation() as lowered:
        assert not lowered and numba.config.OPT is before
    assert numba.config.OPT is before


@pytest.mark.slow
def test_kernels_compiled_at_the_lighter_level_give_the_reference_positions(tmp_path):
    """warmup(jobs=1) on an empty cache compiles in its own process at WARMUP_OPT_LEVEL, the per-step
    kernels apart (at numba's level); those kernels give
    the torch reference's positions there, on random image prompts of five families, as prompts and as
    tracker steps. (The forked children's cache is checked in test_warmup.py's warm start.)"""
    script = """
import numba, numpy as np, torch
import mrope_tracker
from mrope_tracker import MRopeConfig, PositionTracker, prompt_positions, reference
from numba.core import event
levels = {}

class Listener(event.Listener):
    def on_start(self, e):
        levels.setdefault(int(numba.config.OPT), set()).add(e.data["dispatcher"].py_func.__name__)

    def on_end(self, e):
        pass

with event.install_listener("numba:compile", Listener()):
    mrope_tracker.warmup(jobs=1)
# the per-step kernels at numba's level (3: the test clears NUMBA_OPT), every other at the lighter one
assert levels[3] - {"impl"} == {"prepare_step", "next_positions_kernel"}, levels  # (impl: numba's own max)
assert len(levels[1]) > 20 and set(levels) == {1, 3}, levels
rng = np.random.default_rng(5)
for family in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "glm4v", "qwen2_5_omni"):
    config = MRopeConfig(family=family)
    for _ in range(20):
        h, w = 2 * int(rng.integers(1, 6)), 2 * int(rng.integers(1, 6))
        ids = np.array([1, config.vision_start_token_id] + [config.image_token_id] * (h * w // 4)
                       + [config.vision_end_token_id] + [2] * int(rng.integers(0, 9)))
        got, delta = prompt_positions(config, ids, image_grid_thw=[[1, h, w]])
        expected, expected_delta = reference.prompt_positions(config, torch.from_numpy(ids), image_grid_thw=[[1, h, w]])
        assert (got == expected.numpy()).all() and delta == expected_delta, family
        tracker = PositionTracker(config, max_num_reqs=2, max_num_batched_tokens=64)
        tracker.add_request("a", ids, image_grid_thw=[[1, h, w]])
        assert (tracker.prepare(["a"], [len(ids)]).numpy() == got).all()
print("ok")
"""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_OPT"}
    env["NUMBA_CACHE_DIR"] = str(tmp_path)
    out = subprocess.run([sys.executable, "-c", script], env=env, timeout=900, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]
