"""mrope_tracker: exact, incremental M-RoPE positions for multimodal LLM serving.

Public API:
- `MRopeConfig.from_hf_config` reads what decides positions from a model config;
- `prompt_positions` computes a whole prompt's (3, L) positions and delta;
- `canvas_positions` / `canvas_layout`: MiniCPM-V 4.7's canvas, from per-crop sizes;
- `PromptLayout` keeps a prompt as O(items) segments and produces any slice;
- `next_positions` writes decode positions in place;
- `PositionTracker` keeps running requests' positions for a model runner;
- `warmup` compiles every kernel ahead of the first request;
- `reference` holds the plain torch implementation of the same rules.
"""

from .core.canvas import canvas_layout, canvas_positions
from .core.config import SUPPORTED_MODEL_TYPES, MRopeConfig
from .core.layout import PromptLayout
from .core.positions import next_positions, prompt_positions
from .tracker.position_tracker import PositionTracker
from .warmup import warmup

__all__ = [
    "MRopeConfig",
    "SUPPORTED_MODEL_TYPES",
    "PromptLayout",
    "prompt_positions",
    "canvas_positions",
    "canvas_layout",
    "next_positions",
    "PositionTracker",
    "warmup",
]
