"""`prompt_positions` against its checked path, in every input form.

`prompt_positions` brings its arguments to the kernels' canonical form
(int64 arrays of one layout, float32 times) and makes one kernel call
(the token builder, `mrope_tracker.kernels.layout_build`);
`checked_prompt_positions` runs the same arguments through the general input
checks and the builder on a state of its own, and explains an error found
there. These tests hold the two to the same results: equal positions on
every valid prompt, under every semantics preset and input form, and the
checked path's exact error on every bad one. test_prompt_positions.py
checks both against the reference.
"""

from __future__ import annotations

import threading
from collections import namedtuple

import attrs
import numpy as np
import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st
from strategies import prompts

from mrope_tracker import MRopeConfig, prompt_positions, reference
from mrope_tracker.core import positions as positions_module
from mrope_tracker.families import SEMANTICS


def _checked(config, token_ids, **kwargs):
    """The checked path alone: what the fast kernels must agree with."""
    return positions_module.checked_prompt_positions(
        config,
        token_ids,
        kwargs.get("image_grid_thw"),
        kwargs.get("video_grid_thw"),
        kwargs.get("second_per_grid_ts"),
        kwargs.get("audio_feature_lengths"),
        kwargs.get("use_audio_in_video", False),
    )


def _outcome(fn, *args, **kwargs):
    """(positions, delta) or (exception type, message)."""
    try:
        positions, delta = fn(*args, **kwargs)
    except (ValueError, TypeError, KeyError) as error:
        return type(error), str(error)
    return positions.tolist(), delta


def _assert_same(config, token_ids, **kwargs):
    fast = _outcome(prompt_positions, config, token_ids, **kwargs)
    checked = _outcome(_checked, config, token_ids, **kwargs)
    assert fast == checked
    return fast


def _sp_forms(sp: np.ndarray):
    """second_per_grid_ts as engines pass it: float32 array, floats, Python
    ints where whole, float64 array, tensor."""
    as_floats = [float(v) for v in sp]
    mixed = [int(v) if float(v).is_integer() else float(v) for v in sp]
    return {
        "array": sp,
        "list": as_floats,
        "tuple": tuple(as_floats),
        "mixed": mixed,
        "float64": sp.astype(np.float64),
        "tensor": torch.from_numpy(sp.copy()),
        "tensor64": torch.from_numpy(sp.astype(np.float64)),
    }


_Row = namedtuple("_Row", "t h w")


def _grid_forms(grid: np.ndarray):
    return {
        "array": grid,
        "list": grid.tolist(),
        "tuple": tuple(map(tuple, grid.tolist())),
        "list_of_arrays": list(grid),  # numpy rows: not plain ints, so the checked path takes them
        "list_of_tensors": [torch.tensor(row) for row in grid.tolist()],  # rows marshal cannot write
        "named_rows": [_Row(*row) for row in grid.tolist()],  # tuples of another type: marshal refuses them
        "tensor": torch.from_numpy(grid.copy()),
        "tensor_int32": torch.from_numpy(grid.astype(np.int32)),
        "tensor_strided": torch.from_numpy(np.repeat(grid, 2, axis=0))[::2],
        "int32": grid.astype(np.int32),
    }


@given(
    prompt=prompts(max_items=4, use_audio_in_video=False),
    semantics=st.sampled_from(SEMANTICS),
    grid_form=st.sampled_from(
        (
            "array",
            "list",
            "tuple",
            "list_of_arrays",
            "list_of_tensors",
            "named_rows",
            "tensor",
            "tensor_int32",
            "tensor_strided",
            "int32",
        )
    ),
    sp_form=st.sampled_from(("array", "list", "tuple", "mixed", "float64", "tensor", "tensor64", "omitted")),
)
def test_fast_path_equals_checked_path(prompt, semantics, grid_form, sp_form):
    """Text, images and videos under every preset and input form: the
    positions of the fast kernels are the checked path's."""
    config = attrs.evolve(prompt.config, semantics=semantics)
    assume("audio_feature_lengths" not in prompt.kwargs())  # audio is the checked path's
    kwargs = prompt.kwargs()
    for name in ("image_grid_thw", "video_grid_thw"):
        if name in kwargs:
            kwargs[name] = _grid_forms(kwargs[name])[grid_form]
    if "second_per_grid_ts" in kwargs:
        if sp_form == "omitted":
            del kwargs["second_per_grid_ts"]
        else:
            kwargs["second_per_grid_ts"] = _sp_forms(kwargs["second_per_grid_ts"])[sp_form]
    positions, delta = _assert_same(config, prompt.token_ids, **kwargs)
    if semantics == "reference":
        expected, expected_delta = reference.prompt_positions(config, prompt.token_ids, **kwargs)
        assert positions == expected.tolist() and delta == expected_delta


@given(prompt=prompts(max_items=3, use_audio_in_video=False))
def test_token_id_forms(prompt):
    """Token ids as a list, a tuple, int32, a strided view or a tensor."""
    ids = prompt.token_ids
    assume("audio_feature_lengths" not in prompt.kwargs())
    kwargs = prompt.kwargs()
    expected = _assert_same(prompt.config, ids, **kwargs)
    for form in (
        ids.tolist(),
        tuple(ids.tolist()),
        ids.astype(np.int32),
        np.repeat(ids, 2)[::2],
        torch.from_numpy(ids),
    ):
        assert _assert_same(prompt.config, form, **kwargs) == expected


QWEN2_5 = MRopeConfig(family="qwen2_5_vl")


def test_delta_is_the_prompt_maximum_under_r_hw():
    """transformers 5 resumes after a video at s + max(h', w') (R-hw), below
    the video's later frames; the delta is still max + 1 - L over the whole
    prompt, so text between the video and a later image must not lower it.
    (Found by CI: the walk assigned the text's top instead of taking the max.)"""
    config = MRopeConfig(family="qwen2_5_vl", tokens_per_second=2.0, semantics="transformers-5")
    vs, ve, vid, img = (
        config.vision_start_token_id,
        config.vision_end_token_id,
        config.video_token_id,
        config.image_token_id,
    )
    ids = [vs] + [vid] * 5 + [ve, vs, img, ve]  # video (5, 2, 2): one token a frame; image (1, 2, 2)
    kwargs = dict(video_grid_thw=[[5, 2, 2]], image_grid_thw=[[1, 2, 2]], second_per_grid_ts=[1.0])
    # Frames at T = 1 + 2f (sp 1, 2 tokens a second); text resumes at 1 + max(1, 1) = 2.
    expected = [[0, 1, 3, 5, 7, 9, 2, 3, 4, 5], [0, 1, 1, 1, 1, 1, 2, 3, 4, 5], [0, 1, 1, 1, 1, 1, 2, 3, 4, 5]]
    for form in (kwargs, {k: np.array(v) for k, v in kwargs.items()}):
        assert _assert_same(config, ids, **form) == (expected, 0)  # delta = 9 + 1 - 10


QWEN2 = MRopeConfig(family="qwen2_vl")
IMG, VID, VS, VE = (
    QWEN2_5.image_token_id,
    QWEN2_5.video_token_id,
    QWEN2_5.vision_start_token_id,
    QWEN2_5.vision_end_token_id,
)
IMAGE_IDS = [1, VS, IMG, IMG, VE, 2]  # one image of grid (1, 2, 4): 2 tokens
VIDEO_IDS = [1, VS, VID, VID, VID, VID, VE, 2]  # one video of grid (2, 2, 4): 4 tokens

BAD_IMAGE_GRIDS = [
    [[1, 2, True]],  # a bool is not a size
    [[1, 2.0, 4]],  # nor is a float
    [[1, 2, 4, 1]],  # four columns
    [[1, 2]],  # two
    [[1, 2, 4], [1, 2, 4]],  # more rows than runs
    [],  # fewer
    [[1, 3, 4]],  # not a multiple of the merge size
    [[0, 2, 4]],
    [[-1, 2, 4]],
    [[1, 2, 2**40]],  # past 32 bits: marshal writes another record
    [[1, 2, 8]],  # more tokens than the run
    [(1, 2, 4), [1, 2]],
    [None],
    [[1, 2, None]],
    ["124"],
    [b"\x01\x02\x04"],
    [[1, 2, np.int64(4)]],  # numpy scalars: marshal refuses them, the checked path takes them
    [np.array([1, 2, 4])],
    ([1, 2, 4],),
    [[1, 2, 4]],  # valid, for comparison
]


@pytest.mark.parametrize("grid", BAD_IMAGE_GRIDS, ids=repr)
def test_image_grid_lists(grid):
    """Each odd or bad image_grid_thw list (list or array tokens) gives the checked path's positions or its error."""
    _assert_same(QWEN2_5, IMAGE_IDS, image_grid_thw=grid)
    _assert_same(QWEN2_5, np.array(IMAGE_IDS), image_grid_thw=grid)


BAD_SP = [
    [True],
    [None],
    ["1"],
    [float("nan")],
    [float("inf")],
    [-1.0],
    [1.0, 1.0],
    [],
    [1e30],  # a temporal index past the limit
    [np.float32(0.5)],
    [0.5],
    [2],
    (2.5,),
    [2**40],
]


@pytest.mark.parametrize("sp", BAD_SP, ids=repr)
@pytest.mark.parametrize("semantics", SEMANTICS)
def test_second_per_grid_ts_lists(sp, semantics):
    """Each odd or bad second_per_grid_ts list, under every preset, gives the checked path's positions or its error."""
    config = attrs.evolve(QWEN2_5, semantics=semantics)
    _assert_same(config, VIDEO_IDS, video_grid_thw=[[2, 2, 4]], second_per_grid_ts=sp)
    _assert_same(config, VIDEO_IDS, video_grid_thw=np.array([[2, 2, 4]]), second_per_grid_ts=sp)


@pytest.mark.parametrize("sp", [None, [], [1.0], np.zeros(0, np.float32), np.ones(1, np.float32)], ids=repr)
def test_family_without_time_scale_refuses_second_per_grid_ts(sp):
    """Qwen2-VL numbers frames: any second_per_grid_ts, even empty, is refused as the checked path does."""
    for grid in ([[2, 2, 4]], np.array([[2, 2, 4]])):
        outcome = _assert_same(QWEN2, VIDEO_IDS, video_grid_thw=grid, second_per_grid_ts=sp)
        if sp is not None:
            assert outcome[0] is ValueError


def test_many_items_as_lists():
    """A prompt of 1,366 images given as a list (the records kernel this
    replaced took them another way past 1,365)."""
    num_images = 1366
    ids = [1] + [IMG] * num_images + [2]
    grids = [[1, 2, 2]] * num_images
    positions, delta = _assert_same(QWEN2_5, ids, image_grid_thw=grids)
    expected, expected_delta = reference.prompt_positions(QWEN2_5, ids, image_grid_thw=grids)
    assert positions == expected.tolist() and delta == expected_delta


def test_threads_share_the_scratch():
    """The prompt kernel keeps its state in one module buffer and keeps the
    GIL: threads calling it at once each get their own prompt's positions."""
    prompts_ = []
    for k in range(1, 9):
        ids = [1] + [VS] + [IMG] * (2 * k) + [VE] + [VS] + [VID] * (4 * k) + [VE] + [2]
        kwargs = dict(image_grid_thw=[[1, 2, 4 * k]], video_grid_thw=[[2, 2, 4 * k]], second_per_grid_ts=[0.5 * k])
        prompts_.append((ids, kwargs, _checked(QWEN2_5, ids, **kwargs)))
    failures = []

    def run(ids, kwargs, expected):
        for _ in range(300):
            positions, delta = prompt_positions(QWEN2_5, ids, **kwargs)
            if positions.tolist() != expected[0].tolist() or delta != expected[1]:
                failures.append(kwargs)
                return

    threads = [threading.Thread(target=run, args=p) for p in prompts_]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures


def test_kernels_compile_one_signature_each(python_builder_signatures):
    """Arrays of any other dtype or layout are converted to the canonical
    form, never compiled for: each kernel keeps exactly one signature."""
    prompt_positions(QWEN2_5, IMAGE_IDS, image_grid_thw=[[1, 2, 4]])
    prompt_positions(QWEN2_5, np.array(IMAGE_IDS), image_grid_thw=np.array([[1, 2, 4]]))
    odd_ids = np.repeat(np.array(IMAGE_IDS), 2)[::2]
    odd_grid = np.asfortranarray(np.array([[1, 2, 4]], np.int64))
    read_only = np.array(IMAGE_IDS)
    read_only.flags.writeable = False
    _assert_same(QWEN2_5, odd_ids, image_grid_thw=odd_grid)
    _assert_same(QWEN2_5, read_only, image_grid_thw=odd_grid.astype(np.int32))
    _assert_same(QWEN2_5, VIDEO_IDS, video_grid_thw=odd_grid * [2, 1, 1], second_per_grid_ts=np.ones(1))
    _assert_same(QWEN2_5, VIDEO_IDS, video_grid_thw=[[2, 2, 4]], second_per_grid_ts=(1,))
    narrow = np.array([[1, 2, 4, 9], [1, 4, 2, 9]])[:, :3]  # width 3, strides (32, 8)
    _assert_same(QWEN2_5, TWO_IMAGE_IDS, image_grid_thw=narrow)
    _assert_same(QWEN2_5, TWO_IMAGE_IDS, image_grid_thw=np.array([[1, 2, 4], [1, 4, 2]])[:, :2])  # refused
    assert len(python_builder_signatures()) == 1


def _array_layouts(values, dtype) -> dict[str, np.ndarray]:
    """An array of `values` as `dtype`, C-contiguous, and in the layouts
    the kernels were not compiled for (read-only, misaligned, strided, ...). The grid tests give it two rows of
    different shapes, so that a layout read as C-contiguous gives other
    positions, or none."""
    base = np.array(values, dtype)
    unaligned = np.frombuffer(b"\0" + base.tobytes(), dtype, count=base.size, offset=1).reshape(base.shape)
    read_only = base.copy()
    read_only.flags.writeable = False
    forms = {
        "contiguous": base,
        "strided": np.repeat(base, 2, axis=0)[::2],
        "unaligned": unaligned,
        "read_only": read_only,
        "big_endian": base.astype(base.dtype.newbyteorder(">")),
        "other_dtype": base.astype(np.float64 if base.dtype.kind == "f" else np.int32),
        "flat": base.reshape(-1),
        "3-D": base.reshape(1, *base.shape),
        "column": base.reshape(-1, 1),
    }
    if base.ndim == 2:
        forms["fortran"] = np.asfortranarray(base)
        forms["odd_row_stride"] = np.concatenate([base, np.zeros((len(base), 2), dtype)], axis=1)[:, :3]  # (40, 8)
        forms["wide"] = np.concatenate([base, base], axis=1)  # (n, 6): strides (48, 8)
        forms["narrow"] = base[:, :2]  # (n, 2) with the strides of an (n, 3) array: (24, 8)
    return forms


def _ids_layouts(ids: list[int]) -> dict[str, np.ndarray]:
    """int64 token ids in every layout of _array_layouts, and a few more."""
    base = np.array(ids, np.int64)
    return {
        **_array_layouts(ids, np.int64),
        "reversed": base[::-1].copy()[::-1],
        "2-D": base.reshape(1, -1),
        "2-D Fortran": np.asfortranarray(np.stack([base, base])),
        "0-D": np.array(ids[0], np.int64),
    }


@pytest.mark.parametrize("layout", list(_ids_layouts([1, 2])))
@pytest.mark.parametrize(
    "prompt",
    [
        (IMAGE_IDS, {"image_grid_thw": [[1, 2, 4]]}),
        (VIDEO_IDS, {"video_grid_thw": [[2, 2, 4]], "second_per_grid_ts": [1.0]}),
    ],
    ids=("images only", "video"),
)
def test_ids_in_every_layout_with_grid_lists(prompt, layout):
    """Grids as lists with ids in every layout: each comes out as the
    checked path says."""
    ids, kwargs = prompt
    _assert_same(QWEN2_5, _ids_layouts(ids)[layout], **kwargs)


TWO_IMAGES = [[1, 2, 4], [1, 4, 2]]  # two tokens each
TWO_IMAGE_IDS = [1, VS, IMG, IMG, VE, VS, IMG, IMG, VE, 2]
TWO_VIDEOS = [[2, 2, 4], [2, 4, 2]]  # four tokens each
TWO_VIDEO_IDS = [1, VS, VID, VID, VID, VID, VE, VS, VID, VID, VID, VID, VE, 2]


@pytest.mark.parametrize("layout", list(_array_layouts(TWO_IMAGES, np.int64)))
def test_image_grid_arrays_in_every_layout(layout):
    """A grid given as an array passes to the kernel when its type, dtype
    and strides are exactly the canonical ones, and is converted otherwise:
    both give what the checked path says."""
    grid = _array_layouts(TWO_IMAGES, np.int64)[layout]
    for ids in (TWO_IMAGE_IDS, np.array(TWO_IMAGE_IDS), _ids_layouts(TWO_IMAGE_IDS)["read_only"]):
        _assert_same(QWEN2_5, ids, image_grid_thw=grid)


@pytest.mark.parametrize("layout", list(_array_layouts(TWO_VIDEOS, np.int64)))
@pytest.mark.parametrize("sp_layout", [None, *_array_layouts([0.5, 2.0], np.float32)])
def test_video_arrays_in_every_layout(layout, sp_layout):
    """The same for videos' grids and second_per_grid_ts, with images beside them."""
    video_grid = _array_layouts(TWO_VIDEOS, np.int64)[layout]
    sp = None if sp_layout is None else _array_layouts([0.5, 2.0], np.float32)[sp_layout]
    ids = TWO_IMAGE_IDS[:-1] + TWO_VIDEO_IDS[1:]
    for image_grid in (np.array(TWO_IMAGES), _array_layouts(TWO_IMAGES, np.int64)[layout]):
        _assert_same(QWEN2_5, ids, image_grid_thw=image_grid, video_grid_thw=video_grid, second_per_grid_ts=sp)
    _assert_same(QWEN2_5, TWO_VIDEO_IDS, video_grid_thw=video_grid, second_per_grid_ts=sp)
