"""Explicit warm-up: compile (or load from numba's on-disk cache) every kernel
before the first request, with the exact argument types the hot paths use.

Without it the first `prompt_positions`, the first tracker step and so on
each pay their compilation (seconds, on a cold cache) in the middle of
serving; the seed PR compiled lazily, during the engine's profiling run.
`mrope-tracker warmup` runs this from the command line (e.g. at image build
time, so that containers start with a filled cache).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from .config import MRopeConfig
from .layout import PromptLayout
from .positions import next_positions, prompt_positions
from .tracker import PositionTracker

__all__ = ["warmup"]


def warmup(dtypes=(torch.int64,)) -> dict[str, float]:
    """Compile every kernel; returns the seconds each stage took.

    `dtypes` lists the `PositionTracker` dtypes to prepare (int64 by
    default; add torch.int32 if a tracker uses it). The kernels do not depend
    on the model family, so one small Omni workload reaches all of them."""
    config = MRopeConfig(family="qwen2_5_omni", tokens_per_second=2, seconds_per_chunk=2)
    ids, kwargs, ranges = _tiny_prompt(config)
    timings: dict[str, float] = {}

    def stage(name, fn):
        start = time.perf_counter()
        fn()
        timings[name] = time.perf_counter() - start

    image_ids = np.array([1, config.image_token_id, config.image_token_id, 2], dtype=np.int64)
    stage("prompt_positions", lambda: (  # items, text only, images only: three kernels
        prompt_positions(config, ids, **kwargs),
        prompt_positions(config, ids[:3]),
        prompt_positions(config, image_ids, image_grid_thw=np.array([[1, 2, 4]])),
        # lists (token ids, grid rows) go through the marshal decoders
        prompt_positions(config, image_ids.tolist(), image_grid_thw=[[1, 2, 4]]),
    ))  # fmt: skip
    stage("layout", lambda: (
        PromptLayout.from_tokens(config, ids, **kwargs).positions(1, 9),
        PromptLayout.from_ranges(config, len(ids), **kwargs, **ranges),
        # a per-frame video whose frames the is_embed mask locates (kernels/frames.py)
        PromptLayout.from_ranges(MRopeConfig(family="qwen3_vl"), 8, video_ranges=[(1, 6, np.array([0, 1, 0, 0, 1, 0], bool))],
                                 video_grid_thw=[[2, 2, 2]]),
    ))  # fmt: skip
    buffer = np.zeros((3, 5), np.int64)
    # numba compiles one version per array layout: C, a column slice (A), Fortran
    stage("next_positions", lambda: [next_positions(out, 0, -3, 9, 4) for out in (
        buffer, buffer[:, :4], np.asfortranarray(buffer))])  # fmt: skip
    for dtype in dtypes:
        stage(f"tracker[{str(dtype).replace('torch.', '')}]", lambda: _tracker_round(config, ids, kwargs, ranges, dtype))
    return timings


def _tiny_prompt(config: MRopeConfig):
    """t VS AS [V V][A A A A][V V] AE VE t A A t: an interleave, audio and text."""
    v, a = config.video_token_id, config.audio_token_id
    vs, ve, as_, ae = (config.vision_start_token_id, config.vision_end_token_id,
                       config.audio_start_token_id, config.audio_end_token_id)  # fmt: skip
    ids = np.array([1, vs, as_, v, v, a, a, a, a, v, v, ae, ve, 2, a, a, 3], dtype=np.int64)
    kwargs = dict(
        video_grid_thw=np.array([[2, 2, 4]]),
        second_per_grid_ts=np.array([2.0], np.float32),
        audio_feature_lengths=np.array([16, 8]),  # 4 audio tokens in the video, 2 alone
        use_audio_in_video=True,
    )
    ranges = dict(video_ranges=np.array([[3, 8]]), audio_ranges=np.array([[14, 2]]))
    return ids, kwargs, ranges


def _tracker_round(config, ids, kwargs, ranges, dtype) -> None:
    tracker = PositionTracker(config, max_num_reqs=4, max_num_batched_tokens=64, dtype=dtype, layout_rows=1)
    tracker.add_request("a", ids, **kwargs)
    tracker.add_request_from_ranges("b", len(ids), **kwargs, **ranges, num_computed_tokens=5)
    tracker.prepare(["a", "b"], [10, 3])
    tracker.prepare_slots(np.array([tracker.slot("b"), tracker.slot("a")]), np.array([2, 9]))
    tracker.rollback("a", 2)
    tracker.remove_request("a")
    tracker.add_request("c", ids, **kwargs)  # reuses the pool: compaction
