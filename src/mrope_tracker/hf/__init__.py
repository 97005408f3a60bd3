"""Everything that faces transformers.

The drop-in API (what ``mrope_tracker.hf`` exposes):

- `get_rope_index`: transformers' ``get_rope_index`` for a padded batch, same
  positions, deltas, dtypes and padding (`drop_in`);
- `mm_token_type_ids`: the token types transformers 5.x processors return;
- `patch(model)`: a loaded model computes its positions with `get_rope_index`
  until the returned `Patch` is undone (`patching`);
- `warmup`: compiles the batch kernels ahead of the first call;
- `default_semantics`, `installed_transformers`, `CONVENTIONS`: which
  transformers line is installed and what follows from it (`versions`).

Submodules used by tests, benchmarks and the CLI: `native` runs the installed
transformers' own ``get_rope_index`` without weights, `compare` backs
``mrope-tracker compare`` and `sample` makes the prompts it and the ``hf``
benchmark suite use.
"""

from .drop_in import get_rope_index, mm_token_type_ids, warmup
from .patching import Patch, patch
from .versions import CONVENTIONS, default_semantics, installed_transformers

__all__ = [
    "CONVENTIONS",
    "Patch",
    "default_semantics",
    "get_rope_index",
    "installed_transformers",
    "mm_token_type_ids",
    "patch",
    "warmup",
]
