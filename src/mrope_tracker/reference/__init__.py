"""Plain torch reference of the M-RoPE position rules.

The reference states the position rules of every supported family as directly
as possible, in the style of transformers 4.x ``get_rope_index`` and vLLM
mid-2025 ``MRotaryEmbedding``: scan the token ids for the multimodal items,
build one ``(3, n)`` position tensor per segment with ``arange`` / ``expand``
ops, ``torch.cat`` them, and take ``max()`` for the delta. The rules are
written out in `docs/semantics.md`; the modules here say which part they own:

* `_inputs`: the config's raw fields and the item arguments, checked;
* `_scan`: where the items sit in the token ids (no positions);
* `_integer`: integer positions by the reference rules, every family;
* `_float`: Qwen3-Omni float32 positions as transformers 4.57.6 computes them,
  and SGLang 0.5.23's truncation of them (the ``sglang-0.5`` preset);
* `_xd`: HunYuan-VL's four XD-RoPE axes, as transformers 5.24 states them;
* `_canvas`: MiniCPM-V 4.7's canvas positions, as transformers 5.24 states them;
* `_evs`: a pruned video prompt's unpruned prompt and the tokens that survive.

It was written from the rules alone and shares no code with the fast path
(`mrope_tracker.kernels`, `inputs`, `layout`), so that the fast path can be
tested against it; it is also the benchmark baseline. From a config it reads
only ``family``, ``spatial_merge_size``, the token ids, ``tokens_per_second``,
``n_window`` and, for Qwen3-Omni, whether ``semantics`` is "sglang-0.5",
from any object with those attributes (an `MRopeConfig`, or a
`types.SimpleNamespace`); a dict, a ``config.json`` path or a transformers
config is first read by `MRopeConfig.from_hf_config`.

Readability comes first and speed is not a goal, but nothing is deliberately
slow: positions come from per-segment tensor ops and the Python loops run once
per multimodal item or video frame.
"""

from __future__ import annotations

import numpy as np
import torch

from . import _canvas, _evs, _float, _integer, _xd
from ._inputs import as_tensor, audio_count, audio_lengths, describe, grids, is_empty, read_config, video_scales
from ._scan import scan

__all__ = [
    "audio_token_count",
    "canvas_prompt_positions",
    "next_positions",
    "pruned_prompt_positions",
    "prompt_positions",
]


def audio_token_count(num_mel_frames: int, *, n_window: int | None = None) -> int:
    """Audio tokens of a clip with F mel frames.

    Qwen2.5-Omni (n_window None): ((F - 1) // 2 + 1 - 2) // 2 + 1. Qwen3-Omni
    (n_window from ``audio_config``, published 50): windows of W = 2 * n_window
    frames give 13 tokens each; the rest r = F mod W gives g = (r - 1) // 2 + 1
    and then ((g - 1) // 2 + 1 - 1) // 2 + 1 tokens. Plain formulas (a too short
    clip gives n <= 0); `prompt_positions` rejects such clips.
    """
    for name, value in (("num_mel_frames", num_mel_frames), ("n_window", n_window)):
        if value is None and name == "n_window":
            continue
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name}: expected an int, got {describe(value)}")
    if n_window is not None and n_window < 1:
        raise ValueError(f"n_window: expected an int >= 1, got {n_window}")
    return audio_count(int(num_mel_frames), None if n_window is None else int(n_window))


def next_positions(delta, context_len: int, num_new_tokens: int, *, num_dims: int = 3) -> torch.Tensor:
    """Positions of tokens at absolute indices context_len ... context_len+n-1 past the
    prompt: index + delta on every row. Returns (num_dims, n): 3 axes, or 4 for
    HunYuan-VL.

    An int delta gives int64 positions. A float delta (Qwen3-Omni float positions)
    gives float32 positions computed as transformers 4.57.6 decodes:
    float32(context_len) + delta in float32, then + k in float32.
    """
    for name, value in (("context_len", context_len), ("num_new_tokens", num_new_tokens)):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name}: expected an int, got {describe(value)}")
    if isinstance(delta, (bool, np.bool_)) or not isinstance(delta, (int, np.integer, float, np.floating)):
        raise TypeError(f"delta: expected an int (or a float for float positions), got {describe(delta)}")
    if isinstance(num_dims, (bool, np.bool_)) or not isinstance(num_dims, (int, np.integer)) or num_dims < 3:
        raise ValueError(f"num_dims: expected an int >= 3, got {describe(num_dims)}")
    if context_len < 0 or num_new_tokens < 0:
        raise ValueError(f"context_len, num_new_tokens: expected ints >= 0, got {context_len}, {num_new_tokens}")
    if isinstance(delta, (float, np.floating)):
        start = torch.tensor(int(context_len)) + torch.tensor(float(delta), dtype=torch.float32)
        return (torch.arange(int(num_new_tokens)).view(1, -1).expand(num_dims, -1) + start).contiguous()
    row = torch.arange(int(num_new_tokens), dtype=torch.int64) + (int(context_len) + int(delta))
    return row.view(1, -1).expand(int(num_dims), -1).contiguous()


def prompt_positions(
    config,
    token_ids,
    *,
    image_grid_thw=None,
    video_grid_thw=None,
    second_per_grid_ts=None,
    audio_feature_lengths=None,
    use_audio_in_video=False,
    float_positions=False,
) -> tuple[torch.Tensor, int | float]:
    """M-RoPE positions of a whole prompt: ((3, L) int64 tensor, int delta);
    (4, L) for HunYuan-VL.

    Grids are (n, 3) (t, h, w) before merging (Qwen3-VL and GLM: one row per
    video, whose t frames appear as t runs of h'*w' tokens); `second_per_grid_ts`
    has one number per video (Qwen2.5-VL, Omni; default: what the transformers
    processor sends, 1.0, and 2.0 for Qwen3-Omni); `audio_feature_lengths` one
    mel-frame count per audio track in prompt order (standalone clips and, with
    `use_audio_in_video`, video tracks). `float_positions` (Qwen3-Omni only)
    returns float32 positions and a float delta equal to transformers 4.57.6's.
    """
    if getattr(config, "family", None) is None:
        from ..core.config import MRopeConfig  # a dict, path or transformers config: read it first

        config = MRopeConfig.from_hf_config(config)
    rules = read_config(config)
    ids = as_tensor("token_ids", token_ids, "int", 1)
    length = ids.numel()
    if length == 0:
        raise ValueError("token_ids: expected a non-empty prompt, got 0 tokens")
    for name, flag in (("use_audio_in_video", use_audio_in_video), ("float_positions", float_positions)):
        if not isinstance(flag, (bool, np.bool_)):
            raise TypeError(f"{name}: expected a bool, got {describe(flag)}")
    use_audio_in_video, float_positions = bool(use_audio_in_video), bool(float_positions)
    if use_audio_in_video and not rules.omni:
        raise ValueError(f"use_audio_in_video: expected False for {rules.family} (no audio), got True")
    if float_positions and rules.family != "qwen3_omni":
        raise ValueError(
            f"float_positions: expected False for {rules.family} (only qwen3_omni has float positions), got True"
        )

    for name, value, refused in (
        ("image_grid_thw", image_grid_thw, rules.sequential),
        ("video_grid_thw", video_grid_thw, rules.sequential or rules.image_only),
    ):
        if refused and not is_empty(value):
            what = "no vision items (every token sits at its index)" if rules.sequential else "images only"
            raise ValueError(f"{name}: expected None for {rules.family} ({what}), got {describe(value)}")
    images = grids("image_grid_thw", image_grid_thw, rules.merge, image=True)
    videos = grids("video_grid_thw", video_grid_thw, rules.merge, image=False, tmerge=rules.tmerge)
    sps = video_scales(rules, second_per_grid_ts, videos)
    audios = audio_lengths(rules, audio_feature_lengths)
    if rules.xd:
        return _xd.positions(ids, images, rules.image)
    items = scan(rules, ids, images, videos, sps, audios, use_audio_in_video)
    if float_positions:
        return _float.positions(rules, ids, items)
    if rules.float_carry:  # SGLang 0.5 on Qwen3-Omni: the float32 positions, truncated
        return _float.truncated(rules, ids, items)
    return _integer.positions(rules, length, items)


def pruned_prompt_positions(
    config, token_ids, *, video_grid_thw, retention_masks, image_grid_thw=None, second_per_grid_ts=None
) -> tuple[torch.Tensor, int]:
    """Positions of a prompt whose videos were pruned (EVS), by the reference
    rule: every token keeps its position in the unpruned prompt.

    `token_ids` is the pruned prompt as vLLM 0.33 lays it out (see `_evs`),
    `video_grid_thw` the unpruned grids, `retention_masks` one 0/1 mask per
    video over its t*h'*w' tokens, frame-major. Returns ((3, L) int64, delta),
    delta = max + 1 - L over the pruned prompt.
    """
    if getattr(config, "family", None) is None:
        from ..core.config import MRopeConfig  # a dict, path or transformers config: read it first

        config = MRopeConfig.from_hf_config(config)
    rules = read_config(config)
    ids = as_tensor("token_ids", token_ids, "int", 1)
    if ids.numel() == 0:
        raise ValueError("token_ids: expected a non-empty prompt, got 0 tokens")
    videos = grids("video_grid_thw", video_grid_thw, rules.merge, image=False)
    kept = _evs.masks("retention_masks", retention_masks, videos)
    full_ids, keep = _evs.unpruned(rules, ids, videos, kept)
    full, _ = prompt_positions(
        config,
        full_ids,
        image_grid_thw=image_grid_thw,
        video_grid_thw=video_grid_thw,
        second_per_grid_ts=second_per_grid_ts,
    )
    positions = full[:, keep].contiguous()
    return positions, int(positions.max()) + 1 - ids.numel()


# MiniCPM-V 4.7's token ids, as its transformers 5.24 config names them
CANVAS_MARKER_FIELDS = ("image_start_id", "image_end_id", "slice_start_id", "slice_end_id", "newline_id")
CANVAS_MERGE = {"16x": 4, "4x": 2}


def _sizes(name: str, value) -> list[tuple[int, int]]:
    if is_empty(value):
        return []
    sizes = as_tensor(name, value, "int", 2)
    if sizes.shape[1] != 2 or (sizes.numel() and int(sizes.min()) < 1):
        raise ValueError(f"{name}: expected (n, 2) patch grids (h, w) >= 1, got {describe(value)}")
    return [tuple(row) for row in sizes.tolist()]


def canvas_prompt_positions(
    config, token_ids, mm_token_type_ids, *, target_sizes=None, target_sizes_videos=None, downsample_mode=None
) -> tuple[torch.Tensor, int]:
    """MiniCPM-V 4.7's canvas positions of one unpadded prompt: ((3, L) int64, delta).

    `config` is any dict or object with the five marker ids transformers 5.24's
    MiniCPMV4_7Config holds (``image_start_id``, ``image_end_id``,
    ``slice_start_id``, ``slice_end_id``, ``newline_id``) and, unless
    `downsample_mode` is given, its ``downsample_mode`` ("16x" or "4x").
    `mm_token_type_ids` labels every token 0 (text), 1 (image) or 2 (video);
    `target_sizes` and `target_sizes_videos` are the (n, 2) patch grids of the
    image and video crops in prompt order (thumbnail, then slices), as the
    processor sends them. The rule is `_canvas`'s docstring and
    docs/minicpmv4_7-notes.md.
    """
    ids = as_tensor("token_ids", token_ids, "int", 1)
    kinds = as_tensor("mm_token_type_ids", mm_token_type_ids, "int", 1)
    if ids.numel() == 0:
        raise ValueError("token_ids: expected a non-empty prompt, got 0 tokens")
    if kinds.shape != ids.shape:
        raise ValueError(f"mm_token_type_ids: expected one label per token ({ids.numel()}), got {tuple(kinds.shape)}")
    if kinds.numel() and (int(kinds.min()) < 0 or int(kinds.max()) > 2):
        raise ValueError(f"mm_token_type_ids: expected labels 0 (text), 1 (image) or 2 (video), got {kinds.tolist()}")
    ids_of = {}
    for field in CANVAS_MARKER_FIELDS:
        value = config.get(field) if isinstance(config, dict) else getattr(config, field, None)
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"config.{field}: expected an int token id, got {describe(value)}")
        ids_of[field] = int(value)
    if downsample_mode is None:
        downsample_mode = config.get("downsample_mode") if isinstance(config, dict) else None
        downsample_mode = downsample_mode or getattr(config, "downsample_mode", None) or "16x"
    if downsample_mode not in CANVAS_MERGE:
        raise ValueError(f"downsample_mode: expected one of {', '.join(CANVAS_MERGE)}, got {downsample_mode!r}")
    markers = _canvas.Markers(*(ids_of[f] for f in CANVAS_MARKER_FIELDS))
    images = _sizes("target_sizes", target_sizes)
    videos = _sizes("target_sizes_videos", target_sizes_videos)
    return _canvas.positions(ids, kinds, images, videos, CANVAS_MERGE[downsample_mode], markers)
