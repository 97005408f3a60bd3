"""`next_positions`: decode positions written in place, against
`reference.next_positions`, and its rejection of bad buffers and ints."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from spec_cases import qwen2_vl, tokens

from mrope_tracker import next_positions, prompt_positions, reference

SENTINEL = -7


def _buffer(rows: int, width: int) -> np.ndarray:
    return np.full((rows, width), SENTINEL, dtype=np.int64)


@given(
    delta=st.integers(-(10**6), 10**6),
    context_len=st.integers(0, 10**6),
    num_new_tokens=st.integers(0, 20),
    out_offset=st.integers(0, 6),
    tail=st.integers(0, 4),
)
def test_matches_reference(delta, context_len, num_new_tokens, out_offset, tail):
    """out[:, off:off + n] gets the reference's context_len + delta + n on every row; the rest is untouched."""
    context_len = max(context_len, -delta)  # positions are never negative
    out = _buffer(3, out_offset + num_new_tokens + tail)
    assert next_positions(out, out_offset, delta, context_len, num_new_tokens) is None
    expected = reference.next_positions(delta, context_len, num_new_tokens).numpy()
    np.testing.assert_array_equal(out[:, out_offset : out_offset + num_new_tokens], expected)
    assert (out[:, :out_offset] == SENTINEL).all()
    assert (out[:, out_offset + num_new_tokens :] == SENTINEL).all()


def test_continues_a_prompt():
    """After T1 (L 12, delta -3), tokens 12 and 13 sit at 9 and 10 on every row."""
    config = qwen2_vl()
    ids = tokens(config, "t t VS I*6 VE t t")
    _, delta = prompt_positions(config, ids, image_grid_thw=[[1, 4, 6]])
    out = _buffer(3, 2)
    next_positions(out, 0, delta, len(ids), 2)
    assert out.tolist() == [[9, 10]] * 3


def test_in_place_on_cpu_tensor():
    """A CPU int64 tensor is written in place (same storage), at the offset."""
    out = torch.full((3, 6), SENTINEL, dtype=torch.int64)
    pointer = out.data_ptr()
    next_positions(out, 2, -4, 10, 3)
    assert out.data_ptr() == pointer
    expected = reference.next_positions(-4, 10, 3)
    assert torch.equal(out[:, 2:5], expected)
    assert (out[:, :2] == SENTINEL).all() and (out[:, 5:] == SENTINEL).all()


def test_in_place_on_numpy_view():
    """A C-contiguous row-block view of a larger buffer is written through to the buffer."""
    big = _buffer(6, 5)
    view = big[1:4]  # rows 1..3: still C-contiguous
    next_positions(view, 1, 0, 3, 2)
    assert big[1:4, 1:3].tolist() == [[3, 4]] * 3
    assert (big[0] == SENTINEL).all() and (big[4:] == SENTINEL).all() and (big[1:4, [0, 3, 4]] == SENTINEL).all()


def test_more_than_three_rows():
    """Every row of a buffer with more than three rows is written."""
    out = _buffer(4, 3)
    next_positions(out, 0, 1, 5, 3)
    assert out.tolist() == [[6, 7, 8]] * 4


@pytest.mark.parametrize("out_offset", [0, 2, 4])
def test_zero_tokens(out_offset):
    """num_new_tokens = 0 writes nothing, even at out_offset == width."""
    out = _buffer(3, 4)
    next_positions(out, out_offset, 5, 10, 0)
    assert (out == SENTINEL).all()


def test_fills_the_buffer_exactly():
    """out_offset + num_new_tokens == width is allowed and writes the last column."""
    out = _buffer(3, 4)
    next_positions(out, 1, 0, 0, 3)
    assert out.tolist() == [[SENTINEL, 0, 1, 2]] * 3


def test_numpy_integer_arguments():
    """numpy integers are accepted for every int argument."""
    out = _buffer(3, 3)
    next_positions(out, np.int64(0), np.int32(-2), np.int64(7), np.uint8(3))
    assert out.tolist() == [[5, 6, 7]] * 3


# --------------------------------------------------------------------------
# rejections
# --------------------------------------------------------------------------


def rejects(exc: type, match: str, out, *args) -> None:
    """next_positions(out, *args) raises exactly `exc` naming `match`, and writes nothing."""
    before = out.copy() if isinstance(out, np.ndarray) else out.clone() if isinstance(out, torch.Tensor) else None
    with pytest.raises(Exception) as info:
        next_positions(out, *args)
    assert type(info.value) is exc, f"expected {exc.__name__}, got {type(info.value).__name__}: {info.value}"
    info.match(match)
    if isinstance(out, np.ndarray) and out.dtype == before.dtype:
        np.testing.assert_array_equal(out, before)


@pytest.mark.parametrize(
    "out",
    [
        pytest.param(np.zeros((3, 4), np.int32), id="int32"),
        pytest.param(np.zeros((3, 4), np.uint64), id="uint64"),
        pytest.param(np.zeros((3, 4), np.float64), id="float64"),
        pytest.param(torch.zeros((3, 4), dtype=torch.float32), id="float_tensor"),
        pytest.param(torch.zeros((3, 4), dtype=torch.int32), id="int32_tensor"),
        pytest.param(np.zeros(12, np.int64), id="one_dim"),
        pytest.param(np.zeros((3, 4, 1), np.int64), id="three_dim"),
        pytest.param(np.zeros((), np.int64), id="zero_dim"),
        pytest.param([[0] * 4] * 3, id="list"),
        pytest.param(None, id="none"),
    ],
)
def test_wrong_dtype_or_shape(out):
    """An out that is not a 2-D int64 array or tensor is a TypeError naming out."""
    rejects(TypeError, "out", out, 0, 0, 0, 1)


@pytest.mark.parametrize("rows", [1, 2])
def test_fewer_than_three_rows(rows):
    """An out with fewer than the three M-RoPE rows (T, H, W) is a ValueError naming out."""
    rejects(ValueError, "out", np.zeros((rows, 4), np.int64), 0, 0, 0, 1)


def test_big_endian_int64():
    """A non-native byte order int64 array is refused (TypeError naming out)."""
    rejects(TypeError, "out", np.zeros((3, 4), dtype=">i8"), 0, 0, 0, 1)


@pytest.mark.parametrize(
    "out",
    [
        pytest.param(np.zeros((3, 8), np.int64)[:, ::2], id="column_stride"),
        pytest.param(np.asfortranarray(np.zeros((3, 4), np.int64)), id="fortran"),
        pytest.param(torch.zeros((4, 3), dtype=torch.int64).t(), id="transposed_tensor"),
    ],
)
def test_non_contiguous(out):
    """A non-C-contiguous out (e.g. a column slice of a runner buffer) is written through in place."""
    next_positions(out, 0, -3, 7, 2)
    got = out.numpy() if isinstance(out, torch.Tensor) else out
    np.testing.assert_array_equal(got[:, :2], reference.next_positions(-3, 7, 2).numpy())


def test_read_only():
    """A read-only out is a ValueError naming out."""
    out = np.zeros((3, 4), np.int64)
    out.flags.writeable = False
    rejects(ValueError, "out", out, 0, 0, 0, 2)


def test_tensor_not_on_cpu():
    """A tensor on another device (here "meta") is a ValueError naming out."""
    rejects(ValueError, "out", torch.empty((3, 4), dtype=torch.int64, device="meta"), 0, 0, 0, 1)


@pytest.mark.parametrize(("out_offset", "num_new_tokens"), [(0, 5), (3, 2), (4, 1), (5, 0)])
def test_too_small(out_offset, num_new_tokens):
    """out_offset + num_new_tokens past out's width is a ValueError naming the count, writing nothing."""
    rejects(ValueError, "num_new_tokens|out_offset", np.zeros((3, 4), np.int64), out_offset, 0, 0, num_new_tokens)


_ARGS = ("out_offset", "delta", "context_len", "num_new_tokens")


@pytest.mark.parametrize("name", _ARGS)
@pytest.mark.parametrize(
    "value", [1.0, True, "1", None, np.float64(1.0)], ids=["float", "bool", "str", "none", "np_float"]
)
def test_non_int_arguments(name, value):
    """A non-int out_offset, delta, context_len or num_new_tokens is a TypeError naming it."""
    args = dict(out_offset=0, delta=0, context_len=0, num_new_tokens=1)
    args[name] = value
    rejects(TypeError, name, np.zeros((3, 4), np.int64), *(args[a] for a in _ARGS))


@pytest.mark.parametrize("name", ["out_offset", "context_len", "num_new_tokens"])
def test_negative_arguments(name):
    """A negative out_offset, context_len or num_new_tokens is a ValueError naming it."""
    args = dict(out_offset=0, delta=0, context_len=5, num_new_tokens=1)
    args[name] = -1
    rejects(ValueError, name, np.zeros((3, 4), np.int64), *(args[a] for a in _ARGS))


@pytest.mark.parametrize("name", _ARGS)
@pytest.mark.parametrize(
    "value", [2**63, -(2**63) - 1, 2**100], ids=["int64_max_plus_one", "int64_min_minus_one", "huge"]
)
def test_ints_outside_int64(name, value):
    """An int that does not fit int64 is a ValueError naming it (never an OverflowError)."""
    args = dict(out_offset=0, delta=0, context_len=5, num_new_tokens=1)
    args[name] = value
    rejects(ValueError, name, np.zeros((3, 4), np.int64), *(args[a] for a in _ARGS))


def test_negative_positions():
    """context_len + delta < 0 (a position below 0) is a ValueError naming delta, writing nothing."""
    rejects(ValueError, "delta", np.zeros((3, 4), np.int64), 0, -6, 5, 1)


def test_positions_past_int64_range_are_refused():
    """Plain-int arguments whose positions would pass 2**62 are a ValueError naming context_len, and nothing is
    written."""
    out = np.zeros((3, 4), np.int64)
    with pytest.raises(ValueError, match="context_len"):
        next_positions(out, 0, 0, 2**63 - 2, 3)
    with pytest.raises(ValueError, match="context_len"):
        next_positions(out, 0, 2**62, 2**61, 3)
    assert not out.any()
