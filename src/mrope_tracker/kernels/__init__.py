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


def _cache_folders(here: pathlib.Path) -> list[pathlib.Path]:
    folders = [here / "__pycache__"]
    cache_dir = os.environ.get("NUMBA_CACHE_DIR")
    if cache_dir:
        folders.append(pathlib.Path(cache_dir, f"{here.name}_{hashlib.sha1(str(here).encode()).hexdigest()}"))
    return folders


def _drop_stale_cache() -> None:
    here = pathlib.Path(__file__).resolve().parent
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(here.glob("*.py")))).hexdigest()
    for cache in _cache_folders(here):
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
