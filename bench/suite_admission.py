"""Suite `admission`: what admitting a request costs, by cached-prefix length.

A request whose prompt is one long video followed by 512 uncached text
tokens, with the video (and the text before it) in the prefix cache: 1K
and 32K cached tokens, the same single multimodal item. Designs:
- the tracker from placeholder ranges: O(items), whatever the length;
- the tracker from token ids: one scan of the tokens, no positions written;
- today's V1 design: the whole prompt's positions, cached part included;
- an MRV2-like table: the same, written into the slot's table rows.
Each timed call admits and then removes the request.
"""

from __future__ import annotations

import numpy as np

from mrope_tracker import PositionTracker, prompt_positions

from .timing import compare
from .workloads import PromptBuilder, qwen2_5_vl

UNCACHED = 512


def _prompt(config, cached_tokens: int):
    """Text + one video of about `cached_tokens` tokens (162 per frame) + 512 text tokens."""
    frames = max(1, (cached_tokens - 18) // 162)
    prompt = PromptBuilder(config).text(16).video(frames, 18, 36).text(UNCACHED).build()
    return prompt, prompt.num_tokens - UNCACHED


def run(quick: bool, progress) -> dict:
    config = qwen2_5_vl()
    max_model_len = 40960
    tracker = PositionTracker(config, max_num_reqs=4, max_num_batched_tokens=8192, max_model_len=max_model_len)
    table = np.zeros((4 * 3, max_model_len), np.int32)  # the MRV2-like design's per-slot rows
    rows = []
    for cached in (1024, 32768):
        progress(f"admission: cached prefix of {cached} tokens")
        prompt, hit = _prompt(config, cached)
        ids, kwargs, ranges = prompt.token_ids, prompt.kwargs, prompt.ranges

        def from_ranges():
            tracker.add_request_from_ranges("r", prompt.num_tokens, **kwargs, **ranges, num_computed_tokens=hit)
            tracker.remove_request("r")

        def from_tokens():
            tracker.add_request("r", ids, **kwargs, num_computed_tokens=hit)
            tracker.remove_request("r")

        def v1():
            positions, delta = prompt_positions(config, ids, **kwargs)
            return positions, delta

        def mrv2():
            positions, delta = prompt_positions(config, ids, **kwargs)
            table[0:3, : positions.shape[1]] = positions
            return delta

        # every design must agree on the request's delta before it is timed
        tracker.add_request_from_ranges("check", prompt.num_tokens, **kwargs, **ranges)
        tracker.add_request("check2", ids, **kwargs)
        deltas = {tracker.mrope_position_delta("check"), tracker.mrope_position_delta("check2"), v1()[1], mrv2()}
        tracker.remove_request("check")
        tracker.remove_request("check2")
        if len(deltas) != 1:
            raise AssertionError(f"admission designs disagree on delta: {deltas}")
        times = compare(
            {"tracker (ranges)": from_ranges, "tracker (tokens)": from_tokens, "V1 design": v1, "MRV2-like": mrv2},
            rounds=5 if quick else 15,
        )
        rows.append({"cached_tokens": hit, "prompt_tokens": prompt.num_tokens, **{k: v * 1e6 for k, v in times.items()}})
    small, large = rows
    ratios = {k: large[k] / small[k] for k in ("tracker (ranges)", "tracker (tokens)", "V1 design", "MRV2-like")}
    return {"rows": rows, "growth_32k_over_1k": ratios}
