"""The kernels' cache is dropped when any kernel source changes, beside the
modules and under NUMBA_CACHE_DIR alike (numba itself checks only each entry
point's own file)."""

import os
import pathlib
import subprocess
import sys

import mrope_tracker.kernels as kernels


def _numba_subfolder(cache_dir: pathlib.Path, monkeypatch) -> pathlib.Path:
    """The sub-folder the package says numba caches its kernels in under NUMBA_CACHE_DIR."""
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(cache_dir))
    beside, under = kernels.cache_folders()
    assert beside == pathlib.Path(kernels.SOURCE_FOLDER, "__pycache__")
    return under


def test_numba_cache_dir_folder_is_the_one_numba_writes(tmp_path, monkeypatch):
    """The folder the stale-cache drop cleans is where numba writes a compile under NUMBA_CACHE_DIR."""
    script = (
        "import numpy as np; from mrope_tracker import next_positions; "
        "next_positions(np.zeros((3, 2), np.int64), 0, 0, 0, 2)"
    )
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=300)
    assert list(_numba_subfolder(tmp_path, monkeypatch).glob("next_positions.*.nbi"))


def test_stale_entries_are_dropped_in_both_folders(tmp_path, monkeypatch):
    """A stamp from other sources drops the cached entries and writes the current digest."""
    folder = _numba_subfolder(tmp_path, monkeypatch)
    folder.mkdir()
    (folder / "kernels-source.sha256").write_text("an older digest")
    stale = [folder / "prompt.prompt_from_arrays-40.py311.nbi", folder / "prompt.prompt_from_arrays-40.py311.1.nbc"]
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
