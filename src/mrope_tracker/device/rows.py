"""The device form of a layout, as `RopeState` keeps it: int32, integers only.

A layout row (kernels/layout_codes.py) holds integers, except the time scale
of a grid row whose tau mode is one of the float ones (TAU_F32, TAU_F64,
TAU_F32_RATE): tau(f) there is a float product. The device kernel does
integer arithmetic only, so the products are made here, at admission, by
the same numba code the CPU path runs (`fill_positions` on a stand-in row
whose frames are one token each), and each such row gets one of:

- a step k, when tau(f) = f * k for every frame the row covers (the common
  case: a whole number of positions per frame, 2 for Qwen2.5-VL videos at
  2 fps, 25 for Omni), or 0 when the row covers frame 0 only;
- otherwise a small table: the row's tau values, one int32 per frame,
  stored in pool rows right after the request's layout rows.

A device row is the host row's COL_* columns cast to int32 followed by two
columns of its own, DCOL_TAU_STEP and DCOL_TAU_AT (a TAU_FRAME grid row gets
step 1). The values fit: admission refuses a prompt whose tokens or
positions pass 2**31 - 1, which vLLM's own int32 table could not hold
either, and `device_rows` refuses a grid whose token indices or h' * w' do
(a grid may be larger than its prompt: a pruned video's).

A GRID_BITS row (a pruned video's kept tokens, 192 mask bits) becomes one
device row per non-zero 64-bit word: COL_H and COL_W hold the grid's sides
(unpacked), COL_GRID_OFFSET the grid token of the word's bit 0, and the word
itself rides in two columns the device kernel reads for no other kind,
DCOL_BITS_LO (COL_T's place) and DCOL_BITS_HI (COL_SCALED's: the tau mode
is resolved into the step or table like any grid row's).

This module imports no triton: it is the host half of `RopeState`'s
admission, shared with its tests.
"""

from __future__ import annotations

import numpy as np

from ..kernels import layout_codes as C
from ..kernels.device_cast import CAST_PLAIN, CAST_TOO_LARGE, INT32_MAX, cast_rows
from ..kernels.layout_fill import fill_positions

__all__ = [
    "DCOL_TAU_STEP",
    "DCOL_TAU_AT",
    "DCOL_BITS_LO",
    "DCOL_BITS_HI",
    "NUM_DEVICE_COLS",
    "TAU_FROM_TABLE",
    "CANVAS_POINT",
    "CANVAS_IDENTITY",
    "INT32_MAX",
    "S_ROW_START",
    "S_NUM_ROWS",
    "S_PROMPT_LEN",
    "S_DELTA",
    "S_OVERRIDE_AT",
    "S_OVERRIDE_LEN",
    "NUM_SLOT_COLS",
    "device_rows",
]

# --- device row columns: the host's COL_* (0 .. NUM_COLS - 1), then these ----
DCOL_TAU_STEP = C.NUM_COLS  # GRID: tau(f) = f * step when step >= 0; TAU_FROM_TABLE: from the table
DCOL_TAU_AT = C.NUM_COLS + 1  # GRID with a table: tau(f) = pool_flat[request's first row * width + at + f]
DCOL_BITS_LO = C.COL_T  # GRID_BITS: bits 0-31 of the row's mask word (the kernel reads t' of no row)
DCOL_BITS_HI = C.COL_SCALED  # GRID_BITS: bits 32-63 (the tau mode is resolved at admission)
NUM_DEVICE_COLS = C.NUM_COLS + 2
TAU_FROM_TABLE = -1
# CANVAS rows (DCOL_TAU_STEP): cells at the row's first (a point run), or at (i, j) (not stretched)
CANVAS_POINT = 0
CANVAS_IDENTITY = 1

# --- per-slot record (int32), one row per request slot ------------------------
S_ROW_START = 0  # the request's first pool row
S_NUM_ROWS = 1  # its layout rows (the binary search's range; tau tables follow them)
S_PROMPT_LEN = 2  # tokens the rows cover (len(prefill_token_ids))
S_DELTA = 3  # mrope_position_delta
S_OVERRIDE_AT = 4  # EVS: first element of the request's dense override in the arena
S_OVERRIDE_LEN = 5  # EVS: tokens the override covers (0: none)
NUM_SLOT_COLS = 6


def device_rows(rows: np.ndarray, scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(device rows [n, NUM_DEVICE_COLS] int32, tau table int32) of a layout's
    `rows` and `scales`. DCOL_TAU_AT is relative to the request's first pool
    row, so the rows can move in the pool (compaction) unchanged. The caller
    has checked that every position fits in int32; a grid row whose token
    indices or h' * w' do not (a grid far larger than its prompt) is refused
    here, with a ValueError naming the layout."""
    out = np.empty((rows.shape[0], NUM_DEVICE_COLS), np.int32)
    if rows.flags.writeable:  # the cast's one compiled signature is for read-only rows, as a layout holds them
        rows = rows.view()
        rows.flags.writeable = False
    code = cast_rows(rows, out)
    if code == CAST_PLAIN:  # no float tau, no mask row: one pass
        return out, _NO_TAUS
    if code == CAST_TOO_LARGE:
        raise ValueError(_TOO_LARGE)
    canvas = rows[:, C.COL_KIND] == C.KIND_CANVAS
    if canvas.any():
        return _with_canvas_tables(rows, scales, canvas)
    return _general_rows(rows, scales)


def _general_rows(rows: np.ndarray, scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`device_rows` past the one-pass cast: mask rows split, float taus resolved."""
    kinds = rows[:, C.COL_KIND]
    words = None
    span = rows[:, C.COL_TOK_LEN]  # grid tokens a row's tokens reach past its grid offset
    if (kinds == C.KIND_GRID_BITS).any():
        rows, scales, words, span = _split_bits_rows(rows, scales)
        kinds = rows[:, C.COL_KIND]
    n = rows.shape[0]
    out = np.empty((n, NUM_DEVICE_COLS), np.int32)
    out[:, : C.NUM_COLS] = rows
    out[:, DCOL_TAU_STEP] = 1
    out[:, DCOL_TAU_AT] = 0
    # grid rows whose tau is a float product (comparisons, not np.isin: this runs at every admission)
    grids = (kinds == C.KIND_GRID) | (kinds == C.KIND_GRID_RAW)
    grid_kinds = grids | (kinds == C.KIND_GRID_BITS) | (kinds == C.KIND_XD_GRID)
    ends = rows[:, C.COL_GRID_OFFSET] + span
    if (grid_kinds & ((ends > INT32_MAX) | (rows[:, C.COL_H] * rows[:, C.COL_W] > INT32_MAX))).any():
        raise ValueError(_TOO_LARGE)
    if words is not None:
        bits = np.flatnonzero(kinds == C.KIND_GRID_BITS)
        halves = words.astype("<i8").view("<i4").reshape(-1, 2)  # (lo, hi) of each word, as int32 bits
        out[bits, DCOL_BITS_LO] = halves[bits, 0]
        out[bits, DCOL_BITS_HI] = halves[bits, 1]
        grids |= kinds == C.KIND_GRID_BITS
    scaled = grids & (rows[:, C.COL_SCALED] != C.TAU_FRAME)
    if not scaled.any():
        return out, _NO_TAUS
    scaled = np.flatnonzero(scaled)
    hw = rows[scaled, C.COL_H] * rows[scaled, C.COL_W]
    first = rows[scaled, C.COL_GRID_OFFSET]
    f0 = first // hw
    f1 = (first + span[scaled] - 1) // hw
    out[scaled[f1 == 0], DCOL_TAU_STEP] = 0  # frame 0 only: tau(0) = 0 in every mode
    multi = f1 > 0
    if not multi.any():
        return out, _NO_TAUS
    scaled, f0, f1 = scaled[multi], f0[multi], f1[multi]
    taus = _frame_taus(rows, scales, scaled, f0, f1)
    tables = []
    table_len = 0
    table_start = n * NUM_DEVICE_COLS  # the table follows the layout rows
    at = 0
    for k, r in enumerate(scaled.tolist()):
        a, b = int(f0[k]), int(f1[k])
        values = taus[at : at + b - a + 1]
        at += b - a + 1
        step = int(values[-1]) // b
        if (values == np.arange(a, b + 1) * step).all():
            out[r, DCOL_TAU_STEP] = step
            continue
        out[r, DCOL_TAU_STEP] = TAU_FROM_TABLE
        out[r, DCOL_TAU_AT] = table_start + table_len - a
        tables.append(values)
        table_len += values.shape[0]
    if not tables:
        return out, _NO_TAUS
    return out, np.concatenate(tables).astype(np.int32)


_NO_TAUS = np.zeros(0, np.int32)


def _with_canvas_tables(rows: np.ndarray, scales: np.ndarray, canvas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`device_rows` of a layout with CANVAS rows (MiniCPM-V 4.7). Each such
    row's DCOL_TAU_STEP says how its cells stretch: CANVAS_POINT (every cell
    at its first: a run at one point), CANVAS_IDENTITY (cell (i, j) at (i, j):
    a slice, or a thumbnail without slices), or TAU_FROM_TABLE: a stretched
    thumbnail, whose h' row coordinates then w' column coordinates follow the
    request's rows from DCOL_TAU_AT on, made by the CPU kernels' own rule
    (`fill_positions` on stand-in rows). A table is a thumbnail's sides long,
    never its token count."""
    out, taus = _general_rows(rows, scales)
    # (the general path keeps CANVAS rows in place and in order: only GRID_BITS rows split)
    at_out = np.searchsorted(out[:, C.COL_TOK_START], rows[canvas, C.COL_TOK_START])
    sides = rows[canvas][:, [C.COL_H, C.COL_W]]
    extents = scales[canvas].astype(np.int64)
    point = (extents == 1).all(axis=1)
    identity = ~point & (extents == sides).all(axis=1)
    stretched = ~point & ~identity
    out[at_out[point], DCOL_TAU_STEP] = CANVAS_POINT
    out[at_out[identity], DCOL_TAU_STEP] = CANVAS_IDENTITY
    if not stretched.any():
        return out, taus
    heights, widths = sides[stretched, 0], sides[stretched, 1]
    counts = heights + widths
    table_start = out.shape[0] * NUM_DEVICE_COLS + taus.shape[0]
    out[at_out[stretched], DCOL_TAU_STEP] = TAU_FROM_TABLE
    out[at_out[stretched], DCOL_TAU_AT] = table_start + np.cumsum(counts) - counts
    # stand-ins: per stretched row, an h' x 1 grid over (CH, 1) (its rows' H), then a 1 x w' grid over (1, CW)
    k = heights.shape[0]
    standin = np.zeros((2 * k, C.NUM_COLS), np.int64)
    lengths = np.stack([heights, widths], axis=1).reshape(-1)
    standin[:, C.COL_TOK_START] = np.cumsum(lengths) - lengths
    standin[:, C.COL_TOK_LEN] = lengths
    standin[:, C.COL_KIND] = C.KIND_CANVAS
    standin[0::2, C.COL_H] = heights
    standin[0::2, C.COL_W] = 1
    standin[1::2, C.COL_H] = 1
    standin[1::2, C.COL_W] = widths
    standin_scales = np.ones((2 * k, C.NUM_SCALE_COLS), np.float32)
    standin_scales[0::2, C.SCALE_CANVAS_H] = extents[stretched, 0]
    standin_scales[1::2, C.SCALE_CANVAS_W] = extents[stretched, 1]
    total = int(lengths.sum())
    coords = np.empty((3, total), np.int64)
    fill_positions(coords, 0, standin, standin_scales, 0, 2 * k, 0, total)
    # a row's table: its H coordinates (row 1 of its h' x 1 stand-in), then its W ones (row 2 of the other)
    is_h = np.repeat(np.tile([True, False], k), lengths)
    table = np.where(is_h, coords[1], coords[2]).astype(np.int32)
    return out, np.concatenate([taus, table])


_TOO_LARGE = (
    "layout: a grid row's token indices or h' * w' pass 2**31 - 1, past the device's int32 index arithmetic "
    "(a grid far larger than its prompt)"
)


def _split_bits_rows(rows: np.ndarray, scales: np.ndarray):
    """The rows with each GRID_BITS row split into one row per non-zero mask
    word, in the host kinds' own columns (COL_H, COL_W, COL_SCALED unpacked,
    COL_GRID_OFFSET at the word's bit 0, COL_TOK_LEN its set bits), plus each
    row's mask word (0 for other kinds) and its span in grid tokens."""
    out_rows, out_scales, out_words, out_span = [], [], [], []
    side = (1 << C.BITS_SIDE) - 1
    for r in range(rows.shape[0]):
        row = rows[r]
        if row[C.COL_KIND] != C.KIND_GRID_BITS:
            out_rows.append(row)
            out_scales.append(scales[r])
            out_words.append(0)
            out_span.append(int(row[C.COL_TOK_LEN]))
            continue
        shape = int(row[C.COL_BITS_SHAPE])
        start = int(row[C.COL_TOK_START])
        for k in range(C.BITS_WORDS):
            word = int(row[C.COL_BITS_WORDS + k])
            count = bin(word & (2**64 - 1)).count("1")
            if count == 0:
                continue
            piece = row.copy()
            piece[C.COL_TOK_START] = start
            piece[C.COL_TOK_LEN] = count
            piece[C.COL_GRID_OFFSET] = row[C.COL_GRID_OFFSET] + 64 * k
            piece[C.COL_T] = 0
            piece[C.COL_H] = shape & side
            piece[C.COL_W] = (shape >> C.BITS_SIDE) & side
            piece[C.COL_SCALED] = shape >> (2 * C.BITS_SIDE)
            start += count
            out_rows.append(piece)
            out_scales.append(scales[r])
            out_words.append(word)
            out_span.append((word & (2**64 - 1)).bit_length())
    return (
        np.array(out_rows, np.int64),
        np.array(out_scales, np.float32),
        np.array(out_words, np.int64),
        np.array(out_span, np.int64),
    )


def _frame_taus(rows, scales, scaled, f0, f1) -> np.ndarray:
    """tau(f) for frames f0[k] .. f1[k] of each row scaled[k], concatenated:
    the CPU kernels' own rule, run on stand-in rows of one token per frame."""
    counts = f1 - f0 + 1
    standin = np.zeros((scaled.shape[0], C.NUM_COLS), np.int64)
    standin[:, C.COL_TOK_START] = np.cumsum(counts) - counts
    standin[:, C.COL_TOK_LEN] = counts
    standin[:, C.COL_KIND] = C.KIND_GRID
    standin[:, C.COL_GRID_OFFSET] = f0
    standin[:, C.COL_T] = f1 + 1
    standin[:, C.COL_H] = 1
    standin[:, C.COL_W] = 1
    standin[:, C.COL_SCALED] = rows[scaled, C.COL_SCALED]
    total = int(counts.sum())
    out = np.empty((3, total), np.int64)
    fill_positions(out, 0, standin, np.ascontiguousarray(scales[scaled]), 0, scaled.shape[0], 0, total)
    return out[0]
