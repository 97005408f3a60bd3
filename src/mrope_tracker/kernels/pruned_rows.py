"""The rows of a layout with some of its tokens deleted (EVS video pruning,
`mrope_tracker.evs.delete_tokens`), in one pass over its rows.

A row whose tokens are all kept is copied; one with none kept is left out;
one with some kept becomes one row per run of kept tokens, or, for a GRID
row whose runs outnumber them, one GRID_BITS row per window of BITS_PER_ROW
grid tokens from its first kept one (the window's kept bits packed into
BITS_WORDS little-endian words), windows kept whole as GRID rows (one for a
run of them), empty windows as nothing. Token starts are renumbered.

`split_rows` first counts the rows (`write` False: the output tables may be
empty), then writes them into tables of that count (`write` True); the
Python side allocates in between. One signature: a layout's read-only
tables, a C-contiguous writable bool mask.
"""

import numpy as np

from . import layout_codes as C
from .jit_options import helper, tiny

_SIZE = C.BITS_PER_ROW


@tiny
def _kept_in(keep, start, stop):
    n = 0
    for i in range(start, stop):
        if keep[i]:
            n += 1
    return n


@tiny
def _copy_row(rows, scales, r, out_rows, out_scales, o):
    for c in range(C.NUM_COLS):
        out_rows[o, c] = rows[r, c]
    for c in range(C.NUM_SCALE_COLS):
        out_scales[o, c] = scales[r, c]


@tiny
def _bits_row_count(keep, first, last):
    """Rows of the GRID_BITS form over [first, last) of the mask (absolute indices)."""
    n = 0
    previous_whole = False
    for at in range(first, last, _SIZE):
        stop = min(at + _SIZE, last)
        count = _kept_in(keep, at, stop)
        whole = count == stop - at
        if count != 0 and not (whole and previous_whole):
            n += 1
        previous_whole = whole
    return n


@tiny
def _write_bits_rows(rows, scales, r, keep, start, first, last, out_rows, out_scales, o):
    """Write row r's GRID_BITS form from out row o; returns the next out row."""
    h, w, mode = rows[r, C.COL_H], rows[r, C.COL_W], rows[r, C.COL_SCALED]
    shape = h | (w << C.BITS_SIDE) | (mode << (2 * C.BITS_SIDE))
    previous_whole = False
    for at in range(first, last, _SIZE):
        stop = min(at + _SIZE, last)
        count = _kept_in(keep, at, stop)
        whole = count == stop - at
        if count == 0:
            previous_whole = False
            continue
        if whole and previous_whole:  # whole windows one after the other: one GRID row
            out_rows[o - 1, C.COL_TOK_LEN] += count
            continue
        previous_whole = whole
        _copy_row(rows, scales, r, out_rows, out_scales, o)
        out_rows[o, C.COL_TOK_LEN] = count
        out_rows[o, C.COL_GRID_OFFSET] = rows[r, C.COL_GRID_OFFSET] + (at - start)
        if not whole:
            out_rows[o, C.COL_KIND] = C.KIND_GRID_BITS
            out_rows[o, C.COL_BITS_SHAPE] = shape
            for j in range(C.BITS_WORDS):
                word = np.int64(0)
                for b in range(64):
                    i = at + j * 64 + b
                    if i < stop and keep[i]:
                        word |= np.int64(1) << np.int64(b)  # bit 63 is the sign bit: the same 64 bits
                out_rows[o, C.COL_BITS_WORDS + j] = word
        o += 1
    return o


@tiny
def _write_runs(rows, scales, r, keep, start, stop, out_rows, out_scales, o):
    """Write one row per run of kept tokens of row r from out row o; returns the next out row."""
    kind = rows[r, C.COL_KIND]
    i = start
    while i < stop:
        if not keep[i]:
            i += 1
            continue
        j = i
        while j < stop and keep[j]:
            j += 1
        _copy_row(rows, scales, r, out_rows, out_scales, o)
        out_rows[o, C.COL_TOK_LEN] = j - i
        if kind == C.KIND_LINEAR:
            out_rows[o, C.COL_BASE] += i - start
        elif kind == C.KIND_GRID or kind == C.KIND_GRID_RAW:
            out_rows[o, C.COL_GRID_OFFSET] += i - start
        o += 1
        i = j
    return o


@helper
def split_rows(rows, scales, keep, out_rows, out_scales, write):
    """The number of rows of the layout without the tokens `keep` drops
    (written into out_rows / out_scales when `write`)."""
    o = 0
    for r in range(rows.shape[0]):
        start = rows[r, C.COL_TOK_START]
        stop = start + rows[r, C.COL_TOK_LEN]
        count = _kept_in(keep, start, stop)
        if count == 0:
            continue
        if count == stop - start:
            if write:
                _copy_row(rows, scales, r, out_rows, out_scales, o)
            o += 1
            continue
        num_runs = 0
        first = -1
        last = start
        for i in range(start, stop):
            if keep[i]:
                if first < 0:
                    first = i
                if i == start or not keep[i - 1]:
                    num_runs += 1
                last = i + 1
        bits = False
        num_bits = 0
        fits = max(rows[r, C.COL_H], rows[r, C.COL_W]) < (1 << C.BITS_SIDE)
        if rows[r, C.COL_KIND] == C.KIND_GRID and num_runs > 1 and fits:
            num_bits = _bits_row_count(keep, first, last)
            bits = num_bits < num_runs
        if not write:
            o += num_bits if bits else num_runs
        elif bits:
            o = _write_bits_rows(rows, scales, r, keep, start, first, last, out_rows, out_scales, o)
        else:
            o = _write_runs(rows, scales, r, keep, start, stop, out_rows, out_scales, o)
    if write:
        at = 0
        for k in range(o):
            out_rows[k, C.COL_TOK_START] = at
            at += out_rows[k, C.COL_TOK_LEN]
    return o
