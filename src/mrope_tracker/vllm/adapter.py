"""vLLM adapter: positions from vLLM 0.33's multimodal features, without importing vLLM.

vLLM hands a model's ``SupportsMRoPE.get_mrope_input_positions(input_tokens,
mm_features)`` the prompt ids and one ``MultiModalFeatureSpec`` per item.
core/features.py reads those objects by duck typing (it says which attributes and
fields, and how vLLM's placeholder ranges map onto the range form), so this
works with vLLM's own classes and with any stand-in that has the same
attributes. `PositionTracker.add_request_from_features` admits a request
from the same features.

For Model Runner V2, `RopeState` and `get_rope_state` (device/rope_state.py, device/factory.py) keep
these layouts on the device, and `install()` (vllm/plugin.py) makes MRV2
use them.

For EVS (vLLM's video pruning), `EvsRecompute` offers the pruning models'
``recompute_mrope_positions(input_ids, multimodal_embeddings,
mrope_positions, num_computed_tokens)`` with our rule's results, reading the
identity channels `write_identity_columns` writes (evs/recompute.py); the
plugin routes Model Runner V2's pruner through it (vllm/evs_plugin.py).

Each feature is read once: O(items), no token is scanned. Positions follow
``config.semantics``: use ``semantics="vllm-0.33"`` to reproduce vLLM 0.33
bit for bit, ``"reference"`` for the transformers 4.x rules.
"""

from __future__ import annotations

import torch

from ..core.canvas import canvas_layout_from_features
from ..core.features import read_features, sequence_length
from ..core.inputs import as_config, as_index
from ..core.layout import PromptLayout
from ..device.factory import get_rope_state
from ..device.rope_state import RopeState
from ..evs.recompute import EvsRecompute, write_identity_columns
from .plugin import install

__all__ = [
    "layout_from_features",
    "get_mrope_input_positions",
    "RopeState",
    "get_rope_state",
    "install",
    "EvsRecompute",
    "write_identity_columns",
]


def layout_from_features(config, num_tokens: int, mm_features) -> PromptLayout:
    """A prompt's `PromptLayout` from vLLM's multimodal features, in O(items)."""
    config = as_config(config)
    items, ranges = read_features(config, mm_features)
    num_tokens = as_index(num_tokens, "num_tokens", minimum=1)
    return PromptLayout.from_normalized(config, num_tokens, items, ranges)


def get_mrope_input_positions(config, input_tokens, mm_features) -> tuple[torch.Tensor, int]:
    """vLLM's ``SupportsMRoPE.get_mrope_input_positions``: the prompt's (num_dims, L) int64
    positions and its delta, from the placeholder ranges (the ids are only counted;
    MiniCPM-V 4.7's canvas reads them, `canvas.canvas_layout_from_features`)."""
    config = as_config(config)
    if config.spec.canvas:  # MiniCPM-V 4.7: the canvas reads the ids (its markers), as vLLM's does
        _num_tokens(input_tokens)
        layout = canvas_layout_from_features(config, input_tokens, mm_features)
    else:
        layout = layout_from_features(config, _num_tokens(input_tokens), mm_features)
    return torch.from_numpy(layout.positions()), int(layout.delta)


def _num_tokens(input_tokens) -> int:
    num = sequence_length(input_tokens, "input_tokens")  # a dict, a set or a 2-D array: refused
    if num == 0:
        raise ValueError("input_tokens: expected at least one token, got an empty sequence")
    return num
