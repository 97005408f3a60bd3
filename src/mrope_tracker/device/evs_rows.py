"""`PrunedRopeState`: `RopeState` for a model whose videos vLLM prunes (EVS), by our rule.

With ``--video-pruning-rate``, vLLM 0.33 drops part of each Qwen2.5-VL /
Qwen3-VL video's tokens, decided by a retention mask that exists only once
the video's encoder has run. `RopeState` itself knows nothing of this: it
keeps MRV2's contract. This module composes EVS on top of it:

- `init_prefill_positions` of a prompt with pruned videos admits a
  `PrunedPrompt` (`mrope_tracker.evs`): every token but the ones a mask
  decides is exact from admission;
- `set_retention_mask` rebuilds the slot's rows once a video's mask is known
  (the mask's bits, 192 to a host row), staged like any admission.

vLLM's own recompute path (`update_prefill_positions`, a dense override) is
MRV2's contract and stays in `RopeState`; vllm/evs_plugin.py hooks the pruner.
`get_rope_state` builds this class when the model config enables pruning.
"""

from __future__ import annotations

from ..core.config import MRopeConfig
from ..evs.pruned import PRUNABLE, PendingPrune, PrunedPrompt
from ..evs.recompute import pruned_prompt_from_features
from .rope_state import RopeState

__all__ = ["PrunedRopeState"]


class PrunedRopeState(RopeState):
    """`RopeState` whose Qwen2.5-VL / Qwen3-VL videos are admitted pruned (vLLM's EVS)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._pruned: dict[int, PendingPrune] = {}  # slot -> its pruned prompt and the masks known so far

    def _admit_features(self, slot: int, config: MRopeConfig, prefill_token_ids, mm_features) -> None:
        if config.family in PRUNABLE:
            prompt, _ = pruned_prompt_from_features(config, prefill_token_ids, mm_features)
            if prompt is not None:  # its videos' masks come with their encoder outputs
                self.init_prefill_pruned(slot, prompt)
                return
        super()._admit_features(slot, config, prefill_token_ids, mm_features)

    def init_prefill_pruned(self, req_idx: int, prompt: PrunedPrompt, retention_masks=None) -> None:
        """Admit slot `req_idx` with a prompt whose videos vLLM pruned, before
        or with its masks. Until a video's mask comes (`set_retention_mask`),
        the tokens it decides carry stand-in positions: the caller schedules
        them only after the mask, as vLLM does (the encoder runs before its
        tokens' positions are used)."""
        slot = self._slot(req_idx)
        if not isinstance(prompt, PrunedPrompt):
            raise TypeError(f"prompt: expected an mrope_tracker.evs.PrunedPrompt, got {type(prompt).__name__}")
        pending = PendingPrune(prompt, retention_masks)
        self.init_prefill_layout(slot, pending.layout())
        self._pruned[slot] = pending

    def set_retention_mask(self, req_idx: int, video_index: int, retention_mask) -> None:
        """Video `video_index`'s retention mask for slot `req_idx`: the slot's
        rows rebuilt and staged; tokens outside what the mask decides keep
        their positions."""
        slot = self._slot(req_idx)
        pending = self._pruned.get(slot)
        if pending is None:
            raise ValueError(f"req_idx: expected a slot admitted with init_prefill_pruned, got {req_idx!r}")
        updated = pending.with_mask(video_index, retention_mask)
        self.init_prefill_layout(slot, updated.layout())
        self._pruned[slot] = updated

    def _admit_rows(self, slot: int, *args) -> None:
        super()._admit_rows(slot, *args)
        self._pruned.pop(slot, None)  # admitted again: the pruned prompt, if any, is set again by its caller

    def remove_request(self, req_idx: int) -> None:
        super().remove_request(req_idx)
        self._pruned.pop(int(req_idx), None)
