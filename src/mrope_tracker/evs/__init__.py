"""EVS (vLLM's video pruning): pruned layouts and vLLM's recompute contract.

`pruned`: a pruned prompt's layout from a retention mask (`PrunedPrompt`,
`PendingPrune`, `delete_tokens`); `recompute`: `EvsRecompute`, vLLM's
``recompute_mrope_positions`` call answered with our rule.

May import: `core`, `kernels`, `families`.
"""

from .pruned import PendingPrune, PrunedPrompt, delete_tokens

__all__ = ["PendingPrune", "PrunedPrompt", "delete_tokens"]
