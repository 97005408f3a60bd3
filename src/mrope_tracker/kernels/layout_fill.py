"""Kernels that write positions from a layout table.

`fill_positions` produces any token range [start, end) of a prompt without
touching the rest: a binary search finds the first row, then each row is
written by the segment writers of position_rules.
"""

from . import layout_codes as C
from .jit_options import helper, tiny
from .position_rules import write_bits, write_canvas, write_linear, write_segment


@tiny
def find_row(rows, row_begin, row_end, token):
    """Index of the row in [row_begin, row_end) that holds `token` (rows are sorted)."""
    lo = row_begin
    hi = row_end - 1
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        if rows[mid, C.COL_TOK_START] <= token:
            lo = mid
        else:
            hi = mid - 1
    return lo


@helper
def fill_positions(out, out_col, rows, scales, row_begin, row_end, start, end):
    """Write the positions of prompt tokens [start, end) into out[:, out_col:].

    `rows[row_begin:row_end]` is one prompt's layout; [start, end) must lie
    inside it (the callers check)."""
    r = find_row(rows, row_begin, row_end, start)
    token = start
    col = out_col
    while token < end:
        row_start = rows[r, C.COL_TOK_START]
        stop = min(end, row_start + rows[r, C.COL_TOK_LEN])
        count = stop - token
        kind = rows[r, C.COL_KIND]
        if kind == C.KIND_GRID_BITS:
            write_bits(out, col, rows, r, token - row_start, count, scales[r, C.SCALE_SP], scales[r, C.SCALE_R])
            col += count
            token = stop
            r += 1
            continue
        if kind == C.KIND_CANVAS:
            extent_h = scales[r, C.SCALE_CANVAS_H]
            extent_w = scales[r, C.SCALE_CANVAS_W]
            write_canvas(out, col, rows, r, token - row_start, count, extent_h, extent_w)
            col += count
            token = stop
            r += 1
            continue
        write_segment(
            out,
            col,
            token - row_start,
            count,
            kind,
            rows[r, C.COL_BASE],
            rows[r, C.COL_GRID_OFFSET],
            rows[r, C.COL_H],
            rows[r, C.COL_W],
            rows[r, C.COL_SCALED],
            scales[r, C.SCALE_SP],
            scales[r, C.SCALE_R],
        )
        col += count
        token = stop
        r += 1


@tiny
def write_next_positions(out, out_col, delta, context_len, num_new_tokens):
    """Tokens past the prompt: index + delta on every row.
    Writes delta + context_len + n into out[:, out_col + n] for n < num_new_tokens."""
    write_linear(out, out_col, context_len + delta, num_new_tokens)
