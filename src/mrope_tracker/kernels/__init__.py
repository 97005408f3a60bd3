"""numba kernels. Only numpy arrays and plain scalars cross into them; the
Python wrappers in the parent package validate and normalise every input.

numba's on-disk cache keys each entry point on its own file only, not on the
helpers it inlines from sibling modules, so after an edit of a helper it
would load stale machine code. A digest of all kernel sources, kept next to
the cache, drops this package's cache files whenever any kernel changes (a
millisecond at import). With NUMBA_CACHE_DIR set, numba caches elsewhere and
this check does not reach it.
"""

import hashlib
import pathlib


def _drop_stale_cache() -> None:
    here = pathlib.Path(__file__).resolve().parent
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(here.glob("*.py")))).hexdigest()
    cache = here / "__pycache__"
    stamp = cache / "kernels-source.sha256"
    try:
        if stamp.read_text() == digest:
            return
    except OSError:
        pass
    try:
        for path in [*cache.glob("*.nbi"), *cache.glob("*.nbc")]:
            path.unlink(missing_ok=True)
        cache.mkdir(exist_ok=True)
        stamp.write_text(digest)
    except OSError:  # a read-only install: nothing to clean, nothing to stamp
        pass


_drop_stale_cache()
