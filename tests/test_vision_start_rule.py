"""D13 (docs/semantics.md): transformers 4.57.6 and SGLang 0.5.23 find a
Qwen2-VL, Qwen2.5-VL or Qwen3-VL prompt's items by the token after each
`vision_start`, so a placeholder run without one gets other positions from
them than from the identity rule (SGLang: PaddleOCR-VL too). Their presets
(`transformers-4.57`, `sglang-0.5`) refuse such a prompt, naming `token_ids` and the run; the
other presets position it by the identity rule, as before.

The oracle tests take processor-like prompts (tests/family_prompts.py), drop
some of their `vision_start` tokens, and require of each preset: either it
refuses and some run has lost its `vision_start`, or its positions are the
oracle's. The oracles run where they are installed (transformers 4.57.6 in
the default environment; SGLang's file where MROPE_SGLANG_ROPE_INDEX names
it, as CI's SGLang stage does).
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest
from family_prompts import family_prompts
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import examples

from mrope_tracker import MRopeConfig, PositionTracker, PromptLayout, prompt_positions

FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")
SGLANG_FAMILIES = (*FAMILIES, "paddleocr_vl")  # SGLang positions PaddleOCR-VL with Qwen2-VL's scan
HF_FAMILIES = (*FAMILIES, "qwen2_5_omni", "qwen3_omni")  # transformers 4.57's Omni scans find items the same way
STRICT = ("transformers-4.57", "sglang-0.5")
TEXT = 100  # a text token that stands in for a dropped vision_start
VS, IMAGE, VIDEO, VE = 151652, 151655, 151656, 151653

few_examples = settings(max_examples=examples(60, minimum=10), deadline=None)


def _unwrapped_runs(ids, config) -> bool:
    """Whether some image or video run (Qwen3-VL: some frame) lacks the vision_start just before it."""
    items = (config.image_token_id, config.video_token_id)
    start = config.vision_start_token_id
    return any(tok in items and (i == 0 or ids[i - 1] not in (tok, start)) for i, tok in enumerate(ids))


@st.composite
def dropped_starts(draw, family: str):
    """A processor-like prompt of `family` with some of its vision_start tokens made text."""
    prompt = draw(family_prompts(family, max_items=3, max_t=4, integer_sp=True))
    ids = list(prompt.token_ids)
    start = MRopeConfig.from_hf_config(prompt.config).vision_start_token_id
    starts = [i for i, tok in enumerate(ids) if tok == start]
    dropped = draw(st.lists(st.sampled_from(starts), unique=True)) if starts else []
    for i in dropped:
        ids[i] = TEXT
    return dataclasses.replace(prompt, token_ids=tuple(ids)), bool(dropped)


def _refused_or_equal(config, prompt, dropped: bool, oracle) -> None:
    """Refused (only once a vision_start is gone, naming token_ids), or the oracle's positions."""
    ids = list(prompt.token_ids)
    try:
        positions, delta = prompt_positions(config, ids, **prompt.kwargs())
    except ValueError as error:
        assert dropped and str(error).startswith("token_ids:"), error
        if "not after vision_start" in str(error):
            assert _unwrapped_runs(ids, config), "refused a prompt whose every run follows vision_start"
        return
    theirs = np.asarray(oracle(prompt)[0])
    np.testing.assert_array_equal(positions, theirs)  # (Qwen3-Omni: transformers' float32 values, integral here)
    assert delta == int(theirs.max()) + 1 - len(ids)


# ------------------------------------------------------------------- without an oracle


@pytest.mark.parametrize("semantics", STRICT)
def test_a_frame_without_vision_start_is_refused_under_the_strict_presets(semantics):
    config = MRopeConfig(family="qwen3_vl", semantics=semantics)
    ids = [1, VS, VIDEO, VIDEO, VIDEO, VIDEO, VE, 3]  # a 2-frame video in one block: frame 1 has no vision_start
    frame_1 = r"token_ids: video_grid_thw\[0\] = \(2, 2, 4\), frame 1, starts at token_ids\[4\]"
    with pytest.raises(ValueError, match=frame_1):
        prompt_positions(config, ids, video_grid_thw=[[2, 2, 4]])
    with pytest.raises(ValueError, match="vision_start"):
        PromptLayout.from_tokens(config, ids, video_grid_thw=[[2, 2, 4]])


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("semantics", STRICT)
def test_an_image_without_vision_start_is_refused_and_a_refused_admission_changes_nothing(family, semantics):
    config = MRopeConfig(family=family, semantics=semantics)
    bare = [1, IMAGE, IMAGE, IMAGE, IMAGE, 2]
    wrapped = [1, VS, IMAGE, IMAGE, IMAGE, IMAGE, VE, 2]
    grid = [[1, 4, 4]]
    image_0 = r"image_grid_thw\[0\] = \(1, 4, 4\) starts at token_ids\[1\] after token_ids\[0\] = 1"
    with pytest.raises(ValueError, match=image_0):
        prompt_positions(config, bare, image_grid_thw=grid)
    tracker = PositionTracker(config, max_num_reqs=2, max_num_batched_tokens=16)
    with pytest.raises(ValueError, match="vision_start"):
        tracker.add_request("r", bare, image_grid_thw=grid)
    assert "r" not in tracker and len(tracker) == 0
    tracker.check_invariants()
    tracker.add_request("r", wrapped, image_grid_thw=grid)  # the slot and pool the refusal left are usable
    positions, _ = prompt_positions(config, wrapped, image_grid_thw=grid)
    np.testing.assert_array_equal(tracker.prepare(["r"], [len(wrapped)]).cpu().numpy(), positions)


@pytest.mark.parametrize("semantics", ("reference", "vllm-0.33", "transformers-5"))
def test_the_other_presets_position_such_runs_by_the_identity_rule(semantics):
    # T as docs/semantics.md, D13 gives it; transformers 4.57.6 and SGLang 0.5.23 give 0 1 2 2 4 5 6 7
    config = MRopeConfig(family="qwen3_vl", semantics=semantics)
    positions, delta = prompt_positions(config, [1, VS, VIDEO, VIDEO, VIDEO, VIDEO, VE, 3], video_grid_thw=[[2, 2, 4]])
    assert positions[0].tolist() == [0, 1, 2, 2, 4, 4, 6, 7]
    assert delta == 0


# ------------------------------------------------------------------- the oracles


@pytest.mark.parametrize("family", HF_FAMILIES)
@few_examples
@given(data=st.data())
def test_transformers_4_57_preset_refuses_or_equals_transformers(family, data):
    transformers = pytest.importorskip("transformers")
    if not transformers.__version__.startswith("4.57."):
        pytest.skip(f"the oracle is transformers 4.57's get_rope_index, found {transformers.__version__}")
    from hf_oracle import hf_positions

    prompt, dropped = data.draw(dropped_starts(family))
    config = MRopeConfig.from_hf_config(prompt.config, semantics="transformers-4.57")
    _refused_or_equal(config, prompt, dropped, lambda p: hf_positions(None, p))


@pytest.mark.parametrize("family", SGLANG_FAMILIES)
@few_examples
@given(data=st.data())
def test_sglang_preset_refuses_or_equals_sglang(family, data):
    path = os.environ.get("MROPE_SGLANG_ROPE_INDEX")
    if not path:
        pytest.skip("MROPE_SGLANG_ROPE_INDEX names no SGLang mrope_rope_index.py")
    from sglang_calls import config_for, load, sglang_positions

    module = load(path)
    prompt, dropped = data.draw(dropped_starts(family))
    model_type = family
    config = MRopeConfig.from_hf_config(config_for(prompt, model_type), semantics="sglang-0.5")

    _refused_or_equal(config, prompt, dropped, lambda p: sglang_positions(module, p, model_type))
