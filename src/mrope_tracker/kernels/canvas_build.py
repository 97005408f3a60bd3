"""MiniCPM-V 4.7's canvas layout: one scan of the tokens, then O(crops) rows.

`build_canvas` finds the crops (maximal runs of one non-zero modality label),
their frames and groups, and writes each frame as CANVAS rows (layout_codes):
the thumbnail a grid stretched over the canvas, each slice a grid of its
own, every other token of the frame's span a run at one point. The rule is
docs/semantics.md's section "MiniCPM-V 4.7"; core/canvas.py checks and converts
the arguments and turns the error codes into messages.
"""

import numpy as np

from . import layout_codes as C
from .jit_options import inner, jit

# (code, a, b, c, d, e, rows written); the codes:
CANVAS_OK = 0
CANVAS_BEFORE = 1  # a crop's start, b its stop, c the token before it (-1: none), d 1 if that token ends a crop
CANVAS_SLICE_KIND = 2  # a slice's start, b its stop, c its frame's modality, d its own
CANVAS_COUNT = 3  # a modality (1 image, 2 video), b its crops, c the sizes given
CANVAS_TOKENS = 4  # a crop's start, b h', c w', d its tokens, e the slice index (-1: the thumbnail)
CANVAS_EXTENT = 5  # a crop's start, b a canvas (or slice) side at or past CANVAS_EXTENT_LIMIT, c its modality

# crops scratch columns
_KIND = 0
_START = 1
_STOP = 2
_SLICE = 3  # 1: a slice of the frame opened last
_GROUP = 4
CROP_COLS = 5


def rows_needed(num_crops: int) -> int:
    """Rows a prompt of `num_crops` crops takes at most: a frame of s slices
    writes at most 7 + 8s rows (its points, grids and the base coat between
    them), so 8 a crop, plus one text row per group and one at either end."""
    return 9 * num_crops + 2


@inner
def _is_marker(token, markers):
    return (
        token == markers[0] or token == markers[1] or token == markers[2] or token == markers[3] or token == markers[4]
    )


@inner
def _put(rows, scales, n, start, count, t, top, grid_h, grid_w, left, extent_h, extent_w):
    """Row n: `count` tokens from `start`, a grid_h x grid_w grid at T = t whose
    cell (0, 0) is at (top, left), stretched over extent_h x extent_w."""
    rows[n, C.COL_TOK_START] = start
    rows[n, C.COL_TOK_LEN] = count
    rows[n, C.COL_KIND] = C.KIND_CANVAS
    rows[n, C.COL_BASE] = t
    rows[n, C.COL_GRID_OFFSET] = 0
    rows[n, C.COL_CANVAS_TOP] = top
    rows[n, C.COL_H] = grid_h
    rows[n, C.COL_W] = grid_w
    rows[n, C.COL_CANVAS_LEFT] = left
    scales[n, C.SCALE_CANVAS_H] = extent_h
    scales[n, C.SCALE_CANVAS_W] = extent_w
    return n + 1


@inner
def _point(rows, scales, n, start, count, t, h, w):
    """`count` tokens from `start`, all at (t, h, w): an h' = count, 1 x 1 extent grid."""
    one = np.int64(1)  # (a bare 1 would compile _put once more, for the literal)
    return _put(rows, scales, n, start, count, t, h, count, one, w, one, one)


@inner
def _linear(rows, scales, n, start, count, base):
    rows[n, C.COL_TOK_START] = start
    rows[n, C.COL_TOK_LEN] = count
    rows[n, C.COL_KIND] = C.KIND_LINEAR
    rows[n, C.COL_BASE] = base
    for c in range(C.COL_GRID_OFFSET, C.NUM_COLS):
        rows[n, c] = 0
    scales[n, 0] = 0.0
    scales[n, 1] = 0.0
    return n + 1


@inner
def _flush(rows, scales, n, cursor, token, count, t, h, w, o):
    """The base coat from `cursor` up to a pending point, then the point; returns (n, cursor)."""
    if token > cursor:
        n = _point(rows, scales, n, cursor, token - cursor, t, o, o)
    n = _point(rows, scales, n, token, count, t, h, w)
    return n, token + count


@inner
def _scan(ids, kinds, markers, crops):
    """Crops into `crops` (as many as fit), with their frames and groups.
    Returns (code, a, b, c, d, images, videos)."""
    image_start = markers[0]
    slice_start = markers[2]
    length = ids.shape[0]
    found = 0
    images = 0
    videos = 0
    have_frame = False
    frame_kind = 0
    group = -1
    clean = False  # only markers since the last crop
    last_stop = -1
    t = 0
    while t < length:
        kind = kinds[t]
        if kind == 0:
            if not _is_marker(ids[t], markers):
                clean = False
            t += 1
            continue
        start = t
        while t < length and kinds[t] == kind:
            t += 1
        stop = t
        before = np.int64(-1) if start == 0 or start == last_stop else ids[start - 1]
        is_slice = 0
        if before == slice_start and have_frame:
            if frame_kind != kind:
                return CANVAS_SLICE_KIND, start, stop, frame_kind, kind, 0, 0
            is_slice = 1
        elif before >= 0 and (before == image_start or before == slice_start):
            if not (have_frame and clean):
                group += 1
            have_frame = True
            frame_kind = kind
        else:
            previous = ids[start - 1] if start > 0 else np.int64(-1)
            return CANVAS_BEFORE, start, stop, previous, np.int64(start == last_stop), 0, 0
        if found < crops.shape[0]:
            crops[found, _KIND] = kind
            crops[found, _START] = start
            crops[found, _STOP] = stop
            crops[found, _SLICE] = is_slice
            crops[found, _GROUP] = group
        found += 1
        if kind == 1:
            images += 1
        else:
            videos += 1
        last_stop = stop
        clean = True
    return CANVAS_OK, 0, 0, 0, 0, images, videos


@jit  # long: one loop over frames; split into helpers it ran 3-12% slower (bench: prompt, MiniCPM-V 4.7)
def build_canvas(ids, kinds, image_sizes, video_sizes, markers, merge, crops, rows, scales):
    """Layout rows of one prompt into `rows` / `scales` (at least
    rows_needed(crops) of them); `crops` is scratch for as many crops as
    there are sizes. Returns (code, a, b, c, d, e, rows written)."""
    code, a, b, c, d, images, videos = _scan(ids, kinds, markers, crops)
    if code != CANVAS_OK:
        return code, a, b, c, d, 0, 0
    if images != image_sizes.shape[0]:
        return CANVAS_COUNT, 1, images, image_sizes.shape[0], 0, 0, 0
    if videos != video_sizes.shape[0]:
        return CANVAS_COUNT, 2, videos, video_sizes.shape[0], 0, 0, 0
    num_crops = images + videos
    length = ids.shape[0]
    # int64, not bare literals: numba compiles a callee once per literal argument type it is passed
    n = np.int64(0)
    counter = np.int64(0)
    cursor = np.int64(0)  # the first token no row covers yet
    taken_images = 0
    taken_videos = 0
    first = 0
    while first < num_crops:
        last = first + 1  # the frame's crops: [first, last)
        while last < num_crops and crops[last, _SLICE] == 1:
            last += 1
        kind = crops[first, _KIND]
        start = crops[first, _START]
        stop = crops[first, _STOP]
        opening = start - 1
        if first == 0 or crops[first, _GROUP] != crops[first - 1, _GROUP]:  # a group's first frame
            if opening > cursor:
                n = _linear(rows, scales, n, cursor, opening - cursor, counter)
                counter += opening - cursor
        if last < num_crops and crops[last, _GROUP] == crops[first, _GROUP]:
            end = crops[last, _START] - 1
        else:  # the group's last frame: on past the markers after its last crop
            end = crops[last - 1, _STOP]
            while end < length and _is_marker(ids[end], markers):
                end += 1
        sizes = image_sizes if kind == 1 else video_sizes
        k0 = taken_images if kind == 1 else taken_videos
        if kind == 1:
            taken_images += last - first
        else:
            taken_videos += last - first
        th = sizes[k0, 0] // merge
        tw = sizes[k0, 1] // merge
        if stop - start != th * tw:
            return CANVAS_TOKENS, start, th, tw, stop - start, -1, 0
        num_slices = last - first - 1
        canvas_h = th
        canvas_w = tw
        cols = 1
        sh = np.int64(0)
        sw = np.int64(0)
        if num_slices > 0:
            cols = num_slices
            for k in range(num_slices - 1):
                if crops[first + 2 + k, _START] - crops[first + 1 + k, _STOP] > 2:
                    cols = k + 1
                    break
            if (num_slices // cols) * cols != num_slices:
                cols = num_slices
            sh = sizes[k0 + 1, 0] // merge
            sw = sizes[k0 + 1, 1] // merge
            canvas_h = (num_slices // cols) * sh
            canvas_w = cols * sw
        if canvas_h >= C.CANVAS_EXTENT_LIMIT or canvas_w >= C.CANVAS_EXTENT_LIMIT:
            return CANVAS_EXTENT, start, max(canvas_h, canvas_w), kind, 0, 0, 0
        o = counter
        # a pending point (one token unless a gap's newlines): a later point on
        # its token replaces it (the rule's later writes win)
        p_token = opening
        p_count = np.int64(1)
        p_h = max(o - 1, 0)
        p_w = p_h
        cursor = opening
        n, cursor = _flush(rows, scales, n, cursor, p_token, p_count, o, p_h, p_w, o)
        n = _put(rows, scales, n, start, stop - start, o, o, th, tw, o, canvas_h, canvas_w)
        cursor = stop
        pending = False
        if stop < end:
            pending = True
            p_token = stop
            p_count = np.int64(1)
            p_h = o + canvas_h
            p_w = o + canvas_w
        for k in range(num_slices):
            s_start = crops[first + 1 + k, _START]
            s_stop = crops[first + 1 + k, _STOP]
            h = sizes[k0 + 1 + k, 0] // merge
            w = sizes[k0 + 1 + k, 1] // merge
            if s_stop - s_start != h * w:
                return CANVAS_TOKENS, s_start, h, w, s_stop - s_start, k, 0
            if h >= C.CANVAS_EXTENT_LIMIT or w >= C.CANVAS_EXTENT_LIMIT:  # a slice is its own extent
                return CANVAS_EXTENT, s_start, max(h, w), kind, 0, 0, 0
            top = o + (k // cols) * sh
            left = o + (k % cols) * sw
            if pending and p_token != s_start - 1:
                n, cursor = _flush(rows, scales, n, cursor, p_token, p_count, o, p_h, p_w, o)
            n, cursor = _flush(rows, scales, n, cursor, s_start - 1, np.int64(1), o, top, left, o)  # <slice>
            n = _put(rows, scales, n, s_start, s_stop - s_start, o, top, h, w, left, h, w)
            cursor = s_stop
            pending = False
            if s_stop < end:
                pending = True
                p_token = s_stop
                p_count = np.int64(1)
                p_h = top + h - 1
                p_w = left + w - 1
            if k + 1 < num_slices and crops[first + 2 + k, _START] - s_stop > 2:
                n, cursor = _flush(rows, scales, n, cursor, p_token, p_count, o, p_h, p_w, o)  # </slice>
                gap_h = o + (k // cols + 1) * sh - 1
                gap_w = o + cols * sw
                gap = crops[first + 2 + k, _START] - 2 - s_stop
                n, cursor = _flush(rows, scales, n, cursor, s_stop + 1, gap, o, gap_h, gap_w, o)
                pending = False
        if pending:
            n, cursor = _flush(rows, scales, n, cursor, p_token, p_count, o, p_h, p_w, o)
        if end > cursor:
            n = _point(rows, scales, n, cursor, end - cursor, o, o, o)
        cursor = end
        counter = o + max(canvas_h, canvas_w) + 1
        first = last
    if length > cursor:
        n = _linear(rows, scales, n, cursor, length - cursor, counter)
    return CANVAS_OK, 0, 0, 0, 0, 0, n
