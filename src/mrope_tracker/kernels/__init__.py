"""numba kernels. Only numpy arrays and plain scalars cross into them; the
Python modules of the parent package check and convert every input first.

numba's on-disk cache keys each entry point on its own source file only,
not on the helpers it compiles in from sibling modules, so after an edit of
a helper it would load stale machine code. A digest of all kernel sources,
kept next to the cache, drops this package's cache files whenever any
kernel source changes (a cheap check at import). It covers the cache beside
the modules and the one under NUMBA_CACHE_DIR, whose sub-folder for this
package numba names after the source folder and a SHA-1 of its path.
"""

import hashlib
import os
import pathlib

# The folder of these sources as numba names it: absolute, links kept.
SOURCE_FOLDER = os.path.dirname(os.path.abspath(__file__))


def cache_folders() -> list[pathlib.Path]:
    """Where numba caches this package's kernels: the __pycache__ beside them,
    and under NUMBA_CACHE_DIR the sub-folder numba names after the source
    folder and a SHA-1 of its path. The last is the one numba reads and
    writes now (NUMBA_CACHE_DIR, where set, comes first in its search)."""
    here = pathlib.Path(SOURCE_FOLDER)
    folders = [here / "__pycache__"]
    cache_dir = os.environ.get("NUMBA_CACHE_DIR")
    if cache_dir:
        digest = hashlib.sha1(SOURCE_FOLDER.encode()).hexdigest()
        folders.append(pathlib.Path(cache_dir, f"{here.name}_{digest}"))
    return folders


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
            for path in [*cache.glob("*.nbi"), *cache.glob("*.nbc")]:
                path.unlink(missing_ok=True)
            cache.mkdir(parents=True, exist_ok=True)
            stamp.write_text(digest)
        except OSError:  # a read-only install: nothing to clean, nothing to stamp
            pass


_drop_stale_cache()
