"""EVS video pruning: the reference rule, the layout rows, the tracker, and vLLM 0.33's own results.

tests/data/vllm-0.33.0-evs.jsonl holds 80 prompts recorded from vLLM 0.33.0's
EVS path (its processor, pruning and Model Runner V2's chunked recompute), with
their retention masks; `chunk_independent` says whether vLLM's result held for
every chunk schedule tried (docs/semantics.md, "EVS").
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import examples

from mrope_tracker import MRopeConfig, PositionTracker, reference
from mrope_tracker.core.layout import PromptLayout
from mrope_tracker.evs import PrunedPrompt, delete_tokens

VECTORS = os.path.join(os.path.dirname(__file__), "data", "vllm-0.33.0-evs.jsonl")
with open(VECTORS) as f:
    RECORDS = [json.loads(line) for line in f]
VS, VE, VIDEO, IMAGE = 151652, 151653, 151656, 151655


def _config(record, semantics="reference"):
    return MRopeConfig.from_hf_config(record["config"], semantics=semantics)


def _prompt(record, semantics="reference"):
    return PrunedPrompt(
        _config(record, semantics),
        record["token_ids"],
        video_grid_thw=record["video_grid_thw"],
        second_per_grid_ts=record.get("second_per_grid_ts"),
    )


def _reference(record):
    return reference.pruned_prompt_positions(
        _config(record),
        record["token_ids"],
        video_grid_thw=record["video_grid_thw"],
        retention_masks=record["retention_masks"],
        second_per_grid_ts=record.get("second_per_grid_ts"),
    )


# ---------------------------------------------------------------- the rule itself


def test_reference_rule_by_hand():
    """Qwen2.5-VL, one video of 2 frames of 2x2 merged tokens, tokens_per_second 2,
    second_per_grid_ts 1: unpruned the video sits at s=3 with T = 3 + 2f, H/W the
    cell; text resumes at 3 + 2 + 1 = 6. The mask keeps frame 0 and cell (1, 0) of
    frame 1: those tokens keep their positions, the text after keeps 6, 7."""
    config = MRopeConfig(family="qwen2_5_vl", spatial_merge_size=2, tokens_per_second=2)
    ids = [1, 2, VS, VIDEO, VIDEO, VIDEO, VIDEO, VIDEO, VE, 9]
    mask = [1, 1, 1, 1, 0, 0, 1, 0]
    positions, delta = reference.pruned_prompt_positions(
        config, ids, video_grid_thw=[[2, 4, 4]], retention_masks=[mask], second_per_grid_ts=[1.0]
    )
    expected = [
        [0, 1, 2, 3, 3, 3, 3, 5, 6, 7],
        [0, 1, 2, 3, 3, 4, 4, 4, 6, 7],
        [0, 1, 2, 3, 4, 3, 4, 3, 6, 7],
    ]
    assert positions.tolist() == expected
    assert delta == 7 + 1 - len(ids)


def test_reference_rule_qwen3_vl_by_hand():
    """Qwen3-VL, 2 frames of 1x2 merged tokens: unpruned, per frame `<t>` `vs`
    2 pads `ve`. The mask keeps frame 0 and frame 1's second cell: the span is
    t0 vs p p ve t1 vs p ve, each token at its unpruned position (frame 1's
    first cell is gone, so its second sits where it sat, one past the gap)."""
    config = MRopeConfig(family="qwen3_vl", spatial_merge_size=2)
    ids = [5, VS, 7, VS, VIDEO, VIDEO, VIDEO, VE, 8, VS, VE, VE]
    positions, delta = reference.pruned_prompt_positions(
        config, ids, video_grid_thw=[[2, 2, 4]], retention_masks=[[1, 1, 0, 1]]
    )
    # unpruned: 5@0 VS@1 7@2 VS@3 [4,4,4][4,4,5] VE@6 8@7 VS@8 [9,9,9][9,9,10] VE@11 VE@12
    expected_t = [0, 1, 2, 3, 4, 4, 6, 7, 8, 9, 11, 12]
    expected_w = [0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12]
    assert positions[0].tolist() == expected_t
    assert positions[2].tolist() == expected_w
    assert delta == 12 + 1 - len(ids)


# ---------------------------------------------------------------- recorded vectors


@pytest.mark.parametrize("index", range(len(RECORDS)))
def test_vectors_fast_path_equals_reference(index):
    record = RECORDS[index]
    positions, delta = _reference(record)
    layout = _prompt(record).layout(record["retention_masks"])
    np.testing.assert_array_equal(layout.positions(), positions.numpy())
    assert layout.delta == delta


@pytest.mark.parametrize("index", range(len(RECORDS)))
def test_vectors_vllm_preset(index):
    """Under vllm-0.33: vLLM's own result where it does not depend on chunking
    (one Qwen2.5-VL video), else our rule (here equal to the reference's)."""
    record = RECORDS[index]
    layout = _prompt(record, "vllm-0.33").layout(record["retention_masks"])
    if record["chunk_independent"]:
        np.testing.assert_array_equal(layout.positions(), np.array(record["positions"]))
        assert layout.delta == record["delta"]
    else:
        positions, delta = _reference(record)
        np.testing.assert_array_equal(layout.positions(), positions.numpy())
        assert layout.delta == delta


def test_vllm_independent_results_are_exactly_the_one_video_qwen2_5_prompts():
    independent = {i for i, r in enumerate(RECORDS) if r["chunk_independent"]}
    one_video = {i for i, r in enumerate(RECORDS) if r["family"] == "qwen2_5_vl" and len(r["video_grid_thw"]) == 1}
    assert independent == one_video and len(independent) == 31


# ---------------------------------------------------------------- random prompts


@st.composite
def pruned_prompts(draw):
    """(config, pruned token ids, grids, masks, second_per_grid_ts, image grids)."""
    family = draw(st.sampled_from(("qwen2_5_vl", "qwen3_vl")))
    merge = draw(st.sampled_from((1, 2)))
    rate = draw(st.sampled_from((1, 2, 4))) if family == "qwen2_5_vl" else None
    config = MRopeConfig(family=family, spatial_merge_size=merge, tokens_per_second=rate)
    ids, grids, masks, sps, images = [], [], [], [], []

    def text(n):
        ids.extend(draw(st.lists(st.integers(10, 60), min_size=n, max_size=n)))

    text(draw(st.integers(0, 4)))
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):  # an image
            h, w = draw(st.integers(1, 3)), draw(st.integers(1, 3))
            images.append([1, h * merge, w * merge])
            ids.extend([VS] + [IMAGE] * (h * w) + [VE])
        t, h, w = draw(st.integers(1, 4)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
        size = h * w
        if draw(st.integers(0, 3)):  # EVS keeps the first frame whole; VidCom2 (Qwen3-VL) need not
            mask = [1] * size + draw(st.lists(st.integers(0, 1), min_size=(t - 1) * size, max_size=(t - 1) * size))
        else:
            mask = draw(st.lists(st.integers(0, 1), min_size=t * size, max_size=t * size).filter(any))
        kept = sum(mask)
        grids.append([t, h * merge, w * merge])
        masks.append(mask)
        sps.append(draw(st.sampled_from((0.5, 1.0, 1.3, 2.5))))
        if family == "qwen2_5_vl":
            ids.extend([VS] + [VIDEO] * kept + [VE])
        else:
            ids.append(VS)
            for f in range(t):
                text(draw(st.integers(1, 3)))  # the frame's timestamp
                ids.extend([VS] + [VIDEO] * (kept if f == 0 else 0) + [VE])
            ids.append(VE)
        text(draw(st.integers(0, 4)))
    if not ids or ids[-1] in (VIDEO,):
        ids.append(11)
    return config, ids, grids, masks, sps if family == "qwen2_5_vl" else None, images or None


@settings(max_examples=examples(150), deadline=None)
@given(pruned_prompts())
def test_random_pruned_prompts_fast_path_equals_reference(case):
    config, ids, grids, masks, sps, images = case
    expected, delta = reference.pruned_prompt_positions(
        config, ids, video_grid_thw=grids, retention_masks=masks, second_per_grid_ts=sps, image_grid_thw=images
    )
    prompt = PrunedPrompt(config, ids, video_grid_thw=grids, second_per_grid_ts=sps, image_grid_thw=images)
    layout = prompt.layout(masks)
    np.testing.assert_array_equal(layout.positions(), expected.numpy())
    assert layout.delta == delta
    # what a mask decides lies inside the videos' spans; everything else is exact with stand-in masks
    stand_in = prompt.layout([prompt.stand_in_mask(k) for k in range(prompt.num_videos)]).positions()
    decided = np.zeros(len(ids), bool)
    for lo, hi in zip(prompt.video_starts, prompt.video_ends):
        decided[lo:hi] = True
    np.testing.assert_array_equal(stand_in[:, ~decided], expected.numpy()[:, ~decided])


@settings(max_examples=examples(60), deadline=None)
@given(pruned_prompts(), st.data())
def test_tracker_takes_masks_mid_prefill(case, data):
    """Admission before the masks, chunked prefill up to each video, masks as
    the encoder delivers them, then the rest: every position as the reference
    says, and a step into a video still without its mask is refused,
    changing nothing."""
    config, ids, grids, masks, sps, images = case
    expected, delta = reference.pruned_prompt_positions(
        config, ids, video_grid_thw=grids, retention_masks=masks, second_per_grid_ts=sps, image_grid_thw=images
    )
    prompt = PrunedPrompt(config, ids, video_grid_thw=grids, second_per_grid_ts=sps, image_grid_thw=images)
    tracker = PositionTracker(config, max_num_reqs=2, max_num_batched_tokens=len(ids) + 4)
    tracker.add_request("other", [1, 2, 3])
    tracker.add_request_pruned("r", prompt)
    got = []
    done = 0
    for k in range(prompt.num_videos):
        lo = prompt.video_starts[k]
        while done < lo:
            n = data.draw(st.integers(1, lo - done), label="chunk")
            got.append(tracker.prepare(["r"], [n]).numpy().copy())
            done += n
        with pytest.raises(ValueError, match="retention mask has not come"):
            tracker.prepare(["other", "r"], [1, 1])
        assert tracker.num_computed_tokens("r") == done and tracker.num_computed_tokens("other") == 0
        tracker.set_retention_mask("r", k, masks[k])
    if done < len(ids):
        got.append(tracker.prepare_slots(np.array([tracker.slot("r")]), np.array([len(ids) - done])).numpy().copy())
    np.testing.assert_array_equal(np.concatenate(got, axis=1), expected.numpy())
    assert tracker.mrope_position_delta("r") == delta
    decode = tracker.prepare(["r"], [1]).numpy()
    assert decode[:, 0].tolist() == [len(ids) + delta] * 3
    tracker.check_invariants()


# ---------------------------------------------------------------- layout rows


def test_delete_tokens_keeps_positions_and_is_compact():
    config = MRopeConfig(family="qwen2_vl", spatial_merge_size=1)
    ids = [1, 2, VS] + [VIDEO] * 12 + [VE, 3, 4]
    full = PromptLayout.from_tokens(config, ids, video_grid_thw=[[3, 2, 2]])
    keep = np.ones(len(ids), bool)
    keep[[1, 4, 5, 9, 14, 17]] = False
    pruned = delete_tokens(full, keep)
    np.testing.assert_array_equal(pruned.positions(), full.positions()[:, keep])
    assert pruned.num_rows <= full.num_rows + 4  # one more row per hole at most
    with pytest.raises(ValueError, match="keep: expected a bool array"):
        delete_tokens(full, keep[:-1])
    with pytest.raises(ValueError, match="at least one token"):
        delete_tokens(full, np.zeros(len(ids), bool))


# ---------------------------------------------------------------- bad input


def test_bad_masks_are_refused_and_change_nothing():
    record = next(r for r in RECORDS if len(r["video_grid_thw"]) == 2)
    prompt = _prompt(record)
    good = record["retention_masks"]
    with pytest.raises(ValueError, match=r"retention_masks: expected a list of 2 masks"):
        prompt.layout(good[:1])
    with pytest.raises(ValueError, match=r"retention_masks\[0\]: expected a 1-D bool or 0/1 array of"):
        prompt.layout([good[0][:-1], good[1]])
    flipped = list(good[0])
    flipped[-1] = 1 - flipped[-1]
    with pytest.raises(ValueError, match=r"retention_masks\[0\]: expected \d+ kept tokens"):
        prompt.layout([flipped, good[1]])
    with pytest.raises(ValueError, match=r"expected 0/1 entries"):
        prompt.layout([[2] * len(good[0]), good[1]])

    tracker = PositionTracker(_config(record), max_num_reqs=1, max_num_batched_tokens=4096)
    tracker.add_request_pruned("r", prompt)
    rows_before = tracker.slot_state.copy()
    with pytest.raises(ValueError, match=r"video_index: expected a video in \[0, 2\)"):
        tracker.set_retention_mask("r", 2, good[0])
    with pytest.raises(TypeError, match="video_index: expected an int"):
        tracker.set_retention_mask("r", "0", good[0])
    with pytest.raises(ValueError, match="kept tokens"):
        tracker.set_retention_mask("r", 0, flipped)
    np.testing.assert_array_equal(tracker.slot_state, rows_before)
    tracker.set_retention_mask("r", 0, good[0])
    with pytest.raises(ValueError, match="given already"):
        tracker.set_retention_mask("r", 0, good[0])
    tracker.set_retention_mask("r", 1, good[1])
    with pytest.raises(ValueError, match="waiting for its mask"):
        tracker.set_retention_mask("r", 1, good[1])
    with pytest.raises(TypeError, match="prompt: expected an mrope_tracker.evs.PrunedPrompt"):
        tracker.add_request_pruned("s", record["token_ids"])


def test_bad_prompts_are_refused():
    record = RECORDS[0]
    with pytest.raises(ValueError, match="config.family: expected one of qwen2_5_vl, qwen3_vl"):
        PrunedPrompt(MRopeConfig(family="qwen2_vl"), record["token_ids"], video_grid_thw=record["video_grid_thw"])
    with pytest.raises(ValueError, match="video_grid_thw: expected 3 videos in token_ids, found 2"):
        PrunedPrompt(_config(record), record["token_ids"], video_grid_thw=record["video_grid_thw"] + [[2, 4, 4]])
    with pytest.raises(ValueError, match="video_grid_thw: expected an"):
        PrunedPrompt(_config(record), record["token_ids"], video_grid_thw=[])
    qwen3 = next(r for r in RECORDS if r["family"] == "qwen3_vl")
    grid = [[g[0] + 5, g[1], g[2]] for g in qwen3["video_grid_thw"]]
    with pytest.raises(ValueError, match="frames"):
        PrunedPrompt(_config(qwen3), qwen3["token_ids"], video_grid_thw=grid)
    with pytest.raises(ValueError, match=r"retention_masks\[0\]"):
        reference.pruned_prompt_positions(
            _config(record),
            record["token_ids"],
            video_grid_thw=record["video_grid_thw"],
            retention_masks=[[0] * len(record["retention_masks"][0]), record["retention_masks"][1]],
        )


def test_torch_masks_are_accepted():
    record = RECORDS[1]
    masks = [torch.tensor(m, dtype=torch.bool) for m in record["retention_masks"]]
    layout = _prompt(record).layout(masks)
    np.testing.assert_array_equal(layout.positions(), _reference(record)[0].numpy())


def test_engine_guide_example_runs():
    """docs/engine.md's EVS examples run as written, in order (their asserts are the check)."""
    import pathlib
    import re

    text = (pathlib.Path(__file__).resolve().parent.parent / "docs" / "engine.md").read_text(encoding="utf-8")
    section = text[text.index("## 10. Pruned videos (EVS)") :]
    section = section[: section.find("\n## ", 1) if "\n## " in section[1:] else None]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 2  # the tracker's, then vLLM's recompute call
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "docs/engine.md", "exec"), namespace)  # noqa: S102


@settings(max_examples=examples(150), deadline=None)
@given(
    st.integers(1, 6),
    st.integers(1, 9),
    st.integers(1, 9),
    st.sampled_from((0.0, 0.05, 0.5, 0.95, 1.0)),
    st.sampled_from(("reference", "vllm-0.33")),
    st.data(),
)
def test_delete_tokens_any_mask(t, h, w, density, semantics, data):
    """Any keep mask over a Qwen2.5-VL prompt: every kept token at its old
    position, whether the video's rows stay runs or become mask rows, and the
    rows never outnumber the mask's runs or its 192-bit windows by much."""
    config = MRopeConfig(family="qwen2_5_vl", spatial_merge_size=1, tokens_per_second=2, semantics=semantics)
    ids = [1, 2, VS] + [VIDEO] * (t * h * w) + [VE, 3]
    full = PromptLayout.from_tokens(config, ids, video_grid_thw=[[t, h, w]], second_per_grid_ts=[1.3])
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    keep = np.random.default_rng(seed).random(len(ids)) < density
    keep[0] = True
    pruned = delete_tokens(full, keep)
    np.testing.assert_array_equal(pruned.positions(), full.positions()[:, keep])
    assert pruned.delta == int(full.positions()[:, keep].max()) + 1 - int(keep.sum())
    runs = int(np.count_nonzero(np.diff(keep.view(np.int8), prepend=0) == 1))
    assert pruned.num_rows <= min(runs, t * h * w // 192 + 2) + full.num_rows + 2
    # a layout of mask rows survives serialisation and the direct constructor's checks
    again = PromptLayout.from_bytes(pruned.to_bytes())
    np.testing.assert_array_equal(again.positions(), pruned.positions())


def test_mask_rows_are_compact_and_checked():
    """A scattered mask over a 32 x 14 x 14 video: mask rows, a few hundred
    bytes per thousand tokens kept; a mask row whose bits disagree with its
    length is refused by the direct constructor."""
    from mrope_tracker.kernels import layout_codes as C

    config = MRopeConfig(family="qwen2_5_vl", tokens_per_second=2)
    t, size = 32, 14 * 14
    mask = np.zeros(t * size, bool)
    mask[:size] = True
    rng = np.random.default_rng(7)
    mask[size + rng.choice(t * size - size, 1400, replace=False)] = True
    ids = [1, VS] + [VIDEO] * int(mask.sum()) + [VE, 2]
    prompt = PrunedPrompt(config, ids, video_grid_thw=[[t, 28, 28]], second_per_grid_ts=[1.0])
    layout = prompt.layout([mask])
    kinds = layout.rows[:, C.COL_KIND]
    assert (kinds == C.KIND_GRID_BITS).sum() >= 25
    assert layout.num_rows <= t * size // C.BITS_PER_ROW + 6
    reference_positions, _ = reference.pruned_prompt_positions(
        config, ids, video_grid_thw=[[t, 28, 28]], retention_masks=[mask], second_per_grid_ts=[1.0]
    )
    np.testing.assert_array_equal(layout.positions(), reference_positions.numpy())
    rows = layout.rows.copy()
    bits = int(np.flatnonzero(kinds == C.KIND_GRID_BITS)[0])
    rows[bits, C.COL_BITS_WORDS] ^= 1 << 5  # one bit more or less than the row's length
    with pytest.raises(ValueError, match=rf"rows\[{bits}\]: expected a grid row"):
        PromptLayout(rows, layout.scales, layout.num_tokens, layout.delta)


def test_whole_windows_merge_only_when_adjacent():
    """Whole 192-token windows next to each other make one GRID row; an empty
    window between two whole ones keeps them apart (their grid offsets differ)."""
    from mrope_tracker.kernels import layout_codes as C

    config = MRopeConfig(family="qwen2_vl", spatial_merge_size=1)
    n = 192 * 6
    ids = [1, VS] + [VIDEO] * n + [VE]
    full = PromptLayout.from_tokens(config, ids, video_grid_thw=[[6, 16, 12]])
    keep = np.ones(len(ids), bool)
    video = keep[2 : 2 + n].reshape(6, 192)
    video[2] = False  # an empty window between whole ones
    video[5, ::3] = False  # a scattered window
    pruned = delete_tokens(full, keep)
    np.testing.assert_array_equal(pruned.positions(), full.positions()[:, keep])
    kinds = pruned.rows[:, C.COL_KIND].tolist()
    assert kinds.count(C.KIND_GRID) == 2 and kinds.count(C.KIND_GRID_BITS) == 1


def test_a_mask_buffer_reused_by_the_caller_changes_nothing():
    """The tracker keeps its own copy of each mask: a caller that refills its
    buffer for the next video leaves the first video's positions alone."""
    record = next(r for r in RECORDS if len(r["video_grid_thw"]) == 2)
    config = _config(record)
    masks = [np.array(m, bool) for m in record["retention_masks"]]
    tracker = PositionTracker(config, max_num_reqs=1, max_num_batched_tokens=4096)
    tracker.add_request_pruned("r", _prompt(record))
    buffer = masks[0].copy()
    tracker.set_retention_mask("r", 0, buffer)
    buffer[:] = ~buffer  # the caller reuses its buffer
    tracker.set_retention_mask("r", 1, masks[1])
    got = tracker.prepare(["r"], [len(record["token_ids"])]).numpy()
    np.testing.assert_array_equal(got, _reference(record)[0].numpy())


def test_pruned_prompt_refuses_bad_grids_and_extra_placeholders():
    record = RECORDS[1]
    config = _config(record)
    with pytest.raises((ValueError, TypeError), match="video_grid_thw"):
        PrunedPrompt(config, record["token_ids"], video_grid_thw=[[1, 2], [3, 4, 5]])
    with pytest.raises((ValueError, TypeError), match="video_grid_thw"):
        PrunedPrompt(config, record["token_ids"], video_grid_thw="abc")
    ids = [1, VS] + [VIDEO] * 6 + [VE]  # 6 placeholders, a grid of 4 tokens
    with pytest.raises(ValueError, match=r"token_ids: video 0 holds 6 video tokens .* more than its unpruned grid's 4"):
        PrunedPrompt(config, ids, video_grid_thw=[[1, 4, 4]], second_per_grid_ts=[1.0])
    # found by the bad-input fuzz: an empty image grid indexed an empty run (IndexError)
    with pytest.raises(ValueError, match=r"image_grid_thw\[0\]: expected t >= 1"):
        PrunedPrompt(config, [1, VS, VIDEO, VIDEO, VE], video_grid_thw=[[1, 2, 4]], image_grid_thw=[[0, 2, 2]])


def test_steps_with_bad_arrays_name_them_while_a_mask_is_pending():
    record = RECORDS[1]
    tracker = PositionTracker(_config(record), max_num_reqs=2, max_num_batched_tokens=64)
    tracker.add_request_pruned("r", _prompt(record))
    with pytest.raises(ValueError, match="slots"):
        tracker.prepare_slots(np.array([[0], [1]]), np.array([[1], [1]]))


def test_mask_rows_refuse_positions_past_the_limit():
    """A directly built GRID_BITS row whose base plus offsets would pass 2**62 is refused (no int64 wrap)."""
    from mrope_tracker.kernels import layout_codes as C

    rows = np.zeros((1, C.NUM_COLS), np.int64)
    rows[0, [C.COL_TOK_LEN, C.COL_KIND, C.COL_BASE, C.COL_GRID_OFFSET]] = [1, C.KIND_GRID_BITS, 2**62, 2**62]
    rows[0, C.COL_BITS_SHAPE] = 1 | (1 << C.BITS_SIDE)
    rows[0, C.COL_BITS_WORDS] = 1
    with pytest.raises(ValueError, match=r"rows\[0\]: expected positions in \[0, 2\*\*62\]"):
        PromptLayout(rows, np.zeros((1, 2), np.float32), 1, -1)
