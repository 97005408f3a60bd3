"""mrope_tracker for SGLang 0.5 (docs/engine.md, "SGLang").

- `get_rope_index`, `get_rope_index_qwen3_omni`, `get_rope_index_glm4v`,
  `get_rope_index_ernie45`: drop-ins for SGLang's functions of those names
  (rope_index.py);
- `read_layout`, `text_layout`, `extend_session`, `concat_layouts`: a
  request's O(items) position state, SGLang's session rule and its merge of
  two requests' inputs on it (request_state.py);
- `BatchPositions`: one call per forward batch (batch.py);
- `install()`: patches SGLang 0.5's call sites (plugin.py).
"""

from .batch import BatchPositions
from .plugin import install, uninstall
from .request_state import concat_layouts, extend_session, mrope_positions_nbytes, read_layout, text_layout
from .rope_index import (
    default_semantics,
    get_rope_index,
    get_rope_index_ernie45,
    get_rope_index_glm4v,
    get_rope_index_qwen3_omni,
)

__all__ = [
    "BatchPositions",
    "concat_layouts",
    "default_semantics",
    "extend_session",
    "get_rope_index",
    "get_rope_index_ernie45",
    "get_rope_index_glm4v",
    "get_rope_index_qwen3_omni",
    "install",
    "mrope_positions_nbytes",
    "read_layout",
    "text_layout",
    "uninstall",
]
