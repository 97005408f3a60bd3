"""Record SGLang 0.5.23's own positions into tests/data/sglang-0.5.23.jsonl.

    python -m pip download --no-deps --only-binary=:all: --dest WHEELS sglang==0.5.23
    (unpack sglang/srt/layers/rotary_embedding/mrope_rope_index.py from the wheel)
    python tests/record_sglang_vectors.py PATH/TO/mrope_rope_index.py

Draws a fixed set of random prompts (derandomized hypothesis, the strategies of
tests/family_prompts.py) for every model type in tests/sglang_calls.py's
SERVED, runs SGLang's function on each as its processors call it, and writes
one JSON object a line: the model type, its config, the prompt's items, and
SGLang's int64 positions (as prefill casts them) and delta (as the function
returns it: a float for Qwen3-Omni), or the name of the exception SGLang's
code raised. tests/test_sglang_vectors.py checks the sglang-0.5 preset
against the file without the download.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from family_prompts import family_prompts  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from sglang_calls import SERVED, config_for, load, sglang_positions  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "sglang-0.5.23.jsonl")
# prompts per model type: more where SGLang's arithmetic differs from the reference or from vLLM
COUNTS = {model_type: 10 for model_type in SERVED} | {"qwen3_omni_moe": 40, "qwen2_5_vl": 20}
MAX_TOKENS = 700  # keeps the file small; long prompts are the oracle test's


def _draw(model_type: str, count: int) -> list:
    family, config_name = SERVED[model_type]
    prompts = []

    @settings(max_examples=20 * count, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def collect(data):
        prompt = data.draw(family_prompts(family, config_name=config_name, max_t=8))
        if len(prompts) < count and prompt.num_tokens <= MAX_TOKENS:
            prompts.append(prompt)

    collect()
    return prompts


def _record(module, prompt, model_type: str) -> dict:
    out = {
        "model_type": model_type,
        "config": config_for(prompt, model_type),
        "token_ids": list(prompt.token_ids),
        "image_grid_thw": [list(g) for g in prompt.image_grid_thw] or None,
        "video_grid_thw": [list(g) for g in prompt.video_grid_thw] or None,
        "second_per_grid_ts": None if prompt.second_per_grid_ts is None else list(prompt.second_per_grid_ts),
        "audio_feature_lengths": None if prompt.audio_feature_lengths is None else list(prompt.audio_feature_lengths),
        "use_audio_in_video": prompt.use_audio_in_video,
    }
    try:
        positions, delta = sglang_positions(module, prompt, model_type)
    except Exception as error:  # noqa: BLE001 (recorded: the test checks which)
        return {**out, "positions": None, "delta": None, "raised": type(error).__name__}
    return {**out, "positions": positions.tolist(), "delta": delta, "raised": None}


def main(path: str) -> None:
    module = load(path)
    lines = []
    for model_type in sorted(SERVED):
        lines += [_record(module, prompt, model_type) for prompt in _draw(model_type, COUNTS[model_type])]
    with open(OUT, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line, separators=(",", ":")) + "\n")
    raised = sum(line["raised"] is not None for line in lines)
    print(f"{OUT}: {len(lines)} prompts, {raised} on which SGLang raised")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python tests/record_sglang_vectors.py PATH/TO/mrope_rope_index.py")
    main(sys.argv[1])
