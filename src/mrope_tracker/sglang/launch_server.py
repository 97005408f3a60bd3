"""``python -m mrope_tracker.sglang.launch_server ARGS``: SGLang's launch_server with `install()` in every process.

SGLang starts its tokenizer, scheduler and detokenizer in processes of their
own. Processes it spawns import this main module again (as ``__mp_main__``),
so the `install()` below runs in each of them; ``sglang.launch_server``
itself runs in the first process only. MROPE_TRACKER_SGLANG=0 leaves SGLang
as it is.
"""

import runpy

from .plugin import install

install()

if __name__ == "__main__":
    runpy.run_module("sglang.launch_server", run_name="__main__", alter_sys=True)
