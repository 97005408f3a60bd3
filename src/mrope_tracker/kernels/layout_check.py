"""Validation of a layout table that did not come from the builders (a
`PromptLayout` built directly, or deserialised), before any kernel trusts it:
the step and fill kernels run without bounds checks."""

import numpy as np

from . import layout_codes as C
from .jit_options import inner, jit
from .layout_emit import TAU_LIMIT
from .position_rules import bits_shape, canvas_coordinate, grid_range_max, temporal_index

CHECK_OK = 0
CHECK_EMPTY = 1  # no rows
CHECK_TILING = 2  # a row does not start where the previous one ended (or the first at 0)
CHECK_LENGTH = 3  # a row with tok_len <= 0, or rows not ending at num_tokens
CHECK_KIND = 4  # an unknown kind
# a grid row with t, h or w <= 0, or tokens outside its grid, or an unknown tau mode
# (an XD row: t != 1, w < 2 or a negative ordinal)
CHECK_GRID = 5
CHECK_SCALE = 6  # a scaled grid row whose second_per_grid_ts or rate is not finite and >= 0
CHECK_BASE = 7  # a negative base, or positions past 2**62

_POSITION_LIMIT = 2**62


@jit
def check_layout(rows, scales, num_tokens):
    """Returns (code, offending row, largest position)."""
    n = rows.shape[0]
    if n == 0:
        return CHECK_EMPTY, 0, 0
    top = np.int64(-1)
    expected_start = 0
    for r in range(n):
        if rows[r, C.COL_TOK_START] != expected_start:
            return CHECK_TILING, r, 0
        length = rows[r, C.COL_TOK_LEN]
        if length <= 0 or length > num_tokens - expected_start:
            return CHECK_LENGTH, r, 0
        expected_start += length
        base = rows[r, C.COL_BASE]
        if base < 0 or base > _POSITION_LIMIT:
            return CHECK_BASE, r, 0
        kind = rows[r, C.COL_KIND]
        if kind == C.KIND_LINEAR:
            row_top = base + length - 1
        elif kind == C.KIND_CONST:
            row_top = base
        elif kind == C.KIND_GRID or kind == C.KIND_GRID_RAW:
            t = rows[r, C.COL_T]
            h = rows[r, C.COL_H]
            w = rows[r, C.COL_W]
            offset = rows[r, C.COL_GRID_OFFSET]
            scaled = rows[r, C.COL_SCALED]
            # the grid may be larger than the prompt (a pruned video keeps part of it): bound its size only
            if t <= 0 or h <= 0 or w <= 0 or np.float64(t) * np.float64(h) * np.float64(w) > 2.0**62:
                return CHECK_GRID, r, 0
            if offset < 0 or offset + length > t * h * w or not C.TAU_FRAME <= scaled <= C.TAU_F32_RATE:
                return CHECK_GRID, r, 0
            sp = scales[r, C.SCALE_SP]
            rate = scales[r, C.SCALE_R]
            if scaled != C.TAU_FRAME:
                if not (sp >= 0) or not (rate >= 0) or sp == np.inf or rate == np.inf:
                    return CHECK_SCALE, r, 0
                if np.float64(t - 1) * np.float64(sp) * np.float64(rate) >= TAU_LIMIT:
                    return CHECK_SCALE, r, 0
            last_frame = (offset + length - 1) // (h * w)
            tau_last = temporal_index(last_frame, scaled, sp, rate)
            if kind == C.KIND_GRID:
                row_top = base + grid_range_max(offset, offset + length, h, w, tau_last)
            else:  # H and W without the base
                row_top = max(base + tau_last, grid_range_max(offset, offset + length, h, w, np.int64(0)))
        elif kind == C.KIND_GRID_BITS:
            code, row_top = _check_bits(rows, scales, r, length, base)
            if code != CHECK_OK:
                return code, r, 0
        elif kind == C.KIND_XD_GRID:
            h = rows[r, C.COL_H]
            w = rows[r, C.COL_W]
            offset = rows[r, C.COL_GRID_OFFSET]
            ordinal = rows[r, C.COL_ORDINAL]
            if rows[r, C.COL_T] != 1 or h <= 0 or w <= 1 or h > num_tokens or w > num_tokens:
                return CHECK_GRID, r, 0
            if offset < 0 or offset + length > h * w or ordinal < 0 or ordinal > _POSITION_LIMIT:
                return CHECK_GRID, r, 0
            row_top = max(base + length - 1, grid_range_max(offset, offset + length, h, w, np.int64(0)), ordinal)
        elif kind == C.KIND_CANVAS:
            code, row_top = _check_canvas(rows, scales, r, length, base, num_tokens)
            if code != CHECK_OK:
                return code, r, 0
        else:
            return CHECK_KIND, r, 0
        if row_top > _POSITION_LIMIT:
            return CHECK_BASE, r, 0
        top = max(top, row_top)
    if expected_start != num_tokens:
        return CHECK_LENGTH, n - 1, 0
    return CHECK_OK, 0, top


@inner
def _check_bits(rows, scales, r, length, base):
    """(code, largest position) of GRID_BITS row r: a valid shape and tau mode,
    exactly `length` set bits, finite scales."""
    shape = rows[r, C.COL_BITS_SHAPE]
    g0 = rows[r, C.COL_GRID_OFFSET]
    if shape < 0 or g0 < 0 or g0 > _POSITION_LIMIT:
        return CHECK_GRID, 0
    h, w, mode = bits_shape(shape)
    if h <= 0 or w <= 0 or not C.TAU_FRAME <= mode <= C.TAU_F32_RATE:
        return CHECK_GRID, 0
    sp = scales[r, C.SCALE_SP]
    rate = scales[r, C.SCALE_R]
    hw = h * w
    if mode != C.TAU_FRAME:
        if not (sp >= 0) or not (rate >= 0) or sp == np.inf or rate == np.inf:
            return CHECK_SCALE, 0
        last_frame = (g0 + C.BITS_PER_ROW - 1) // hw
        if np.float64(last_frame) * np.float64(sp) * np.float64(rate) >= TAU_LIMIT:
            return CHECK_SCALE, 0
    seen = 0
    top = np.int64(0)
    for k in range(C.BITS_WORDS):
        word = rows[r, C.COL_BITS_WORDS + k]
        for b in range(64):
            if (word >> b) & 1:
                g = g0 + 64 * k + b
                frame = g // hw
                rest = g - frame * hw
                i = rest // w
                top = max(top, temporal_index(frame, mode, sp, rate), i, rest - i * w)
                seen += 1
    if seen != length:
        return CHECK_GRID, 0
    if top > _POSITION_LIMIT - base:  # base <= 2**62 already: no overflow on either side
        return CHECK_BASE, 0
    return CHECK_OK, base + top


@inner
def _check_canvas(rows, scales, r, length, base, num_tokens):
    """(code, largest position) of CANVAS row r: a grid of sides at most the
    prompt's length that holds its tokens, whole extents in [1,
    CANVAS_EXTENT_LIMIT), corners within the position range."""
    h = rows[r, C.COL_H]
    w = rows[r, C.COL_W]
    offset = rows[r, C.COL_GRID_OFFSET]
    top = rows[r, C.COL_CANVAS_TOP]
    left = rows[r, C.COL_CANVAS_LEFT]
    if h <= 0 or w <= 0 or h > num_tokens or w > num_tokens or np.float64(h) * np.float64(w) > 2.0**62:
        return CHECK_GRID, 0
    if offset < 0 or offset + length > h * w:
        return CHECK_GRID, 0
    extent_h = scales[r, C.SCALE_CANVAS_H]
    extent_w = scales[r, C.SCALE_CANVAS_W]
    for extent in (extent_h, extent_w):
        if not (1.0 <= extent < C.CANVAS_EXTENT_LIMIT) or extent != np.floor(extent):
            return CHECK_SCALE, 0
    if top < 0 or left < 0 or top > _POSITION_LIMIT or left > _POSITION_LIMIT:
        return CHECK_BASE, 0
    # the stretch never decreases: the last row and the rightmost column reached are the largest
    first = offset
    last = offset + length - 1
    last_i = last // w
    last_j = w - 1 if last_i > first // w else last - last_i * w
    far_h = canvas_coordinate(last_i, h, extent_h)
    far_w = canvas_coordinate(last_j, w, extent_w)
    return CHECK_OK, max(base, top + far_h, left + far_w)
