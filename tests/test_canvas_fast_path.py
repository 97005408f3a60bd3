"""MiniCPM-V 4.7's canvas on the fast path (`mrope_tracker.core.canvas`, CANVAS
layout rows, the tracker) against the torch reference and the recorded
vLLM 0.33 vectors; the float32 stretch against torch.linspace; bad input."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import examples
from test_canvas_reference import (
    CONFIG,
    IM_END,
    IM_START,
    NEWLINE,
    RECORDS,
    SL_END,
    SL_START,
    Prompt,
    _hf_rope_index,
    needs_minicpm,
    prompts,
)
from triton_support import require_triton
from vllm_features import TokenBuffer, canvas_features

from mrope_tracker import MRopeConfig, PositionTracker, PromptLayout, reference
from mrope_tracker.core.canvas import canvas_layout, canvas_positions
from mrope_tracker.kernels import layout_codes as C

MODES = {"16x": 4, "4x": 2}


def _config(mode="16x", semantics="reference", **fields) -> MRopeConfig:
    return MRopeConfig.from_hf_config(
        {"model_type": "minicpmv4_7", **CONFIG, "downsample_mode": mode, **fields}, semantics=semantics
    )


def _sizes(prompt: Prompt):
    return {"target_sizes": prompt.sizes[1] or None, "target_sizes_videos": prompt.sizes[2] or None}


def _expected(prompt: Prompt, mode: str):
    positions, delta = reference.canvas_prompt_positions(
        CONFIG, prompt.ids, prompt.kinds, downsample_mode=mode, **_sizes(prompt)
    )
    return positions.numpy(), delta


@st.composite
def edited_prompts(draw, merge: int) -> Prompt:
    """A processor's prompt, sometimes without some of its closing markers
    (</image>, </slice>): the rule's later writes then land on the next marker."""
    prompt = draw(prompts(merge))
    if draw(st.booleans()):
        closing = [k for k, t in enumerate(prompt.ids) if t in (IM_END, SL_END)]
        drop = set(draw(st.lists(st.sampled_from(closing), unique=True))) if closing else set()
        prompt.ids = [t for k, t in enumerate(prompt.ids) if k not in drop]
        prompt.kinds = [t for k, t in enumerate(prompt.kinds) if k not in drop]
    return prompt


# --------------------------------------------------------------------------
# The float32 stretch
# --------------------------------------------------------------------------


def test_stretch_equals_torch_linspace_exhaustively():
    """A CANVAS row's stretch (kernels' canvas_coordinate) equals
    round(torch.linspace(0, extent - 1, size)) for every size 1..119 and extent
    1..479 (the processors' crops and canvases are far smaller): per size, one
    layout of one h' = size, w' = 1 row per extent, read back through the fill."""
    extents = np.arange(1, 480)
    for size in range(1, 120):
        rows = np.zeros((extents.shape[0], C.NUM_COLS), np.int64)
        rows[:, C.COL_TOK_START] = np.arange(extents.shape[0]) * size
        rows[:, C.COL_TOK_LEN] = size
        rows[:, C.COL_KIND] = C.KIND_CANVAS
        rows[:, C.COL_H] = size
        rows[:, C.COL_W] = 1
        scales = np.ones((extents.shape[0], C.NUM_SCALE_COLS), np.float32)
        scales[:, C.SCALE_CANVAS_H] = extents
        layout = PromptLayout.from_rows(None, rows, scales, extents.shape[0] * size)
        got = layout.positions()[1].reshape(extents.shape[0], size)
        expected = torch.stack([torch.linspace(0, e - 1, size) for e in extents.tolist()]).round().to(torch.int64)
        assert np.array_equal(got, expected.numpy()), size
        assert layout.max_position == (extents[-1] - 1 if size > 1 else 0)


# --------------------------------------------------------------------------
# Against the reference
# --------------------------------------------------------------------------


@settings(max_examples=examples(300), deadline=None)
@given(data=st.data(), mode=st.sampled_from(sorted(MODES)))
def test_fast_path_equals_reference(data, mode):
    prompt = data.draw(edited_prompts(MODES[mode]))
    expected, delta = _expected(prompt, mode)
    layout = canvas_layout(_config(mode), prompt.ids, prompt.kinds, **_sizes(prompt))
    assert np.array_equal(layout.positions(), expected)
    assert layout.delta == delta
    # O(crops) rows: the thumbnail's and each slice's three, the frame's own, the text between groups
    crops = len(prompt.sizes[1]) + len(prompt.sizes[2])
    assert layout.num_rows <= 6 * crops + 2 * prompt.ids.count(NEWLINE) + 1 + (crops + 1)
    # any slice of the positions, and the layout through bytes and pickling
    start = data.draw(st.integers(0, len(prompt.ids)))
    end = data.draw(st.integers(start, len(prompt.ids)))
    assert np.array_equal(layout.positions(start, end), expected[:, start:end])
    again = pickle.loads(pickle.dumps(layout))
    assert np.array_equal(again.positions(), expected) and again.config == layout.config


@settings(max_examples=examples(150), deadline=None)
@given(data=st.data(), mode=st.sampled_from(sorted(MODES)))
def test_tracker_equals_reference(data, mode):
    """Admitted with a random prefix already computed, scheduled in random
    chunks, then decoded: the tracker's positions are the reference's, and
    index + delta past the prompt."""
    prompts_ = [data.draw(edited_prompts(MODES[mode])) for _ in range(2)]
    tracker = PositionTracker(_config(mode), max_num_reqs=2, max_num_batched_tokens=64)
    expected = {}
    done = {}
    for k, prompt in enumerate(prompts_):
        positions, delta = _expected(prompt, mode)
        decode = 3
        length = len(prompt.ids)
        index = np.arange(length, length + decode)
        expected[k] = np.concatenate([positions, np.stack([index + delta] * 3)], axis=1)
        done[k] = data.draw(st.integers(0, length - 1))
        tracker.add_request_canvas(k, prompt.ids, prompt.kinds, num_computed_tokens=done[k], **_sizes(prompt))
        assert tracker.mrope_position_delta(k) == delta
    while any(done[k] < expected[k].shape[1] for k in done):
        live = [k for k in done if done[k] < expected[k].shape[1]]
        counts = [data.draw(st.integers(1, min(32, expected[k].shape[1] - done[k]))) for k in live]
        got = tracker.prepare(live, counts).numpy()
        col = 0
        for k, n in zip(live, counts):
            assert np.array_equal(got[:, col : col + n], expected[k][:, done[k] : done[k] + n])
            done[k] += n
            col += n


@pytest.mark.parametrize("record", RECORDS, ids=[f"vllm-{i}" for i in range(len(RECORDS))])
def test_vllm_vectors(record):
    """vLLM 0.33.0's own positions, under the vllm-0.33 preset with the
    record's config flag, through canvas_positions and the tracker."""
    config = _config(record["downsample_mode"], "vllm-0.33", uses_mrope_canvas=record["uses_mrope_canvas"])
    sizes = {
        field: [s for item in record["items"] if item["modality"] == m for s in item["target_sizes"]] or None
        for m, field in (("image", "target_sizes"), ("video", "target_sizes_videos"))
    }
    positions, delta = canvas_positions(config, record["token_ids"], record["mm_token_type_ids"], **sizes)
    assert positions.tolist() == record["positions"]
    assert delta == record["delta"]
    tracker = PositionTracker(config, max_num_reqs=1, max_num_batched_tokens=512)
    tracker.add_request_canvas("r", record["token_ids"], record["mm_token_type_ids"], **sizes)
    length = len(record["token_ids"])
    got = tracker.prepare(["r"], [length]).numpy()
    assert got.tolist() == record["positions"]
    assert tracker.prepare(["r"], [1]).numpy()[:, 0].tolist() == [length + delta] * 3


def test_without_the_flag_every_token_at_its_index():
    """vLLM 0.33 without the config's flag: one text row, delta 0, whatever the crops."""
    prompt = Prompt()
    prompt.frame(1, (8, 8), [(8, 8)] * 2, 2, 4)
    layout = canvas_layout(_config(semantics="vllm-0.33"), prompt.ids, prompt.kinds, **_sizes(prompt))
    assert layout.num_rows == 1 and layout.delta == 0
    assert layout.positions().tolist() == [list(range(len(prompt.ids)))] * 3
    on = canvas_layout(
        _config(semantics="vllm-0.33", uses_mrope_canvas=True), prompt.ids, prompt.kinds, **_sizes(prompt)
    )
    assert on.delta < 0


def test_state_is_o_crops():
    """A long video (64 frames of 16 x 16 tokens, 4 slices each) takes a few
    rows per crop, not per token."""
    prompt = Prompt()
    prompt.text([7])
    for _ in range(64):
        prompt.frame(2, (64, 64), [(32, 32)] * 4, 2, 4)
    layout = canvas_layout(_config(), prompt.ids, prompt.kinds, **_sizes(prompt))
    crops = 64 * 5
    assert len(prompt.ids) > 64 * (256 + 4 * 64)
    assert layout.num_rows <= 4 * crops
    # 80 bytes a row, a few hundred a crop, against 24 a token for dense positions
    assert layout.rows.nbytes + layout.scales.nbytes < 320 * crops < 24 * len(prompt.ids) / 5


# --------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------


def _one_picture():
    prompt = Prompt()
    prompt.text([7])
    prompt.frame(1, (8, 8), [(8, 8)] * 2, 2, 4)
    return {"token_ids": prompt.ids, "mm_token_type_ids": prompt.kinds, "target_sizes": prompt.sizes[1]}


@pytest.mark.parametrize(
    ("edit", "error", "message"),
    [
        (
            lambda a: a.update(target_sizes=a["target_sizes"][:2]),
            ValueError,
            "target_sizes: expected one (h, w) per image crop (3), got 2",
        ),
        (
            lambda a: a.update(target_sizes_videos=[[8, 8]]),
            ValueError,
            "target_sizes_videos: expected one (h, w) per video crop (0), got 1",
        ),
        (
            lambda a: a.update(target_sizes=[[12, 8], [8, 8], [8, 8]]),
            ValueError,
            "expected 3 x 2 = 6 tokens for the thumbnail",
        ),
        (
            lambda a: a.update(target_sizes=[[8, 8], [8, 8], [8, 12]]),
            ValueError,
            "expected 2 x 3 = 6 tokens for slice 1",
        ),
        (lambda a: a.update(target_sizes=[[8, 8, 1]] * 3), ValueError, "target_sizes: expected (n, 2) patch grids"),
        (lambda a: a.update(target_sizes=[[8, 0]] * 3), ValueError, "target_sizes: expected (n, 2) patch grids"),
        (lambda a: a.update(target_sizes=[["a", "b"]] * 3), TypeError, "target_sizes: expected integers"),
        (
            lambda a: a.update(mm_token_type_ids=a["mm_token_type_ids"][:-1]),
            ValueError,
            "mm_token_type_ids: expected one label per token",
        ),
        (
            lambda a: a.update(mm_token_type_ids=[3] * len(a["token_ids"])),
            ValueError,
            "mm_token_type_ids: expected labels 0",
        ),
        (
            lambda a: a.update(token_ids=[7] + a["token_ids"][2:], mm_token_type_ids=[0] + a["mm_token_type_ids"][2:]),
            ValueError,
            "token_ids: expected <image> (900) or <slice> (902) before the crop",
        ),
        (lambda a: a.update(token_ids=[]), ValueError, "token_ids: expected at least one token"),
    ],
)
def test_bad_input_leaves_the_tracker_unchanged(edit, error, message):
    args = _one_picture()
    edit(args)
    tracker = PositionTracker(_config(), max_num_reqs=2, max_num_batched_tokens=64)
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        tracker.add_request_canvas(
            "r",
            args["token_ids"],
            args["mm_token_type_ids"],
            target_sizes=args["target_sizes"],
            target_sizes_videos=args.get("target_sizes_videos"),
        )
    assert len(tracker) == 0 and "r" not in tracker
    good = _one_picture()
    tracker.add_request_canvas("r", good["token_ids"], good["mm_token_type_ids"], target_sizes=good["target_sizes"])
    assert tracker.prompt_len("r") == len(good["token_ids"])


def test_adjacent_crops_are_refused():
    """A crop right after a crop of the other modality has no marker before it
    (transformers would read the last token of the first crop)."""
    ids = [7, IM_START, 1, 1, 1, 1, 2, 2, 2, 2]
    kinds = [0, 0, 1, 1, 1, 1, 2, 2, 2, 2]
    with pytest.raises(ValueError, match=r"before the crop at token_ids\[6:10\], got 1 \(a crop\)"):
        canvas_layout(_config(), ids, kinds, target_sizes=[[8, 8]], target_sizes_videos=[[8, 8]])


def test_missing_marker_ids_and_other_families():
    config = MRopeConfig(family="minicpmv4_7", vision_start_token_id=IM_START, vision_end_token_id=IM_END)
    with pytest.raises(ValueError, match="config.slice_start_token_id: expected the token id"):
        canvas_layout(config, [1, 2], [0, 0])
    # the canvas off (vLLM 0.33 without the flag): the markers are not needed
    off = MRopeConfig(family="minicpmv4_7", semantics="vllm-0.33")
    assert canvas_layout(off, [1, 2], [0, 0]).positions().tolist() == [[0, 1]] * 3
    with pytest.raises(ValueError, match="config: expected a config of a canvas family"):
        canvas_layout(MRopeConfig(family="qwen2_vl"), [1, 2], [0, 0])


def test_hand_made_canvas_rows_are_checked():
    """A CANVAS row with an extent that is not a whole number, or tokens past
    its grid, is refused when a layout is built from its tables."""
    layout = canvas_layout(
        _config(),
        *(lambda a: (a["token_ids"], a["mm_token_type_ids"]))(_one_picture()),
        target_sizes=_one_picture()["target_sizes"],
    )
    rows, scales = layout.rows.copy(), layout.scales.copy()
    grid = int(np.flatnonzero((rows[:, C.COL_KIND] == C.KIND_CANVAS) & (rows[:, C.COL_TOK_LEN] > 1))[0])
    assert np.array_equal(PromptLayout(rows, scales, layout.num_tokens, layout.delta).positions(), layout.positions())
    bad_scales = scales.copy()
    bad_scales[grid, C.SCALE_CANVAS_H] = 2.5
    with pytest.raises(ValueError, match=rf"rows\[{grid}\]: expected finite"):
        PromptLayout(rows, bad_scales, layout.num_tokens, layout.delta)
    bad_rows = rows.copy()
    bad_rows[grid, C.COL_W] = 1
    with pytest.raises(ValueError, match=rf"rows\[{grid}\]: expected a grid row"):
        PromptLayout(bad_rows, scales, layout.num_tokens, layout.delta)


def test_rows_stretch_the_thumbnail_over_the_canvas():
    """The worked example's thumbnail row: a 3 x 3 grid over a 4 x 4 extent."""
    prompt = Prompt()
    prompt.text([7, 8])
    prompt.frame(1, (12, 12), [(8, 8)] * 4, 2, 4)
    layout = canvas_layout(_config(), prompt.ids, prompt.kinds, **_sizes(prompt))
    thumb = int(np.flatnonzero(layout.rows[:, C.COL_TOK_START] == 3)[0])
    row = layout.rows[thumb]
    assert (row[C.COL_KIND], row[C.COL_TOK_LEN], row[C.COL_H], row[C.COL_W]) == (C.KIND_CANVAS, 9, 3, 3)
    assert layout.scales[thumb].tolist() == [4.0, 4.0]
    assert layout.positions(3, 12)[1].tolist() == [2, 2, 2, 4, 4, 4, 5, 5, 5]
    assert SL_START in prompt.ids and IM_START in prompt.ids


def test_grid_entry_points_refuse_a_canvas_config():
    """prompt_positions, the layouts from tokens or ranges, the tracker's
    grid admission and the adapter's layout from features alone (no ids)
    cannot place a canvas: they refuse, naming the canvas entry points; with
    the canvas off (vLLM 0.33, no flag) they give text's positions."""
    from mrope_tracker import prompt_positions
    from mrope_tracker.vllm import layout_from_features

    config = _config()
    tracker = PositionTracker(config, max_num_reqs=1, max_num_batched_tokens=8)
    for call in (
        lambda: prompt_positions(config, [1, 2]),
        lambda: PromptLayout.from_tokens(config, [1, 2]),
        lambda: PromptLayout.from_ranges(config, 2),
        lambda: tracker.add_request("r", [1, 2]),
        lambda: layout_from_features(config, 2, []),
    ):
        with pytest.raises(ValueError, match="config: expected a family of .* use mrope_tracker.canvas_positions"):
            call()
    assert len(tracker) == 0
    off = _config(semantics="vllm-0.33")
    assert prompt_positions(off, [1, 2])[0].tolist() == [[0, 1]] * 3


# --------------------------------------------------------------------------
# The vLLM adapter: vLLM 0.33's features (tgt_sizes / video_tgt_sizes)
# --------------------------------------------------------------------------


def _features(record, with_mask: bool):
    """vLLM-like features of a recorded prompt (tests/vllm_features.py)."""
    return canvas_features(record, (IM_END, SL_END), with_mask)


@pytest.mark.parametrize("ids_form", [list, TokenBuffer])
@pytest.mark.parametrize("record", RECORDS, ids=[f"vllm-{i}" for i in range(len(RECORDS))])
def test_vllm_adapter_on_the_vectors(record, ids_form):
    """get_mrope_input_positions and the tracker's feature admission give vLLM
    0.33.0's recorded positions from the ids and the features alone, the ids
    as vLLM 0.33 passes them (a list) or as 0.34 does (a TokenBuffer: the
    canvas reads its markers from it)."""
    from mrope_tracker.vllm import get_mrope_input_positions

    config = _config(record["downsample_mode"], "vllm-0.33", uses_mrope_canvas=record["uses_mrope_canvas"])
    ids = ids_form(record["token_ids"])
    positions, delta = get_mrope_input_positions(config, ids, _features(record, True))
    assert positions.tolist() == record["positions"] and delta == record["delta"]
    tracker = PositionTracker(config, max_num_reqs=1, max_num_batched_tokens=512)
    done = min(3, len(record["token_ids"]) - 1)
    tracker.add_request_from_features("r", ids, _features(record, False), num_computed_tokens=done)
    assert tracker.prepare(["r"], [len(record["token_ids"]) - done]).numpy().tolist() == [
        row[done:] for row in record["positions"]
    ]


def test_vllm_adapter_bad_features():
    from mrope_tracker.vllm import get_mrope_input_positions

    record = next(r for r in RECORDS if r["uses_mrope_canvas"] and len(r["items"]) > 1)
    config = _config(record["downsample_mode"], "vllm-0.33", uses_mrope_canvas=True)
    features = _features(record, True)
    field = next(iter(features[0].data))
    features[0].data = {"pixel_values": None}
    with pytest.raises(ValueError, match=f"mm_features\\[0\\].data\\['{field}'\\]: a .* feature needs this field"):
        get_mrope_input_positions(config, record["token_ids"], features)
    features = _features(record, True)
    features[0].data[field].data = torch.zeros(4, 3, dtype=torch.int64)
    with pytest.raises(ValueError, match=r"\.data\['.*'\]: expected \(n, 2\) integer patch grids"):
        get_mrope_input_positions(config, record["token_ids"], features)
    features = _features(record, True)
    features[0].mm_position.offset = len(record["token_ids"])
    with pytest.raises(ValueError, match=r"mm_position: expected a range inside the prompt"):
        get_mrope_input_positions(config, record["token_ids"], features)
    features = _features(record, True)
    features[0].data[field].data = features[0].data[field].data[:-1]
    with pytest.raises(ValueError, match=r"target_sizes(_videos)?: expected one \(h, w\) per"):
        get_mrope_input_positions(config, record["token_ids"], features)


# --------------------------------------------------------------------------
# hf.get_rope_index: transformers 5.24's MiniCPMV4_7Model.get_rope_index
# --------------------------------------------------------------------------


def _padded_batch(data, mode: str, with_mask: bool, side: str):
    merge = MODES[mode]
    rows = [data.draw(edited_prompts(merge)) for _ in range(data.draw(st.integers(1, 3)))]
    width = max(len(p.ids) for p in rows) + data.draw(st.integers(0, 2))
    if not with_mask:
        rows, width = [rows[0]] * len(rows), len(rows[0].ids)
    ids = np.zeros((len(rows), width), np.int64)
    kinds = np.zeros((len(rows), width), np.int64)
    mask = np.zeros((len(rows), width), np.int64)
    expected = np.zeros((3, len(rows), width), np.int64)
    deltas = []
    for b, p in enumerate(rows):
        pad = width - len(p.ids)
        span = slice(pad, width) if side == "left" else slice(0, len(p.ids))
        ids[b, span], kinds[b, span], mask[b, span] = p.ids, p.kinds, 1
        positions, delta = _expected(p, mode)
        expected[:, b, span] = positions
        deltas.append([delta])
    sizes = {
        "target_sizes": [s for p in rows for s in p.sizes[1]] or None,
        "target_sizes_videos": [s for p in rows for s in p.sizes[2]] or None,
    }
    return ids, kinds, mask if with_mask else None, sizes, expected, deltas


@settings(max_examples=examples(150), deadline=None)
@given(
    data=st.data(),
    mode=st.sampled_from(sorted(MODES)),
    with_mask=st.booleans(),
    side=st.sampled_from(["left", "right"]),
)
def test_hf_get_rope_index_equals_reference(data, mode, with_mask, side):
    """hf.get_rope_index on a padded batch: each row the reference's positions
    over its kept tokens, padding at 0, deltas against the kept tokens."""
    from mrope_tracker import hf

    ids, kinds, mask, sizes, expected, deltas = _padded_batch(data, mode, with_mask, side)
    config = _config(semantics="transformers-5")
    got, got_deltas = hf.get_rope_index(
        config, torch.from_numpy(ids), attention_mask=mask, mm_token_type_ids=kinds, downsample_mode=mode, **sizes
    )
    assert got.dtype == torch.int64 and np.array_equal(got.numpy(), expected)
    assert got_deltas.tolist() == deltas


def test_hf_get_rope_index_bad_input():
    from mrope_tracker import hf

    prompt = Prompt()
    prompt.text([7])
    prompt.frame(1, (8, 8), [(8, 8)] * 2, 2, 4)
    ids, kinds = torch.tensor([prompt.ids]), torch.tensor([prompt.kinds])
    config = _config(semantics="transformers-5")
    with pytest.raises(
        ValueError, match=r"target_sizes: expected one \(h, w\) per image crop in the batch \(3\), got 4"
    ):
        hf.get_rope_index(config, ids, mm_token_type_ids=kinds, target_sizes=[[8, 8]] * 4)
    with pytest.raises(ValueError, match=r"input_ids row 0 \(sizes counted from its first crop\): target_sizes"):
        hf.get_rope_index(config, ids, mm_token_type_ids=kinds, target_sizes=[[8, 8]] * 2)
    with pytest.raises(ValueError, match="image_grid_thw, video_grid_thw: expected None for minicpmv4_7"):
        hf.get_rope_index(config, ids, [[1, 2, 2]], mm_token_type_ids=kinds, target_sizes=[[8, 8]] * 3)
    with pytest.raises(ValueError, match="downsample_mode: expected one of 16x, 4x"):
        hf.get_rope_index(config, ids, mm_token_type_ids=kinds, target_sizes=[[8, 8]] * 3, downsample_mode="8x")
    with pytest.raises(ValueError, match="target_sizes: expected None for qwen2_vl"):
        hf.get_rope_index(MRopeConfig(family="qwen2_vl"), ids, target_sizes=[[8, 8]])


@needs_minicpm
@settings(max_examples=examples(150), deadline=None)
@given(data=st.data(), mode=st.sampled_from(sorted(MODES)), with_mask=st.booleans())
def test_hf_get_rope_index_equals_transformers(data, mode, with_mask):
    """hf.get_rope_index equals transformers 5.24's own on left-padded batches
    (the processor's padding side), where transformers 5.24 is installed."""
    from mrope_tracker import hf

    ids, kinds, mask, sizes, _, _ = _padded_batch(data, mode, with_mask, "left")
    expected, expected_deltas = _hf_rope_index(
        ids.tolist(),
        kinds.tolist(),
        None if mask is None else mask.tolist(),
        sizes["target_sizes"],
        sizes["target_sizes_videos"],
        mode,
    )
    got, got_deltas = hf.get_rope_index(
        _config(semantics="transformers-5"),
        torch.from_numpy(ids),
        attention_mask=mask,
        mm_token_type_ids=kinds,
        downsample_mode=mode,
        **sizes,
    )
    assert torch.equal(got, expected)
    assert torch.equal(got_deltas, expected_deltas)


def test_compare_names_the_canvas_flag():
    """`compare` samples MiniCPM-V 4.7 prompts: without the config's flag,
    vLLM 0.33 differs from the transformers presets on every prompt with a
    picture, explained by D12 (canvas_flag); with the flag, nowhere."""
    from mrope_tracker.hf.compare import compare

    result = compare("minicpmv4_7", presets=("vllm-0.33", "transformers-5"), num_prompts=12, seed=1)
    (pair,) = result["pairs"]
    assert pair["differ"] > 0 and pair["divergences"] == {"D12": pair["differ"]}
    assert result["refused"] == {"vllm-0.33": 0, "transformers-5": 0}
    flagged = {"model_type": "minicpmv4_7", **CONFIG, "uses_mrope_canvas": True}
    result = compare(flagged, presets=("vllm-0.33", "transformers-5"), num_prompts=12, seed=1)
    assert result["pairs"][0]["differ"] == 0


def test_sampled_canvas_prompts_match_the_reference():
    """The compare sample's prompts are well formed: the fast path equals the reference on them."""
    from mrope_tracker.hf.sample import sample_prompts

    config = _config()
    for prompt in sample_prompts(config, 10, seed=3):
        got = canvas_positions(config, prompt.token_ids, prompt.mm_token_type_ids, **prompt.kwargs())
        expected = reference.canvas_prompt_positions(
            CONFIG, prompt.token_ids, prompt.mm_token_type_ids, downsample_mode="16x", **prompt.kwargs()
        )
        assert np.array_equal(got[0], expected[0].numpy()) and got[1] == expected[1]


# --------------------------------------------------------------------------
# RopeState (Model Runner V2): CANVAS rows on the device
# --------------------------------------------------------------------------

ROPE_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _rope_state(n: int, **kwargs):
    require_triton()
    from mrope_tracker.device.rope_state import RopeState

    return RopeState(3, 4, n + 8, n + 64, ROPE_DEVICE, **kwargs)


def _step(state, slot: int, start: int, count: int, prefill_len: int):
    """One step of `count` tokens of slot `slot` from token `start`; its positions."""
    tensors = [
        torch.tensor(v, dtype=d, device=ROPE_DEVICE)
        for v, d in (
            ([slot], torch.int64),
            ([0, count], torch.int32),
            ([prefill_len if k == slot else 0 for k in range(4)], torch.int32),
            ([start if k == slot else 0 for k in range(4)], torch.int32),
        )
    ]
    state.prepare_positions(*tensors)
    return state.get_positions(count).cpu().numpy().copy()  # (a view of the buffer the next step rewrites)


# every fifth vector; the three longest (most Triton-interpreter steps) under -m slow
_LONGEST = (0, 25, 40)


@pytest.mark.parametrize(
    "index",
    [pytest.param(i, marks=pytest.mark.slow) if i in _LONGEST else i for i in range(0, len(RECORDS), 5)],
    ids=[f"vllm-{i}" for i in range(0, len(RECORDS), 5)],
)
def test_rope_state_on_the_vectors(index):
    """init_prefill_positions from vLLM's features, then the prefill in two
    steps and a decode token: vLLM 0.33.0's positions from the Triton step."""
    record = RECORDS[index]
    config = _config(record["downsample_mode"], "vllm-0.33", uses_mrope_canvas=record["uses_mrope_canvas"])
    n = len(record["token_ids"])
    state = _rope_state(n, block_size=16)
    state.init_prefill_positions(2, config, record["token_ids"], _features(record, True))
    state.apply_staged_writes()
    half = n // 2
    got = np.concatenate([_step(state, 2, 0, half, n), _step(state, 2, half, n - half, n)], axis=1)
    assert got.tolist() == record["positions"]
    assert state.read_prefill_positions(2, n).cpu().tolist() == record["positions"]
    assert _step(state, 2, n + 3, 1, n)[:, 0].tolist() == [n + 3 + record["delta"]] * 3


@settings(max_examples=examples(20), deadline=None)
@given(data=st.data(), mode=st.sampled_from(sorted(MODES)))
def test_rope_state_equals_reference(data, mode):
    """A random prompt's canvas layout admitted to RopeState (stretched
    thumbnails: their coordinate tables) gives the reference's positions."""
    prompt = data.draw(edited_prompts(MODES[mode]))
    expected, _ = _expected(prompt, mode)
    layout = canvas_layout(_config(mode), prompt.ids, prompt.kinds, **_sizes(prompt))
    n = len(prompt.ids)
    state = _rope_state(n, block_size=16, config=_config(mode))
    state.init_prefill_layout(1, layout)
    state.apply_staged_writes()
    assert np.array_equal(state.read_prefill_positions(1, n).cpu().numpy(), expected)
    assert np.array_equal(_step(state, 1, 0, n, n), expected)
