"""The CPU tracker for vLLM's V1 runner: `PositionTracker` and its bookkeeping.

`position_tracker` (the class), `row_pool` (the layout-row allocator),
`staging` (pinned host buffers and the one host-to-device copy a step),
`step_args` / `step_errors` (a step's arguments checked and its kernel's
error codes turned into messages).

May import: `core`, `evs`, `kernels`, `families`.
"""

from .position_tracker import PositionTracker

__all__ = ["PositionTracker"]
