"""Bad inputs refused up front, naming the argument, and leaving nothing behind (issue 27, item 7).

One test per case the issue lists: wild grids and lengths (EVS, the range form's per-frame tables,
Omni interleaves), a config whose family and model type disagree, damaged `from_bytes` buffers,
video ranges whose non-embedding tail runs past the prompt, a refused Omni request that grew the
tracker's pool, and prompt ids given as a dict, a set or a 2-D array.
"""

from __future__ import annotations

import pickle
import zlib

import attrs
import numpy as np
import pytest
import torch
from vllm_features import feature

from mrope_tracker import MRopeConfig, PositionTracker, PromptLayout
from mrope_tracker.core.config import SUPPORTED_MODEL_TYPES
from mrope_tracker.device.rope_state import RopeState
from mrope_tracker.evs import PrunedPrompt
from mrope_tracker.families import FAMILIES
from mrope_tracker.vllm import get_mrope_input_positions, layout_from_features

QWEN2_5 = MRopeConfig(family="qwen2_5_vl", tokens_per_second=2)
QWEN3 = MRopeConfig(family="qwen3_vl")


# --------------------------------------------------------------------------
# wild grids and lengths: a ValueError naming the argument, before any allocation
# --------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl"])
@pytest.mark.parametrize("grid", [[2**31, 2, 2], [1, 2, 2**31], [1, 2**20, 2**20], [2**40, 2**40, 2**40]])
def test_evs_wild_grid_is_refused(family, grid):
    """A pruned video whose unpruned grid would need gigabytes of ids is refused, naming video_grid_thw."""
    config = MRopeConfig(family=family)
    ids = [1, config.vision_start_token_id, config.video_token_id, config.video_token_id, config.vision_end_token_id]
    with pytest.raises(ValueError, match=r"video_grid_thw: expected grids of at most \d+ tokens"):
        PrunedPrompt(config, ids, video_grid_thw=[grid])


@pytest.mark.parametrize("family", ["qwen3_vl", "glm4v", "glm_ocr"])
def test_per_frame_range_with_wild_frame_count_is_refused(family):
    """A per-frame video range long enough for 2**31 frames is refused before its frame table is made."""
    config = MRopeConfig(family=family)
    with pytest.raises(ValueError, match=r"video_grid_thw: expected at most \d+ video frames"):
        PromptLayout.from_ranges(config, 2**33, video_ranges=[(0, 2**31)], video_grid_thw=[[2**31, 2, 2]])


@pytest.mark.parametrize("family", ["qwen2_5_omni", "qwen3_omni"])
@pytest.mark.parametrize(
    ("grid", "mel", "match"),
    [
        ([2, 4, 4], 2**40, r"video_ranges\[0\]: expected an audio-in-video interleave"),
        ([2, 4, 4], 2**62, r"video_ranges\[0\]: expected an audio-in-video interleave"),
        ([2**31, 4, 4], 100, r"video_grid_thw: expected at most \d+ video frames"),
        ([2**62, 2, 2], 100, r"video_grid_thw: expected at most \d+ video frames"),
    ],
)
def test_omni_wild_interleave_is_refused_at_once(family, grid, mel, match):
    """An audio-in-video block whose audio or frames would make billions of runs is refused before any is made."""
    config = MRopeConfig(family=family)
    with pytest.raises(ValueError, match=match):
        PromptLayout.from_ranges(
            config,
            2**40,
            video_ranges=[(1, 20)],
            video_grid_thw=[grid],
            audio_feature_lengths=[mel],
            use_audio_in_video=True,
        )


# --------------------------------------------------------------------------
# a config's family and model type agree
# --------------------------------------------------------------------------


def test_family_and_model_type_must_agree():
    """A model type of another family (or of none) is refused, naming model_type; the family's own are taken."""
    with pytest.raises(ValueError, match=r"model_type: expected a model type of the qwen2_vl family .* hunyuan_vl"):
        MRopeConfig(family="qwen2_vl", model_type="hunyuan_vl")
    for bad in ("qwen2_5_vl", "llama", "", 7, ["qwen2_vl"]):
        with pytest.raises(ValueError, match="model_type"):
            MRopeConfig(family="qwen2_vl", model_type=bad)
    for model_type, family in SUPPORTED_MODEL_TYPES.items():
        assert MRopeConfig(family=family, model_type=model_type).model_type == model_type
    for family in FAMILIES:
        assert MRopeConfig(family=family).model_type == family  # the default: the family's own name
    with pytest.raises(ValueError, match="model_type"):
        attrs.evolve(QWEN3, family="glm4v")  # a swap of the family alone


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("tokens_per_second", 10**400, ValueError),
        ("tokens_per_second", "2", TypeError),
        ("spatial_merge_size", 2.0, ValueError),
        ("image_token_id", 2**64, ValueError),
        ("family", ["qwen2_vl"], ValueError),
        ("semantics", ["reference"], ValueError),
        ("uses_mrope_canvas", 1, ValueError),
    ],
)
def test_config_fields_are_refused_by_name(field, value, error):
    """The validators refuse a field of the wrong type or range by its name (an int past float's range too)."""
    kwargs = {"family": "qwen2_5_vl", field: value}
    if field == "uses_mrope_canvas":
        kwargs["family"] = "minicpmv4_7"
    with pytest.raises(error, match=field):
        MRopeConfig(**kwargs)


def _resealed(data: bytes) -> bytes:
    return data[:-4] + zlib.crc32(data[:-4]).to_bytes(4, "little")


def _small_layout(config=QWEN2_5) -> PromptLayout:
    ids = [1, config.vision_start_token_id, *[config.image_token_id] * 2, config.vision_end_token_id, 2]
    return PromptLayout.from_tokens(config, ids, image_grid_thw=[[1, 2, 4]])


def test_from_bytes_refuses_a_swapped_family():
    """A buffer whose recorded family was swapped is refused, by its checksum, and even with a checksum made
    right (the family then disagrees with the recorded model type)."""
    data = _small_layout(QWEN3).to_bytes()
    swapped = data.replace(b'"family":"qwen3_vl"', b'"family":"qwen2_vl"')
    assert swapped != data
    with pytest.raises(ValueError, match=r"data: .*checksum"):
        PromptLayout.from_bytes(swapped)
    with pytest.raises(ValueError, match=r"data: .*model_type"):
        PromptLayout.from_bytes(_resealed(swapped))


# --------------------------------------------------------------------------
# from_bytes: a format version and a checksum; any buffer it did not write is refused
# --------------------------------------------------------------------------


@pytest.mark.parametrize("with_config", [True, False], ids=["config", "unknown_origin"])
def test_every_single_bit_flip_is_refused(with_config):
    """Each of the buffer's bits flipped alone gives a ValueError naming data, never a layout."""
    layout = _small_layout()
    if not with_config:
        layout = PromptLayout(layout.rows, layout.scales, layout.num_tokens, layout.delta)
    data = layout.to_bytes()
    assert PromptLayout.from_bytes(data).positions().tolist() == layout.positions().tolist()
    accepted = []
    for bit in range(8 * len(data)):
        flipped = bytearray(data)
        flipped[bit // 8] ^= 1 << (bit % 8)
        try:
            PromptLayout.from_bytes(bytes(flipped))
        except ValueError as exc:
            assert str(exc).startswith("data: "), exc
        else:
            accepted.append(bit)
    assert accepted == []


def test_pickle_goes_through_the_checked_bytes():
    """A pickled layout is its to_bytes buffer: a bit flipped inside the pickle is refused on loading."""
    layout = _small_layout()
    pickled = pickle.dumps(layout)
    data = layout.to_bytes()
    at = pickled.index(data) + len(data) // 2
    damaged = bytearray(pickled)
    damaged[at] ^= 0x10
    with pytest.raises(ValueError, match=r"data: .*checksum"):
        pickle.loads(bytes(damaged))
    assert pickle.loads(pickled).positions().tolist() == layout.positions().tolist()


def test_old_and_foreign_buffers_are_refused():
    """Version 1 and 2 buffers (no checksum) and any other bytes are refused, naming data."""
    data = _small_layout().to_bytes()
    for version in (1, 2, 4, 255):
        with pytest.raises(ValueError, match=rf"data: expected PromptLayout format version 3, got version {version}"):
            PromptLayout.from_bytes(_resealed(data[:4] + bytes([version]) + data[5:]))
    for foreign in (b"", b"MRLY", b"\0" * 100, pickle.dumps([1, 2, 3])):
        with pytest.raises(ValueError, match="data: "):
            PromptLayout.from_bytes(foreign)


# --------------------------------------------------------------------------
# a video range whose non-embedding tail runs past the prompt's end
# --------------------------------------------------------------------------

# <ts ts VS V*4 VE ts ts VS V*4 VE>: two frames of a (2, 4, 4) video with the text around them
FRAMES_MASK = [False] * 3 + [True] * 4 + [False] * 4 + [True] * 4 + [False]


@pytest.mark.parametrize("family", ["qwen3_vl", "glm4v", "glm_ocr"])
def test_video_range_past_the_prompt_is_refused(family):
    """A range whose frames fit the prompt but whose last, non-embedding token lies past its end is refused
    (range form and vLLM's features); the same range in a prompt one token longer is taken."""
    config = MRopeConfig(family=family)
    kwargs = dict(video_ranges=[(2, 16, FRAMES_MASK)], video_grid_thw=[[2, 4, 4]])
    video = feature("video", 2, 16, FRAMES_MASK, video_grid_thw=[2, 4, 4])
    assert PromptLayout.from_ranges(config, 18, **kwargs).num_tokens == 18
    assert layout_from_features(config, 18, [video]).num_tokens == 18
    match = r"video_ranges\[0\]: expected a range inside the prompt of 17 tokens, got offset 2 and length 16"
    with pytest.raises(ValueError, match=match):
        PromptLayout.from_ranges(config, 17, **kwargs)
    with pytest.raises(ValueError, match=match):
        layout_from_features(config, 17, [video])


def test_keye_vl1_5_video_range_past_the_prompt_is_refused():
    """Keye-VL-1.5: a video feature whose closing (non-embedding) tokens lie past the prompt is refused."""
    config = MRopeConfig(family="keye_vl1_5")
    mask = [False, *[True] * 4, False, False, *[True] * 4, False]  # <FR V*4 FR ts V*4 VE>
    video = feature("video", 1, 12, mask, video_grid_thw=[[1, 4, 4], [1, 4, 4]])
    assert layout_from_features(config, 13, [video]).num_tokens == 13
    with pytest.raises(ValueError, match=r"video_ranges\[\d\]: expected a range inside the prompt of 12 tokens"):
        layout_from_features(config, 12, [video])


# --------------------------------------------------------------------------
# a refused request leaves the tracker's memory, pool and state as they were
# --------------------------------------------------------------------------


def _snapshot(tracker: PositionTracker):
    return (
        tracker.pool_rows.shape,
        tracker.pool_rows.copy(),
        tracker.pool_scales.copy(),
        tracker._pool.top,
        tracker.nbytes(),
        tracker.slot_state.copy(),
        len(tracker),
    )


def _same(before, after) -> bool:
    return all(
        np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b for a, b in zip(before, after, strict=True)
    )


@pytest.mark.parametrize("family", ["qwen2_5_omni", "qwen3_omni"])
@pytest.mark.parametrize("mel", [2**28, 2**40])
def test_refused_omni_request_leaves_the_pool_as_it_was(family, mel):
    """A refused audio-in-video request with a wild audio length changes neither the pool's size nor anything
    in it (the pool grew by 214 MB, 5.58 GB for Qwen3-Omni, for mel = 2**28)."""
    config = MRopeConfig(family=family)
    tracker = PositionTracker(config, max_num_reqs=4, max_num_batched_tokens=64)
    tracker.add_request_from_ranges("live", 40, image_ranges=[(1, 4)], image_grid_thw=[[1, 4, 4]])
    before = _snapshot(tracker)
    vs, ve, a_s, a_e = (
        config.vision_start_token_id,
        config.vision_end_token_id,
        config.audio_start_token_id,
        config.audio_end_token_id,
    )
    block = [vs, a_s, *[config.video_token_id] * 8, *[config.audio_token_id] * 4, a_e, ve]
    with pytest.raises(ValueError, match="audio|video"):
        tracker.add_request(
            "wild", [1, *block, 2], video_grid_thw=[[2, 4, 4]], audio_feature_lengths=[mel], use_audio_in_video=True
        )
    with pytest.raises(ValueError, match="video_ranges|audio_feature_lengths"):
        tracker.add_request_from_ranges(
            "wild",
            2**40,
            video_ranges=[(3, 12)],
            video_grid_thw=[[2, 4, 4]],
            audio_feature_lengths=[mel],
            use_audio_in_video=True,
        )
    features = [
        feature("video", 2, 14, None, video_grid_thw=[2, 4, 4], use_audio_in_video=True),
        feature("audio", 2, 14, None, audio_feature_lengths=mel),
    ]
    with pytest.raises(ValueError, match="video_ranges|audio_feature_lengths|mm_features"):
        tracker.add_request_from_features("wild", 2**40, features)
    assert _same(before, _snapshot(tracker))


def test_refused_request_that_needed_a_bigger_pool_leaves_it_as_it_was():
    """A request refused after its build (int32 positions out of range) whose rows did not fit the free top
    leaves the pool unmoved and ungrown; the same request in int64 grows it."""
    tracker = PositionTracker(QWEN2_5, max_num_reqs=2, max_num_batched_tokens=64, dtype=torch.int32, layout_rows=2)
    tracker.add_request_from_ranges("live", 10)
    tracker.add_request_from_ranges("gone", 10)
    tracker.remove_request("gone")  # a hole: room after a compaction, none at the top
    before = _snapshot(tracker)
    kwargs = dict(image_ranges=[(1, 4), (2**31, 4)], image_grid_thw=[[1, 4, 4]] * 2)
    with pytest.raises(ValueError, match="dtype"):
        tracker.add_request_from_ranges("far", 2**31 + 10, **kwargs)
    assert _same(before, _snapshot(tracker))
    wide = PositionTracker(QWEN2_5, max_num_reqs=2, max_num_batched_tokens=64, layout_rows=2)
    wide.add_request_from_ranges("far", 2**31 + 10, **kwargs)
    assert wide.pool_rows.shape[0] > 2


# --------------------------------------------------------------------------
# prompt ids that only have a length
# --------------------------------------------------------------------------

NOT_PROMPTS = [
    ({1: 2, 3: 4}, TypeError),
    ({1, 2, 3}, TypeError),
    ("abc", TypeError),
    (b"abc", TypeError),
    (np.zeros((2, 3), np.int64), ValueError),
    (torch.zeros((2, 3), dtype=torch.int64), ValueError),
]


@pytest.mark.parametrize(("ids", "error"), NOT_PROMPTS, ids=["dict", "set", "str", "bytes", "2d_array", "2d_tensor"])
def test_rope_state_refuses_ids_that_only_have_a_length(ids, error):
    """RopeState.init_prefill_positions counts its ids: a dict, a set or a 2-D array is refused, the state
    unchanged; a list, a tuple and a 1-D array are taken."""
    state = RopeState(3, max_num_reqs=2, max_num_tokens=64, max_model_len=64, device="cpu", config=QWEN2_5)
    with pytest.raises(error, match="prefill_token_ids"):
        state.init_prefill_positions(0, QWEN2_5, ids, [])
    for good in ([1, 2, 3], (1, 2, 3), np.arange(3), torch.arange(3)):
        state.init_prefill_positions(0, QWEN2_5, good, [])


@pytest.mark.parametrize(("ids", "error"), NOT_PROMPTS, ids=["dict", "set", "str", "bytes", "2d_array", "2d_tensor"])
def test_vllm_entry_points_refuse_ids_that_only_have_a_length(ids, error):
    """get_mrope_input_positions and the tracker's feature admission count ids the same way."""
    with pytest.raises(error, match="input_tokens"):
        get_mrope_input_positions(QWEN2_5, ids, [])
    tracker = PositionTracker(QWEN2_5, max_num_reqs=2, max_num_batched_tokens=64)
    with pytest.raises(error, match="prompt_token_ids"):
        tracker.add_request_from_features("r", ids, [])
    assert len(tracker) == 0


@pytest.mark.parametrize("name", ["out_offset", "delta", "context_len", "num_new_tokens"])
@pytest.mark.parametrize("value", [2**62 + 1, 2**63, 2**64, 2**100, -(2**100)])
def test_next_positions_refuses_ints_past_int64_by_name(name, value):
    """A Python int too large for the kernel (numba cannot even type one past 2**64) is a ValueError naming it,
    and `out` is left as it was (found by tests/test_bad_input_fuzz.py)."""
    from mrope_tracker import next_positions

    out = np.zeros((3, 8), np.int64)
    args = dict(out_offset=0, delta=5, context_len=3, num_new_tokens=4)
    with pytest.raises(ValueError, match=name):
        next_positions(out, **{**args, name: value})
    assert not out.any()
