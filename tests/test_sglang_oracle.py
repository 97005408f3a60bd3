"""SGLang 0.5.23's own position code as the oracle of the ``sglang-0.5`` preset.

The file ``sglang/srt/layers/rotary_embedding/mrope_rope_index.py`` from the
released sglang 0.5.23 wheel is loaded by path (tests/sglang_calls.py; the
sglang package is never imported) from the environment variable
MROPE_SGLANG_ROPE_INDEX, which the CI stage sets after unpacking that one file
(.ci/run). Without it this module skips.

Random prompts of every model type SGLang serves with that file and this
repository knows (images, videos, Qwen3-Omni audio and audio-in-video blocks,
text between, several items) must get SGLang's positions from
`prompt_positions`, both layouts and the reference under the preset. Where
SGLang's code raises, the error must be one of its known defects (2 and 3 in
docs/semantics.md, section 4.4), and the preset still positions the prompt.
The delta is the integer positions' (defect 1 for Qwen3-Omni).
"""

from __future__ import annotations

import math
import os
import types

import numpy as np
import pytest
import torch
from family_prompts import family_prompts
from hypothesis import given, settings
from hypothesis import strategies as st
from sglang_calls import SERVED, config_for, load, sglang_positions
from strategies import examples

from mrope_tracker import MRopeConfig, PromptLayout, prompt_positions, reference
from mrope_tracker.sglang import get_rope_index as sglang_get_rope_index

PATH = os.environ.get("MROPE_SGLANG_ROPE_INDEX")
if not PATH:
    pytest.skip(
        "MROPE_SGLANG_ROPE_INDEX is not set (path to SGLang 0.5.23's mrope_rope_index.py)", allow_module_level=True
    )

SGLANG = load(PATH)


def _ours(prompt, model_type: str):
    """(positions, delta) from every entry point under the preset; they must agree."""
    config = MRopeConfig.from_hf_config(config_for(prompt, model_type), semantics="sglang-0.5")
    ids = list(prompt.token_ids)
    positions, delta = prompt_positions(config, ids, **prompt.kwargs())
    expected, expected_delta = reference.prompt_positions(config, ids, **prompt.kwargs())
    np.testing.assert_array_equal(positions, expected.numpy())
    assert delta == expected_delta
    for layout in (
        PromptLayout.from_tokens(config, ids, **prompt.kwargs()),
        PromptLayout.from_ranges(config, len(ids), **prompt.range_kwargs()),
    ):
        np.testing.assert_array_equal(layout.positions(), positions)
        assert layout.delta == delta
    return positions, delta


def _known_defect(model_type: str, prompt, error: Exception) -> bool:
    """SGLang 0.5.23 raising where it is known to: intern_s2_preview on a video of
    two or more frames (defect 2: an IndexError at the video's second frame, or a
    ValueError when the skipped frames hide a later image's tokens)."""
    multi_frame = any(t > 1 for t, _, _ in prompt.video_grid_thw)
    return model_type == "intern_s2_preview" and multi_frame and isinstance(error, (IndexError, ValueError))


def _check(prompt, model_type: str) -> None:
    positions, delta = _ours(prompt, model_type)
    try:
        theirs, their_delta = sglang_positions(SGLANG, prompt, model_type)
    except Exception as error:  # noqa: BLE001 (which errors are known is checked here)
        assert _known_defect(model_type, prompt, error), f"SGLang raised {error!r} on a prompt it should position"
        return
    np.testing.assert_array_equal(positions, theirs)
    assert delta == int(theirs.max()) + 1 - len(prompt.token_ids)
    # SGLang's decode reads its delta truncated toward zero: one past ours where that
    # delta is negative and fractional (Qwen3-Omni, defect 1), else the same
    defect_1 = their_delta < 0 and their_delta != math.floor(their_delta)
    assert int(their_delta) == delta + (1 if defect_1 else 0)
    assert not defect_1 or model_type == "qwen3_omni_moe"


@settings(max_examples=examples(300, minimum=60))
@given(model_type=st.sampled_from(sorted(SERVED)), data=st.data())
def test_every_model_type_equals_sglang(model_type, data):
    """Random prompts of each model type: positions and delta are SGLang's."""
    family, config_name = SERVED[model_type]
    _check(data.draw(family_prompts(family, config_name=config_name)), model_type)


@settings(max_examples=examples(300, minimum=60))
@given(data=st.data())
def test_qwen3_omni_equals_sglang(data):
    """Qwen3-Omni at any frame rate, with audio clips and audio-in-video blocks:
    the float32 times carried from item to item, then truncated, as SGLang."""
    prompt = data.draw(family_prompts("qwen3_omni", min_videos=data.draw(st.integers(0, 2))))
    _check(prompt, "qwen3_omni_moe")


@settings(max_examples=examples(100, minimum=20))
@given(data=st.data())
def test_qwen2_5_vl_float32_times_equal_sglang(data):
    """Qwen2.5-VL videos at any frame rate: SGLang truncates float32 products (as
    the reference, unlike vLLM 0.33's float64 ones, D3)."""
    _check(data.draw(family_prompts("qwen2_5_vl", min_videos=1)), "qwen2_5_vl")


def _t(rows, dims=2):
    return torch.tensor(rows, dtype=torch.float32 if dims == 0 else torch.long)


def test_sglang_defects_reproduced():
    """The defects docs/semantics.md names, each shown with SGLang's own function
    (so that the section stays true of the code it describes)."""
    rope = SGLANG.get_rope_index
    vs, v, ve, image = 151652, 151656, 151653, 151655
    # 1: Qwen3-Omni, [text, VS, 32 video tokens, VE], grid (2, 8, 8), 2/3 s per grid
    ids = [[100, vs, *[v] * 32, ve]]
    omni = {"audio_token_id": 151675, "audio_start_token_id": 151669, "position_id_per_seconds": 13}
    pos, delta = rope(2, image, v, vs, "qwen3_omni_moe", None, _t(ids), None, _t([[2, 8, 8]]), _t([2 / 3], 0), **omni)
    assert int(pos.to(int).max()) == 11 and len(ids[0]) + int(delta.item()) == 13
    # 2: intern_s2_preview, a two-frame video
    frames = [[100, vs, 101, vs, v, v, v, v, ve, 102, vs, v, v, v, v, ve, ve]]
    with pytest.raises(IndexError):
        rope(2, image, v, vs, "intern_s2_preview", None, _t(frames), None, _t([[2, 4, 4]]))
    # 3: paddleocr_vl without tokens_per_second, an image
    with pytest.raises(TypeError):
        rope(2, image, v, vs, "paddleocr_vl", None, _t([[100, vs, image, image, image, image, ve]]), _t([[1, 4, 4]]))
    # 4: a prompt that ends in vision_start
    with pytest.raises(IndexError):
        rope(2, image, v, vs, "qwen2_vl", None, _t([[100, vs, image, image, image, image, ve, vs]]), _t([[1, 4, 4]]))
    # 4: ERNIE with an odd frame count (3 frames: one temporal patch of positions for 1.5 of tokens)
    ernie = types.SimpleNamespace(
        im_patch_id=100295,
        video_start_token_id=101306,
        video_end_token_id=101307,
        spatial_conv_size=2,
        temporal_conv_size=2,
    )
    with pytest.raises(RuntimeError):
        SGLANG.get_rope_index_ernie45(_t([[100, 101306, *[100295] * 6, 101307]]), ernie, None, _t([[3, 4, 4]]))
    # 4: a Qwen3-Omni video without second_per_grid_ts
    with pytest.raises(TypeError):
        rope(2, image, v, vs, "qwen3_omni_moe", None, _t(ids), None, _t([[2, 8, 8]]), None, **omni)
    # 5: qwen2_5_omni is refused
    with pytest.raises(RuntimeError, match="Unimplemented"):
        rope(2, image, v, vs, "qwen2_5_omni", None, _t([[100, vs, image, image, image, image, ve]]), _t([[1, 4, 4]]))
    # 6: the Qwen3-VL line given second_per_grid_ts (one value a video) reads it once a frame; the drop-in
    # places the video by frame index, as SGLang does without the times
    qwen3 = (2, image, v, vs, "qwen3_vl", None, _t(frames), None, _t([[2, 4, 4]]))
    with pytest.raises(IndexError):
        rope(*qwen3, _t([1.0], 0))
    theirs = rope(*qwen3)
    ours = sglang_get_rope_index(*qwen3, _t([1.0], 0), semantics="sglang-0.5")
    assert torch.equal(ours[0], theirs[0]) and torch.equal(ours[1], theirs[1])
