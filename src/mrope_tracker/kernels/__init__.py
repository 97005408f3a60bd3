"""numba kernels. Only numpy arrays and plain scalars cross into them; the
Python modules of the parent package check and convert every input first.

numba's on-disk cache keys each entry point on its own source file only,
not on the helpers it compiles in from sibling modules, so after an edit of
a helper it would load stale machine code. A digest of all kernel sources,
kept next to the cache, drops this package's cache files (numba's ``.nbi``
index and ``.nbc`` data files, as its documentation names them) whenever
any kernel source changes (a cheap check at import).

Which folder that is, numba says itself: the ``stats.cache_path`` of a
dispatcher defined in this folder (numba picks it: NUMBA_CACHE_DIR, the
``__pycache__`` beside the sources, or a user-wide folder when that is
read-only). Nothing here re-derives numba's naming of those folders; a
numba without that report gets the ``__pycache__`` beside the sources,
numba's documented default, cleaned.
"""

import hashlib
import os
import pathlib

import numba

# The folder of these sources, as numba names it: absolute, links kept.
SOURCE_FOLDER = os.path.dirname(os.path.abspath(__file__))
# warmup() writes this (with numba's and Python's versions) where numba caches, once every kernel is in;
# it goes with the cache files when the sources change
WARM_MARKER_GLOB = "warmup-complete-*"


def _cache_probe():  # never called: numba is asked where it would cache it
    return 0


def _numba_cache_folder() -> pathlib.Path | None:
    """The folder numba caches this folder's kernels in, as numba reports it (None if it cannot)."""
    try:
        return pathlib.Path(numba.njit(cache=True)(_cache_probe).stats.cache_path)
    except Exception:  # a numba without the report, or no usable cache folder at all
        return None


def cache_folders() -> list[pathlib.Path]:
    """Where this package's kernels may be cached: the __pycache__ beside them
    (numba's default, and where an earlier run may have left entries), then
    the folder numba uses now when that is another (NUMBA_CACHE_DIR, or a
    user-wide folder for a read-only install). The last is the one numba
    reads and writes now."""
    beside = pathlib.Path(SOURCE_FOLDER, "__pycache__")
    now = _numba_cache_folder()
    return [beside] if now is None or now == beside else [beside, now]


def _drop_stale_cache() -> None:
    here = pathlib.Path(SOURCE_FOLDER)
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(here.glob("*.py")))).hexdigest()
    for cache in cache_folders():
        stamp = cache / "kernels-source.sha256"
        try:
            if stamp.read_text() == digest:
                continue
        except OSError:
            pass
        try:
            for path in [*cache.glob("*.nbi"), *cache.glob("*.nbc"), *cache.glob(WARM_MARKER_GLOB)]:
                path.unlink(missing_ok=True)
            cache.mkdir(parents=True, exist_ok=True)
            stamp.write_text(digest)
        except OSError:  # a read-only install: nothing to clean, nothing to stamp
            pass


_drop_stale_cache()
