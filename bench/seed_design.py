"""The seed PR's design, re-implemented as a benchmark baseline (Qwen2/2.5-VL).

vLLM PR #16881 (closed unmerged, 2025) replaced the torch position code of
Qwen2/2.5-VL with one numba function. This module restates its approach, in
our own code, so that `prompt_positions` can be measured against it rather
than only against a torch baseline:

- the wrapper converts its inputs once per call the way that PR did: token
  ids to an int64 array (`np.asarray`: free for an int64 array), every grid
  with ``np.array(grid, dtype=np.int64)`` (a new array even when it is one
  already), ``second_per_grid_ts`` with ``np.array(..., dtype=np.float64)``
  (1.0 per video when absent); the model's ids and scales are read from the
  config on every call;
- it allocates the output with ``np.empty((3, L), np.int64)``;
- one nopython pass walks the token ids with a running `cur_t` (the next
  free position): a text token gets `cur_t` on all three rows; the first
  token of an image or video placeholder run starts the item's block, which
  is written in one go (frame, row, column loops) and skipped over; `cur_t`
  then moves to one past the block's maximum;
- errors come back as codes and are raised in Python (the PR raised from an
  object-mode block; either way the hot path stays nopython).

Temporal index: ``int(f * second_per_grid_t * tokens_per_second)`` in float64
(Qwen2-VL has no tokens_per_second: 1.0). The six seed cases only use whole
seconds, where float32 and float64 agree; the suite checks every output
against ours.
"""

from __future__ import annotations

import numba
import numpy as np

from mrope_tracker import MRopeConfig

__all__ = ["seed_prompt_positions", "warm_up"]

_OK = 0
_ERR_MISSING_IMAGE = 1  # an image run with no grid row left
_ERR_MISSING_VIDEO = 2
_ERR_EXCEEDED = 3  # an item's block runs past the end of the prompt
_ERR_UNUSED = 4  # grid rows left over at the end

_MESSAGES = {
    _ERR_MISSING_IMAGE: "more image placeholder runs than image_grid_thw rows",
    _ERR_MISSING_VIDEO: "more video placeholder runs than video_grid_thw rows",
    _ERR_EXCEEDED: "a multimodal item runs past the end of the prompt",
    _ERR_UNUSED: "grid rows left over after the last placeholder run",
}


@numba.njit(cache=True)
def _seed_vl_positions(
    out, token_ids, image_token_id, video_token_id, merge, tokens_per_second, image_grid, video_grid, video_sp
):
    """Fill out (3, L) in one pass; returns (error code, delta)."""
    num_tokens = token_ids.shape[0]
    cur_t = 0
    num_images = 0
    num_videos = 0
    i = 0
    while i < num_tokens:
        token = token_ids[i]
        if token == image_token_id or token == video_token_id:
            if token == image_token_id:
                if num_images >= image_grid.shape[0]:
                    return _ERR_MISSING_IMAGE, 0
                t = image_grid[num_images, 0]
                h = image_grid[num_images, 1] // merge
                w = image_grid[num_images, 2] // merge
                scale = 1.0
                num_images += 1
            else:
                if num_videos >= video_grid.shape[0]:
                    return _ERR_MISSING_VIDEO, 0
                t = video_grid[num_videos, 0]
                h = video_grid[num_videos, 1] // merge
                w = video_grid[num_videos, 2] // merge
                scale = video_sp[num_videos] * tokens_per_second
                num_videos += 1
            if i + t * h * w > num_tokens:
                return _ERR_EXCEEDED, 0
            k = i
            for f in range(t):
                tau = cur_t + np.int64(f * scale)
                for y in range(h):
                    for x in range(w):
                        out[0, k] = tau
                        out[1, k] = cur_t + y
                        out[2, k] = cur_t + x
                        k += 1
            top = max(np.int64((t - 1) * scale), h - 1, w - 1)
            cur_t += top + 1
            i = k
        else:
            out[0, i] = cur_t
            out[1, i] = cur_t
            out[2, i] = cur_t
            cur_t += 1
            i += 1
    if num_images != image_grid.shape[0] or num_videos != video_grid.shape[0]:
        return _ERR_UNUSED, 0
    return _OK, cur_t - num_tokens


_NO_GRID = np.zeros((0, 3), np.int64)
_NO_SP = np.zeros(0, np.float64)


def seed_prompt_positions(
    config: MRopeConfig, token_ids, image_grid_thw=None, video_grid_thw=None, second_per_grid_ts=None
) -> tuple[np.ndarray, int]:
    """(positions (3, L) int64, delta) of a Qwen2-VL / Qwen2.5-VL prompt, the seed PR's way."""
    ids = np.asarray(token_ids, dtype=np.int64)
    image_grid = _NO_GRID if image_grid_thw is None else np.array(image_grid_thw, dtype=np.int64)
    video_grid = _NO_GRID if video_grid_thw is None else np.array(video_grid_thw, dtype=np.int64)
    if second_per_grid_ts is not None:
        video_sp = np.array(second_per_grid_ts, dtype=np.float64)
    elif video_grid.shape[0]:
        video_sp = np.ones(video_grid.shape[0], np.float64)
    else:
        video_sp = _NO_SP
    tokens_per_second = config.tokens_per_second
    out = np.empty((3, ids.shape[0]), np.int64)
    code, delta = _seed_vl_positions(
        out,
        ids,
        config.image_token_id,
        config.video_token_id,
        config.spatial_merge_size,
        1.0 if tokens_per_second is None else float(tokens_per_second),
        image_grid,
        video_grid,
        video_sp,
    )
    if code:
        raise ValueError(f"token_ids: {_MESSAGES[code]}")
    return out, delta


def warm_up() -> None:
    """Compile the kernel before anything is timed."""
    config = MRopeConfig(family="qwen2_5_vl", tokens_per_second=2)
    ids = [1, config.image_token_id, config.image_token_id, 2, config.video_token_id, config.video_token_id, 3]
    seed_prompt_positions(config, ids, image_grid_thw=[[1, 2, 4]], video_grid_thw=[[2, 2, 2]])
