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
extent grid. Text between groups is `LINEAR`. A frame costs about
4 + 3 x slices rows, whatever its token count.

The scan is numpy over the tokens (run boundaries, marker positions) and a
Python loop over crops.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .config import MRopeConfig
from .inputs import as_config, as_int_array, as_token_ids, describe
from .kernels import layout_codes as C
from .layout import PromptLayout

__all__ = ["MARKER_FIELDS", "canvas_layout", "canvas_positions"]

# MRopeConfig fields of the five markers, in the order <image>, </image>, <slice>, </slice>, newline
MARKER_FIELDS = (
    "vision_start_token_id",
    "vision_end_token_id",
    "slice_start_token_id",
    "slice_end_token_id",
    "newline_token_id",
)
_MODALITIES = {1: ("image", "target_sizes"), 2: ("video", "target_sizes_videos")}


class _Frame(NamedTuple):
    kind: int
    start: int  # the thumbnail's tokens [start, stop)
    stop: int
    slices: list  # [(start, stop), ...]


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
    if sizes.shape[1] != 2 or (sizes.size and sizes.min() < 1):
        raise ValueError(f"{name}: expected (n, 2) patch grids (h, w) >= 1, got {describe(value)}")
    return sizes


def _columns(slices: list) -> tuple[int, int]:
    """(rows, cols): a row of slices ends at the first gap of more than two tokens."""
    cols = len(slices)
    for k in range(len(slices) - 1):
        if slices[k + 1][0] - slices[k][1] > 2:
            cols = k + 1
            break
    rows = len(slices) // cols
    return (rows, cols) if rows * cols == len(slices) else (1, len(slices))


class _Scan:
    """Where the crops, frames and groups of one prompt sit."""

    def __init__(self, ids: np.ndarray, kinds: np.ndarray, markers: tuple[int, ...]):
        self.length = ids.shape[0]
        image_start, _, slice_start, _, _ = markers
        # tokens that are not markers: "only markers between" and "the markers after" by binary search
        self.others = np.flatnonzero(~np.isin(ids, np.array(markers, np.int64)))
        change = np.flatnonzero(kinds[1:] != kinds[:-1]) + 1
        starts = np.concatenate(([0], change))
        stops = np.concatenate((change, [self.length]))
        crops = kinds[starts] != 0
        self.groups: list[list[_Frame]] = []
        last_stop = 0
        previous_stop = -1
        for kind, start, stop in zip(kinds[starts][crops].tolist(), starts[crops].tolist(), stops[crops].tolist()):
            before = int(ids[start - 1]) if start > 0 else None
            if start == previous_stop:  # a crop right after another of another modality
                before = None
            if before == slice_start and self.groups:
                frame = self.groups[-1][-1]
                if frame.kind != kind:
                    raise ValueError(
                        f"mm_token_type_ids: expected the slice at token_ids[{start}:{stop}] to have its frame's "
                        f"modality {frame.kind}, got {kind}"
                    )
                frame.slices.append((start, stop))
            elif before == image_start or before == slice_start:
                frame = _Frame(kind, start, stop, [])
                if self.groups and self.only_markers(last_stop, start - 1):
                    self.groups[-1].append(frame)
                else:
                    self.groups.append([frame])
            else:
                raise ValueError(
                    f"token_ids: expected <image> ({image_start}) or <slice> ({slice_start}) before the crop at "
                    f"token_ids[{start}:{stop}], got {'nothing' if start == 0 else int(ids[start - 1])}"
                    f"{' (a crop)' if start == previous_stop else ''}"
                )
            last_stop = previous_stop = stop

    def only_markers(self, start: int, stop: int) -> bool:
        others = self.others
        return int(np.searchsorted(others, start)) == int(np.searchsorted(others, stop))

    def past_markers(self, token: int) -> int:
        """The first token at or after `token` that is not a marker (or the prompt's end)."""
        k = int(np.searchsorted(self.others, token))
        return int(self.others[k]) if k < self.others.shape[0] else self.length


class _Rows:
    """Layout rows under construction."""

    def __init__(self):
        self.rows: list[tuple] = []
        self.extents: list[tuple] = []

    def linear(self, start: int, count: int, base: int) -> None:
        self.rows.append((start, count, C.KIND_LINEAR, base, 0, 0, 0, 0, 0))
        self.extents.append((0.0, 0.0))

    def grid(self, start: int, h: int, w: int, t: int, top: int, left: int, extent_h: int, extent_w: int) -> None:
        """An h x w grid over tokens [start, start + h * w), stretched over extent_h x extent_w."""
        self.rows.append((start, h * w, C.KIND_CANVAS, t, 0, top, h, w, left))
        self.extents.append((extent_h, extent_w))

    def point(self, start: int, count: int, t: int, h: int, w: int) -> None:
        """`count` tokens from `start`, all at (t, h, w)."""
        self.grid(start, count, 1, t, h, w, 1, 1)


def _frame(out: _Rows, frame: _Frame, end: int, origin: int, grids: list, merge: int) -> int:
    """Rows of one frame over token_ids[opening:end]; returns the counter's advance."""
    o = origin
    th, tw = grids[0]
    if frame.stop - frame.start != th * tw:
        raise ValueError(
            f"token_ids: expected {th} x {tw} = {th * tw} tokens for the thumbnail at token_ids[{frame.start}:], "
            f"got {frame.stop - frame.start}"
        )
    canvas_h, canvas_w = th, tw
    rows = cols = 1
    sh = sw = 0
    if frame.slices:
        rows, cols = _columns(frame.slices)
        sh, sw = grids[1]
        canvas_h, canvas_w = rows * sh, cols * sw
    for extent, name in ((canvas_h, "height"), (canvas_w, "width")):
        if extent >= C.CANVAS_EXTENT_LIMIT:
            raise ValueError(
                f"target_sizes: expected a canvas {name} below 2**24 tokens, got {extent} at token_ids[{frame.start}:]"
            )
    # Segments in token order, each (start, stop, h, w, grid_h, extent): a grid
    # of grid_h rows whose first cell is at (h, w), stretched over `extent`, or
    # (grid_h and extent None) a run of tokens at (h, w). Only a point can land
    # on the token of the point before it (a missing </image> or </slice>);
    # the later one wins, as in the rule.
    segments: list[tuple] = []

    def point(token: int, h: int, w: int, count: int = 1) -> None:
        if segments and segments[-1][0] == token and segments[-1][5] is None:
            segments.pop()
        segments.append((token, token + count, h, w, None, None))

    halo = max(o - 1, 0)
    point(frame.start - 1, halo, halo)
    segments.append((frame.start, frame.stop, o, o, th, (canvas_h, canvas_w)))
    if frame.stop < end:
        point(frame.stop, o + canvas_h, o + canvas_w)
    for k, (start, stop) in enumerate(frame.slices):
        h, w = grids[1 + k]
        if stop - start != h * w:
            raise ValueError(
                f"token_ids: expected {h} x {w} = {h * w} tokens for slice {k} at token_ids[{start}:], "
                f"got {stop - start}"
            )
        top, left = o + (k // cols) * sh, o + (k % cols) * sw
        point(start - 1, top, left)
        segments.append((start, stop, top, left, h, (h, w)))
        if stop < end:
            point(stop, top + h - 1, left + w - 1)
        if k + 1 < len(frame.slices) and frame.slices[k + 1][0] - stop > 2:
            point(stop + 1, o + (k // cols + 1) * sh - 1, o + cols * sw, frame.slices[k + 1][0] - 2 - stop)
    cursor = frame.start - 1
    for start, stop, h_at, w_at, grid_h, extent in segments:
        if start > cursor:  # the base coat: every other token of the span at the origin
            out.point(cursor, start - cursor, o, o, o)
        if extent is None:
            out.point(start, stop - start, o, h_at, w_at)
        else:
            out.grid(start, grid_h, (stop - start) // grid_h, o, h_at, w_at, *extent)
        cursor = stop
    if end > cursor:
        out.point(cursor, end - cursor, o, o, o)
    return max(canvas_h, canvas_w) + 1


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
    out = _Rows()
    if not config.canvas:
        out.linear(0, length, 0)
        return _layout(config, out, length)
    markers = tuple(getattr(config, field) for field in MARKER_FIELDS)
    scan = _Scan(ids, kinds, markers)
    counts = {1: 0, 2: 0}
    for group in scan.groups:
        for frame in group:
            counts[frame.kind] += 1 + len(frame.slices)
    for kind, (name, field) in _MODALITIES.items():
        if counts[kind] != sizes[kind].shape[0]:
            raise ValueError(
                f"{field}: expected one (h, w) per {name} crop ({counts[kind]}), got {sizes[kind].shape[0]}"
            )
    merge = config.spatial_merge_size
    grids = {kind: (sizes[kind] // merge).tolist() for kind in sizes}
    taken = {1: 0, 2: 0}
    counter = cursor = 0
    for group in scan.groups:
        opening = group[0].start - 1
        if opening > cursor:
            out.linear(cursor, opening - cursor, counter)
            counter += opening - cursor
        last = group[-1]
        group_end = scan.past_markers(last.slices[-1][1] if last.slices else last.stop)
        for k, frame in enumerate(group):
            end = group[k + 1].start - 1 if k + 1 < len(group) else group_end
            n = 1 + len(frame.slices)
            first = taken[frame.kind]
            taken[frame.kind] += n
            counter += _frame(out, frame, end, counter, grids[frame.kind][first : first + n], merge)
        cursor = group_end
    if length > cursor:
        out.linear(cursor, length - cursor, counter)
    return _layout(config, out, length)


def _layout(config: MRopeConfig, out: _Rows, length: int) -> PromptLayout:
    rows = np.array(out.rows, np.int64).reshape(-1, C.NUM_COLS)
    extents = np.array(out.extents, np.float32).reshape(-1, C.NUM_SCALE_COLS)
    # from_rows checks the rows in O(rows) and takes delta from the largest position they reach
    return PromptLayout.from_rows(config, rows, extents, length)


def canvas_positions(
    config, token_ids, mm_token_type_ids, *, target_sizes=None, target_sizes_videos=None
) -> tuple[np.ndarray, int]:
    """MiniCPM-V 4.7's positions of a whole prompt: ((3, L) int64, delta), as
    `canvas_layout` (same arguments) places them."""
    layout = canvas_layout(
        config, token_ids, mm_token_type_ids, target_sizes=target_sizes, target_sizes_videos=target_sizes_videos
    )
    return layout.positions(), layout.delta
