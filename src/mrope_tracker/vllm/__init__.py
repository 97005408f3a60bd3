"""vLLM integration: the adapter (`adapter`), the MRV2 plugin (`plugin`) and its EVS hook (`evs_plugin`).

`mrope_tracker.vllm` is the documented entry point: it re-exports the
adapter's names. Nothing here imports vLLM at import time.

May import: every layer below (`device`, `tracker`, `evs`, `core`, `kernels`, `families`).
"""

from .adapter import (
    EvsRecompute,
    RopeState,
    get_mrope_input_positions,
    get_rope_state,
    install,
    layout_from_features,
    write_identity_columns,
)

__all__ = [
    "layout_from_features",
    "get_mrope_input_positions",
    "RopeState",
    "get_rope_state",
    "install",
    "EvsRecompute",
    "write_identity_columns",
]
