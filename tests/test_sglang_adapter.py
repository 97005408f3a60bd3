"""mrope_tracker.sglang: the get_rope_index* drop-ins, the O(items) request
state (sessions included) and the one call per forward batch.

Positions are checked against `PromptLayout.positions` / `prompt_positions`
(themselves checked against the torch reference elsewhere) and, for the batch
call, against SGLang 0.5's per-request rules re-stated below in plain torch:
an extend slices ``[prefix, prefix + extend)`` out of the request's
positions (text past the prompt at ``index + delta``), a decode token sits at
``seq_len - 1 + delta``, a draft token at its 1-D position + delta, and a
session keeps the saved positions, continues with text from their largest + 1
and shifts the new turn after that. When MROPE_SGLANG_ROPE_INDEX names
SGLang 0.5.23's ``mrope_rope_index.py``, the drop-ins are also compared
with it (loaded by path, the sglang package is never imported).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types

import numpy as np
import pytest
import torch
from family_prompts import family_prompts, load_config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import examples

from mrope_tracker import MRopeConfig, PromptLayout, prompt_positions
from mrope_tracker.sglang import (
    BatchPositions,
    concat_layouts,
    extend_session,
    get_rope_index,
    get_rope_index_ernie45,
    get_rope_index_glm4v,
    get_rope_index_qwen3_omni,
    read_layout,
    text_layout,
)

SEMANTICS = "sglang-0.5"
# the families SGLang's get_rope_index serves with its argument list (not GLM or ERNIE: those read a config)
QWEN_FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "paddleocr_vl")


def _config(prompt) -> MRopeConfig:
    return MRopeConfig.from_hf_config(prompt.config, semantics=SEMANTICS)


def _sglang_args(config: MRopeConfig, prompt) -> dict:
    kw = prompt.kwargs()
    return dict(
        spatial_merge_size=config.spatial_merge_size,
        image_token_id=config.image_token_id,
        video_token_id=config.video_token_id,
        vision_start_token_id=config.vision_start_token_id,
        model_type=config.model_type,
        tokens_per_second=config.tokens_per_second,
        input_ids=torch.tensor(prompt.token_ids, dtype=torch.int64)[None],
        image_grid_thw=None if "image_grid_thw" not in kw else torch.from_numpy(kw["image_grid_thw"]),
        video_grid_thw=None if "video_grid_thw" not in kw else torch.from_numpy(kw["video_grid_thw"]),
        second_per_grid_ts=None if kw.get("second_per_grid_ts") is None else torch.tensor(kw["second_per_grid_ts"]),
    )


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(QWEN_FAMILIES).flatmap(lambda family: family_prompts(family)))
def test_get_rope_index_is_prompt_positions_in_sglang_shapes(prompt):
    config = _config(prompt)
    args = _sglang_args(config, prompt)
    positions, deltas = get_rope_index(**args, semantics=SEMANTICS)
    if args["image_grid_thw"] is None and args["video_grid_thw"] is None:
        assert positions.shape == (3, 1, prompt.num_tokens) and deltas.tolist() == [[0]]
        return
    expected, delta = prompt_positions(config, np.array(prompt.token_ids), **prompt.kwargs())
    assert positions.shape == (3, 1, prompt.num_tokens) and positions.dtype == torch.int64
    assert deltas.shape == (1, 1) and deltas.dtype == torch.int64 and int(deltas) == delta
    assert (positions[:, 0].numpy() == expected).all()


def test_get_rope_index_batch_rows_take_their_own_items():
    config = MRopeConfig.from_hf_config(
        {"model_type": "qwen2_vl", "image_token_id": 9, "video_token_id": 8, "vision_start_token_id": 7,
         "vision_end_token_id": 6, "vision_config": {"spatial_merge_size": 2}}, semantics=SEMANTICS,
    )  # fmt: skip
    rows = [[1, 7, 9, 9, 9, 9, 6, 2, 3], [7, 9, 9, 9, 9, 9, 9, 6, 4]]
    grids = [[1, 4, 4], [1, 4, 6]]
    positions, deltas = get_rope_index(
        2, 9, 8, 7, "qwen2_vl", None, torch.tensor(rows), torch.tensor(grids), semantics=SEMANTICS
    )
    for row, grid in enumerate(grids):
        expected, delta = prompt_positions(config, rows[row], image_grid_thw=[grid])
        assert (positions[:, row].numpy() == expected).all() and int(deltas[row]) == delta


def test_get_rope_index_glm4v_masks_padding_to_one():
    hf = load_config("glm4v")
    config = MRopeConfig.from_hf_config(hf, semantics=SEMANTICS)
    image, start, end = hf["image_token_id"], hf["image_start_token_id"], hf["image_end_token_id"]
    ids = [0, 0, 1, start, image, image, image, image, end, 2]
    mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1, 1, 1, 1]])
    positions, deltas = get_rope_index_glm4v(torch.tensor([ids]), hf, [[1, 4, 4]], None, mask, semantics=SEMANTICS)
    expected, _ = prompt_positions(config, ids[2:], image_grid_thw=[[1, 4, 4]])
    assert (positions[:, 0, 2:].numpy() == expected).all() and (positions[:, 0, :2] == 1).all()
    assert int(deltas) == expected.max() + 1 - len(ids)  # SGLang's delta counts the padded row


def test_get_rope_index_names_bad_arguments():
    with pytest.raises(TypeError, match="input_ids"):
        get_rope_index(2, 9, 8, 7, "qwen2_vl", None, [[1, 2]], [[1, 4, 4]])
    with pytest.raises(ValueError, match="image_grid_thw"):
        get_rope_index(2, 9, 8, 7, "qwen2_vl", None, torch.tensor([[1, 2]]), [[1, 4]])
    with pytest.raises(ValueError, match="semantics"):
        get_rope_index(2, 9, 8, 7, "qwen2_vl", None, torch.tensor([[1, 2]]), None, semantics="sglang-9")


@pytest.mark.parametrize("name, value", [("spatial_merge_size", 2.0), ("spatial_merge_size", [2]),
                                         ("image_token_id", 9.0), ("video_token_id", True)])  # fmt: skip
def test_ids_of_another_type_are_refused_after_a_call_with_ints(name, value):
    """2.0 == 2 as a cache key: after a call with int ids, a float id must still be refused, not find its plan."""
    ids = torch.tensor([[1, 7, 9, 9, 9, 9, 6, 2]])
    args = dict(spatial_merge_size=2, image_token_id=9, video_token_id=8, vision_start_token_id=7)
    get_rope_index(**args, model_type="qwen2_vl", input_ids=ids, image_grid_thw=torch.tensor([[1, 4, 4]]))
    args[name] = value
    with pytest.raises(TypeError, match=name):
        get_rope_index(**args, model_type="qwen2_vl", input_ids=ids, image_grid_thw=torch.tensor([[1, 4, 4]]))


def test_time_scales_in_another_float_dtype_are_sglangs_or_refused():
    """SGLang multiplies frame indices by a float64 (float16, bfloat16) tensor's value in that dtype: where its frame
    times are float32's, the positions are the same; where they differ, the call is refused, never positioned
    otherwise (31/7 s a grid at 2 tokens a second: frame 7 is at 61.999996 in float32, 62.0 in float64)."""
    ids = torch.tensor([[1, 7] + [8] * 32 + [6, 2]])
    args = (2, 9, 8, 7, "qwen2_5_vl", 2, ids, None, torch.tensor([[8, 4, 4]]))
    float32, _ = get_rope_index(*args, torch.tensor([1.5]), semantics=SEMANTICS)
    for dtype in (torch.float64, torch.float16, torch.bfloat16):
        same, _ = get_rope_index(*args, torch.tensor([1.5], dtype=dtype), semantics=SEMANTICS)
        assert torch.equal(same, float32)
    with pytest.raises(ValueError, match=r"second_per_grid_ts\[0\].*float64"):
        get_rope_index(*args, torch.tensor([31 / 7], dtype=torch.float64), semantics=SEMANTICS)
    needs_grad, _ = get_rope_index(*args, torch.tensor([1.5], requires_grad=True), semantics=SEMANTICS)
    assert torch.equal(needs_grad, float32)


@pytest.mark.parametrize(
    "name, value",
    [
        ("image_grid_thw", [[2**70, 4, 4]]),
        ("image_grid_thw", [[1.5, 4, 4]]),
        ("image_grid_thw", torch.tensor([[True, True, True]])),
        ("image_grid_thw", torch.ones((1, 3), dtype=torch.int64, device="meta")),
        ("second_per_grid_ts", ["a"]),
        ("second_per_grid_ts", torch.ones(1, device="meta")),
        ("input_ids", torch.ones((1, 13), dtype=torch.complex64)),  # (its real part was read)
        *(
            [("input_ids", torch.full((1, 13), 2**63 + 1, dtype=torch.uint64))]  # (it wrapped to a negative id)
            if hasattr(torch, "uint64")
            else []
        ),
    ],
)
def test_argument_forms_that_cannot_be_read_are_named(name, value):
    ids = torch.tensor([[1, 7, 9, 9, 9, 9, 6, 7, 8, 8, 8, 8, 6]])
    args = dict(input_ids=ids, image_grid_thw=[[1, 4, 4]], video_grid_thw=[[1, 4, 4]], second_per_grid_ts=[1.0])
    args[name] = value
    with pytest.raises((TypeError, ValueError), match=name):
        get_rope_index(2, 9, 8, 7, "qwen2_5_vl", 2, **args, semantics=SEMANTICS)


# ---------------------------------------------------------------------------------------------- SGLang's file
ORACLE = os.environ.get("MROPE_SGLANG_ROPE_INDEX")


def _oracle():
    spec = importlib.util.spec_from_file_location("sglang_mrope_rope_index", ORACLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not ORACLE, reason="MROPE_SGLANG_ROPE_INDEX names no SGLang mrope_rope_index.py")
@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(("qwen2_vl", "qwen2_5_vl")).flatmap(lambda family: family_prompts(family, min_videos=1)))
def test_get_rope_index_equals_sglangs_own(prompt):
    args = _sglang_args(_config(prompt), prompt)
    theirs = _oracle().get_rope_index(**args)
    ours = get_rope_index(**args, semantics=SEMANTICS)
    assert torch.equal(theirs[0], ours[0]) and torch.equal(theirs[1], ours[1])


def _namespace(value):
    """A config dict as an object with attributes, as SGLang's functions read a model config."""
    if isinstance(value, dict):
        return types.SimpleNamespace(**{key: _namespace(item) for key, item in value.items()})
    return value


@pytest.mark.skipif(not ORACLE, reason="MROPE_SGLANG_ROPE_INDEX names no SGLang mrope_rope_index.py")
@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(("glm4v", "ernie4_5_moe_vl")).flatmap(lambda family: family_prompts(family, config_name=family)))
def test_config_reading_drop_ins_equal_sglangs_own(prompt):
    kw = prompt.kwargs()
    images, videos = kw.get("image_grid_thw"), kw.get("video_grid_thw")
    args = [
        torch.tensor([prompt.token_ids]),
        _namespace(prompt.config),
        None if images is None else torch.from_numpy(images),
        None if videos is None else torch.from_numpy(videos),
    ]
    if prompt.family == "glm4v":
        args.append(torch.ones((1, prompt.num_tokens), dtype=torch.int64))
        theirs, ours = _oracle().get_rope_index_glm4v(*args), get_rope_index_glm4v(*args, semantics=SEMANTICS)
    else:
        theirs, ours = _oracle().get_rope_index_ernie45(*args), get_rope_index_ernie45(*args, semantics=SEMANTICS)
    assert torch.equal(theirs[0], ours[0]) and torch.equal(theirs[1], ours[1])


# ---------------------------------------------------------------------------------------------- batches
BATCH_FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "glm4v", "ernie4_5_moe_vl")


@st.composite
def padded_batches(draw):
    """2 or 3 prompts of one family and config, right-padded with id 0 to one width: (prompts, ids, mask)."""
    family = draw(st.sampled_from(BATCH_FAMILIES))
    name = family if family in ("glm4v", "ernie4_5_moe_vl") else None  # (the configs SGLang's functions read)
    first = draw(family_prompts(family, config_name=name, max_items=2, max_t=4, min_videos=1))  # (no grids: (3, 1, L))
    more = st.lists(family_prompts(family, config_name=name, max_items=2, max_t=4), min_size=1, max_size=2)
    prompts = [first] + [p for p in draw(more) if p.config == first.config]
    width = max(p.num_tokens for p in prompts)
    ids = np.zeros((len(prompts), width), np.int64)
    mask = np.zeros((len(prompts), width), np.int64)
    for row, prompt in enumerate(prompts):
        ids[row, : prompt.num_tokens] = prompt.token_ids
        mask[row, : prompt.num_tokens] = 1
    return prompts, ids, mask


def _batch_args(prompts, ids, mask) -> tuple[str, list, dict]:
    """(function name, positional arguments, keyword arguments) of SGLang's call for a padded batch."""
    kws = [p.kwargs() for p in prompts]

    def joined(name, dtype):
        parts = [kw[name] for kw in kws if kw.get(name) is not None]
        return torch.from_numpy(np.concatenate(parts).astype(dtype)) if parts else None

    images, videos = joined("image_grid_thw", np.int64), joined("video_grid_thw", np.int64)
    family = prompts[0].family
    if family in ("glm4v", "ernie4_5_moe_vl"):
        args = [torch.from_numpy(ids), _namespace(prompts[0].config), images, videos]
        if family == "glm4v":
            return "get_rope_index_glm4v", args + [torch.from_numpy(mask)], {}
        return "get_rope_index_ernie45", args, {}
    args = _sglang_args(_config(prompts[0]), prompts[0])
    args.update(input_ids=torch.from_numpy(ids), image_grid_thw=images, video_grid_thw=videos)
    args["second_per_grid_ts"] = joined("second_per_grid_ts", np.float32)
    return "get_rope_index", [], args


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(padded_batches())
def test_batch_rows_take_the_items_in_batch_order(batch):
    """Each row of a batch is its own prompt with the next items, whatever the family's layout (GLM's frames are
    images inside video brackets; ERNIE's videos have no vision_start): SGLang's counters run across rows."""
    prompts, ids, mask = batch
    name, args, kwargs = _batch_args(prompts, ids, mask)
    positions, deltas = getattr(sys.modules["mrope_tracker.sglang"], name)(*args, **kwargs, semantics=SEMANTICS)
    config = _config(prompts[0])
    for row, prompt in enumerate(prompts):
        if name == "get_rope_index_glm4v":  # padding masked: positions of 1; the delta counts the padded row
            kept, expected = prompt.token_ids, np.ones((3, ids.shape[1]), np.int64)
        else:  # padding positioned as text
            kept, expected = ids[row], np.empty((3, ids.shape[1]), np.int64)
        alone, _ = prompt_positions(config, kept, **prompt.kwargs())
        expected[:, : alone.shape[1]] = alone
        assert (positions[:, row].numpy() == expected).all()
        assert int(deltas[row]) == alone.max() + 1 - ids.shape[1]


@pytest.mark.skipif(not ORACLE, reason="MROPE_SGLANG_ROPE_INDEX names no SGLang mrope_rope_index.py")
@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(padded_batches())
def test_batches_equal_sglangs_own(batch):
    name, args, kwargs = _batch_args(*batch)
    theirs = getattr(_oracle(), name)(*args, **kwargs)
    ours = getattr(sys.modules["mrope_tracker.sglang"], name)(*args, **kwargs, semantics=SEMANTICS)
    assert torch.equal(theirs[0], ours[0]) and torch.equal(theirs[1], ours[1])


# ---------------------------------------------------------------------------------------------- request state
def _sglang_session(saved: torch.Tensor | None, prompt_len: int, turn: torch.Tensor) -> torch.Tensor:
    """SGLang 0.5's session rule on (3, L) positions, re-stated."""
    prefix_len = prompt_len - turn.shape[1]
    prefix = torch.empty((3, 0), dtype=torch.int64) if saved is None else saved[:, :prefix_len]
    start = int(prefix.max()) + 1 if prefix.numel() else 0
    gap = prefix_len - prefix.shape[1]
    text = torch.arange(gap).expand(3, -1) + start
    return torch.cat([prefix, text, turn + start + gap], dim=1)


@st.composite
def layouts(draw, config, max_items=3):
    num_text = draw(st.integers(0, 6))
    rows, images, at = [], [], num_text
    for _ in range(draw(st.integers(0, max_items))):
        h, w = draw(st.integers(1, 4)), draw(st.integers(1, 4))
        images.append([1, 2 * h, 2 * w])
        rows.append((at + 1, h * w))
        at += h * w + 2 + draw(st.integers(0, 5))
    at += draw(st.integers(0 if images else 1, 5))
    if not images:
        return text_layout(config, at)
    return PromptLayout.from_ranges(config, at, image_ranges=rows, image_grid_thw=images)


QWEN25 = MRopeConfig.from_hf_config(
    {"model_type": "qwen2_5_vl", "image_token_id": 151655, "video_token_id": 151656, "vision_start_token_id": 151652,
     "vision_end_token_id": 151653, "vision_config": {"spatial_merge_size": 2, "tokens_per_second": 2}},
    semantics=SEMANTICS,
)  # fmt: skip


@settings(max_examples=examples(80), deadline=None)
@given(st.one_of(st.none(), layouts(QWEN25)), layouts(QWEN25), st.integers(0, 40), st.data())
def test_extend_session_is_sglangs_session_rule(saved, turn, extra, data):
    prefix_len = extra if saved is None else data.draw(st.integers(0, saved.num_tokens + extra))
    prompt_len = prefix_len + turn.num_tokens
    layout = extend_session(saved, prompt_len, turn)
    expected = _sglang_session(None if saved is None else torch.from_numpy(saved.positions()), prompt_len,
                               torch.from_numpy(turn.positions()))  # fmt: skip
    assert (layout.positions() == expected.numpy()).all()
    assert layout.delta == int(expected.max()) + 1 - prompt_len
    assert layout.num_rows <= (0 if saved is None else saved.num_rows) + 1 + turn.num_rows  # O(rows), not tokens


def test_extend_session_names_bad_input():
    turn = text_layout(QWEN25, 5)
    with pytest.raises(ValueError, match="prompt_len"):
        extend_session(None, 4, turn)
    with pytest.raises(TypeError, match="turn"):
        extend_session(None, 5, turn.positions())


# ---------------------------------------------------------------------------------------------- batches
def _full(layout: PromptLayout, end: int) -> np.ndarray:
    """A request's positions up to `end`: its layout, then index + delta."""
    out = np.empty((3, end), np.int64)
    n = min(end, layout.num_tokens)
    out[:, :n] = layout.positions(0, n)
    out[:, n:] = np.arange(n, end) + layout.delta
    return out


@st.composite
def requests(draw):
    """A request's layout: a prompt's, or a session's (a saved prompt, generated text, a new turn)."""
    layout = draw(layouts(QWEN25))
    if not draw(st.booleans()):
        return layout
    turn = draw(layouts(QWEN25))
    return extend_session(layout, layout.num_tokens + draw(st.integers(0, 12)) + turn.num_tokens, turn)


@st.composite
def batches(draw):
    num = draw(st.integers(1, 6))
    rows = draw(st.lists(st.integers(0, 15), min_size=num, max_size=num, unique=True))
    reqs = [draw(requests()) for _ in rows]
    mode = draw(st.sampled_from(("extend", "decode", "spec")))
    if mode == "extend":
        prefix = [draw(st.integers(0, r.num_tokens + 8)) for r in reqs]
        extend = [draw(st.integers(1, r.num_tokens + 8)) for r in reqs]
        return rows, reqs, mode, (prefix, extend)
    if mode == "decode":
        return rows, reqs, mode, [r.num_tokens + draw(st.integers(0, 20)) for r in reqs]
    k = draw(st.integers(1, 4))
    return rows, reqs, mode, [r.num_tokens + draw(st.integers(0, 20)) + j for r in reqs for j in range(k)]


@settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches(), st.booleans())
def test_one_call_per_batch_is_sglangs_per_request_rule(batch, bytes_form):
    rows, reqs, mode, lens = batch
    engine = BatchPositions(QWEN25, max_num_reqs=15, max_num_tokens=512)
    for row, layout in zip(rows, reqs):
        engine.admit(row, layout.to_bytes() if bytes_form else layout)
    if mode == "spec":
        spec = torch.tensor(lens)
        out = engine.positions(torch.tensor(rows), spec_positions=spec)
        k = len(lens) // len(rows)
        parts = [(spec.view(len(rows), k)[b] + r.delta).expand(3, -1).numpy() for b, r in enumerate(reqs)]
        assert (out.numpy() == np.concatenate(parts, axis=1)).all()
        return
    if mode == "extend":
        prefix, extend = lens
        parts = [_full(r, p + e)[:, p:] for r, p, e in zip(reqs, prefix, extend)]
        # tuples: the checked route (the usual forms below take the one-pass reading of the fields)
        checked = engine.positions(tuple(rows), prefix_lens=tuple(prefix), extend_lens=tuple(extend)).clone()
    else:
        parts = [_full(r, s)[:, s - 1 :] for r, s in zip(reqs, lens)]
        checked = engine.positions(tuple(rows), seq_lens=tuple(lens)).clone()
    expected = np.concatenate(parts, axis=1)
    assert (checked.numpy() == expected).all()
    # (host modes return a view of one buffer, so each route's result is read before the next call)
    out = engine.positions(np.array(rows), **_mode_kwargs(mode, lens))
    assert (out.numpy() == expected).all()


def _mode_kwargs(mode, lens) -> dict:
    if mode == "extend":
        return dict(prefix_lens=lens[0], extend_lens=lens[1])
    return dict(seq_lens=torch.tensor(lens))


def test_usual_batch_fields_take_one_pass(monkeypatch):
    """SGLang's usual forms (lists, int64 or int32 arrays and CPU tensors) never reach the checked route's readers."""
    engine = _engine()

    def checked(*args):
        raise AssertionError("the checked route was taken")

    monkeypatch.setattr(engine, "_slots", checked)
    for rows in ([1], np.array([1]), torch.tensor([1])):
        np.testing.assert_array_equal(engine.positions(rows, seq_lens=torch.tensor([5])).numpy(), [[4]] * 3)
        np.testing.assert_array_equal(engine.positions(rows, seq_lens=[3]).numpy(), [[2]] * 3)
        seq32 = torch.tensor([4], dtype=torch.int32)
        np.testing.assert_array_equal(engine.positions(rows, seq_lens=seq32).numpy(), [[3]] * 3)
        step = engine.positions(rows, prefix_lens=np.array([1]), extend_lens=torch.tensor([3]))
        np.testing.assert_array_equal(step.numpy(), [[1, 2, 3]] * 3)
    # refusals: the checked route names them
    for bad in (dict(seq_lens=[0]), dict(prefix_lens=[0], extend_lens=[99]), dict(seq_lens=[1], rows=[2])):
        with pytest.raises(AssertionError, match="checked route"):
            engine.positions(bad.pop("rows", [1]), **bad)


def test_bad_batches_name_the_argument_and_change_nothing():
    engine = BatchPositions(QWEN25, max_num_reqs=4, max_num_tokens=64)
    layout = PromptLayout.from_ranges(QWEN25, 20, image_ranges=[(3, 4)], image_grid_thw=[[1, 4, 4]])
    engine.admit(2, layout)
    before = engine.positions([2], prefix_lens=[0], extend_lens=[20]).clone()
    cases = [
        (ValueError, "req_pool_indices", dict(req_pool_indices=[9], seq_lens=[3])),
        (ValueError, "req_pool_indices", dict(req_pool_indices=[1], seq_lens=[3])),
        (TypeError, "req_pool_indices", dict(req_pool_indices=[[2]], seq_lens=[3])),
        (ValueError, "seq_lens", dict(req_pool_indices=[2], seq_lens=[0])),
        (ValueError, "extend_lens", dict(req_pool_indices=[2], prefix_lens=[0], extend_lens=[1, 2])),
        (ValueError, "extend_lens", dict(req_pool_indices=[2], prefix_lens=[0], extend_lens=[-1])),
        (ValueError, "num_scheduled_tokens|extend_lens", dict(req_pool_indices=[2], prefix_lens=[0], extend_lens=[99])),
        (TypeError, "prefix_lens", dict(req_pool_indices=[2])),
        (TypeError, "extend_lens", dict(req_pool_indices=[2], prefix_lens=[0])),
        (TypeError, "seq_lens", dict(req_pool_indices=[2], seq_lens=np.array([1.5]))),
        (ValueError, "spec_positions", dict(req_pool_indices=torch.tensor([2]), spec_positions=torch.tensor([[1, 2]]))),
        # speculative rows: integer tensors, inside the table (checked where the rows are on the host)
        (TypeError, "req_pool_indices", dict(req_pool_indices=torch.tensor([True]), spec_positions=torch.tensor([7]))),
        (TypeError, "spec_positions", dict(req_pool_indices=torch.tensor([2]), spec_positions=torch.tensor([7.0]))),
        (ValueError, "req_pool_indices", dict(req_pool_indices=torch.tensor([5]), spec_positions=torch.tensor([7]))),
        (ValueError, "req_pool_indices", dict(req_pool_indices=torch.tensor([-1]), spec_positions=torch.tensor([7]))),
    ]
    for error, name, kwargs in cases:
        with pytest.raises(error, match=name):
            engine.positions(kwargs.pop("req_pool_indices"), **kwargs)
    with pytest.raises(ValueError, match="req_pool_idx"):
        engine.admit(5, layout)
    other = MRopeConfig.from_hf_config(load_config("qwen2_vl"), semantics=SEMANTICS)
    with pytest.raises(ValueError, match="layout"):
        engine.admit(2, PromptLayout.from_ranges(other, 9))
    with pytest.raises(KeyError, match="req_pool_idx"):
        engine.release(3)
    assert engine.delta(2) == layout.delta and list(engine.admitted()) == [2]
    assert torch.equal(engine.positions([2], prefix_lens=[0], extend_lens=[20]), before)


def test_a_row_is_replaced_with_every_row_in_use():
    engine = BatchPositions(QWEN25, max_num_reqs=2, max_num_tokens=64)
    for row in (0, 1, 2):
        engine.admit(row, num_tokens=5)
    layout = PromptLayout.from_ranges(QWEN25, 20, image_ranges=[(3, 4)], image_grid_thw=[[1, 4, 4]])
    engine.admit(1, layout)
    assert engine.delta(1) == layout.delta and list(engine.admitted()) == [0, 1, 2]
    other = MRopeConfig.from_hf_config(load_config("qwen2_vl"), semantics=SEMANTICS)
    with pytest.raises(ValueError, match="layout"):  # refused: the row keeps its request
        engine.admit(1, PromptLayout.from_ranges(other, 9))
    assert engine.delta(1) == layout.delta
    step = engine.positions([1], prefix_lens=[0], extend_lens=[20])
    assert torch.equal(step[:, :20], torch.from_numpy(layout.positions()))


def test_rows_are_reused_and_state_grows_with_items():
    engine = BatchPositions(QWEN25, max_num_reqs=2, max_num_tokens=64)
    big = PromptLayout.from_ranges(QWEN25, 100_000, image_ranges=[(3, 4)], image_grid_thw=[[1, 4, 4]])
    engine.admit(1, big)
    assert engine.layout_nbytes(1) < 1000 < 24 * big.num_tokens
    engine.admit(1, num_tokens=7)  # SGLang reuses the row for a text request
    assert engine.delta(1) == 0 and (engine.positions([1], seq_lens=[9]).numpy() == 8).all()
    engine.release(1)
    assert 1 not in engine


# ---------------------------------------------------------------------------------------------- Qwen3-Omni
def _omni_args(prompt) -> tuple[list, dict]:
    config = _config(prompt)
    kw = prompt.kwargs()
    args = _sglang_args(config, prompt)
    args["model_type"] = "qwen3_omni_moe"
    lengths = kw.get("audio_feature_lengths")
    extra = {
        "audio_token_id": config.audio_token_id,
        "audio_start_token_id": config.audio_start_token_id,
        "position_id_per_seconds": config.tokens_per_second,
        "use_audio_in_video": prompt.use_audio_in_video,
        "audio_seqlens": None if lengths is None else torch.from_numpy(lengths),
    }
    return args, extra


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family_prompts("qwen3_omni", min_videos=1))
def test_qwen3_omni_drop_in_is_the_float_carry_rule(prompt):
    """The drop-in's one jitted float32 pass (kernels/sglang_omni.py) gives
    `prompt_positions`' positions and delta (the layout rows of core/float_carry.py),
    as float32; with SGLang's file, SGLang's own positions as prefill casts them."""
    args, extra = _omni_args(prompt)
    positions, deltas = get_rope_index(**args, **extra, semantics=SEMANTICS)
    expected, delta = prompt_positions(_config(prompt), np.array(prompt.token_ids), **prompt.kwargs())
    assert positions.dtype == torch.float32 and deltas.dtype == torch.float32
    assert positions.shape == (3, 1, prompt.num_tokens) and deltas.shape == (1, 1)
    assert (positions[:, 0].numpy().astype(np.int64) == expected).all() and int(deltas) == delta
    if ORACLE:
        theirs = _oracle().get_rope_index(**args, **extra)[0]
        assert torch.equal(theirs.to(torch.int64), positions.to(torch.int64))


def test_qwen3_omni_drop_in_names_a_missing_bracket():
    """A prompt the float pass cannot follow takes the checked route, which names it."""
    config = MRopeConfig.from_hf_config(load_config("qwen3_omni_moe"), semantics=SEMANTICS)
    ids = [1, config.vision_start_token_id, *[config.video_token_id] * 4, 2]  # no vision_end
    with pytest.raises(ValueError, match="token_ids"):
        get_rope_index(
            2, config.image_token_id, config.video_token_id, config.vision_start_token_id, "qwen3_omni_moe", None,
            torch.tensor([ids]), None, torch.tensor([[1, 4, 4]]), torch.tensor([0.5]),
            audio_token_id=config.audio_token_id, audio_start_token_id=config.audio_start_token_id,
            position_id_per_seconds=config.tokens_per_second, semantics=SEMANTICS,
        )  # fmt: skip


def test_argument_forms_give_the_same_positions():
    """Lists, int32 ids, float64 times and non-contiguous grids take the converted route: the same result."""
    config = QWEN25
    ids = [1, config.vision_start_token_id, *[config.video_token_id] * 8, config.vision_end_token_id, 3]
    usual = get_rope_index(2, 151655, 151656, 151652, "qwen2_5_vl", 2, torch.tensor([ids]), None,
                           torch.tensor([[2, 4, 4]]), torch.tensor([1.2]), semantics=SEMANTICS)  # fmt: skip
    grid = torch.tensor([[2, 9], [4, 9], [4, 9]]).t()[:1]  # [[2, 4, 4]], not contiguous
    assert not grid.is_contiguous()
    other = get_rope_index(2, 151655, 151656, 151652, "qwen2_5_vl", 2, torch.tensor([ids], dtype=torch.int32),
                           None, grid, torch.tensor([1.2], dtype=torch.float64), semantics=SEMANTICS)  # fmt: skip
    listed = get_rope_index(2, 151655, 151656, 151652, "qwen2_5_vl", 2, torch.tensor([ids]), None, [[2, 4, 4]],
                            [1.2], semantics=SEMANTICS)  # fmt: skip
    assert other[0].dtype == torch.int32 and torch.equal(usual[0], other[0].long()) and torch.equal(usual[1], other[1])
    assert torch.equal(usual[0], listed[0]) and torch.equal(usual[1], listed[1])


@settings(max_examples=examples(40), deadline=None)
@given(layouts(QWEN25), layouts(QWEN25))
def test_concat_layouts_is_sglangs_merge_of_two_tables(first, second):
    merged = concat_layouts(first, second)
    expected = np.concatenate([first.positions(), second.positions()], axis=1)
    assert merged.num_tokens == expected.shape[1] and (merged.positions() == expected).all()
    assert merged.delta == int(expected.max()) + 1 - expected.shape[1]


def test_concat_layouts_names_bad_input():
    layout = text_layout(QWEN25, 4)
    with pytest.raises(TypeError, match="second"):
        concat_layouts(layout, np.zeros((3, 4)))
    other = text_layout(MRopeConfig.from_hf_config(load_config("qwen2_vl"), semantics=SEMANTICS), 4)
    with pytest.raises(ValueError, match="second"):
        concat_layouts(layout, other)


# ---------------------------------------------------------------------------------------- found by a fuzz


def _glm_hf_config():
    raw = load_config("glm4v")
    fields = {key: value for key, value in raw.items() if key != "vision_config"}
    return types.SimpleNamespace(**fields, vision_config=types.SimpleNamespace(**raw["vision_config"]))


def test_glm4v_reads_a_config_changed_in_place_again():
    """The drop-in keeps a config object's parse only while the object reads the same: a token id changed
    in place is read again, as SGLang reads it on every call."""
    hf = _glm_hf_config()
    start, end, image = hf.image_start_token_id, hf.image_end_token_id, hf.image_token_id
    grid = torch.tensor([[1, 2, 4]])
    get_rope_index_glm4v(torch.tensor([[start, image, image, end]]), hf, grid, None, None, semantics=SEMANTICS)
    hf.image_token_id = 7
    ids = torch.tensor([[start, image, image, end, start, 7, 7, end]])  # the old id is text now
    positions, _ = get_rope_index_glm4v(ids, hf, grid, None, None, semantics=SEMANTICS)
    assert positions[0, 0].tolist() == [0, 1, 2, 3, 4, 5, 5, 7]  # SGLang 0.5.23's own, with the new id


@pytest.mark.parametrize(
    "mask, error",
    [
        (torch.ones(1, 2, dtype=torch.long), ValueError),
        ([[1, 1, 1], [1, 1, 1]], TypeError),
        (np.ones((2, 3), np.int64), TypeError),
        (torch.ones(2, 3, dtype=torch.complex64), TypeError),
    ],
)
def test_glm4v_checks_the_attention_mask_without_grids_too(mask, error):
    ids = torch.tensor([[1, 2, 3], [4, 5, 6]])
    with pytest.raises(error, match="attention_mask"):
        get_rope_index_glm4v(ids, _glm_hf_config(), None, None, mask, semantics=SEMANTICS)


def test_glm4v_positions_an_empty_masked_batch():
    positions, deltas = get_rope_index_glm4v(
        torch.zeros(2, 0, dtype=torch.long), _glm_hf_config(), None, None, torch.ones(2, 0), semantics=SEMANTICS
    )
    assert positions.shape == (3, 2, 0) and deltas.tolist() == [[0], [0]]


def _engine() -> BatchPositions:
    engine = BatchPositions(MRopeConfig(family="qwen2_5_vl", semantics=SEMANTICS), max_num_reqs=3, max_num_tokens=32)
    engine.admit(1, num_tokens=5)
    return engine


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(prefix_lens=torch.zeros(1, requires_grad=True), extend_lens=[2]), "prefix_lens"),
        (dict(prefix_lens=torch.zeros(1, dtype=torch.bfloat16), extend_lens=[2]), "prefix_lens"),
        (dict(seq_lens=torch.tensor([1 + 0j]).conj()), "seq_lens"),
    ],
)
def test_batch_fields_torch_cannot_hand_to_numpy_are_named(kwargs, name):
    engine = _engine()
    with pytest.raises(TypeError, match=name):
        engine.positions([1], **kwargs)
    np.testing.assert_array_equal(engine.positions([1], seq_lens=[5]).numpy()[:, 0], [4, 4, 4])  # nothing changed


def test_batch_refusals_name_the_row_and_the_argument():
    engine = _engine()
    with pytest.raises(ValueError, match=r"req_pool_indices: expected a 1-D tensor"):
        engine.positions(torch.tensor(1), spec_positions=torch.tensor([5]))
    with pytest.raises(ValueError, match=r"for req_pool_indices\[0\] = 1,"):
        engine.positions([1], seq_lens=[2**63 - 1])
    with pytest.raises(TypeError, match="req_pool_idx"):
        float("inf") in engine  # noqa: B015 (the membership test is the call under test)
    assert 1 in engine and 2 not in engine and -1 not in engine and 99 not in engine


@pytest.mark.parametrize(
    "audio",
    [
        torch.tensor([], dtype=torch.long, device="meta"),
        torch.tensor([], dtype=torch.complex64).conj(),
        torch.tensor([], dtype=torch.bfloat16),
    ],
)
def test_qwen3_omni_names_audio_seqlens_torch_cannot_read(audio):
    config = MRopeConfig(family="qwen3_omni", semantics=SEMANTICS)
    with pytest.raises(TypeError, match="audio_seqlens"):
        get_rope_index(**_omni_image_call(config), audio_seqlens=audio, semantics=SEMANTICS)


def test_qwen3_omni_names_position_id_per_seconds():
    config = MRopeConfig(family="qwen3_omni", semantics=SEMANTICS)
    call = {**_omni_image_call(config), "position_id_per_seconds": float("nan")}
    with pytest.raises(ValueError, match="^position_id_per_seconds: expected a number in"):
        get_rope_index(**call, semantics=SEMANTICS)


def _omni_image_call(config: MRopeConfig) -> dict:
    ids = [1, config.vision_start_token_id, *[config.image_token_id] * 4, config.vision_end_token_id, 2]
    return dict(
        spatial_merge_size=2,
        image_token_id=config.image_token_id,
        video_token_id=config.video_token_id,
        vision_start_token_id=config.vision_start_token_id,
        model_type="qwen3_omni_moe",
        tokens_per_second=None,
        input_ids=torch.tensor([ids]),
        image_grid_thw=torch.tensor([[1, 4, 4]]),
        audio_token_id=config.audio_token_id,
        audio_start_token_id=config.audio_start_token_id,
        position_id_per_seconds=13.0,
        use_audio_in_video=False,
    )


def test_a_bool_rate_is_refused_after_an_int_call_too():
    """True == 1 as a cache key: the kept plan of an int call must not serve a bool one."""
    args = (2, 151655, 151656, 151652, "qwen2_5_vl")
    ids = torch.tensor([[1, 151652, 151656, 151656, 151653, 3]])
    video, times = torch.tensor([[2, 2, 2]]), torch.tensor([1.0])
    get_rope_index(*args, 1, ids, None, video, times, semantics=SEMANTICS)
    with pytest.raises(TypeError, match="tokens_per_second"):
        get_rope_index(*args, True, ids, None, video, times, semantics=SEMANTICS)
    config = MRopeConfig(family="qwen3_omni", semantics=SEMANTICS)
    get_rope_index(**_omni_image_call(config), semantics=SEMANTICS)
    with pytest.raises(TypeError, match="audio_token_id"):
        call = {**_omni_image_call(config), "audio_token_id": float(config.audio_token_id)}
        get_rope_index(**call, semantics=SEMANTICS)


def test_sparse_and_wide_forms_are_named():
    args = (2, 151655, 151656, 151652, "qwen2_5_vl", 2)
    ids = torch.tensor([[1, 151652, 151656, 151656, 151653, 3]])
    with pytest.raises(TypeError, match="second_per_grid_ts"):
        get_rope_index(
            *args, ids, None, torch.tensor([[2, 2, 2]]), torch.tensor([1.0]).to_sparse(), semantics=SEMANTICS
        )
    hf = _glm_hf_config()
    glm_ids = torch.tensor(
        [[1, hf.image_start_token_id, hf.image_token_id, hf.image_token_id, hf.image_end_token_id, 2]]
    )
    sparse_mask = torch.ones(1, 6, dtype=torch.long).to_sparse()
    with pytest.raises(TypeError, match="attention_mask"):
        get_rope_index_glm4v(glm_ids, hf, torch.tensor([[1, 2, 4]]), None, sparse_mask, semantics=SEMANTICS)
    with pytest.raises(ValueError, match="^prefix_lens: expected values below 2\\*\\*63, got 9223372036854775808"):
        _engine().positions([1], prefix_lens=np.array([2**63], np.uint64), extend_lens=[1])
    layout = PromptLayout.from_ranges(MRopeConfig(family="qwen2_5_vl"), 5)
    with pytest.raises(TypeError, match="config"):
        read_layout(layout, {"model_type": "qwen2_5_vl"})


def test_batch_positions_names_its_own_token_budget():
    """Found by a fuzz: a bad max_num_tokens was refused under the tracker's name, max_num_batched_tokens."""
    for bad, error in ((-1, ValueError), (None, TypeError), (2**40, ValueError)):
        with pytest.raises(error, match="max_num_tokens: expected an int"):
            BatchPositions(QWEN25, max_num_reqs=2, max_num_tokens=bad)


def test_a_huge_qwen3_omni_video_grid_is_named_not_allocated():
    """Found by a fuzz: under SGLang's float32 rule a video grid of 2**40 frames made its frame times
    (an array of t values, 4 TiB) before the builder could refuse the grid: a MemoryError. (The builder names the
    times, whose temporal positions pass 2**31 first.)"""
    config = MRopeConfig(family="qwen3_omni", model_type="qwen3_omni_moe", semantics=SEMANTICS)
    ids = [1, config.vision_start_token_id, *[config.video_token_id] * 8, config.vision_end_token_id, 2]
    huge = np.full((1, 3), 2**40, np.int64)
    with pytest.raises(ValueError, match="video_grid_thw|second_per_grid_ts"):
        prompt_positions(config, ids, video_grid_thw=huge, second_per_grid_ts=[2 / 3])
    with pytest.raises(ValueError, match="video_grid_thw|second_per_grid_ts"):
        get_rope_index_qwen3_omni(
            2, config.image_token_id, config.video_token_id, config.vision_start_token_id, None,
            torch.tensor([ids]), None, torch.from_numpy(huge), torch.tensor([2 / 3]), semantics=SEMANTICS,
            audio_token_id=config.audio_token_id, audio_start_token_id=config.audio_start_token_id,
            position_id_per_seconds=13,
        )  # fmt: skip


def test_qwen3_omni_use_audio_in_video_must_be_a_bool():
    """Found by a fuzz: any value was taken by its truth (an array raised numpy's unnamed ValueError)."""
    config = MRopeConfig(family="qwen3_omni", model_type="qwen3_omni_moe", semantics=SEMANTICS)
    ids = [1, config.vision_start_token_id, *[config.video_token_id] * 8, config.vision_end_token_id, 2]
    for bad in (-1, np.zeros((2, 2)), "yes"):
        with pytest.raises(TypeError, match="use_audio_in_video: expected a bool"):
            get_rope_index_qwen3_omni(
                2, config.image_token_id, config.video_token_id, config.vision_start_token_id, None,
                torch.tensor([ids]), None, torch.tensor([[2, 4, 4]]), torch.tensor([2 / 3]), semantics=SEMANTICS,
                audio_token_id=config.audio_token_id, audio_start_token_id=config.audio_start_token_id,
                position_id_per_seconds=13, use_audio_in_video=bad,
            )  # fmt: skip


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_speculative_batch_on_the_device_reads_no_row_past_the_table():
    """Device rows are not read back to be checked: a row outside the table is clamped into it."""
    engine = BatchPositions(QWEN25, max_num_reqs=3, max_num_tokens=32, device="cuda")
    layout = PromptLayout.from_ranges(QWEN25, 20, image_ranges=[(3, 4)], image_grid_thw=[[1, 4, 4]])
    engine.admit(3, layout)
    rows = torch.tensor([3, -5, 99], device="cuda")
    out = engine.positions(rows, spec_positions=torch.tensor([30, 31, 32], device="cuda"))
    assert out.cpu().tolist() == [[30 + layout.delta, 31, 32 + layout.delta]] * 3
