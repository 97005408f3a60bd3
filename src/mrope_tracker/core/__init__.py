"""The rules' core: what a prompt is and where its tokens sit, with no engine in sight.

Owns the config (`MRopeConfig`, presets), input normalisation (`inputs`), the
range form (`ranges`), vLLM's feature objects read by duck typing
(`features`: the tracker and the device state admit from them too, so they
live here, not in `vllm/`), the O(items) `PromptLayout`, whole-prompt
positions, MiniCPM-V 4.7's canvas, admission checks and error messages, and
the kept parse of a model config object (`config_cache`).

May import: `families`, `kernels`. Nothing above it.
"""
