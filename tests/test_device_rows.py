"""device_rows: a layout's rows as RopeState keeps them, integers only (no triton needed).

The device rule, re-stated here in numpy from its description (a grid row's
tau(f) is f * step, or the row's table entry), must give the T row the CPU
kernels give for every tau mode, frame rate and chunk of a grid.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import FPS_VALUES, examples

from mrope_tracker.device.rows import DCOL_TAU_AT, DCOL_TAU_STEP, NUM_DEVICE_COLS, TAU_FROM_TABLE, device_rows
from mrope_tracker.kernels import layout_codes as C
from mrope_tracker.kernels.layout_fill import fill_positions

MODES = (C.TAU_FRAME, C.TAU_F32, C.TAU_F64, C.TAU_F32_RATE)


def device_t_row(rows: np.ndarray, taus: np.ndarray, num_tokens: int) -> np.ndarray:
    """The T row the device rule gives (grid rows only; -1 elsewhere)."""
    flat = np.concatenate([rows.reshape(-1), taus, np.zeros(NUM_DEVICE_COLS, np.int32)])
    out = np.full(num_tokens, -1, np.int64)
    for row in rows:
        if row[C.COL_KIND] != C.KIND_GRID:
            continue
        n = np.arange(row[C.COL_TOK_LEN])
        f = (row[C.COL_GRID_OFFSET] + n) // (row[C.COL_H] * row[C.COL_W])
        if row[DCOL_TAU_STEP] == TAU_FROM_TABLE:
            tau = flat[row[DCOL_TAU_AT] + f]
        else:
            tau = f * row[DCOL_TAU_STEP]
        out[row[C.COL_TOK_START] + n] = row[C.COL_BASE] + tau
    return out


@st.composite
def grid_layouts(draw):
    """Rows of grids cut in chunks (as Omni interleaves cut them), any tau mode and time scale."""
    rows, scales, at = [], [], 0
    for _ in range(draw(st.integers(1, 4))):
        t, h, w = draw(st.integers(1, 40)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
        mode = draw(st.sampled_from(MODES))
        sp = np.float32(2.0 / draw(st.sampled_from(FPS_VALUES))) if draw(st.booleans()) else np.float32(1.0)
        r = np.float32(draw(st.sampled_from((1, 2, 25, 13, 2.5))))
        size, done = t * h * w, 0
        while done < size:
            count = draw(st.integers(1, size - done))
            rows.append([at, count, C.KIND_GRID, 3 * at, done, t, h, w, mode])
            scales.append([sp, r])
            at += count
            done += count
        rows.append([at, 2, C.KIND_LINEAR, 5 * at, 0, 0, 0, 0, 0])
        scales.append([0, 0])
        at += 2
    return np.array(rows, np.int64), np.array(scales, np.float32), at


@settings(max_examples=examples(200))
@given(grid_layouts())
def test_device_rows_reproduce_the_cpu_t_row(layout):
    rows, scales, num_tokens = layout
    device, taus = device_rows(rows, scales)
    assert device.dtype == np.int32 and device.shape == (rows.shape[0], NUM_DEVICE_COLS)
    assert (device[:, : C.NUM_COLS] == rows).all()
    expected = np.empty((3, num_tokens), np.int64)
    fill_positions(expected, 0, rows, scales, 0, rows.shape[0], 0, num_tokens)
    grid = np.repeat(rows[:, C.COL_KIND] == C.KIND_GRID, rows[:, C.COL_TOK_LEN])
    assert (device_t_row(device, taus, num_tokens)[grid] == expected[0][grid]).all()


def test_common_rates_need_no_table():
    """Whole positions per frame (2 fps with 2 tokens a second, Omni's 25) and frame 0
    alone are a step; a rate such as 1.4 positions per frame (fps 0.7 in vLLM 0.33) is a table of one int32 a frame."""
    rows = np.array(
        [
            [0, 32, C.KIND_GRID, 0, 0, 8, 2, 2, C.TAU_F64],
            [32, 32, C.KIND_GRID, 40, 0, 8, 2, 2, C.TAU_F32],
            [64, 4, C.KIND_GRID, 80, 0, 1, 2, 2, C.TAU_F32],
            [68, 32, C.KIND_GRID, 90, 0, 8, 2, 2, C.TAU_F64],
        ],
        np.int64,
    )
    scales = np.array([[1.0, 2.0], [2.0, 12.5], [0.7, 2.0], [0.7, 2.0]], np.float32)
    device, taus = device_rows(rows, scales)
    assert device[:, DCOL_TAU_STEP].tolist() == [2, 25, 0, TAU_FROM_TABLE]
    # vLLM 0.33's float64 product of the float32 0.7: 7 * 1.3999999762 truncates to 9, 5 * ... to 6
    assert taus.dtype == np.int32 and taus.tolist() == [0, 1, 2, 4, 5, 6, 8, 9]
