"""Building a `RopeState` as vLLM 0.33 does, and what one will hold.

`get_rope_state` has vLLM's `get_rope_state` signature (the plugin installs
it, vllm/plugin.py): our `RopeState`, or `PrunedRopeState` (device/evs_rows.py)
when the model config enables video pruning. `planned_nbytes` is a state's
memory at construction, computed without building one (or importing triton).
"""

from __future__ import annotations

from ..core.config import MRopeConfig
from . import rows as D
from .evs_rows import PrunedRopeState
from .rope_state import DEFAULT_ROWS_PER_REQ, DEFAULT_STAGING_BYTES, RopeState

__all__ = ["get_rope_state", "planned_nbytes", "video_pruning_enabled"]


def planned_nbytes(
    max_num_reqs: int,
    max_num_tokens: int,
    *,
    on_cuda: bool = True,
    max_num_rows: int | None = None,
    staging_bytes: int = DEFAULT_STAGING_BYTES,
    num_dims: int = 3,
) -> dict[str, int]:
    """What `RopeState(...).nbytes()` will be (with no EVS override), computed
    without building one (or importing triton): its memory is fixed at
    construction, whatever the requests and max_model_len."""
    if max_num_rows is None:
        max_num_rows = max_num_reqs * DEFAULT_ROWS_PER_REQ
    staging = 4 * (staging_bytes // 4)
    return {
        "positions": num_dims * (max_num_tokens + 1) * 8,
        "slot_records": max_num_reqs * D.NUM_SLOT_COLS * 4,
        "row_pool": max_num_rows * D.NUM_DEVICE_COLS * 4,
        "evs_arena": 4,
        "staging_pinned" if on_cuda else "staging_host": 2 * staging,
        "staging_device": staging,
    }


def get_rope_state(
    model_config,
    model,
    max_num_reqs: int,
    max_num_tokens: int,
    max_model_len: int,
    device,
    *,
    semantics: str = "vllm-0.33",
    config: MRopeConfig | None = None,
) -> RopeState | None:
    """vLLM 0.33's `get_rope_state`, returning our `RopeState`: None when the
    model does not use M-RoPE, as vLLM's; the model's config read under
    `semantics` unless `config` is given (already read). A model this package
    does not know raises ValueError (the plugin then falls back to vLLM's
    own, see vllm/plugin.py)."""
    if not _field(model_config, "uses_mrope"):
        return None
    if config is None:
        config = MRopeConfig.from_hf_config(_field(model_config, "hf_config"), semantics=semantics)
    # vLLM's --video-pruning-rate: pruned videos by our rule
    kind = PrunedRopeState if video_pruning_enabled(model_config) else RopeState
    num_dims = _field(model_config, "mrope_num_dims")
    return kind(num_dims, max_num_reqs, max_num_tokens, max_model_len, device, config=config)


def _field(model_config, name: str):
    """`model_config.<name>`, or a TypeError naming `model_config` where it has none (not vLLM's ModelConfig)."""
    try:
        return getattr(model_config, name)
    except AttributeError:
        raise TypeError(
            f"model_config: expected vLLM's ModelConfig (with .{name}), got {type(model_config).__name__}"
        ) from None


def video_pruning_enabled(model_config) -> bool:
    """Whether vLLM prunes this model's videos (``--video-pruning-rate``), as
    its MRV2 decides to build a pruner."""
    multimodal = getattr(model_config, "multimodal_config", None)
    check = getattr(multimodal, "is_multimodal_pruning_enabled", None)
    return bool(check()) if callable(check) else False
