"""The ``sglang-0.5`` preset: every fast path equals the reference under it, and
where SGLang 0.5.23's own code fails (defects 1-5 in docs/semantics.md,
section 4.4) the preset does the right thing.

SGLang's own functions check the preset in tests/test_sglang_oracle.py (CI)
and through the recorded vectors in tests/test_sglang_vectors.py.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from family_prompts import ALL_FAMILIES, family_prompts, load_config
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import examples
from triton_support import require_triton

from mrope_tracker import MRopeConfig, PositionTracker, PromptLayout, next_positions, prompt_positions, reference
from mrope_tracker.families import FAMILIES

OMNI = load_config("qwen3_omni_moe")
SGLANG = "sglang-0.5"


def _omni(**fields) -> MRopeConfig:
    return (
        MRopeConfig.from_hf_config(OMNI, semantics=SGLANG)
        if not fields
        else MRopeConfig(family="qwen3_omni", semantics=SGLANG, **fields)
    )


def _same_everywhere(config, token_ids, kwargs, range_kwargs=None):
    """prompt_positions, both layouts, a byte round trip and the reference agree; returns the reference."""
    expected, delta = reference.prompt_positions(config, list(token_ids), **kwargs)
    expected = expected.numpy()
    got, got_delta = prompt_positions(config, list(token_ids), **kwargs)
    np.testing.assert_array_equal(got, expected)
    assert got_delta == delta == int(expected.max()) + 1 - len(token_ids)
    layouts = [PromptLayout.from_tokens(config, list(token_ids), **kwargs)]
    if range_kwargs is not None:
        layouts.append(PromptLayout.from_ranges(config, len(token_ids), **range_kwargs))
    for layout in layouts:
        np.testing.assert_array_equal(layout.positions(), expected)
        assert layout.delta == delta
        again = PromptLayout.from_bytes(layout.to_bytes())  # checked like any foreign layout
        np.testing.assert_array_equal(again.positions(), expected)
    return expected, delta


@settings(max_examples=examples(150, minimum=30))
@given(family=st.sampled_from(ALL_FAMILIES), data=st.data())
def test_fast_paths_equal_reference(family, data):
    """Random prompts of every family the repository draws: the fast paths equal
    the reference under the preset (for Qwen3-Omni, its float32 rule)."""
    prompt = data.draw(family_prompts(family))
    config = MRopeConfig.from_hf_config(prompt.config, semantics=SGLANG)
    _same_everywhere(config, prompt.token_ids, prompt.kwargs(), prompt.range_kwargs())


@st.composite
def near_integer_times(draw):
    """A Qwen3-Omni prompt of plain videos, images and audio whose frame times
    land on or just off whole numbers, so that float32 sums of the carried
    fractions round across integers (and across H/W rows inside frames)."""
    rate = draw(st.sampled_from((13, 25, 2, 3)))
    config = _omni(tokens_per_second=rate, spatial_merge_size=2)
    ids = [100] * draw(st.integers(0, 40))
    videos, sps, audio = [], [], []
    for kind in draw(st.lists(st.sampled_from(("video", "image", "audio")), min_size=1, max_size=4)):
        if kind == "video":
            sp = np.float32(draw(st.integers(1, 80)) / rate / draw(st.sampled_from((1, 2, 3))))
            for _ in range(draw(st.integers(0, 3))):
                sp = np.nextafter(sp, np.float32(draw(st.sampled_from((0, 100)))))
            t, h, w = draw(st.integers(1, 6)), 2 * draw(st.integers(1, 8)), 2 * draw(st.integers(1, 8))
            ids += [config.vision_start_token_id] + [config.video_token_id] * (t * h * w // 4)
            ids += [config.vision_end_token_id]
            videos.append((t, h, w))
            sps.append(float(sp))
        elif kind == "image":
            h, w = 2 * draw(st.integers(1, 8)), 2 * draw(st.integers(1, 8))
            ids += [config.vision_start_token_id] + [config.image_token_id] * (h * w // 4)
            ids += [config.vision_end_token_id]
            videos.append(None)
            sps.append((1, h, w))
        else:
            frames = draw(st.integers(1, 300))
            audio.append(frames)
            n = reference.audio_token_count(frames, n_window=50)
            ids += [config.audio_start_token_id] + [config.audio_token_id] * n + [config.audio_end_token_id]
        ids += [100] * draw(st.integers(0, 70))
    kwargs = {
        "video_grid_thw": [v for v in videos if v is not None] or None,
        "second_per_grid_ts": [s for v, s in zip(videos, sps) if v is not None] or None,
        "image_grid_thw": [s for v, s in zip(videos, sps) if v is None] or None,
        "audio_feature_lengths": audio or None,
    }
    return config, ids, {k: v for k, v in kwargs.items() if v is not None}


@settings(max_examples=examples(300, minimum=60))
@given(case=near_integer_times())
def test_float32_rounding_across_integers(case):
    """Fractions carried from one item to the next, rounded where sums cross a
    power of two: the rows the fast path makes give the reference's positions."""
    config, ids, kwargs = case
    _same_everywhere(config, ids, kwargs)


def test_rounding_skips_an_integer_and_splits_frame_rows():
    """A video whose frame times leave a fraction just below 1 in the base: a
    float32 sum in the text after it rounds up across an integer (one position
    is skipped), and the next video's frame needs its rows split where its H
    and W sums do the same. Both as the reference; the rows stay few."""
    config = _omni()
    sp = 2.692307472229004  # a float32 value: 4 frames at 13 * sp = 34.99999...
    v, vs, ve = config.video_token_id, config.vision_start_token_id, config.vision_end_token_id
    ids = [100] * 7 + [vs] + [v] * 16 + [ve] + [100] * 122 + [vs] + [v] * 64 + [ve] + [100] * 3
    kwargs = {"video_grid_thw": [[4, 4, 4], [1, 16, 16]], "second_per_grid_ts": [sp, sp]}
    expected, _ = _same_everywhere(config, ids, kwargs)
    text = expected[0, 25:148]
    assert (np.diff(text) == 2).sum() == 1 and (np.diff(text) == 1).sum() == len(text) - 2
    rows = PromptLayout.from_tokens(config, ids, **kwargs).num_rows
    assert 12 < rows < 64  # more than a row per frame, far fewer than per token


def test_defect_1_decode_continues_after_prefill():
    """SGLang 0.5.23: tokens [text, vision_start, 32 video tokens, vision_end],
    grid (2, 8, 8), 2/3 s per grid: prefill ends at 11, its first decode token
    sits at 13. The preset continues at 12, in every decode path."""
    config = _omni()
    ids = [100, config.vision_start_token_id] + [config.video_token_id] * 32 + [config.vision_end_token_id]
    kwargs = {"video_grid_thw": [[2, 8, 8]], "second_per_grid_ts": [2 / 3]}
    positions, delta = prompt_positions(config, ids, **kwargs)
    assert int(positions.max()) == 11 and delta == 12 - len(ids)
    decode = np.zeros((3, 2), np.int64)
    next_positions(decode, 0, delta, len(ids), 2)
    np.testing.assert_array_equal(decode, [[12, 13]] * 3)
    np.testing.assert_array_equal(reference.next_positions(delta, len(ids), 2).numpy(), [[12, 13]] * 3)
    tracker = PositionTracker(config, max_num_reqs=1, max_num_batched_tokens=64)
    tracker.add_request("r", ids, **kwargs)
    got = tracker.prepare(["r"], [len(ids) + 1]).numpy()
    np.testing.assert_array_equal(got[:, :-1], positions)
    assert got[:, -1].tolist() == [12, 12, 12]


def test_defects_2_to_5_are_positioned():
    """Where SGLang 0.5.23 raises, the preset positions the prompt as the reference rules do."""
    # 2: intern_s2_preview videos of two or more frames (SGLang: IndexError); Qwen3.5's rule
    qwen35 = MRopeConfig(family="qwen3_vl", model_type="qwen3_5", semantics=SGLANG)
    intern = MRopeConfig(family="qwen3_vl", model_type="intern_s2_preview", semantics=SGLANG)
    vs, v, ve = qwen35.vision_start_token_id, qwen35.video_token_id, qwen35.vision_end_token_id
    ids = [100, vs, 101, vs, v, v, v, v, ve, 102, vs, v, v, v, v, ve, ve, 100]
    got = [prompt_positions(config, ids, video_grid_thw=[[2, 4, 4]]) for config in (qwen35, intern)]
    expected, delta = reference.prompt_positions(qwen35, ids, video_grid_thw=[[2, 4, 4]])
    for pos, d in got:
        np.testing.assert_array_equal(pos, expected.numpy())
        assert d == delta
    # 3: paddleocr_vl images when the vision config has no tokens_per_second (SGLang: TypeError)
    paddle = MRopeConfig.from_hf_config(load_config("paddleocr_vl"), semantics=SGLANG)
    ids = [100, paddle.vision_start_token_id] + [paddle.image_token_id] * 4 + [paddle.vision_end_token_id]
    assert prompt_positions(paddle, ids, image_grid_thw=[[1, 4, 4]])[1] == -2
    # 4: a prompt ending in vision_start (SGLang: IndexError) is text there
    assert prompt_positions(qwen35, [100, 101, vs])[1] == 0
    # 4: a Qwen3-Omni video without second_per_grid_ts (SGLang: TypeError) takes the 2 s default
    omni = _omni()
    ids = [100, omni.vision_start_token_id] + [omni.video_token_id] * 8 + [omni.vision_end_token_id]
    pos, _ = prompt_positions(omni, ids, video_grid_thw=[[2, 4, 4]])
    assert pos[0, 2:10].tolist() == [2] * 4 + [28] * 4
    # 4: ERNIE with an odd frame count (SGLang: a shape error) is refused, naming the merge
    ernie = MRopeConfig.from_hf_config(load_config("ernie4_5_moe_vl"), semantics=SGLANG)
    ids = [100, ernie.video_start_token_id] + [ernie.image_token_id] * 4 + [ernie.video_end_token_id]
    with pytest.raises(ValueError, match="temporal"):
        prompt_positions(ernie, ids, video_grid_thw=[[3, 4, 4]])
    # 5: qwen2_5_omni (SGLang: "Unimplemented model type") takes the reference rules
    q25 = MRopeConfig.from_hf_config(load_config("qwen2_5_omni"), semantics=SGLANG)
    assert q25.switches == frozenset()


def test_the_preset_changes_positions_only_for_qwen3_omni():
    """Every other family SGLang serves gives the reference positions under the
    preset (the oracle tests show SGLang's code does): the only other switch,
    on the Qwen-VL lines, refuses prompts rather than positioning them
    (D13, tests/test_vision_start_rule.py)."""
    switched = {name: family.presets[SGLANG] for name, family in FAMILIES.items() if family.presets.get(SGLANG)}
    refusing = frozenset({"items_after_vision_start"})
    assert switched == {"qwen3_omni": frozenset({"float_carry"}), **dict.fromkeys(_QWEN_VL, refusing)}
    assert _omni().float_carry and not MRopeConfig.from_hf_config(OMNI).float_carry


_QWEN_VL = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "paddleocr_vl")


def test_bracketless_items_are_refused_as_by_the_reference():
    """The float32 rule reads the token before an item as its bos: without one,
    both the reference and the fast path refuse, naming the item."""
    config = _omni()
    ids = [100, config.image_token_id, config.image_token_id, config.image_token_id, config.image_token_id, 100]
    for call in (reference.prompt_positions, prompt_positions):
        with pytest.raises(ValueError, match="vision_start"):
            call(config, ids, image_grid_thw=[[1, 4, 4]])


def test_s1_example_of_the_docs():
    """docs/semantics.md 4.4, S1: two videos (2, 2, 2) at fps 3, r = 13. The second
    starts at 13.67, so its second frame is at 22.33 (22), where the integer rule
    gives 21; the delta is 15 against the reference's 14."""
    ids = [100, 151652, 151656, 151656, 151653, 151652, 151656, 151656, 151653, 101]
    kwargs = {"video_grid_thw": [[2, 2, 2], [2, 2, 2]], "second_per_grid_ts": [2 / 3, 2 / 3]}
    expected, delta = _same_everywhere(_omni(), ids, kwargs)
    assert expected[0].tolist() == [0, 1, 2, 10, 11, 12, 13, 22, 23, 24] and delta == 15
    assert expected[1, 6:8].tolist() == expected[2, 6:8].tolist() == [13, 13]
    integer, integer_delta = prompt_positions(MRopeConfig.from_hf_config(OMNI), ids, **kwargs)
    assert integer[0].tolist() == [0, 1, 2, 10, 11, 12, 13, 21, 22, 23] and integer_delta == 14


def test_float_carry_rows_on_the_device():
    """RopeState (vLLM MRV2's device state) serves the preset's rows, CANVAS frames
    split by grid row included: the reference's positions, then index + delta.
    The Triton kernels run in triton's CPU interpreter without a GPU."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    require_triton()
    from mrope_tracker.device.rope_state import RopeState

    device = "cuda" if torch.cuda.is_available() else "cpu"
    config = _omni()
    sp = 2.692307472229004  # the prompt of test_rounding_skips_an_integer_and_splits_frame_rows
    v, vs, ve = config.video_token_id, config.vision_start_token_id, config.vision_end_token_id
    ids = [100] * 7 + [vs] + [v] * 16 + [ve] + [100] * 122 + [vs] + [v] * 64 + [ve] + [100] * 3
    kwargs = {"video_grid_thw": [[4, 4, 4], [1, 16, 16]], "second_per_grid_ts": [sp, sp]}
    layout = PromptLayout.from_tokens(config, ids, **kwargs)
    expected, delta = reference.prompt_positions(config, ids, **kwargs)
    n = len(ids)
    state = RopeState(3, 2, n + 8, n + 64, device, config=config, block_size=64)
    state.init_prefill_layout(1, layout)
    state.apply_staged_writes()
    tensors = [
        torch.tensor(x, dtype=d, device=device)
        for x, d in zip(([1], [0, n + 2], [0, n], [0, 0]), (torch.int64, torch.int32, torch.int32, torch.int32))
    ]
    state.prepare_positions(*tensors)
    got = state.get_positions(n + 2).cpu().numpy()
    np.testing.assert_array_equal(got[:, :n], expected.numpy())
    assert got[0, n:].tolist() == [n + delta, n + delta + 1]


@settings(max_examples=examples(60, minimum=15))
@given(data=st.data())
def test_hf_drop_in_under_the_preset(data):
    """`hf.get_rope_index` with semantics="sglang-0.5": each row of a left-padded
    Qwen3-Omni batch gets the preset's positions (as float32, the dtype the
    model code expects) and its delta."""
    from mrope_tracker import hf

    # (one video at least: a batch without grids takes transformers' text-only convention, D10)
    prompts = [data.draw(family_prompts("qwen3_omni", use_audio_in_video=False, min_videos=k)) for k in (1, 0)]
    width = max(p.num_tokens for p in prompts)
    ids = [[0] * (width - p.num_tokens) + list(p.token_ids) for p in prompts]
    mask = [[0] * (width - p.num_tokens) + [1] * p.num_tokens for p in prompts]
    items = {"image_grid_thw": [], "video_grid_thw": [], "second_per_grid_ts": [], "audio_feature_lengths": []}
    for p in prompts:
        for name, value in p.kwargs().items():
            items[name] += [list(v) if isinstance(v, np.ndarray) else v for v in value.tolist()]
    items = {name: value for name, value in items.items() if value}
    config = MRopeConfig.from_hf_config(prompts[0].config, semantics=SGLANG)
    positions, deltas = hf.get_rope_index(config, ids, attention_mask=mask, **items)
    for row, p in enumerate(prompts):
        expected, delta = prompt_positions(config, list(p.token_ids), **p.kwargs())
        np.testing.assert_array_equal(positions[:, row, width - p.num_tokens :].numpy(), expected)
        assert deltas[row, 0].item() == delta
