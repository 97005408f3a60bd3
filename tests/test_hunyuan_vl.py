"""HunYuan-VL: four position axes (XD-RoPE) through every entry point.

Random prompts laid out as its processor lays them out (an image is
``<start> I*(h'(w' + 1) + 2) <end>``) go through the token form,
`PromptLayout` (tokens and ranges), the vLLM adapter and the tracker, and
must equal the torch reference; `hf.get_rope_index` must equal transformers
5.24's own on random padded batches (skipped where 5.24 is not installed:
the CI's transformers-5 environment runs them). Bad input is refused naming
the argument.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import examples
from triton_support import require_triton
from vllm_features import feature

from mrope_tracker import MRopeConfig, PositionTracker, PromptLayout, next_positions, prompt_positions, reference
from mrope_tracker.vllm import get_mrope_input_positions

START, END = 120118, 120119  # <image_start>, <image_end>: text
TEXT_IDS = range(100, 200)
CONFIG = MRopeConfig(family="hunyuan_vl")
IMAGE = CONFIG.image_token_id


def image_tokens(h: int, w: int) -> int:
    """Image tokens of a (1, h, w) grid (merge 2): h' rows of w' + 1, and two more."""
    return (h // 2) * (w // 2 + 1) + 2


@st.composite
def prompts(draw, max_items: int = 4, max_text: int = 5):
    """(token ids, image grids, image ranges) of a random HunYuan-VL prompt."""
    ids: list[int] = []
    grids, ranges = [], []
    text = st.lists(st.sampled_from(TEXT_IDS), max_size=max_text)
    ids += draw(text)
    for _ in range(draw(st.integers(0, max_items))):
        grid = (1, 2 * draw(st.integers(1, 6)), 2 * draw(st.integers(1, 6)))
        n = image_tokens(grid[1], grid[2])
        ids.append(START)
        ranges.append((len(ids), n))
        ids += [IMAGE] * n
        ids.append(END)
        grids.append(grid)
        ids += draw(text)
    if not ids:
        ids.append(draw(st.sampled_from(TEXT_IDS)))
    return ids, grids, ranges


def _kwargs(grids) -> dict:
    return {"image_grid_thw": np.array(grids, np.int64)} if grids else {}


def _features(grids, ranges) -> list:
    return [feature("image", offset, length, image_grid_thw=g) for g, (offset, length) in zip(grids, ranges)]


def test_worked_example():
    """docs/semantics.md's example: text, one 4 x 4 image (LLM grid 2 x 2), text."""
    ids = [7, START, *[IMAGE] * image_tokens(4, 4), END, 8]
    positions, delta = prompt_positions(CONFIG, ids, image_grid_thw=[[1, 4, 4]])
    index = list(range(12))
    expected = [
        index,
        [0, 1, 2, 0, 1, 2, 0, 1, 2, 9, 10, 11],
        [0, 1, 2, 0, 0, 0, 1, 1, 1, 9, 10, 11],
        [0, 1, 2, 0, 0, 0, 0, 0, 0, 9, 10, 11],
    ]
    np.testing.assert_array_equal(positions, expected)
    assert delta == 0
    ref, ref_delta = reference.prompt_positions(CONFIG, ids, image_grid_thw=[[1, 4, 4]])
    np.testing.assert_array_equal(ref.numpy(), expected)
    assert ref_delta == 0


def test_second_image_ordinal():
    """A request's images are numbered from 0 on the fourth axis."""
    ids = [START, *[IMAGE] * image_tokens(2, 2), END, START, *[IMAGE] * image_tokens(2, 2), END]
    positions, _ = prompt_positions(CONFIG, ids, image_grid_thw=[[1, 2, 2], [1, 2, 2]])
    assert positions[3, 2:4].tolist() == [0, 0]
    assert positions[3, 8:10].tolist() == [1, 1]
    assert positions.shape == (4, len(ids))


@settings(max_examples=examples(150, minimum=30))
@given(prompt=prompts())
def test_every_entry_point_equals_the_reference(prompt):
    """Token form, from_tokens, from_ranges (checked and not), slices, the vLLM adapter."""
    ids, grids, ranges = prompt
    expected, delta = reference.prompt_positions(CONFIG, ids, **_kwargs(grids))
    expected = expected.numpy()
    assert expected.shape == (4, len(ids))
    for form in (ids, np.array(ids, np.int64), torch.tensor(ids)):
        positions, got = prompt_positions(CONFIG, form, **_kwargs(grids))
        np.testing.assert_array_equal(positions, expected)
        assert got == delta
    range_kw = {"image_ranges": ranges} if ranges else {}
    layouts = (
        PromptLayout.from_tokens(CONFIG, ids, **_kwargs(grids)),
        PromptLayout.from_ranges(CONFIG, len(ids), **range_kw, **_kwargs(grids)),
        PromptLayout.from_ranges(CONFIG, len(ids), token_ids=ids, **range_kw, **_kwargs(grids)),
    )
    for layout in layouts:
        assert layout.num_dims == 4
        np.testing.assert_array_equal(layout.positions(), expected)
        assert layout.delta == delta
        mid = len(ids) // 3
        np.testing.assert_array_equal(layout.positions(mid, len(ids) - 1), expected[:, mid : len(ids) - 1])
        out = np.full((4, len(ids) + 2), -7, np.int64)
        layout.write_positions(out, 2, 0, len(ids))
        np.testing.assert_array_equal(out[:, 2:], expected)
    np.testing.assert_array_equal(layouts[0].rows, layouts[1].rows)
    restored = PromptLayout.from_bytes(layouts[0].to_bytes())
    np.testing.assert_array_equal(restored.positions(), expected)
    adapted, adapted_delta = get_mrope_input_positions(CONFIG, ids, _features(grids, ranges))
    np.testing.assert_array_equal(adapted.numpy(), expected)
    assert adapted_delta == delta


@settings(max_examples=examples(60, minimum=15))
@given(prompt=prompts(), data=st.data())
def test_tracker_chunks_and_decode(prompt, data):
    """The tracker's [4, max_num_batched_tokens + 1] buffer: any chunking of the
    prompt, then decode steps at index + delta on all four axes."""
    ids, grids, ranges = prompt
    expected, delta = reference.prompt_positions(CONFIG, ids, **_kwargs(grids))
    decode = 3
    expected = np.concatenate(
        [expected.numpy(), reference.next_positions(delta, len(ids), decode, num_dims=4).numpy()], axis=1
    )
    tracker = PositionTracker(CONFIG, max_num_reqs=2, max_num_batched_tokens=64)
    assert tuple(tracker.positions.shape) == (4, 65)
    how = data.draw(st.sampled_from(["tokens", "ranges", "features"]))
    if how == "tokens":
        tracker.add_request("a", ids, **_kwargs(grids))
    elif how == "ranges":
        tracker.add_request_from_ranges("a", len(ids), **({"image_ranges": ranges} if ranges else {}), **_kwargs(grids))
    else:
        tracker.add_request_from_features("a", ids, _features(grids, ranges))
    assert tracker.mrope_position_delta("a") == delta
    done = 0
    total = len(ids) + decode
    while done < total:
        count = 1 if done >= len(ids) else data.draw(st.integers(1, min(64, len(ids) - done)))
        step = tracker.prepare(["a"], [count])
        assert tuple(step.shape) == (4, count)
        np.testing.assert_array_equal(step.numpy(), expected[:, done : done + count])
        done += count


def test_next_positions_writes_every_axis():
    out = np.zeros((4, 5), np.int64)
    next_positions(out, 1, 3, 10, 4)
    np.testing.assert_array_equal(out[:, 1:], np.tile(np.arange(13, 17), (4, 1)))


# --------------------------------------------------------------------------
# Configs and bad input
# --------------------------------------------------------------------------


def _published(**text) -> dict:
    """A config in the form transformers 5.24's HunYuanVLConfig writes."""
    return {
        "model_type": "hunyuan_vl",
        "image_token_id": 120120,
        "im_start_id": 120118,
        "im_end_id": 120119,
        "vision_config": {"spatial_merge_size": 2},
        "text_config": {"rope_parameters": {"rope_type": "xdrope", "mrope_section": [16, 16, 16, 16]}, **text},
    }


def test_from_hf_config_reads_ids_and_axes():
    config = MRopeConfig.from_hf_config(_published())
    assert (config.family, config.num_dims, config.image_token_id, config.spatial_merge_size) == (
        "hunyuan_vl",
        4,
        120120,
        2,
    )
    # the flat legacy form: the sections at the top level, as xdrope_section in rope_scaling
    flat = {
        "model_type": "hunyuan_vl",
        "image_token_id": 120120,
        "im_start_id": 120118,
        "im_end_id": 120119,
        "vision_config": {"spatial_merge_size": 2},
        "rope_scaling": {"type": "xdrope", "xdrope_section": [16, 16, 16, 16]},
    }
    assert MRopeConfig.from_hf_config(flat).num_dims == 4


def test_three_axis_sections_are_refused():
    config = _published()
    config["text_config"]["rope_parameters"]["mrope_section"] = [16, 24, 24]
    with pytest.raises(ValueError, match=r"config.text_config.rope_parameters.mrope_section: expected 4 sections"):
        MRopeConfig.from_hf_config(config)
    flat = {"model_type": "hunyuan_vl", "rope_scaling": {"xdrope_section": [32, 32]}}
    with pytest.raises(ValueError, match=r"config.rope_scaling.xdrope_section: expected 4 sections .*got \[32, 32\]"):
        MRopeConfig.from_hf_config(flat)


def test_three_axis_families_keep_three_rows():
    assert MRopeConfig(family="qwen2_vl").num_dims == 3
    positions, _ = prompt_positions(MRopeConfig(family="qwen2_vl"), [1, 2, 3])
    assert positions.shape == (3, 3)


@pytest.mark.parametrize(
    ("ids", "grids", "match"),
    [
        pytest.param([START, *[IMAGE] * 5, END], [[1, 4, 2]], r"expects 6 image tokens .* found 5", id="short"),
        pytest.param(  # h'(w' + 1) tokens without the two extra ones (transformers accepts them; the model cannot)
            [START, *[IMAGE] * 4, END], [[1, 4, 2]], r"image_grid_thw\[0\] = \(1, 4, 2\) expects 6", id="bare_grid"
        ),
        pytest.param([START, *[IMAGE] * 5], [[1, 4, 2]], r"cut off", id="cut_off"),
        pytest.param(
            [START, *[IMAGE] * 8, END], [[1, 2, 2], [1, 2, 2]], r"run token_ids\[1:9\] holds 8", id="adjacent_images"
        ),
        pytest.param([START, *[IMAGE] * 4, END], [[1, 2, 2], [1, 2, 2]], r"image_grid_thw", id="missing_image"),
        pytest.param([1, 2], [[1, 3, 2]], r"spatial_merge_size", id="odd_grid"),
    ],
)
def test_bad_prompts_are_refused(ids, grids, match):
    with pytest.raises(ValueError, match=match):
        prompt_positions(CONFIG, ids, image_grid_thw=grids)
    with pytest.raises(ValueError):
        reference.prompt_positions(CONFIG, ids, image_grid_thw=grids)
    with pytest.raises(ValueError):
        PromptLayout.from_tokens(CONFIG, ids, image_grid_thw=grids)


def test_videos_and_bad_ranges_are_refused():
    with pytest.raises(ValueError, match="video_grid_thw"):
        prompt_positions(CONFIG, [1, 2, 3], video_grid_thw=[[2, 2, 2]])
    with pytest.raises(ValueError, match=r"image_ranges\[0\]: expected length 4"):
        PromptLayout.from_ranges(CONFIG, 10, image_ranges=[(1, 3)], image_grid_thw=[[1, 2, 2]])


def test_write_positions_needs_four_rows():
    layout = PromptLayout.from_tokens(CONFIG, [1, 2, 3])
    with pytest.raises(TypeError, match=r"out: expected 4 rows"):
        layout.write_positions(np.zeros((3, 3), np.int64), 0, 0, 3)


# --------------------------------------------------------------------------
# transformers 5.24's own get_rope_index
# --------------------------------------------------------------------------

_HAS_HUNYUAN = importlib.util.find_spec("transformers") is not None and (
    importlib.util.find_spec("transformers.models.hunyuan_vl") is not None
)
needs_hunyuan = pytest.mark.skipif(not _HAS_HUNYUAN, reason="needs transformers 5.24 (HunYuanVLModel)")


@st.composite
def padded_batches(draw):
    """(ids (B, L), attention_mask, grids in batch order) with left or right padding."""
    rows = draw(st.lists(prompts(max_items=3), min_size=1, max_size=4))
    width = max(len(ids) for ids, _, _ in rows) + draw(st.integers(0, 3))
    left = draw(st.booleans())
    ids = np.zeros((len(rows), width), np.int64)
    mask = np.zeros((len(rows), width), np.int64)
    grids = []
    for b, (row, row_grids, _) in enumerate(rows):
        lo = width - len(row) if left else 0
        ids[b, lo : lo + len(row)] = row
        mask[b, lo : lo + len(row)] = 1
        grids += row_grids
    return ids, mask, grids


@needs_hunyuan
@settings(max_examples=examples(80, minimum=20), deadline=None)
@given(batch=padded_batches(), with_mask=st.booleans())
def test_drop_in_equals_transformers(batch, with_mask):
    """hf.get_rope_index == transformers 5.24's HunYuanVLModel.get_rope_index, padding
    and the fourth axis's batch-wide image numbering included."""
    from mrope_tracker import hf
    from mrope_tracker.hf import native

    ids, mask, grids = batch
    mask = mask if with_mask else None
    if mask is None:
        ids = np.where(ids == 0, 5, ids)  # no mask: every token is kept
    grid = np.array(grids, np.int64).reshape(-1, 3) if grids else None
    expected = native.rope_index(CONFIG, ids, grid, attention_mask=mask)
    got = hf.get_rope_index(CONFIG, ids, grid, attention_mask=mask, semantics="reference", convention="transformers-5")
    assert got[0].shape == expected[0].shape == (4, *ids.shape)
    assert got[0].dtype == expected[0].dtype
    torch.testing.assert_close(got[0], expected[0], rtol=0, atol=0)
    torch.testing.assert_close(got[1], expected[1], rtol=0, atol=0)


@needs_hunyuan
def test_batch_numbering_quirk():
    """transformers numbers images across the batch: row 1's only image is image 1
    on the fourth axis, so its positions depend on row 0 (the per-request API says 0)."""
    from mrope_tracker import hf

    row = [START, *[IMAGE] * image_tokens(2, 2), END]
    ids = np.array([row, row], np.int64)
    positions, deltas = hf.get_rope_index(CONFIG, ids, [[1, 2, 2], [1, 2, 2]], convention="transformers-5")
    assert positions[3, 0, 2].item() == 0 and positions[3, 1, 2].item() == 1
    single, _ = prompt_positions(CONFIG, row, image_grid_thw=[[1, 2, 2]])
    assert single[3, 2] == 0
    assert deltas.tolist() == [[0], [0]]


@needs_hunyuan
def test_patch_takes_transformers_signature():
    """hf.patch on a module with HunYuanVLModel's get_rope_index: positional and keyword
    calls, as its compute_3d_position_ids and generation make them, give its own result."""
    import json

    from transformers.models.hunyuan_vl import modeling_hunyuan_vl

    from mrope_tracker.hf import mm_token_type_ids, native, patch

    class Module:
        get_rope_index = modeling_hunyuan_vl.HunYuanVLModel.get_rope_index
        get_vision_position_ids = modeling_hunyuan_vl.HunYuanVLModel.get_vision_position_ids

    module = Module()
    module.config = native._stand_in(json.dumps(native.config_dict(CONFIG), sort_keys=True))[1].config
    row = [1, START, *[IMAGE] * image_tokens(4, 4), END, 5]
    ids = torch.tensor([row, [0, 0, *row[:-2]]])
    mask = torch.tensor([[1] * len(row), [0, 0] + [1] * (len(row) - 2)])
    grids = torch.tensor([[1, 4, 4], [1, 4, 4]])
    types = mm_token_type_ids(CONFIG, ids)
    expected = module.get_rope_index(ids, mm_token_type_ids=types, image_grid_thw=grids, attention_mask=mask)
    with patch(module) as patched:
        assert patched.modules == [""]
        for got in (
            module.get_rope_index(ids, mm_token_type_ids=types, image_grid_thw=grids, attention_mask=mask),
            module.get_rope_index(ids, types, grids, mask),
        ):
            torch.testing.assert_close(got[0], expected[0], rtol=0, atol=0)
            torch.testing.assert_close(got[1], expected[1], rtol=0, atol=0)


@pytest.mark.parametrize("copy_mode", ["rows", "span"])
def test_staged_copies_move_four_rows(copy_mode):
    """Through the host staging ring (as on CUDA), both copy modes move all four rows."""
    ids = [7, START, *[IMAGE] * image_tokens(4, 6), END, 8, START, *[IMAGE] * image_tokens(2, 2), END]
    grids = [[1, 4, 6], [1, 2, 2]]
    direct = PositionTracker(CONFIG, max_num_reqs=2, max_num_batched_tokens=32)
    staged = PositionTracker(CONFIG, max_num_reqs=2, max_num_batched_tokens=32, staging=True, num_staging_buffers=2)
    staged.buffers.copy_mode = copy_mode
    for tracker in (direct, staged):
        tracker.add_request("a", ids, image_grid_thw=grids)
        tracker.add_request("b", [1, 2, 3])
    for counts in ([5, 3], [9, 1], [10, 1], [1, 1]):
        want = direct.prepare(["a", "b"], counts).numpy().copy()
        np.testing.assert_array_equal(staged.prepare(["a", "b"], counts).numpy(), want)
        assert want.shape == (4, sum(counts))
    width = staged.positions.shape[1]
    assert staged.buffers.copy_nbytes(5) == (4 * 5 if copy_mode == "rows" else 3 * width + 5) * 8


# --------------------------------------------------------------------------
# RopeState (Model Runner V2): a [4, max_num_tokens + 1] buffer
# --------------------------------------------------------------------------


def _rope_state(num_dims, config=CONFIG):
    require_triton()
    from mrope_tracker.device.rope_state import RopeState

    device = "cuda" if torch.cuda.is_available() else "cpu"
    return RopeState(num_dims, 3, 48, 256, device, config=config, block_size=16), device


@settings(max_examples=examples(10, minimum=3))
@given(prompt=prompts(max_items=3, max_text=3), data=st.data())
def test_rope_state_four_rows(prompt, data):
    """RopeState(4, ...) from vLLM's features: chunked prefill steps, a read, and decode
    tokens at index + delta on all four rows, as the reference."""
    ids, grids, ranges = prompt
    state, device = _rope_state(4)
    assert tuple(state.positions.shape) == (4, 49)
    expected, delta = reference.prompt_positions(CONFIG, ids, **_kwargs(grids))
    expected = np.concatenate(
        [expected.numpy(), reference.next_positions(delta, len(ids), 2, num_dims=4).numpy()], axis=1
    )
    state.init_prefill_positions(1, CONFIG, ids, _features(grids, ranges))
    np.testing.assert_array_equal(state.read_prefill_positions(1, len(ids)).cpu().numpy(), expected[:, : len(ids)])
    n = len(ids)

    def tensor(values, dtype):
        return torch.tensor(values, dtype=dtype, device=device)

    done = 0
    while done < n + 2:
        count = 1 if done >= n else data.draw(st.integers(1, min(48, n - done)))
        state.prepare_positions(
            tensor([1], torch.int64),
            tensor([0, count], torch.int32),
            tensor([0, n, 0], torch.int32),
            tensor([0, done, 0], torch.int32),
        )
        np.testing.assert_array_equal(state.get_positions(count).cpu().numpy(), expected[:, done : done + count])
        done += count


def test_rope_state_follows_the_family():
    """num_dims must be the family's; a layout of another number of rows is refused."""
    with pytest.raises(ValueError, match=r"num_dims: expected hunyuan_vl's 4 position rows"):
        _rope_state(3)
    with pytest.raises(ValueError, match=r"num_dims: expected 3 \(T, H, W\) or 4"):
        _rope_state(5, config=None)
    three, _ = _rope_state(3, config=None)
    layout = PromptLayout.from_tokens(CONFIG, [START, *[IMAGE] * image_tokens(2, 2), END], image_grid_thw=[[1, 2, 2]])
    with pytest.raises(ValueError, match=r"layout: expected positions of this state's 3 rows"):
        three.init_prefill_layout(0, layout)
    four, _ = _rope_state(4, config=None)
    with pytest.raises(ValueError, match=r"layout: expected positions of this state's 4 rows"):
        four.init_prefill_layout(0, PromptLayout.from_tokens(MRopeConfig(family="qwen2_vl"), [1, 2]))
    four.init_prefill_layout(0, layout)
    np.testing.assert_array_equal(four.read_prefill_positions(0, layout.num_tokens).cpu().numpy(), layout.positions())
