"""Suite `memory`: host memory each design holds for its positions.

Per design and configuration: vLLM V1 keeps every live request's (3, L)
int64 prompt positions (24 bytes per prompt token); an MRV2-like design
keeps a [max_num_reqs * 3, max_model_len] int32 table in pinned memory
whatever the requests are; the tracker keeps a slot row per request and a
few layout rows per multimodal item. The tracker's figures are measured on
a real tracker filled with the requests; the others are their buffer sizes.

The device design (`RopeState`, Model Runner V2's state on the GPU) holds a
fixed device state, sized by its row budget and never by max_model_len, and
two small pinned staging buffers: its bytes come from `planned_nbytes`
(what its constructor allocates; a test checks they agree), and the rows
the requests use from their layouts' device rows, against its budget.
"""

from __future__ import annotations

from mrope_tracker import PositionTracker, PromptLayout
from mrope_tracker.device.factory import planned_nbytes
from mrope_tracker.device.rows import NUM_DEVICE_COLS, device_rows

from .workloads import PromptBuilder, qwen2_5_vl

MiB = 1024 * 1024

# (max_num_reqs, prompt tokens per request, max_model_len, images per request)
CONFIGS = (
    (256, 8192, 32768, 1),
    (1024, 8192, 131072, 1),
    (1024, 8192, 131072, 8),
    (1024, 8192, 262144, 8),
)
MAX_NUM_TOKENS = 8192


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
            config, max_num_reqs=max_num_reqs, max_num_batched_tokens=MAX_NUM_TOKENS, max_model_len=max_model_len
        )
        for i in range(max_num_reqs):
            tracker.add_request_from_ranges(i, prompt.num_tokens, **prompt.kwargs, **prompt.ranges)
        held = tracker.nbytes()
        layout = PromptLayout.from_ranges(config, prompt.num_tokens, **prompt.kwargs, **prompt.ranges)
        device, taus = device_rows(layout.rows, layout.scales)
        rope_rows = device.shape[0] + -(-taus.shape[0] // NUM_DEVICE_COLS)
        rope = planned_nbytes(max_num_reqs, MAX_NUM_TOKENS)
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
                "rope_state_device_bytes": sum(rope.values()) - rope["staging_pinned"],
                "rope_state_pinned_bytes": rope["staging_pinned"],
                "rope_state_rows_used": rope_rows * max_num_reqs,
                "rope_state_max_num_rows": rope["row_pool"] // (4 * NUM_DEVICE_COLS),
                "rope_state_breakdown": rope,
            }
        )
    return {"rows": rows}
