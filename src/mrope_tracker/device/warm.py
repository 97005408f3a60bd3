"""What a `RopeState` needs compiled for one model, run once before serving.

The vLLM plugin calls `warm_rope_state(config)` when it builds a state, so a
worker compiles (or loads from numba's cache) the builder from ranges and
the device rows' kernels, plus MiniCPM-V 4.7's canvas kernels, the
per-frame video locator or EVS's row split only when its model uses them:
never the prompt entries, the builder from tokens or `PositionTracker`'s
step kernel.
`mrope_tracker.warmup(config, runner="rope_state")` does the same, with a
forked compile on a cold cache; its other workloads live in warmup.py.
"""

from __future__ import annotations

import time

import numpy as np

from ..core.config import MRopeConfig
from ..core.layout import PromptLayout
from ..evs.pruned import PRUNABLE
from ..kernels import layout_codes as C

__all__ = ["warm_rope_state", "pruned_rows", "pruned_prompt"]


def warm_rope_state(config: MRopeConfig) -> float:
    """Run, in this process, every kernel a `RopeState` for `config` calls; returns the seconds it took."""
    start = time.perf_counter()
    omni = MRopeConfig(family="qwen2_5_omni", tokens_per_second=2, seconds_per_chunk=2)
    # the builder from ranges takes no family: one small Omni prompt (an interleave, audio, text) reaches it
    PromptLayout.from_ranges(
        omni,
        17,
        video_grid_thw=[[2, 2, 4]],
        second_per_grid_ts=[2.0],
        audio_feature_lengths=[16, 8],
        use_audio_in_video=True,
        video_ranges=[(3, 8)],
        audio_ranges=[(14, 2)],
    ).positions(1, 9)
    device_rows()
    if config.spec.video_blocks == "frames":
        per_frame_video()
    if config.canvas:
        canvas_prompt()
    if config.family in PRUNABLE:
        pruned_prompt()
    return time.perf_counter() - start


def device_rows() -> None:
    """RopeState's admission (rows cast to the device's int32 records) and its dense read-back (the fill)."""
    cast_device_rows()
    layout = PromptLayout.from_ranges(
        MRopeConfig(family="qwen2_vl"), 6, image_ranges=[(1, 4)], image_grid_thw=[[1, 4, 4]]
    )
    layout.positions(0, 6)


def cast_device_rows() -> None:
    """The cast of layout rows to the device's int32 records, with the one table type it is called with:
    read-only, as a `PromptLayout` holds them (`device_rows` views an admission's writable rows so)."""
    from ..kernels.device_cast import cast_rows

    rows = np.zeros((1, C.NUM_COLS), np.int64)
    rows.setflags(write=False)
    cast_rows(rows, np.empty((1, C.NUM_COLS + 2), np.int32))


def canvas_prompt() -> None:
    """A MiniCPM-V 4.7 picture, a thumbnail and one slice (core/canvas.py: the
    layout check of hand-made rows, the CANVAS rows' fill)."""
    from ..core.canvas import canvas_layout

    config = MRopeConfig(
        family="minicpmv4_7",
        vision_start_token_id=10,
        vision_end_token_id=11,
        slice_start_token_id=12,
        slice_end_token_id=13,
        newline_token_id=14,
    )
    ids = [1, 10, 5, 5, 5, 5, 11, 12, 5, 5, 5, 5, 13, 14, 2]
    kinds = [0, 0, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 0, 0, 0]
    canvas_layout(config, ids, kinds, target_sizes=[[8, 8], [8, 8]]).positions(1, 9)


def per_frame_video() -> None:
    """A per-frame video whose frames the is_embed mask locates (kernels/frames.py)."""
    PromptLayout.from_ranges(
        MRopeConfig(family="qwen3_vl"),
        8,
        video_ranges=[(1, 6, np.array([0, 1, 0, 0, 1, 0], bool))],
        video_grid_thw=[[2, 2, 2]],
    )


def pruned_prompt() -> None:
    """EVS's admission as the plugin and the recompute make it (evs/pruned.py): a pruned prompt from a list of
    ids and list grids (the list decoders), its unpruned layout from ranges, its rows split around the pruned
    tokens (`pruned_rows`' kernel), their positions. In a forked child use `pruned_rows`: this one also runs the
    builder from ranges, which the other child compiles."""
    from ..evs.pruned import PrunedPrompt

    config = MRopeConfig(family="qwen2_5_vl", tokens_per_second=2)
    vs, ve, video = config.vision_start_token_id, config.vision_end_token_id, config.video_token_id
    prompt = PrunedPrompt(config, [1, vs, video, video, video, ve, 2], video_grid_thw=[[1, 4, 4]])
    prompt.layout([np.array([True, True, False, True])]).positions(1, 6)


def pruned_rows() -> None:
    """EVS's split of a layout's rows around pruned tokens (kernels/pruned_rows.py), with the argument types
    `delete_tokens` passes: a layout's read-only tables and a writable bool mask."""
    from ..kernels.pruned_rows import split_rows

    rows = np.zeros((1, C.NUM_COLS), np.int64)
    rows[0, C.COL_TOK_LEN] = 2
    scales = np.zeros((1, C.NUM_SCALE_COLS), np.float32)
    rows.setflags(write=False)
    scales.setflags(write=False)
    split_rows(rows, scales, np.array([True, False]), rows[:0].copy(), scales[:0].copy(), False)
