"""PromptLayout built directly (e.g. after deserialising) is checked before any kernel reads it."""

import numpy as np
import pytest

from mrope_tracker import MRopeConfig, PositionTracker, PromptLayout
from mrope_tracker.kernels import layout_codes as C

CONFIG = MRopeConfig(family="qwen2_5_vl", tokens_per_second=2)
IMG, VS, VE = CONFIG.image_token_id, CONFIG.vision_start_token_id, CONFIG.vision_end_token_id
IDS = np.array([1, 2, VS] + [IMG] * 6 + [VE, 3, 4])  # spec T1 layout


def good_layout() -> PromptLayout:
    return PromptLayout.from_tokens(CONFIG, IDS, image_grid_thw=[[1, 4, 6]])


def rebuilt(rows=None, scales=None, num_tokens=None, delta=None) -> PromptLayout:
    g = good_layout()
    return PromptLayout(
        g.rows if rows is None else rows,
        g.scales if scales is None else scales,
        g.num_tokens if num_tokens is None else num_tokens,
        g.delta if delta is None else delta,
    )


def test_direct_construction_of_a_valid_layout():
    """A layout rebuilt from another's tables gives the same positions, and holds read-only copies."""
    g = good_layout()
    rows = g.rows.copy()
    copy = PromptLayout(rows, g.scales.copy(), g.num_tokens, g.delta)
    rows[:] = 0  # the caller's array is not the layout's
    np.testing.assert_array_equal(copy.positions(), g.positions())
    assert not copy.rows.flags.writeable and not copy.scales.flags.writeable


def _mutated(col, row, value):
    rows = good_layout().rows.copy()
    rows[row, col] = value
    return rows


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(rows=np.zeros((0, C.NUM_COLS), np.int64), scales=np.zeros((0, 2), np.float32)), r"rows\[0\]: expected at least one row"),
        (dict(rows=_mutated(C.COL_TOK_START, 1, 4)), r"rows\[1\]: expected rows that tile"),
        (dict(rows=_mutated(C.COL_TOK_LEN, 2, 0)), r"rows\[2\]: expected rows of positive length"),
        (dict(num_tokens=20), r"rows\[2\]: expected rows of positive length ending exactly at num_tokens"),
        (dict(rows=_mutated(C.COL_KIND, 0, 7)), r"rows\[0\]: expected kinds"),
        (dict(rows=_mutated(C.COL_W, 1, 0)), r"rows\[1\]: expected a grid row"),
        (dict(rows=_mutated(C.COL_GRID_OFFSET, 1, 1)), r"rows\[1\]: expected a grid row"),
        (dict(rows=_mutated(C.COL_BASE, 0, -1)), r"rows\[0\]: expected positions"),
        (dict(delta=0), r"delta: expected max position \+ 1 - num_tokens = -3"),
    ],
)
def test_invalid_tables_are_rejected(kwargs, match):
    """Rows that do not tile the prompt, bad kinds or grids, or a wrong delta are a ValueError naming the field."""
    with pytest.raises(ValueError, match=match):
        rebuilt(**kwargs)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(rows=good_layout().rows.astype(np.float64)), TypeError, "rows: expected a int64 array"),
        (dict(rows=good_layout().rows[:, :5]), TypeError, "rows: expected a int64 array"),
        (dict(scales=good_layout().scales.astype(np.float64)), TypeError, "scales: expected a float32 array"),
        (dict(scales=np.zeros((1, 2), np.float32)), ValueError, "scales: expected one row per layout row"),
        (dict(num_tokens=0), ValueError, "num_tokens"),
        (dict(delta=1.5), TypeError, "delta"),
    ],
)
def test_wrong_types_and_shapes(kwargs, error, match):
    """Tables of the wrong dtype or shape, and bad counts, are refused with the field's name."""
    with pytest.raises(error, match=match):
        rebuilt(**kwargs)


def test_tracker_takes_a_checked_layout():
    """add_request_layout with a rebuilt layout gives the same positions as add_request."""
    g = good_layout()
    a = PositionTracker(CONFIG, max_num_reqs=2, max_num_batched_tokens=32)
    a.add_request_layout("r", PromptLayout(g.rows.copy(), g.scales.copy(), g.num_tokens, g.delta), num_computed_tokens=1)
    b = PositionTracker(CONFIG, max_num_reqs=2, max_num_batched_tokens=32)
    b.add_request("r", IDS, image_grid_thw=[[1, 4, 6]], num_computed_tokens=1)
    assert a.prepare(["r"], [14]).tolist() == b.prepare(["r"], [14]).tolist()
