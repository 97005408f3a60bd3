"""Benchmarks: `mrope-tracker bench` (installed as mrope_tracker.bench).

SUITES is the registry: each suite NAME is the module ``suite_NAME`` here,
with a ``run(quick, progress)`` function, and is listed with what it
measures. `mrope-tracker bench` runs them in this order and its --help lists
them from here, without importing them (they import torch and transformers).
"""

SUITES = {
    "prompt": "whole-prompt positions against the torch reference, vLLM's and transformers' code",
    "decode": "positions for a scheduler step, per request and per batch",
    "admission": "what admitting a request costs, by cached-prefix length (tracker and RopeState)",
    "scheduler": "a simulated engine running the four designs side by side",
    "memory": "host memory each design holds for its positions",
    "hf": "hf.get_rope_index against the installed transformers' own",
    "startup": "what an engine pays when it starts: warmup() cold and warm, in fresh processes",
    "evs": "a pruned video admitted, then its retention mask applied, against vLLM's recompute",
    "rope": "RopeState.prepare_positions host time per step at 256 and 1,024 requests, beside vLLM's own",
    "sglang": "SGLang's get_rope_index, its per-batch extend and decode paths and its memory, against the adapter",
}
