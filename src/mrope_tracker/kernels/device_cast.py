"""The host half of a device layout (`device_rows`), in one pass.

`RopeState` admits a request on the engine's critical path: casting its
layout rows to the device's int32 form with numpy takes a handful of whole-
array passes (a cast, two column fills, three kind comparisons), several
microseconds on a long video's few hundred rows. This kernel does it in one
pass and says whether any row needs the Python side's slower handling.
"""

from . import layout_codes as C
from .jit_options import helper

CAST_PLAIN = 0  # every row cast; no tau table and no mask row
CAST_SLOW = 1  # a grid row with a float tau, a GRID_BITS or a CANVAS row: the caller's general path
CAST_TOO_LARGE = 2  # a grid whose token indices or h' * w' pass int32 (the device's index arithmetic)

INT32_MAX = 2**31 - 1


@helper
def cast_rows(rows, out):
    """rows [n, NUM_COLS] int64 -> out [n, NUM_COLS + 2] int32: the columns cast,
    then tau step 1 and table offset 0. Returns CAST_PLAIN or CAST_SLOW (then
    `out` is not to be used), or CAST_TOO_LARGE (a grid row's indices do not
    fit the device's int32 arithmetic: positions may fit while a grid larger
    than the prompt, a pruned video's, does not)."""
    for r in range(rows.shape[0]):
        kind = rows[r, C.COL_KIND]
        if kind == C.KIND_GRID_BITS or kind == C.KIND_CANVAS:  # (CANVAS: its stretch mode or table)
            return CAST_SLOW
        if kind == C.KIND_GRID or kind == C.KIND_GRID_RAW or kind == C.KIND_XD_GRID:
            if rows[r, C.COL_GRID_OFFSET] + rows[r, C.COL_TOK_LEN] > INT32_MAX:
                return CAST_TOO_LARGE
            if rows[r, C.COL_H] * rows[r, C.COL_W] > INT32_MAX:
                return CAST_TOO_LARGE
        if (kind == C.KIND_GRID or kind == C.KIND_GRID_RAW) and rows[r, C.COL_SCALED] != C.TAU_FRAME:
            return CAST_SLOW
        for c in range(C.NUM_COLS):
            out[r, c] = rows[r, c]
        out[r, C.NUM_COLS] = 1
        out[r, C.NUM_COLS + 1] = 0
    return CAST_PLAIN
