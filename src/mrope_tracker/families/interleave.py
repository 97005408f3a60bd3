"""Audio-in-video interleave conventions: how a processor lays out one block.

The positions of a block follow each token's identity (the k-th video token
is token k of the grid, the k-th audio token is audio token k), so the token
form needs no convention at all. The range form cannot see which token is
which, so it recomputes the layout the processor made, as a run-length list
of (kind, count) with kind RUN_VIDEO or RUN_AUDIO. Each function here is
O(chunks) (or O(frames)), never O(tokens).

- `hf_walker_runs`: transformers' Qwen2.5-Omni processor (4.57): per-token
  times f * sp * r in float64, cut by its chunk walker (which closes at most
  one chunk per token), then video chunk j and audio chunk j alternate.
- `model_walker_runs`: the same walker on the model's float32 temporal
  index; this is the chunking transformers' get_rope_index assumes.
- `vllm_chunk_runs`: vLLM's Qwen2.5-Omni processor (0.8-0.33): frame f goes to
  chunk tau(f) // C, every chunk up to the last is visited (empty ones too),
  each emitting its frames and then up to C audio tokens; leftover audio last.
- `merge_runs`: Qwen3-Omni's processors: a two-pointer merge in which a video
  token (time f * sp * r) goes first when its time is <= the audio index.
"""

from __future__ import annotations

import math

import numpy as np

from ._spec import RUN_AUDIO, RUN_VIDEO


def compact(runs) -> list[tuple[int, int]]:
    """Drop empty runs and merge neighbours of the same kind."""
    out: list[list[int]] = []
    for kind, count in runs:
        if count <= 0:
            continue
        if out and out[-1][0] == kind:
            out[-1][1] += count
        else:
            out.append([kind, count])
    return [(k, c) for k, c in out]


def _walker_bounds(frame_values: np.ndarray, hw: int, chunk: int) -> list[int]:
    """Cut points of transformers' chunk walker over a per-token value sequence
    in which every frame's hw tokens share frame_values[f] (non-decreasing).

    The walker visits tokens in order with a counter c = 1 and closes the
    current chunk before token q when value[q] >= c * chunk, then c += 1, once
    per token. Jumping from cut to cut with a binary search over frames keeps
    this O(chunks log frames)."""
    num = len(frame_values) * hw
    cuts = []
    c = 1
    q = 0
    while q < num:
        f = int(np.searchsorted(frame_values, c * chunk, side="left"))  # first frame reaching c*chunk
        if f >= len(frame_values):
            break
        q = max(q, f * hw)
        cuts.append(q)
        c += 1
        q += 1
    return cuts


def _alternate(video_cuts: list[int], num_video: int, num_audio: int, chunk: int) -> list[tuple[int, int]]:
    """Video chunk j then audio chunk j, for every j (transformers' order).
    Audio indices 0, 1, ... cut by the same walker give chunks of `chunk`."""
    edges = [0, *video_cuts, num_video]
    video = [edges[j + 1] - edges[j] for j in range(len(edges) - 1)]
    num_audio_chunks = -(-num_audio // chunk)
    runs = []
    for j in range(max(len(video), num_audio_chunks)):
        if j < len(video):
            runs.append((RUN_VIDEO, video[j]))
        if j < num_audio_chunks:
            runs.append((RUN_AUDIO, min(chunk, num_audio - j * chunk)))
    return compact(runs)


def hf_walker_runs(t, h, w, sp, num_audio, rate, chunk):
    """transformers' processor layout: float64 times f * sp * rate."""
    values = np.arange(t, dtype=np.float64) * float(sp) * float(rate)
    return _alternate(_walker_bounds(values, h * w, chunk), t * h * w, num_audio, chunk)


def model_walker_runs(t, h, w, sp, num_audio, rate, chunk):
    """The walker on the model's own temporal index trunc(float32(f * sp) * r)."""
    f = np.arange(t, dtype=np.float32)
    tau = ((f * np.float32(sp)).astype(np.float32) * np.float32(rate)).astype(np.float32).astype(np.int64)
    return _alternate(_walker_bounds(tau.astype(np.float64), h * w, chunk), t * h * w, num_audio, chunk)


def vllm_chunk_runs(t, h, w, sp, num_audio, rate, chunk):
    """vLLM's processor layout: frame f in chunk tau(f) // chunk, with tau the
    truncated float32 product of the float32 sp (its processor multiplies
    torch tensors); empty chunks keep their audio."""
    f = np.arange(t, dtype=np.float32)
    tau = ((f * np.float32(sp)).astype(np.float32) * np.float32(rate)).astype(np.float32).astype(np.int64)
    frame_chunk = tau // chunk
    hw = h * w
    runs = []
    audio_left = num_audio
    f = 0
    for c in range(int(frame_chunk[-1]) + 1):
        n = 0
        while f < t and frame_chunk[f] == c:
            n += 1
            f += 1
        runs.append((RUN_VIDEO, n * hw))
        take = min(chunk, audio_left)
        runs.append((RUN_AUDIO, take))
        audio_left -= take
    runs.append((RUN_AUDIO, audio_left))
    return compact(runs)


def merge_runs(t, h, w, sp, num_audio, rate, chunk=None):
    """Qwen3-Omni: video tokens of frame f (time f * sp * rate) go before
    every audio token whose index is >= that time; leftovers last."""
    hw = h * w
    runs = []
    audio_done = 0
    for f in range(t):
        v = f * float(sp) * float(rate)
        before = min(num_audio, max(0, math.ceil(v)))  # audio indices a < v come first
        if before > audio_done:
            runs.append((RUN_AUDIO, before - audio_done))
            audio_done = before
        runs.append((RUN_VIDEO, hw))
    runs.append((RUN_AUDIO, num_audio - audio_done))
    return compact(runs)
