"""MiniCPM-V 4.7's canvas positions on the fast path: a prompt as layout rows.

`canvas_layout` reads a prompt's token ids, its modality labels
(``mm_token_type_ids``) and the patch grid of every crop (``target_sizes``,
``target_sizes_videos``) and returns a `PromptLayout` of O(crops) rows, so
that everything that takes a layout (`PromptLayout.positions`, the tracker,
serialisation) serves MiniCPM-V 4.7 too. `canvas_positions` is the one-call
form. The rule is docs/semantics.md's section "MiniCPM-V 4.7"; the plain torch
statement of it is `mrope_tracker.reference.canvas_prompt_positions`.

A frame's span decomposes into rows of one kind, `CANVAS`
(kernels/layout_codes.py): an h' x w' grid stretched over an extent, at one
T. A thumbnail is a grid stretched over the whole canvas; a slice is its own
extent; a run of tokens at one point (the base coat, the halo, the corners,
the slice markers, the row-ending newlines) is an h' = run length, 1 x 1
extent grid. Text between groups is `LINEAR`. A frame of s slices takes
4 + 3s rows (and one per row-ending newline) as the processors lay it out,
at most 7 + 8s, whatever its token count.

Arguments are checked here; the scan and the rows are one numba call
(kernels/canvas_build.py), whose error codes become messages here.
"""

from __future__ import annotations

import numpy as np

from ..kernels import canvas_build
from ..kernels import layout_codes as C
from .config import MRopeConfig
from .features import checked_features
from .inputs import as_config, as_int_array, as_token_ids, describe
from .layout import PromptLayout

__all__ = ["MARKER_FIELDS", "SIZE_FIELDS", "canvas_layout", "canvas_layout_from_features", "canvas_positions"]

# MRopeConfig fields of the five markers, in the order <image>, </image>, <slice>, </slice>, newline
MARKER_FIELDS = (
    "vision_start_token_id",
    "vision_end_token_id",
    "slice_start_token_id",
    "slice_end_token_id",
    "newline_token_id",
)
_MODALITIES = {1: ("image", "target_sizes"), 2: ("video", "target_sizes_videos")}
# vLLM 0.33's item fields holding a MiniCPM-V feature's per-crop patch grids
SIZE_FIELDS = {"image": "tgt_sizes", "video": "video_tgt_sizes"}


def _config(config) -> MRopeConfig:
    config = as_config(config)
    if not config.spec.canvas:
        raise ValueError(f"config: expected a config of a canvas family (minicpmv4_7), got family {config.family!r}")
    if config.canvas:
        for field in MARKER_FIELDS:
            if getattr(config, field) is None:
                raise ValueError(
                    f"config.{field}: expected the token id (the canvas is anchored on it; no published default), "
                    "got None"
                )
    return config


def _labels(mm_token_type_ids, length: int) -> np.ndarray:
    kinds = as_int_array(mm_token_type_ids, "mm_token_type_ids", 1, "(num_tokens,)")
    if kinds.shape[0] != length:
        raise ValueError(f"mm_token_type_ids: expected one label per token ({length}), got {kinds.shape[0]}")
    if kinds.shape[0] and (kinds.min() < 0 or kinds.max() > 2):
        bad = int(np.flatnonzero((kinds < 0) | (kinds > 2))[0])
        raise ValueError(
            f"mm_token_type_ids: expected labels 0 (text), 1 (image) or 2 (video), got {int(kinds[bad])} at {bad}"
        )
    return kinds


def _sizes(value, name: str) -> np.ndarray:
    if value is None or (isinstance(value, (list, tuple)) and not value):
        return np.zeros((0, 2), np.int64)
    if getattr(value, "ndim", 2) == 1 and len(value) == 0:  # an empty 1-D array or tensor
        return np.zeros((0, 2), np.int64)
    sizes = as_int_array(value, name, 2, "(num_crops, 2)")
    if sizes.shape[1] != 2 or (sizes.size and (sizes.min() < 1 or sizes.max() >= 2**31)):
        raise ValueError(f"{name}: expected (n, 2) patch grids (h, w) in [1, 2**31), got {describe(value)}")
    return sizes


def canvas_layout(config, token_ids, mm_token_type_ids, *, target_sizes=None, target_sizes_videos=None):
    """A MiniCPM-V 4.7 prompt as a `PromptLayout` of O(crops) rows.

    `token_ids` is the prompt as the processor writes it (1-D integers);
    `mm_token_type_ids` labels each token 0 (text), 1 (image) or 2 (video);
    `target_sizes` and `target_sizes_videos` are the (n, 2) patch grids (h, w)
    of the image and video crops in prompt order (each picture's thumbnail,
    then its slices), as the processor sends them. A crop's LLM grid is
    (h // m, w // m), m the config's `spatial_merge_size` (its
    ``downsample_mode``: 4 for "16x", 2 for "4x").

    Where the config's preset leaves the canvas off (`MRopeConfig.canvas`:
    vLLM 0.33 without the config's flag), every token sits at its index and
    delta is 0, whatever the crops. Bad input raises a ValueError or
    TypeError naming the argument."""
    config = _config(config)
    ids = as_token_ids(token_ids)
    length = ids.shape[0]
    kinds = _labels(mm_token_type_ids, length)
    sizes = {1: _sizes(target_sizes, "target_sizes"), 2: _sizes(target_sizes_videos, "target_sizes_videos")}
    if not config.canvas:
        rows = np.zeros((1, C.NUM_COLS), np.int64)
        rows[0, C.COL_TOK_LEN] = length
        return PromptLayout.from_rows(config, rows, np.zeros((1, C.NUM_SCALE_COLS), np.float32), length)
    markers = np.array([getattr(config, field) for field in MARKER_FIELDS], np.int64)
    num_sizes = sizes[1].shape[0] + sizes[2].shape[0]
    crops = np.empty((num_sizes, canvas_build.CROP_COLS), np.int64)
    capacity = canvas_build.rows_needed(num_sizes)
    rows = np.empty((capacity, C.NUM_COLS), np.int64)
    extents = np.empty((capacity, C.NUM_SCALE_COLS), np.float32)
    code, a, b, c, d, e, n = canvas_build.build_canvas(
        ids, kinds, sizes[1], sizes[2], markers, config.spatial_merge_size, crops, rows, extents
    )
    if code != canvas_build.CANVAS_OK:
        raise _error(code, a, b, c, d, e, markers)
    # from_rows checks the rows in O(rows) and takes delta from the largest position they reach
    return PromptLayout.from_rows(config, rows[:n], extents[:n], length)


def _error(code, a, b, c, d, e, markers) -> ValueError:
    if code == canvas_build.CANVAS_BEFORE:
        got = "nothing" if a == 0 else f"{c}{' (a crop)' if d else ''}"
        return ValueError(
            f"token_ids: expected <image> ({markers[0]}) or <slice> ({markers[2]}) before the crop at "
            f"token_ids[{a}:{b}], got {got}"
        )
    if code == canvas_build.CANVAS_SLICE_KIND:
        return ValueError(
            f"mm_token_type_ids: expected the slice at token_ids[{a}:{b}] to have its frame's modality {c}, got {d}"
        )
    if code == canvas_build.CANVAS_COUNT:
        name, field = _MODALITIES[a]
        return ValueError(f"{field}: expected one (h, w) per {name} crop ({b}), got {c}")
    if code == canvas_build.CANVAS_TOKENS:
        what = "the thumbnail" if e < 0 else f"slice {e}"
        return ValueError(f"token_ids: expected {b} x {c} = {b * c} tokens for {what} at token_ids[{a}:], got {d}")
    # CANVAS_EXTENT
    return ValueError(
        f"{_MODALITIES[c][1]}: expected canvas and slice sides below 2**24 tokens, got {b} at token_ids[{a}:]"
    )


def canvas_positions(
    config, token_ids, mm_token_type_ids, *, target_sizes=None, target_sizes_videos=None
) -> tuple[np.ndarray, int]:
    """MiniCPM-V 4.7's positions of a whole prompt: ((3, L) int64, delta), as
    `canvas_layout` (same arguments) places them."""
    layout = canvas_layout(
        config, token_ids, mm_token_type_ids, target_sizes=target_sizes, target_sizes_videos=target_sizes_videos
    )
    return layout.positions(), layout.delta


def canvas_layout_from_features(config, input_tokens, mm_features) -> PromptLayout:
    """A MiniCPM-V 4.7 prompt's layout from what vLLM 0.33 hands a model: the
    prompt ids and one ``MultiModalFeatureSpec``-like object per picture or
    video (read by duck typing, core/features.py).

    As vLLM's own code does, a feature's crops are the tokens between an
    opening marker (``<image>``, ``<slice>``) and the next closing one
    (``</image>``, ``</slice>``) inside its placeholder range (its
    ``is_embed`` mask is not needed), and its crops' patch grids are its
    ``tgt_sizes`` (images) or ``video_tgt_sizes`` (videos) field, (n, 2) in
    prompt order. Without the canvas (vLLM 0.33 without the config's flag)
    every token sits at its index, whatever the features."""
    config = _config(config)
    ids = as_token_ids(input_tokens)
    length = ids.shape[0]
    kinds = np.zeros(length, np.int64)
    sizes = {1: [], 2: []}
    if config.canvas:
        openings = np.array([config.vision_start_token_id, config.slice_start_token_id], np.int64)
        closings = np.array([config.vision_end_token_id, config.slice_end_token_id], np.int64)
        for feature in checked_features(mm_features):
            where = f"mm_features[{feature.index}]"
            kind = {"image": 1, "video": 2}.get(feature.modality)
            if kind is None:
                raise ValueError(f"{where}.modality: expected 'image' or 'video' for MiniCPM-V 4.7, got 'audio'")
            if feature.offset + feature.length > length:
                raise ValueError(
                    f"{where}.mm_position: expected a range inside the prompt's {length} tokens, got offset "
                    f"{feature.offset}, length {feature.length}"
                )
            window = ids[feature.offset : feature.offset + feature.length]
            opening = np.isin(window, openings)
            marker = opening | np.isin(window, closings)
            # each token's last marker at or before it: a crop token follows an opening one
            last = np.maximum.accumulate(np.where(marker, np.arange(window.shape[0]), -1))
            crop = (last >= 0) & ~marker
            crop[crop] = opening[last[crop]]
            kinds[feature.offset : feature.offset + feature.length][crop] = kind
            name = SIZE_FIELDS[feature.modality]
            value = feature.element(name)
            grid = value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)
            if grid.size and (grid.shape[-1] != 2 or grid.dtype.kind not in "iu"):
                raise ValueError(f"{where}.data[{name!r}]: expected (n, 2) integer patch grids, got {describe(grid)}")
            sizes[kind].append(grid.reshape(-1, 2).astype(np.int64))
    return canvas_layout(
        config,
        ids,
        kinds,
        target_sizes=np.concatenate(sizes[1]) if sizes[1] else None,
        target_sizes_videos=np.concatenate(sizes[2]) if sizes[2] else None,
    )
