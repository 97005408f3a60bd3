"""The EVS recompute contract (`mrope_tracker.vllm.EvsRecompute`): chunk by chunk,
as Model Runner V2 calls it, its positions are our rule's (the reference's),
whatever the chunk schedule; tokens already computed are never rewritten.

The chunks' embeddings are built as vLLM 0.33 lays them out (a Qwen2.5-VL
video's rows are its kept tokens; a Qwen3-VL video's rows are its whole span,
each frame's timestamp, vision start, kept tokens and vision end), with the
identity channels `write_identity_columns` writes, sliced to each chunk's
window as vLLM's encoder runner does (tests/data/README.md has the vectors'
provenance).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import examples
from test_bad_input_fuzz import Entry, _method_entry, fuzz_tests
from test_evs import IMAGE, RECORDS, VIDEO, VS, _config, _prompt, _reference, pruned_prompts

from mrope_tracker import reference
from mrope_tracker.core.inputs import true_runs
from mrope_tracker.evs import PendingPrune, PrunedPrompt
from mrope_tracker.evs.recompute import NUM_EXTRA_COLUMNS, EvsRecompute, write_identity_columns

HIDDEN = 3


def _placeholders(prompt: PrunedPrompt, ids) -> list[tuple[int, int]]:
    """vLLM's placeholder ranges: each image's pads, each video's tokens
    (Qwen2.5-VL) or inner span (Qwen3-VL: from frame 0's timestamp to the last
    frame's vision end)."""
    ids = np.asarray(ids)
    ranges = [tuple(run) for run in true_runs(ids == IMAGE).tolist()]
    for k, (start, end) in enumerate(zip(prompt.video_starts, prompt.video_ends)):
        if prompt.config.family == "qwen2_5_vl":
            ranges.append((start, prompt.num_kept[k]))
            continue
        outer = start - 2
        while ids[outer] != VS:
            outer -= 1
        ranges.append((outer + 1, end + 1 - (outer + 1)))
    return sorted(ranges)


def _item_embeddings(prompt, ids, placeholders, masks, dtype):
    """Each item's whole embedding, as vLLM's pruning model returns it."""
    family = prompt.config.family
    extra = NUM_EXTRA_COLUMNS[family]
    out = []
    video_offsets = {}
    for k in range(prompt.num_videos):
        for i, (o, n) in enumerate(placeholders):
            if o <= prompt.video_starts[k] < o + n:
                video_offsets[i] = k
    for i, (offset, length) in enumerate(placeholders):
        emb = torch.randn(length, HIDDEN + extra).to(dtype)
        k = video_offsets.get(i)
        if k is not None:
            mask = np.asarray(masks[k], bool)
            if family == "qwen3_vl":
                # the span as the model sees it: per frame, its text rows, then its own kept tokens
                span = np.asarray(ids[offset : offset + length])
                per_frame = iter(mask.reshape(prompt.num_frames[k], -1).sum(axis=1).tolist())
                is_video = []
                for token in span[span != VIDEO].tolist():  # the text rows; each vision start opens a frame
                    is_video.append(0)
                    if token == VS:
                        is_video += [1] * next(per_frame)
                assert len(is_video) == length
                emb[:, -1] = torch.tensor(is_video, dtype=dtype)
            write_identity_columns(emb, mask, family=family)
        out.append(emb)
    return out


def _run(prompt, ids, placeholders, masks, boundaries, dtype=torch.float32):
    """Model Runner V2's loop: per chunk, the window's embeddings and a recompute
    when there are any. Returns (positions each chunk's tokens used, final
    positions, last delta)."""
    recompute = EvsRecompute(prompt, placeholders)
    items = _item_embeddings(prompt, ids, placeholders, masks, dtype)
    state = torch.from_numpy(PendingPrune(prompt).layout().positions())  # our admission, masks to come
    used, delta = [], None
    for a, b in zip(boundaries[:-1], boundaries[1:]):
        window = []
        for (offset, length), emb in zip(placeholders, items):
            lo, hi = max(a - offset, 0), min(b - offset, length)
            if lo < hi:
                window.append(emb[lo:hi])
        if window:
            before = state.clone()
            cleaned, state, delta = recompute.recompute_mrope_positions(ids, window, before, a)
            assert torch.equal(state[:, :a], before[:, :a]), "a computed token was rewritten"
            assert [c.shape[1] for c in cleaned] == [HIDDEN] * len(window)
        used.append(state[:, a:b].numpy().copy())
    return np.concatenate(used, axis=1), state.numpy(), delta


def _schedule(data, n: int) -> list[int]:
    cuts = data.draw(st.lists(st.integers(1, n - 1), max_size=6, unique=True), label="cuts") if n > 1 else []
    return [0, *sorted(cuts), n]


@settings(max_examples=examples(80), deadline=None)
@given(st.sampled_from(range(len(RECORDS))), st.data())
def test_vectors_any_schedule_gives_the_reference(index, data):
    record = RECORDS[index]
    prompt = _prompt(record)
    ids = record["token_ids"]
    placeholders = [(p["offset"], p["length"]) for p in record["placeholders"]]
    assert placeholders == _placeholders(prompt, ids)
    expected, delta = _reference(record)
    dtype = data.draw(st.sampled_from((torch.float32, torch.bfloat16)), label="dtype")
    schedule = _schedule(data, len(ids))
    used, final, got_delta = _run(prompt, ids, placeholders, record["retention_masks"], schedule, dtype)
    np.testing.assert_array_equal(used, expected.numpy())
    np.testing.assert_array_equal(final, expected.numpy())
    assert got_delta == delta


@pytest.mark.parametrize("index", [i for i, r in enumerate(RECORDS) if r["chunk_independent"]])
def test_vllm_preset_reproduces_vllm_where_chunking_does_not_matter(index):
    record = RECORDS[index]
    prompt = _prompt(record, "vllm-0.33")
    ids = record["token_ids"]
    placeholders = [(p["offset"], p["length"]) for p in record["placeholders"]]
    _, final, delta = _run(prompt, ids, placeholders, record["retention_masks"], record["chunks"])
    np.testing.assert_array_equal(final, np.asarray(record["positions"]))
    assert delta == record["delta"]


@settings(max_examples=examples(80), deadline=None)
@given(pruned_prompts(), st.data())
def test_random_prompts_any_schedule_gives_the_reference(case, data):
    config, ids, grids, masks, sps, images = case
    expected, delta = reference.pruned_prompt_positions(
        config, ids, video_grid_thw=grids, retention_masks=masks, second_per_grid_ts=sps, image_grid_thw=images
    )
    prompt = PrunedPrompt(config, ids, video_grid_thw=grids, second_per_grid_ts=sps, image_grid_thw=images)
    placeholders = _placeholders(prompt, ids)
    used, final, got_delta = _run(prompt, ids, placeholders, masks, _schedule(data, len(ids)))
    np.testing.assert_array_equal(used, expected.numpy())
    np.testing.assert_array_equal(final, expected.numpy())
    if got_delta is not None:
        assert got_delta == delta


def _one_video_case():
    record = next(r for r in RECORDS if r["family"] == "qwen3_vl")
    prompt = _prompt(record)
    ids = record["token_ids"]
    placeholders = [(p["offset"], p["length"]) for p in record["placeholders"]]
    items = _item_embeddings(prompt, ids, placeholders, record["retention_masks"], torch.float32)
    return prompt, ids, placeholders, items


def test_bad_calls_are_refused_and_change_nothing():
    prompt, ids, placeholders, items = _one_video_case()
    recompute = EvsRecompute(prompt, placeholders)
    n = len(ids)
    positions = torch.zeros(3, n, dtype=torch.int64)
    kept = positions.clone()
    offset = placeholders[0][0]
    with pytest.raises(ValueError, match="input_ids"):
        recompute.recompute_mrope_positions(ids[:-1], items, positions, 0)
    with pytest.raises(ValueError, match="mrope_positions"):
        recompute.recompute_mrope_positions(ids, items, positions[:, :-1], 0)
    with pytest.raises(ValueError, match="num_computed_tokens"):
        recompute.recompute_mrope_positions(ids, items, positions, n)
    with pytest.raises(ValueError, match="multimodal_embeddings"):
        recompute.recompute_mrope_positions(ids, items + items, positions, 0)
    with pytest.raises(ValueError, match=r"multimodal_embeddings\[0\]: expected at most"):
        recompute.recompute_mrope_positions(ids, [items[0]], positions, offset + 1)
    with pytest.raises(TypeError, match="multimodal_embeddings"):
        recompute.recompute_mrope_positions(ids, items[0], positions, 0)
    spoiled = items[0].clone()
    spoiled[:, -5] = 0.5  # not an identity digit
    with pytest.raises(ValueError, match="identity digits"):
        recompute.recompute_mrope_positions(ids, [spoiled], positions, 0)
    shuffled = items[0].flip(0)
    with pytest.raises(ValueError, match=r"multimodal_embeddings\[0\]"):
        recompute.recompute_mrope_positions(ids, [shuffled], positions, 0)
    # a slice that starts past where the chunk starts cannot fit the kept count
    with pytest.raises(ValueError, match="do not fit"):
        recompute.recompute_mrope_positions(ids, [items[0][-3:]], positions, offset)
    assert torch.equal(positions, kept)


def test_bad_construction_is_refused():
    prompt, ids, placeholders, items = _one_video_case()
    with pytest.raises(TypeError, match="prompt"):
        EvsRecompute("prompt", placeholders)
    with pytest.raises(ValueError, match="placeholders"):
        EvsRecompute(prompt, [])
    with pytest.raises(ValueError, match=r"placeholders\[0\]"):
        EvsRecompute(prompt, [(len(ids) - 1, 5)])
    with pytest.raises(ValueError, match=r"placeholders\[0\]\.length"):
        EvsRecompute(prompt, [(3, 0)])


def test_identity_columns_refuse_bad_input():
    emb = torch.zeros(4, HIDDEN + 4)
    with pytest.raises(ValueError, match="family"):
        write_identity_columns(emb, [1, 1, 1, 1], family="qwen2_vl")
    with pytest.raises(ValueError, match="embeddings"):
        write_identity_columns(torch.zeros(4, 4), [1, 1, 1, 1], family="qwen2_5_vl")
    with pytest.raises(ValueError, match="retention_mask: expected 4 kept"):
        write_identity_columns(emb, [1, 0, 1, 1], family="qwen2_5_vl")
    with pytest.raises(ValueError, match="retention_mask"):
        write_identity_columns(emb, [[1, 1], [1, 1]], family="qwen2_5_vl")
    write_identity_columns(emb, [1, 0, 1, 1, 1], family="qwen2_5_vl")
    assert emb[:, -4:-1].tolist() == [[0, 0, 0], [2, 0, 0], [3, 0, 0], [4, 0, 0]]


def test_identities_past_bfloat16_integers_survive():
    """Grid indices far past 256 (exact bfloat16 integers) arrive whole."""
    config = _config(RECORDS[0])
    t, h, w = 300, 8, 8  # 4,800 tokens a frame... merged 2: 16 a frame, 4,800 in all
    mask = np.zeros(t * 16, bool)
    mask[:16] = True
    mask[[100, 2_000, 4_799]] = True
    ids = [1, 2, VS] + [VIDEO] * int(mask.sum()) + [151653, 3]
    prompt = PrunedPrompt(config, ids, video_grid_thw=[[t, h, w]], second_per_grid_ts=[1.0])
    placeholders = [(3, int(mask.sum()))]
    used, final, _ = _run(prompt, ids, placeholders, [mask], [0, 10, len(ids)], torch.bfloat16)
    expected, _ = reference.pruned_prompt_positions(
        config, ids, video_grid_thw=[[t, h, w]], retention_masks=[mask], second_per_grid_ts=[1.0]
    )
    np.testing.assert_array_equal(final, expected.numpy())


# ------------------------------------------------------------------ bad arguments (test_bad_input_fuzz.py's checks)
_PROMPT, _IDS, _PLACEHOLDERS, _ITEMS = _one_video_case()


def _recompute_state(recompute: EvsRecompute):
    return tuple(recompute.placeholders), tuple(recompute.video_of_item), str(recompute.text_before_frame)


FUZZED = [
    Entry("EvsRecompute", EvsRecompute, dict(prompt=_PROMPT, placeholders=_PLACEHOLDERS)),
    _method_entry(
        EvsRecompute,
        lambda: EvsRecompute(_PROMPT, _PLACEHOLDERS),
        _recompute_state,
        "recompute_mrope_positions",
        dict(
            input_ids=_IDS,
            multimodal_embeddings=_ITEMS,
            mrope_positions=torch.zeros(3, len(_IDS), dtype=torch.int64),
            num_computed_tokens=0,
        ),
    ),
]
(
    test_the_valid_call_is_accepted,
    test_bad_arguments_are_refused_cleanly,
    test_bad_arguments_are_refused_cleanly_at_length,
) = fuzz_tests(FUZZED, 25, 400)
