"""Suite `admission`: what admitting a request costs, by cached-prefix length.

A request whose prompt is one long video followed by 512 uncached text
tokens, with the video (and the text before it) in the prefix cache: 1K
and 32K cached tokens, the same single multimodal item. Designs:
- the tracker from placeholder ranges: O(items), whatever the length;
- the tracker from token ids: one scan of the tokens, no positions written;
- today's V1 design: the whole prompt's positions, cached part included;
- an MRV2-like table: the same, written into the slot's table rows.
Each timed call admits and then removes the request. Both prefix lengths
run in the same interleaved rounds, so the growth from 1K to 32K is a ratio
per round, reported as its median, min and max.
"""

from __future__ import annotations

import numpy as np

from mrope_tracker import PositionTracker, prompt_positions

from .timing import measure, medians_us, ratio
from .workloads import PromptBuilder, qwen2_5_vl

UNCACHED = 512
DESIGNS = ("tracker (ranges)", "tracker (tokens)", "V1 design", "MRV2-like")


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
    contenders = {}
    rows = []
    for cached in (1024, 32768):
        prompt, hit = _prompt(config, cached)
        ids, kwargs, ranges = prompt.token_ids, prompt.kwargs, prompt.ranges

        def from_ranges(prompt=prompt, kwargs=kwargs, ranges=ranges, hit=hit):
            tracker.add_request_from_ranges("r", prompt.num_tokens, **kwargs, **ranges, num_computed_tokens=hit)
            tracker.remove_request("r")

        def from_tokens(ids=ids, kwargs=kwargs, hit=hit):
            tracker.add_request("r", ids, **kwargs, num_computed_tokens=hit)
            tracker.remove_request("r")

        def v1(ids=ids, kwargs=kwargs):
            positions, delta = prompt_positions(config, ids, **kwargs)
            return positions, delta

        def mrv2(ids=ids, kwargs=kwargs):
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
        for name, fn in zip(DESIGNS, (from_ranges, from_tokens, v1, mrv2)):
            contenders[(name, cached)] = fn
        rows.append({"cached_tokens": hit, "prompt_tokens": prompt.num_tokens, "key": cached})
    progress("admission: 1K and 32K cached prefixes, interleaved")
    samples = measure({f"{name}@{cached}": fn for (name, cached), fn in contenders.items()}, rounds=5 if quick else 15)
    us = medians_us(samples)
    for row in rows:
        key = row.pop("key")
        row.update({name: us[f"{name}@{key}"] for name in DESIGNS})
    growth = {name: ratio(samples, f"{name}@32768", f"{name}@1024") for name in DESIGNS}
    return {"rows": rows, "growth_32k_over_1k": growth}
