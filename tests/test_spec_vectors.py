"""The documented worked examples and test vectors (tests/spec_cases.py) against every implementation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from spec_cases import CASES, SpecCase, tokens

import mrope_tracker
import mrope_tracker.reference

IMPLEMENTATIONS = {
    "reference": lambda: mrope_tracker.reference.prompt_positions,
    "fast": lambda: getattr(mrope_tracker, "prompt_positions", None),
}
ROW = {"T": 0, "H": 1, "W": 2}


def _as_lists(positions) -> list[list[int]]:
    if isinstance(positions, (torch.Tensor, np.ndarray)):
        return positions.tolist()
    return [list(row) for row in positions]


@pytest.fixture(params=sorted(IMPLEMENTATIONS))
def prompt_positions(request):
    """The implementation under test; the fast path is skipped until it exists."""
    function = IMPLEMENTATIONS[request.param]()
    if function is None:
        pytest.skip(f"mrope_tracker.prompt_positions ({request.param}) is not implemented yet")
    return function


def _run(prompt_positions, case: SpecCase):
    config = case.config()
    ids = tokens(config, case.prompt)
    positions, delta = prompt_positions(config, ids, **case.kwargs())
    rows = _as_lists(positions)
    assert len(rows) == 3 and all(len(row) == len(ids) for row in rows)
    return rows, delta


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_delta(prompt_positions, case):
    """The returned delta is max(P) + 1 - L for the case."""
    _, delta = _run(prompt_positions, case)
    assert int(delta) == case.delta


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_positions(prompt_positions, case):
    """Positions equal the documented full rows, single-token positions and partial rows."""
    rows, _ = _run(prompt_positions, case)
    if case.rows is not None:
        assert rows == [list(row) for row in case.rows]
    for index, expected in case.points:
        assert tuple(row[index] for row in rows) == expected, f"token {index}"
    for name, start, values in case.runs:
        assert rows[ROW[name]][start : start + len(values)] == list(values), f"row {name} from {start}"


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_delta_is_max_plus_one_minus_length(prompt_positions, case):
    """delta = max(P) + 1 - L over all rows and tokens."""
    rows, delta = _run(prompt_positions, case)
    assert int(delta) == max(map(max, rows)) + 1 - len(rows[0])
