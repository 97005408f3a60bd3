"""Suite `memory`: host memory each design holds for its positions.

Per design and configuration: vLLM V1 keeps every live request's (3, L)
int64 prompt positions (24 bytes per prompt token); an MRV2-like design
keeps a [max_num_reqs * 3, max_model_len] int32 table in pinned memory
whatever the requests are; the tracker keeps a slot row per request and a
few layout rows per multimodal item. The tracker's figures are measured on
a real tracker filled with the requests; the others are their buffer sizes.
"""

from __future__ import annotations

from mrope_tracker import PositionTracker

from .workloads import PromptBuilder, qwen2_5_vl

MiB = 1024 * 1024

# (max_num_reqs, prompt tokens per request, max_model_len, images per request)
CONFIGS = (
    (256, 8192, 32768, 1),
    (1024, 8192, 131072, 1),
    (1024, 8192, 131072, 8),
)


def run(quick: bool, progress) -> dict:
    config = qwen2_5_vl()
    rows = []
    for max_num_reqs, prompt_len, max_model_len, images in CONFIGS:
        progress(f"memory: {max_num_reqs} requests x {prompt_len} tokens, max_model_len {max_model_len}")
        b = PromptBuilder(config)
        for _ in range(images):
            b.text(10).image(36, 36)
        used = len(b.ids)
        prompt = b.text(prompt_len - used).build()
        tracker = PositionTracker(
            config, max_num_reqs=max_num_reqs, max_num_batched_tokens=8192, max_model_len=max_model_len
        )
        for i in range(max_num_reqs):
            tracker.add_request_from_ranges(i, prompt.num_tokens, **prompt.kwargs, **prompt.ranges)
        held = tracker.nbytes()
        v1 = max_num_reqs * prompt.num_tokens * 3 * 8
        mrv2 = max_num_reqs * 3 * max_model_len * 4
        rows.append(
            {
                "max_num_reqs": max_num_reqs,
                "prompt_tokens": prompt.num_tokens,
                "max_model_len": max_model_len,
                "images_per_request": images,
                "v1_bytes": v1,
                "mrv2_bytes": mrv2,
                "tracker_bytes": sum(held.values()),
                "tracker_request_state_bytes": held["slot_state"] + held["layout_pool"],
                "tracker_per_request_bytes": tracker.state_nbytes(0),
                "v1_per_request_bytes": prompt.num_tokens * 24,
                "tracker_breakdown": held,
            }
        )
    return {"rows": rows}
