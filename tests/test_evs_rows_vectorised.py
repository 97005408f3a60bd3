"""EVS: `delete_tokens`' rows against the row-by-row form they replaced.

`delete_tokens` once split a layout row by row in Python, each window of
mask bits a row of its own; it then built them in a few array operations
per row, and now in one numba kernel (kernels/pruned_rows.py). The rows are
part of the contract (`device/rows.py` reads GRID_BITS rows, `to_bytes`
writes them), so the faster forms must give the same rows, not only the
same positions: this file keeps the first form as the oracle and compares
the tables on random masks, scattered, in runs, with whole windows and
empty ones.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import examples

from mrope_tracker import MRopeConfig
from mrope_tracker.core.inputs import true_runs
from mrope_tracker.core.layout import PromptLayout
from mrope_tracker.evs import delete_tokens
from mrope_tracker.kernels import layout_codes as C

VS, VE, VIDEO, IMAGE = 151652, 151653, 151656, 151655


# the row-by-row form (the commit before the vectorised one), kept as the oracle


def _row_by_row(layout: PromptLayout, keep) -> tuple[np.ndarray, np.ndarray]:
    """The rows `delete_tokens` makes (its docstring states the rule), made
    one layout row at a time in Python, as before the row-split kernel."""
    out_rows, out_scales = [], []
    # kept tokens before each row's start and end, from one prefix sum: a row
    # kept whole or dropped whole (most text rows) needs no work of its own
    before = np.concatenate(([0], np.cumsum(keep, dtype=np.int64)))
    starts = layout.rows[:, C.COL_TOK_START]
    counts = (before[starts + layout.rows[:, C.COL_TOK_LEN]] - before[starts]).tolist()
    for r in range(layout.num_rows):
        row, scale = layout.rows[r], layout.scales[r]
        start, length = int(row[C.COL_TOK_START]), int(row[C.COL_TOK_LEN])
        if counts[r] == 0:
            continue
        if counts[r] == length:
            out_rows.append(row)
            out_scales.append(scale)
            continue
        kept = keep[start : start + length]
        runs = true_runs(kept)
        grid = row[C.COL_KIND] in (C.KIND_GRID, C.KIND_GRID_RAW)
        if row[C.COL_KIND] == C.KIND_GRID and runs.shape[0] > 1:
            bits = _bits_rows(row, kept, runs)
            if bits is not None and len(bits) < runs.shape[0]:
                out_rows.extend(bits)
                out_scales.extend([scale] * len(bits))
                continue
        for offset, count in runs.tolist():
            piece = row.copy()
            piece[C.COL_TOK_LEN] = count
            if row[C.COL_KIND] == C.KIND_LINEAR:
                piece[C.COL_BASE] += offset
            elif grid:
                piece[C.COL_GRID_OFFSET] += offset
            out_rows.append(piece)
            out_scales.append(scale)
    rows = np.array(out_rows, np.int64)
    lengths = rows[:, C.COL_TOK_LEN]
    rows[:, C.COL_TOK_START] = np.cumsum(lengths) - lengths
    return rows, np.array(out_scales, np.float32)


def _bits_rows(row: np.ndarray, kept: np.ndarray, runs: np.ndarray) -> list[np.ndarray] | None:
    """A grid row's kept tokens as GRID_BITS rows, one per window of
    BITS_PER_ROW grid tokens from the first kept one, and GRID rows for runs
    of windows kept whole; None when the grid's sides do not fit the packing."""
    h, w, mode = int(row[C.COL_H]), int(row[C.COL_W]), int(row[C.COL_SCALED])
    if max(h, w) >= 1 << C.BITS_SIDE:
        return None
    shape = h | (w << C.BITS_SIDE) | (mode << (2 * C.BITS_SIDE))
    first, last = int(runs[0, 0]), int(runs[-1, 0] + runs[-1, 1])
    size = C.BITS_PER_ROW
    # every window at once: its kept count and its bits packed into BITS_WORDS little-endian words
    num_windows = -(-(last - first) // size)
    padded = np.zeros(num_windows * size, np.bool_)
    padded[: last - first] = kept[first:last]
    windows = padded.reshape(num_windows, size)
    kept_counts = np.count_nonzero(windows, axis=1).tolist()
    words = np.packbits(windows, axis=1, bitorder="little").view("<i8")
    widths = [min(size, last - first - k * size) for k in range(num_windows)]
    out: list[np.ndarray] = []
    grid_end = -1  # where the last GRID row of whole windows ends (row-local), if it was the last row
    for k in range(num_windows):
        count = kept_counts[k]
        at = first + k * size
        if count == 0:
            grid_end = -1
            continue
        whole = count == widths[k]
        if whole and grid_end == at:
            out[-1][C.COL_TOK_LEN] += count  # whole windows one after the other: one GRID row
            grid_end += count
            continue
        piece = row.copy()
        piece[C.COL_TOK_LEN] = count
        if whole:
            piece[C.COL_GRID_OFFSET] += at
            grid_end = at + count
        else:
            grid_end = -1
            piece[C.COL_KIND] = C.KIND_GRID_BITS
            piece[C.COL_GRID_OFFSET] = row[C.COL_GRID_OFFSET] + at
            piece[C.COL_BITS_SHAPE] = shape
            piece[C.COL_BITS_WORDS : C.COL_BITS_WORDS + C.BITS_WORDS] = words[k]
        out.append(piece)
    return out


def _mask(rng, n: int, style: str) -> np.ndarray:
    if style == "scattered":
        return rng.random(n) < rng.choice([0.05, 0.3, 0.5, 0.9])
    if style == "runs":  # runs of kept and dropped tokens, some longer than a window
        lengths = rng.integers(1, 400, size=n)
        flags = np.repeat(np.arange(lengths.shape[0]) % 2 == rng.integers(0, 2), lengths)[:n]
        return flags
    # windows kept whole, dropped whole, or scattered, one after the other
    size = C.BITS_PER_ROW
    out = np.zeros(n, np.bool_)
    for start in range(int(rng.integers(0, size)), n, size):
        kind = rng.integers(0, 3)
        out[start : start + size] = kind == 1 if kind < 2 else rng.random(min(size, n - start)) < 0.5
    return out


@settings(max_examples=examples(200), deadline=None)
@given(
    st.integers(1, 40),
    st.sampled_from((1, 2, 6, 14, 28)),
    st.sampled_from((1, 3, 14, 28)),
    st.sampled_from(("scattered", "runs", "windows")),
    st.sampled_from(("reference", "vllm-0.33")),
    st.booleans(),
    st.integers(0, 2**32 - 1),
)
def test_delete_tokens_rows_equal_row_by_row(t, h, w, style, semantics, with_image, seed):
    """The same rows and scales as the row-by-row form, for a video (and an
    image before it, whose rows stay runs), text kept whole or cut."""
    config = MRopeConfig(family="qwen2_5_vl", spatial_merge_size=1, tokens_per_second=2, semantics=semantics)
    image = [VS, IMAGE, IMAGE, IMAGE, IMAGE, VE] if with_image else []
    ids = [1, 2] + image + [VS] + [VIDEO] * (t * h * w) + [VE, 3, 4]
    full = PromptLayout.from_tokens(
        config,
        ids,
        image_grid_thw=[[1, 2, 2]] if with_image else None,
        video_grid_thw=[[t, h, w]],
        second_per_grid_ts=[1.3],
    )
    rng = np.random.default_rng(seed)
    keep = _mask(rng, len(ids), style)
    if not keep.any():
        keep[int(rng.integers(0, len(ids)))] = True
    rows, scales = _row_by_row(full, keep)
    pruned = delete_tokens(full, keep)
    np.testing.assert_array_equal(pruned.rows, rows)
    np.testing.assert_array_equal(pruned.scales, scales)
    np.testing.assert_array_equal(pruned.positions(), full.positions()[:, keep])
