"""MiniCPM-V 4.7's "canvas" positions (three axes), stated on their own.

The rule, as transformers 5.24 states it (``MiniCPMV4_7Model.get_rope_index``;
docs/minicpmv4_7-notes.md has it in full, with a worked example):

* A *crop* is a maximal run of tokens of one non-text modality (1 image,
  2 video, as ``mm_token_type_ids`` labels them). Crop k of a modality has that
  modality's k-th patch grid (h, w), and an LLM grid of (h // m, w // m),
  m = 4 (``downsample_mode`` "16x") or 2 ("4x").
* A crop right after ``<slice>`` is a *slice* of the open frame; any other
  crop is a *thumbnail* and opens a new *frame* whose opening token is the one
  just before it (``<image>``). A frame opened after only markers
  (``<image>``, ``</image>``, ``<slice>``, ``</slice>``, newline) since the last
  crop joins the previous frame's *group*; otherwise it starts a new group.
* A frame spans from its opening token to the next frame's opening token in
  the same group, or, for a group's last frame, past every marker that
  follows its last crop.
* Text outside the groups runs on (T = H = W = a counter). A frame at counter
  value o (its *origin*) puts all its tokens at (o, o, o), then rewrites:
  the opening token's H, W to max(o - 1, 0); the token after the thumbnail's
  H, W to the canvas's far corner (o + CH, o + CW); the thumbnail's token
  (i, j) to H = o + round(linspace(0, CH - 1, h')[i]), W likewise with CW;
  slice k, in row r = k // cols and column c = k % cols, to
  (o + r * sh + i, o + c * sw + j) with its own grid, its ``<slice>`` to the
  slice's top-left corner and the token after it to its bottom-right
  corner; every token strictly between the row-ending ``</slice>`` and the next
  ``<slice>`` to (o + (r + 1) * sh - 1, o + cols * sw). Later rewrites win, in
  that order. The counter then moves to o + max(CH, CW) + 1.
* The canvas is the thumbnail's own grid without slices. With slices, cols is
  the number of slices before the first gap of more than two tokens between
  slices (all of them when there is none; a row count that does not divide
  gives one row), sh x sw the first slice's grid, and the canvas
  (rows * sh) x (cols * sw).
* delta = max over all positions + 1 - L.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

CANVAS_AXES = 3


class Markers(NamedTuple):
    """The structural token ids the canvas is anchored on."""

    image_start: int
    image_end: int
    slice_start: int
    slice_end: int
    newline: int


class _Frame(NamedTuple):
    kind: int
    thumb: tuple[int, int]
    slices: list[tuple[int, int]]


def _crops(kinds: list[int]) -> list[tuple[int, int, int]]:
    """(kind, start, end) of every maximal run of one non-zero kind."""
    crops = []
    start = 0
    for i in range(1, len(kinds) + 1):
        if i == len(kinds) or kinds[i] != kinds[start]:
            if kinds[start] != 0:
                crops.append((kinds[start], start, i))
            start = i
    return crops


def _groups(ids: list[int], kinds: list[int], markers: Markers) -> list[list[_Frame]]:
    marker_set = set(markers)
    groups: list[list[_Frame]] = []
    last_end = 0
    for kind, start, end in _crops(kinds):
        before = ids[start - 1] if start > 0 else None
        if before == markers.slice_start and groups:
            frame = groups[-1][-1]
            if frame.kind != kind:
                raise ValueError(
                    f"mm_token_type_ids: expected the slice at token_ids[{start}:{end}] to have its frame's "
                    f"modality {frame.kind}, got {kind}"
                )
            frame.slices.append((start, end))
        elif before in (markers.image_start, markers.slice_start):
            frame = _Frame(kind, (start, end), [])
            joins = bool(groups) and all(t in marker_set for t in ids[last_end : start - 1])
            if joins:
                groups[-1].append(frame)
            else:
                groups.append([frame])
        else:
            raise ValueError(
                f"token_ids: expected <image> ({markers.image_start}) or <slice> ({markers.slice_start}) before "
                f"the crop at token_ids[{start}:{end}], got {before}"
            )
        last_end = end
    return groups


def _frame_end(ids: list[int], frame: _Frame, markers: Markers) -> int:
    end = frame.slices[-1][1] if frame.slices else frame.thumb[1]
    while end < len(ids) and ids[end] in markers:
        end += 1
    return end


def _columns(slices: list[tuple[int, int]]) -> tuple[int, int]:
    """(rows, cols): a row ends at the first gap of more than two tokens."""
    cols = len(slices)
    for k in range(len(slices) - 1):
        if slices[k + 1][0] - slices[k][1] > 2:
            cols = k + 1
            break
    rows = len(slices) // cols
    if rows * cols != len(slices):
        return 1, len(slices)
    return rows, cols


def _stretched(size: int, canvas: int) -> torch.Tensor:
    """`size` evenly spread coordinates over 0 .. canvas - 1, rounded half to even."""
    return torch.linspace(0, canvas - 1, size).round().to(torch.int64)


def _place_grid(out: torch.Tensor, start: int, end: int, rows: torch.Tensor, cols: torch.Tensor, what: str) -> None:
    if end - start != rows.numel() * cols.numel():
        raise ValueError(
            f"token_ids: expected {rows.numel()} x {cols.numel()} = {rows.numel() * cols.numel()} tokens for "
            f"{what} at token_ids[{start}:], got {end - start}"
        )
    out[1, start:end] = rows.repeat_interleave(cols.numel())
    out[2, start:end] = cols.repeat(rows.numel())


def _frame(out: torch.Tensor, ids, frame: _Frame, end: int, origin: int, grids, merge: int) -> int:
    """Writes one frame's positions over token_ids[opening:end]; returns its origin's advance."""
    opening = frame.thumb[0] - 1
    th, tw = (v // merge for v in next(grids[frame.kind]))
    canvas_h, canvas_w = th, tw
    slice_grids = [tuple(v // merge for v in next(grids[frame.kind])) for _ in frame.slices]
    rows, cols = _columns(frame.slices) if frame.slices else (0, 0)
    sh, sw = slice_grids[0] if slice_grids else (0, 0)
    if frame.slices:
        canvas_h, canvas_w = rows * sh, cols * sw

    out[:, opening:end] = origin
    out[1:, opening] = max(origin - 1, 0)
    if frame.thumb[1] < end:
        out[1, frame.thumb[1]] = origin + canvas_h
        out[2, frame.thumb[1]] = origin + canvas_w
    _place_grid(
        out, *frame.thumb, origin + _stretched(th, canvas_h), origin + _stretched(tw, canvas_w), "the thumbnail"
    )
    for k, ((start, stop), (h, w)) in enumerate(zip(frame.slices, slice_grids)):
        top, left = origin + (k // cols) * sh, origin + (k % cols) * sw
        out[1, start - 1], out[2, start - 1] = top, left
        if stop < end:
            out[1, stop], out[2, stop] = top + h - 1, left + w - 1
        _place_grid(out, start, stop, top + torch.arange(h), left + torch.arange(w), f"slice {k}")
    for k in range(len(frame.slices) - 1):
        gap_start, gap_end = frame.slices[k][1], frame.slices[k + 1][0]
        if gap_end - gap_start > 2:
            out[1, gap_start + 1 : gap_end - 1] = origin + (k // cols + 1) * sh - 1
            out[2, gap_start + 1 : gap_end - 1] = origin + cols * sw
    return max(canvas_h, canvas_w) + 1


def positions(
    ids: torch.Tensor,
    kinds: torch.Tensor,
    image_sizes: list[tuple[int, int]],
    video_sizes: list[tuple[int, int]],
    merge: int,
    markers: Markers,
) -> tuple[torch.Tensor, int]:
    """((3, L) int64 positions, delta) of one unpadded prompt.

    `kinds` labels each token 0 (text), 1 (image) or 2 (video); `image_sizes`
    and `video_sizes` are the patch grids (h, w) of that modality's crops, in
    prompt order (a picture's thumbnail, then its slices); `merge` is the
    patch-to-token merge (4 or 2)."""
    ids_list, kinds_list = ids.tolist(), kinds.tolist()
    length = len(ids_list)
    groups = _groups(ids_list, kinds_list, markers)
    for kind, sizes, name, field in (
        (1, image_sizes, "image", "target_sizes"),
        (2, video_sizes, "video", "target_sizes_videos"),
    ):
        crops = sum(1 + len(f.slices) for g in groups for f in g if f.kind == kind)
        if crops != len(sizes):
            raise ValueError(f"{field}: expected one (h, w) per {name} crop ({crops}), got {len(sizes)}")
    grids = {1: iter(image_sizes), 2: iter(video_sizes)}
    out = torch.zeros(CANVAS_AXES, length, dtype=torch.int64)
    counter, cursor = 0, 0
    for group in groups:
        opening = group[0].thumb[0] - 1
        out[:, cursor:opening] = torch.arange(counter, counter + opening - cursor)
        counter += opening - cursor
        group_end = _frame_end(ids_list, group[-1], markers)
        for k, frame in enumerate(group):
            end = group[k + 1].thumb[0] - 1 if k + 1 < len(group) else group_end
            counter += _frame(out, ids_list, frame, end, counter, grids, merge)
        cursor = group_end
    out[:, cursor:] = torch.arange(counter, counter + length - cursor)
    return out, int(out.max()) + 1 - length
