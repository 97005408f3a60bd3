"""`prompt_positions` gives the canonical call's exact result in every input form.

The canonical call passes C-contiguous int64 arrays (float32 times). Every
other form a caller passes (lists, tuples, numpy arrays of any integer or
float dtype, strided, read-only, misaligned or byte-swapped, torch tensors)
is normalised once to that form (a read-only array takes one copy: the
token builder, which is the kernel, has one signature, for writable
arrays). These tests draw a form per argument and hold the result to the
canonical call's, and check that no form makes numba compile a second
signature of the builder.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from numba import types
from strategies import configs, prompts

from mrope_tracker import MRopeConfig, prompt_positions

QWEN2_5 = MRopeConfig(family="qwen2_5_vl", tokens_per_second=2)
IMAGE = QWEN2_5.image_token_id


def _read_only(value: np.ndarray) -> np.ndarray:
    out = value.copy()
    out.flags.writeable = False
    return out


def _read_only_view(value: np.ndarray) -> np.ndarray:
    value.flags.writeable = False
    return value


def _strided(value: np.ndarray) -> np.ndarray:
    wide = np.zeros((*value.shape[:-1], 2 * value.shape[-1]), value.dtype)
    wide[..., ::2] = value
    return wide[..., ::2]


def _unaligned(value: np.ndarray) -> np.ndarray:
    raw = np.frombuffer(b"\0" + value.tobytes(), value.dtype, count=value.size, offset=1)
    return raw.reshape(value.shape)


def _fits(value: np.ndarray, dtype) -> bool:
    if not value.size or np.dtype(dtype).kind == "f":
        return True
    info = np.iinfo(dtype)
    return info.min <= value.min() and value.max() <= info.max


INT_FORMS = {
    "list": lambda v: v.tolist(),
    "tuple": lambda v: tuple(tuple(r) if isinstance(r, list) else r for r in v.tolist()),
    "int8": lambda v: v.astype(np.int8),
    "int16": lambda v: v.astype(np.int16),
    "int32": lambda v: v.astype(np.int32),
    "uint8": lambda v: v.astype(np.uint8),
    "uint16": lambda v: v.astype(np.uint16),
    "uint32": lambda v: v.astype(np.uint32),
    "uint64": lambda v: v.astype(np.uint64),
    "strided": _strided,
    "read-only": _read_only,
    "read-only strided": lambda v: _read_only_view(_strided(v)),
    "unaligned": _unaligned,
    "big-endian": lambda v: v.astype(">i8"),
    "fortran": np.asfortranarray,
    "tensor": lambda v: torch.from_numpy(v.copy()),
    "tensor int32": lambda v: torch.from_numpy(v.astype(np.int32)),
    "tensor strided": lambda v: torch.from_numpy(_strided(v)),
}
FLOAT_FORMS = {
    "list": lambda v: v.tolist(),
    "tuple": lambda v: tuple(v.tolist()),
    "float64": lambda v: v.astype(np.float64),
    "strided": _strided,
    "read-only": _read_only,
    "big-endian": lambda v: v.astype(">f4"),
    "tensor": lambda v: torch.from_numpy(v.copy()),
    "tensor float64": lambda v: torch.from_numpy(v.astype(np.float64)),
}
_INT_DTYPES = {"int8": np.int8, "int16": np.int16, "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32}


def _in_form(value, form: str):
    if value is None or form == "canonical":
        return value
    if value.dtype.kind == "f":
        return FLOAT_FORMS[form](value)
    if form in _INT_DTYPES and not _fits(value, _INT_DTYPES[form]):
        return value  # (ids past the dtype's range: the canonical form)
    return INT_FORMS[form](value)


ARGUMENTS = ("token_ids", "image_grid_thw", "video_grid_thw", "second_per_grid_ts", "audio_feature_lengths")
ANY_FORM = st.sampled_from(("canonical", *INT_FORMS))
ANY_FLOAT_FORM = st.sampled_from(("canonical", *FLOAT_FORMS))


def _args(prompt) -> dict:
    return {
        "token_ids": prompt.token_ids,
        "image_grid_thw": prompt.image_grid_thw,
        "video_grid_thw": prompt.video_grid_thw,
        "second_per_grid_ts": prompt.second_per_grid_ts,
        "audio_feature_lengths": prompt.audio_feature_lengths,
        "use_audio_in_video": prompt.use_audio_in_video,
    }


def _same(got, expected) -> None:
    assert got[1] == expected[1]
    assert got[0].dtype == np.int64 and got[0].flags.c_contiguous
    np.testing.assert_array_equal(got[0], expected[0])


@given(
    prompt=prompts(),  # Qwen2-VL, Qwen2.5-VL and Qwen2.5-Omni configs
    forms=st.fixed_dictionaries(
        {name: (ANY_FLOAT_FORM if name == "second_per_grid_ts" else ANY_FORM) for name in ARGUMENTS}
    ),
)
def test_every_form_of_every_argument_gives_the_canonical_result(prompt, forms):
    """Each argument in a form of its own, drawn: the canonical call's positions and delta."""
    args = _args(prompt)
    expected = prompt_positions(prompt.config, **args)
    varied = {name: _in_form(args[name], forms[name]) for name in ARGUMENTS}
    _same(prompt_positions(prompt.config, **{**args, **varied}), expected)


@pytest.mark.parametrize("form", [*INT_FORMS, "canonical"])
@given(prompt=configs(families=("qwen2_5_vl", "qwen2_5_omni")).flatmap(prompts))
def test_one_form_for_every_argument_at_once(form, prompt):
    """The bench's seed-forms shape: every argument in the same form."""
    args = _args(prompt)
    expected = prompt_positions(prompt.config, **args)
    float_form = form if form in FLOAT_FORMS else "canonical"
    varied = {name: _in_form(args[name], float_form if name == "second_per_grid_ts" else form) for name in ARGUMENTS}
    _same(prompt_positions(prompt.config, **{**args, **varied}), expected)


def test_read_only_inputs_compile_nothing_new(python_builder_signatures):
    """Read-only ids and grids are copied once, so the builder keeps its one
    signature for Python callers, writable arrays only, on the error path too."""
    ids = np.array([1, IMAGE, IMAGE, 2, IMAGE, IMAGE, 3], np.int64)
    grid = np.array([[1, 2, 4], [1, 4, 2]], np.int64)
    expected = prompt_positions(QWEN2_5, ids, image_grid_thw=grid)
    _same(prompt_positions(QWEN2_5, _read_only(ids), image_grid_thw=_read_only(grid)), expected)
    _same(prompt_positions(QWEN2_5, _read_only(ids), image_grid_thw=grid), expected)
    _same(prompt_positions(QWEN2_5, ids, image_grid_thw=_read_only(grid)), expected)
    with pytest.raises(ValueError, match="image_grid_thw"):
        prompt_positions(QWEN2_5, _read_only(ids), image_grid_thw=_read_only(grid[:1]))
    (signature,) = python_builder_signatures()
    assert all(arg.mutable for arg in signature if isinstance(arg, types.Array))


def test_tensors_that_need_grad_are_read_through_a_detached_copy():
    ids = torch.tensor([1, IMAGE, IMAGE, 2], dtype=torch.float64, requires_grad=True)
    grid = torch.tensor([[1.0, 2.0, 4.0]], requires_grad=True)
    with pytest.raises(TypeError, match="token_ids"):  # floats: refused after the copy, as without grad
        prompt_positions(QWEN2_5, ids)
    expected = prompt_positions(QWEN2_5, [1, IMAGE, IMAGE, 2], image_grid_thw=[[1, 2, 4]])
    with pytest.raises(TypeError, match="image_grid_thw"):
        prompt_positions(QWEN2_5, ids.detach().long(), image_grid_thw=grid)
    _same(prompt_positions(QWEN2_5, ids.detach().long(), image_grid_thw=grid.detach().long()), expected)


@pytest.mark.parametrize(
    ("token_ids", "kwargs", "error", "argument"),
    [
        (torch.tensor([1.0, 2.0]), {}, TypeError, "token_ids"),
        (torch.tensor([True, False]), {}, TypeError, "token_ids"),
        (torch.tensor([1, 2], dtype=torch.bfloat16), {}, TypeError, "token_ids"),
        (torch.empty(2, dtype=torch.int64, device="meta"), {}, TypeError, "token_ids"),
        (np.array([[1, 2]]), {}, ValueError, "token_ids"),
        (_read_only(np.zeros(0, np.int64)), {}, ValueError, "token_ids"),
        (np.array([2**63], np.uint64), {}, ValueError, "token_ids"),
        (np.array([1.0, 2.0]), {}, TypeError, "token_ids"),
        ([1, IMAGE, IMAGE], {"image_grid_thw": torch.tensor([[1.0, 2.0, 2.0]])}, TypeError, "image_grid_thw"),
        ([1, IMAGE, IMAGE], {"image_grid_thw": torch.tensor([[1, 2]])}, ValueError, "image_grid_thw"),
        ([1, IMAGE, IMAGE], {"image_grid_thw": _read_only(np.array([[1, 2, 2]]))}, ValueError, "image"),
        ([1, 2], {"use_audio_in_video": 0}, TypeError, "use_audio_in_video"),
    ],
)
def test_bad_forms_are_refused_naming_the_argument(token_ids, kwargs, error, argument):
    with pytest.raises(error, match=argument):
        prompt_positions(QWEN2_5, token_ids, **kwargs)


def test_one_reader_of_tensors_for_every_entry_point():
    """core.inputs.tensor_values, which the prompt entries, the tracker's step arguments and both drop-ins read
    tensors through: a view of a CPU tensor that needs no grad, a copy of one that does, bfloat16 widened only
    where asked, and a TypeError naming the argument for what numpy cannot read."""
    from mrope_tracker.core.inputs import tensor_values

    plain = torch.arange(4)
    assert np.shares_memory(tensor_values(plain, "x"), plain.numpy())
    grad = torch.arange(4.0, requires_grad=True)
    assert tensor_values(grad, "x").tolist() == [0.0, 1.0, 2.0, 3.0]
    half = torch.tensor([0.5, 2.0], dtype=torch.bfloat16)
    assert tensor_values(half, "x", widen_bfloat16=True).dtype == np.float32
    with pytest.raises(TypeError, match="^x: expected a tensor numpy can read"):
        tensor_values(half, "x")
    with pytest.raises(TypeError, match="^x: expected a tensor that holds values"):
        tensor_values(torch.empty(2, device="meta"), "x")
