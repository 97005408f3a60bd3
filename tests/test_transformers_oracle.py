"""transformers 4.57.6 as the oracle: its own ``get_rope_index`` (run without
weights, tests/hf_oracle.py) against our reference and fast paths, on random
prompts laid out as each family's processor lays them out
(tests/family_prompts.py).

transformers is the reference semantics (docs/semantics.md) for: Qwen2-VL;
Qwen2.5-VL with integral second_per_grid_ts (4.57 truncates fractions before
multiplying: D2 in docs/semantics.md); Qwen2.5-Omni, audio-in-video laid out in the model's
own chunking (its get_rope_index assigns positions in that order whatever
the tokens are); Qwen3-VL; GLM-4.1V/4.5V; Qwen3-Omni with integral sp * rate
(int positions) and, through the reference's float mode, any rate.

The oracle itself is first checked on the worked examples T1-T12 of the
worked examples of docs/semantics.md (expected values written from their text, as
transformers 4.57.6 applies) and against transformers' own Omni processors.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

transformers = pytest.importorskip("transformers")
if int(transformers.__version__.split(".")[0]) >= 5:
    # 5.x reworked get_rope_index (it reads mm_token_type_ids); this oracle is 4.57's, the
    # reference semantics. tests/test_hf_drop_in.py compares with whichever line is installed.
    pytest.skip(
        f"the oracle is transformers 4.57's get_rope_index, found transformers {transformers.__version__}",
        allow_module_level=True,
    )

from family_prompts import (  # noqa: E402
    FAMILIES,
    family_prompts,
    interleave_matches_model,
    load_config,
    omni_interleave,
    qwen3_omni_merge,
    qwen3_omni_processor_times,
    special_ids,
    video_rates,
)
from hf_oracle import hf_positions, hf_processor_interleave, hf_rope_index  # noqa: E402
from spec_cases import tokens  # noqa: E402
from strategies import examples  # noqa: E402

# transformers' scans are slow Python: half the profile's examples.
few_examples = settings(max_examples=examples(150, minimum=10))


# --------------------------------------------------------------------------
# The oracle on the worked examples of docs/semantics.md
# --------------------------------------------------------------------------


def _omni_toy() -> dict:
    """The toy Omni config of worked example T6: r = 2, 2 s chunks (C = 4)."""
    config = copy.deepcopy(load_config("qwen2_5_omni"))
    config["thinker_config"]["position_id_per_seconds"] = 2
    return config


def _same(v):
    return (v, v, v)


# (name, family, config, prompt, hf kwargs, delta, {token index: (T, H, W)}, full rows or None)
SPEC_EXAMPLES = [
    (
        "T1 Qwen2-VL image",
        "qwen2_vl",
        "qwen2_vl",
        "t t VS I*6 VE t t",
        dict(image_grid_thw=[[1, 4, 6]]),
        -3,
        {9: _same(6)},
        (
            (0, 1, 2, 3, 3, 3, 3, 3, 3, 6, 7, 8),
            (0, 1, 2, 3, 3, 3, 4, 4, 4, 6, 7, 8),
            (0, 1, 2, 3, 4, 5, 3, 4, 5, 6, 7, 8),
        ),
    ),
    (
        "T2 Qwen2-VL video",
        "qwen2_vl",
        "qwen2_vl",
        "t VS V*12 VE t t",
        dict(video_grid_thw=[[3, 4, 4]]),
        -9,
        {2: (2, 2, 2), 5: (2, 3, 3), 6: (3, 2, 2), 13: (4, 3, 3), 14: _same(5)},
        None,
    ),
    (
        "T3 Qwen2.5-VL sp 1",
        "qwen2_5_vl",
        "qwen2_5_vl",
        "t VS V*8 VE t t",
        dict(video_grid_thw=[[4, 2, 4]], second_per_grid_ts=[1.0]),
        -1,
        {10: _same(9)},
        (
            (0, 1, 2, 2, 4, 4, 6, 6, 8, 8, 9, 10, 11),
            (0, 1, 2, 2, 2, 2, 2, 2, 2, 2, 9, 10, 11),
            (0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 9, 10, 11),
        ),
    ),
    # D2: 4.57 truncates sp = 0.5 to 0, so every frame sits at T = 2.
    (
        "T4 Qwen2.5-VL sp 0.5 (4.57)",
        "qwen2_5_vl",
        "qwen2_5_vl",
        "t VS V*8 VE t t",
        dict(video_grid_thw=[[4, 2, 4]], second_per_grid_ts=[0.5]),
        -6,
        {2: (2, 2, 2), 9: (2, 2, 3), 10: _same(4)},
        None,
    ),
    # D2: sp = float32(2/1.2) truncates to 1, tau 0, 2, 4, 6 as with sp = 1.
    (
        "T5 Qwen2.5-VL fps 1.2 (4.57)",
        "qwen2_5_vl",
        "qwen2_5_vl",
        "t VS V*8 VE t t",
        dict(video_grid_thw=[[4, 2, 4]], second_per_grid_ts=[float(np.float32(2 / 1.2))]),
        -1,
        {2: (2, 2, 2), 4: (4, 2, 2), 6: (6, 2, 2), 8: (8, 2, 2), 10: _same(9)},
        None,
    ),
    (
        "T6 Omni audio in video, toy",
        "qwen2_5_omni",
        _omni_toy(),
        "t VS AS V*4 A*4 V*4 A*2 AE VE t",
        dict(video_grid_thw=[[4, 2, 4]], second_per_grid_ts=[1.0], audio_feature_lengths=[24], use_audio_in_video=True),
        -10,
        {1: _same(1), 2: _same(1), 17: _same(8), 18: _same(8)},
        (
            (0, 1, 1, 2, 2, 4, 4, 2, 3, 4, 5, 6, 6, 8, 8, 6, 7, 8, 8, 9),
            (0, 1, 1, 2, 2, 2, 2, 2, 3, 4, 5, 2, 2, 2, 2, 6, 7, 8, 8, 9),
            (0, 1, 1, 2, 3, 2, 3, 2, 3, 4, 5, 2, 3, 2, 3, 6, 7, 8, 8, 9),
        ),
    ),
    (
        "T7 Omni audio in video, 7B",
        "qwen2_5_omni",
        "qwen2_5_omni",
        "t VS AS V*8 A*50 V*8 A*50 AE VE t",
        dict(
            video_grid_thw=[[4, 4, 4]], second_per_grid_ts=[1.0], audio_feature_lengths=[400], use_audio_in_video=True
        ),
        -18,
        {1: _same(1), 2: _same(1), 3: _same(2), 11: _same(2), 119: _same(102), 120: _same(102), 121: _same(103)},
        None,
    ),
    (
        "T8 Qwen3-VL image and video",
        "qwen3_vl",
        "qwen3_vl",
        "t VS I*6 VE t t t VS V*4 VE t t VS V*4 VE t t",
        dict(image_grid_thw=[[1, 4, 6]], video_grid_thw=[[2, 4, 4]]),
        -7,
        {},
        (
            (0, 1, 2, 2, 2, 2, 2, 2, 5, 6, 7, 8, 9, 10, 10, 10, 10, 12, 13, 14, 15, 16, 16, 16, 16, 18, 19, 20),
            (0, 1, 2, 2, 2, 3, 3, 3, 5, 6, 7, 8, 9, 10, 10, 11, 11, 12, 13, 14, 15, 16, 16, 17, 17, 18, 19, 20),
            (0, 1, 2, 3, 4, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 10, 11, 12, 13, 14, 15, 16, 17, 16, 17, 18, 19, 20),
        ),
    ),
    (
        "T9 Qwen3-Omni sp 1",
        "qwen3_omni",
        "qwen3_omni_moe",
        "t VS AS V V A*13 V V V V AE VE t",
        dict(
            video_grid_thw=[[3, 2, 4]], second_per_grid_ts=[1.0], audio_feature_lengths=[100], use_audio_in_video=True
        ),
        8,
        {
            1: _same(1),
            2: _same(2),
            3: (3, 3, 3),
            4: (3, 3, 4),
            5: _same(3),
            17: _same(15),
            18: (16, 3, 3),
            19: (16, 3, 4),
            20: (29, 3, 3),
            21: (29, 3, 4),
            22: _same(30),
            23: _same(31),
            24: _same(32),
        },
        None,
    ),
    (
        "T11 Qwen3-Omni short audio, big frame",
        "qwen3_omni",
        "qwen3_omni_moe",
        "t VS AS V*64 A*7 AE VE t",
        dict(
            video_grid_thw=[[1, 16, 16]], second_per_grid_ts=[1.0], audio_feature_lengths=[50], use_audio_in_video=True
        ),
        -64,
        {74: _same(10), 75: _same(11)},
        None,
    ),
    (
        "T12 GLM-4.1V image and video",
        "glm4v",
        "glm4v",
        "t BOI I*6 EOI t BOV BOI I*4 EOI t t BOI I*4 EOI t t EOV t t",
        dict(image_grid_thw=[[1, 4, 6]], video_grid_thw=[[2, 4, 4]]),
        -7,
        {
            2: (2, 2, 2),
            7: (2, 3, 4),
            8: _same(5),
            11: _same(8),
            12: (9, 9, 9),
            15: (9, 10, 10),
            16: _same(11),
            20: (15, 15, 15),
            23: (15, 16, 16),
            27: _same(20),
            29: _same(22),
        },
        None,
    ),
]


@pytest.mark.parametrize("case", SPEC_EXAMPLES, ids=[c[0] for c in SPEC_EXAMPLES])
def test_oracle_matches_spec_examples(case):
    """transformers' get_rope_index, as the oracle runs it, gives the documented worked-example positions."""
    _, family, config, prompt, kwargs, delta, points, rows = case
    config = load_config(config) if isinstance(config, str) else config
    ids = tokens(special_ids(family, config), prompt)
    positions, got_delta = hf_positions(config, ids, **kwargs)
    assert positions.shape == (3, len(ids))
    assert got_delta == delta
    if rows is not None:
        assert positions.tolist() == [list(r) for r in rows]
    for index, want in points.items():
        assert tuple(positions[:, index].tolist()) == want, index


def test_oracle_qwen3_omni_fractional_time():
    """Qwen3-Omni at fps 3 (sp = 2/3): fractional float32 positions and delta (worked example T10)."""
    config = load_config("qwen3_omni_moe")
    ids = tokens(special_ids("qwen3_omni", config), "t VS AS V V A*9 V V A*4 V V AE VE t")
    positions, delta = hf_positions(
        config,
        ids,
        video_grid_thw=[[3, 2, 4]],
        second_per_grid_ts=[2 / 3],
        audio_feature_lengths=[100],
        use_audio_in_video=True,
    )
    assert positions.dtype == torch.float32
    expect = {3: 3.0, 14: 3 + 26 / 3, 20: 3 + 52 / 3, 22: 4 + 52 / 3, 23: 5 + 52 / 3, 24: 6 + 52 / 3}
    for index, value in expect.items():
        assert positions[0, index].item() == pytest.approx(value, abs=1e-4), index
    assert delta == pytest.approx(7 + 52 / 3 - 25, abs=1e-4)


def test_oracle_batch_padding_conventions():
    """Batched, left-padded rows: positions per row as alone; pads and delta as the oracle documents (D10)."""
    for family in ("qwen2_vl", "qwen2_5_omni", "qwen3_omni"):
        config = load_config("qwen3_omni_moe" if family == "qwen3_omni" else family)
        symbols = special_ids(family, config)
        ids_a, ids_b = tokens(symbols, "t VS I*6 VE t"), tokens(symbols, "t t t VS I*6 VE")
        width = max(len(ids_a), len(ids_b)) + 2
        batch = [[0] * (width - len(x)) + x for x in (ids_a, ids_b)]
        mask = [[0] * (width - len(x)) + [1] * len(x) for x in (ids_a, ids_b)]
        positions, deltas = hf_rope_index(config, batch, attention_mask=mask, image_grid_thw=[[1, 4, 6]] * 2)
        for row, ids in enumerate((ids_a, ids_b)):
            alone, alone_delta = hf_positions(config, ids, image_grid_thw=[[1, 4, 6]])
            pads = width - len(ids)
            assert torch.equal(positions[:, row, pads:], alone)
            assert positions[:, row, :pads].eq(0 if family == "qwen3_omni" else 1).all()
            # VL models take the delta against the padded length, the Omni thinkers the unpadded one.
            assert deltas[row, 0].item() == alone_delta - (pads if family == "qwen2_vl" else 0)


@few_examples
@given(
    family=st.sampled_from(("qwen2_5_omni", "qwen3_omni")),
    t=st.integers(1, 40),
    hw=st.sampled_from((1, 2, 4, 6)),
    rate=video_rates(),
    frames=st.integers(1, 1500),
)
def test_processor_interleaves_match_transformers(family, t, hw, rate, frames):
    """Our statement of the Omni processors' audio-in-video layout equals transformers' processor."""
    sp32, sp64, _ = rate
    num_audio = 1 + frames // 4
    grid = (t, 2, 2 * hw)
    expect = hf_processor_interleave(family, grid, sp64, num_audio)
    if family == "qwen2_5_omni":
        ours = omni_interleave("transformers", t, hw, sp32, sp64, num_audio, 25.0, 2.0)
    else:
        ours = qwen3_omni_merge(qwen3_omni_processor_times(t, hw, sp64, 13.0), num_audio)
    assert ours == expect


@few_examples
@given(prompt=st.sampled_from(FAMILIES).flatmap(family_prompts))
def test_generated_ranges_mark_exactly_the_placeholders(prompt):
    """Both range forms of a generated prompt cover its placeholder tokens and nothing else."""
    ids = special_ids(prompt.family, prompt.config)
    pads = {"image": ids["I"], "video": ids.get("V", ids["I"]), "audio": ids.get("A")}
    tokens = np.array(prompt.token_ids)
    marked = np.zeros(len(tokens), dtype=int)
    for r in prompt.vllm_ranges:
        span = tokens[r.offset : r.offset + r.length]
        embed = np.ones(r.length, bool) if r.is_embed is None else np.array(r.is_embed)
        assert len(embed) == r.length and np.array_equal(span == pads[r.modality], embed)
        marked[r.offset : r.offset + r.length] += embed
    if prompt.av_blocks:  # with use_audio_in_video every video is such a block
        assert [(b.offset, len(b.kinds)) for b in prompt.av_blocks] == list(prompt.video_ranges)
    ours_marked = np.zeros(len(tokens), dtype=int)
    for offset, length, *embed in prompt.image_ranges + prompt.video_ranges + prompt.audio_ranges:
        ours_marked[offset : offset + length] += np.array(embed[0]) if embed else 1
    placeholders = np.isin(tokens, [v for v in pads.values() if v is not None])
    assert np.array_equal(marked > 0, placeholders) and marked.max(initial=0) <= 1
    assert np.array_equal(ours_marked, placeholders.astype(int))


# --------------------------------------------------------------------------
# What each family is compared on
# --------------------------------------------------------------------------

# (test id, family, family_prompts keyword arguments); all give integer positions in transformers.
INT_CASES = [
    ("qwen2_vl", "qwen2_vl", {}),
    ("qwen2_5_vl-integer-sp", "qwen2_5_vl", dict(integer_sp=True)),
    ("qwen2_5_omni", "qwen2_5_omni", dict(use_audio_in_video=False)),
    ("qwen2_5_omni-av-model", "qwen2_5_omni", dict(use_audio_in_video=True, interleave="model", min_videos=1)),
    ("qwen3_vl", "qwen3_vl", {}),
    ("glm4v", "glm4v", {}),
    ("qwen3_omni-integer-sp", "qwen3_omni", dict(integer_sp=True)),
    ("qwen3_omni-av-integer-sp", "qwen3_omni", dict(integer_sp=True, use_audio_in_video=True, min_videos=1)),
]
int_cases = pytest.mark.parametrize("family, kwargs", [c[1:] for c in INT_CASES], ids=[c[0] for c in INT_CASES])


def _hf_int(prompt):
    """transformers' positions as int64 (Qwen3-Omni's float32 ones must be integral here)."""
    positions, delta = hf_positions(None, prompt)
    if positions.dtype.is_floating_point:
        assert torch.equal(positions, positions.round()) and float(delta).is_integer()
        positions, delta = positions.long(), int(delta)
    return positions, delta


def _config(prompt):
    from mrope_tracker import MRopeConfig

    return MRopeConfig.from_hf_config(prompt.config)


# --------------------------------------------------------------------------
# (a) the reference equals transformers
# --------------------------------------------------------------------------


@int_cases
@few_examples
@given(data=st.data())
def test_reference_matches_transformers(family, kwargs, data):
    """reference.prompt_positions equals transformers' get_rope_index where transformers is the reference."""
    from mrope_tracker import reference

    prompt = data.draw(family_prompts(family, **kwargs), label="prompt")
    assert interleave_matches_model(prompt)
    expect, expect_delta = _hf_int(prompt)
    got, delta = reference.prompt_positions(prompt.config, list(prompt.token_ids), **prompt.kwargs())
    assert torch.equal(torch.as_tensor(got), expect)
    assert delta == expect_delta


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen2_5_omni", "qwen3_omni"])
@few_examples
@given(data=st.data())
def test_reference_default_second_per_grid_ts_matches_transformers(family, data):
    """Without second_per_grid_ts the reference uses the default transformers (or its processor) uses."""
    from mrope_tracker import reference

    prompt = data.draw(family_prompts(family, use_audio_in_video=False, min_videos=1), label="prompt")
    kwargs = {k: v for k, v in prompt.hf_kwargs().items() if k != "second_per_grid_ts"}
    expect, expect_delta = hf_positions(prompt.config, prompt.token_ids, **kwargs)
    got, delta = reference.prompt_positions(prompt.config, list(prompt.token_ids), **kwargs)
    assert torch.equal(torch.as_tensor(got).to(expect.dtype), expect)
    assert delta == expect_delta


@few_examples
@given(prompt=family_prompts("qwen3_omni", use_audio_in_video=None))
def test_reference_float_positions_match_transformers_qwen3_omni(prompt):
    """Qwen3-Omni at any frame rate: the reference's float mode equals transformers' float32 positions exactly."""
    from mrope_tracker import reference

    assume(interleave_matches_model(prompt))
    expect, expect_delta = hf_positions(None, prompt)
    got, delta = reference.prompt_positions(
        prompt.config, list(prompt.token_ids), float_positions=True, **prompt.kwargs()
    )
    got = torch.as_tensor(got)
    assert got.dtype == torch.float32
    assert torch.equal(got, expect)
    assert np.float32(delta) == np.float32(expect_delta)


# --------------------------------------------------------------------------
# (b) the fast paths equal transformers
# --------------------------------------------------------------------------


@int_cases
@few_examples
@given(data=st.data())
def test_prompt_positions_matches_transformers(family, kwargs, data):
    """prompt_positions (token scan) equals transformers' get_rope_index."""
    from mrope_tracker import prompt_positions

    prompt = data.draw(family_prompts(family, **kwargs), label="prompt")
    expect, expect_delta = _hf_int(prompt)
    got, delta = prompt_positions(_config(prompt), np.array(prompt.token_ids, dtype=np.int64), **prompt.kwargs())
    assert np.array_equal(got, expect.numpy())
    assert delta == expect_delta


@int_cases
@few_examples
@given(data=st.data())
def test_layout_from_ranges_matches_transformers(family, kwargs, data):
    """PromptLayout.from_ranges (our range form, no token read) equals transformers' get_rope_index."""
    from mrope_tracker import PromptLayout

    prompt = data.draw(family_prompts(family, **kwargs), label="prompt")
    expect, expect_delta = _hf_int(prompt)
    layout = PromptLayout.from_ranges(_config(prompt), prompt.num_tokens, **prompt.range_kwargs())
    assert np.array_equal(layout.positions(), expect.numpy())
    assert layout.delta == expect_delta


def _chunks(data, total: int) -> list[int]:
    """Random positive chunk sizes summing to `total`."""
    cuts = data.draw(st.lists(st.integers(1, max(1, total - 1)), max_size=6, unique=True)) if total > 1 else []
    edges = [0, *sorted(c for c in cuts if 0 < c < total), total]
    return [b - a for a, b in zip(edges, edges[1:])]


@int_cases
@few_examples
@given(data=st.data())
def test_tracker_chunked_prefill_matches_transformers(family, kwargs, data):
    """A PositionTracker fed the prompt in random chunks, then two decode tokens, follows transformers."""
    from mrope_tracker import PositionTracker

    prompt = data.draw(family_prompts(family, **kwargs), label="prompt")
    expect, expect_delta = _hf_int(prompt)
    length = prompt.num_tokens
    tracker = PositionTracker(_config(prompt), max_num_reqs=2, max_num_batched_tokens=length + 2)
    tracker.add_request("r", np.array(prompt.token_ids, dtype=np.int64), **prompt.kwargs())
    steps = [tracker.prepare(["r"], [n]).clone() for n in _chunks(data, length)]
    decode = tracker.prepare(["r"], [2]).clone()
    assert torch.equal(torch.cat(steps, dim=1).cpu().long(), expect)
    following = torch.arange(length, length + 2) + expect_delta
    assert torch.equal(decode.cpu().long(), following.expand(3, -1))
