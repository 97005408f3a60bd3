"""``python -m mrope_tracker.sglang.launch_server ARGS``: SGLang's launch_server with `install()` in every process.

SGLang starts its tokenizer, scheduler and detokenizer in processes of their
own. Processes it spawns import this main module again (as ``__mp_main__``),
so the `install()` below runs in each of them; ``sglang.launch_server``
itself runs in the first process only. Before it starts, that first process
runs `warmup(runner="tracker")`: every kernel the drop-ins and the batch call
use is compiled into numba's cache once (forked over the cores on a cold
cache; loaded in a fraction of a second on a filled one), so that the
processes SGLang starts load them instead of each compiling its own on its
first request (several processes compiling into one cache at once can even
race, docs/engine.md section 8). MROPE_TRACKER_SGLANG=0 leaves SGLang as it
is, and warms nothing.
"""

import runpy

from .plugin import install, installed

install()

if __name__ == "__main__":
    if installed():
        from .. import warmup  # (the package's `warmup` is the function)

        warmup(runner="tracker")
    runpy.run_module("sglang.launch_server", run_name="__main__", alter_sys=True)
