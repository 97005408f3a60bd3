"""Random bad arguments to every public entry point (issue 27, item 7).

Each example takes a valid call of one entry point and replaces one of its
arguments with a bad value (a wrong type, a wild or negative number, a
ragged, 3-D, float, bool or masked array, a huge grid or range, a dict or a
set). The call may accept it (some bad-looking values are valid), or refuse
it with a ValueError, TypeError or KeyError whose message names an argument
of the entry point; nothing else may escape (no IndexError, OverflowError,
MemoryError, numba or assertion error). A refused call leaves the tracker's
slots, pool and counters, and the layout it was asked about, as they were.

The default run is a few seconds; the `slow` variant runs many more examples
(CI runs it).
"""

from __future__ import annotations

import copy
import inspect
import math
import types

import attrs
import numpy as np
import pytest
import torch
from family_prompts import load_config as load_config_dict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from vllm_features import FeatureSpec, feature

from mrope_tracker import (
    MRopeConfig,
    PositionTracker,
    PromptLayout,
    canvas_layout,
    canvas_positions,
    hf,
    next_positions,
    prompt_positions,
)
from mrope_tracker.evs import PrunedPrompt
from mrope_tracker.hf.compare import load_config
from mrope_tracker.sglang import BatchPositions
from mrope_tracker.sglang import get_rope_index as sglang_get_rope_index
from mrope_tracker.sglang import get_rope_index_ernie45 as sglang_get_rope_index_ernie45
from mrope_tracker.sglang import get_rope_index_glm4v as sglang_get_rope_index_glm4v
from mrope_tracker.sglang import get_rope_index_qwen3_omni as sglang_get_rope_index_qwen3_omni
from mrope_tracker.vllm import get_mrope_input_positions, layout_from_features

QWEN2_5 = MRopeConfig(family="qwen2_5_vl", tokens_per_second=2)
OMNI = MRopeConfig(family="qwen2_5_omni")
CANVAS = load_config("minicpmv4_7")
VS, VE, IMG = QWEN2_5.vision_start_token_id, QWEN2_5.vision_end_token_id, QWEN2_5.image_token_id
IDS = [1, VS, IMG, IMG, VE, 2, VS, QWEN2_5.video_token_id, QWEN2_5.video_token_id, VE, 3]
GRIDS = dict(image_grid_thw=[[1, 2, 4]], video_grid_thw=[[1, 2, 4]], second_per_grid_ts=[1.0])
RANGES = dict(image_ranges=[(2, 2)], video_ranges=[(7, 2)], **GRIDS)
HF_CONFIG = {
    "model_type": "qwen2_5_vl",
    "image_token_id": IMG,
    "video_token_id": QWEN2_5.video_token_id,
    "vision_start_token_id": VS,
    "vision_end_token_id": VE,
    "vision_config": {"spatial_merge_size": 2, "tokens_per_second": 2},
}


def _features():
    return [feature("image", 2, 2, image_grid_thw=[1, 2, 4]), feature("video", 7, 2, video_grid_thw=[1, 2, 4])]


# EVS: a 2-frame video of 2 x 4 patches (2 tokens a frame), its second frame pruned to one token
PRUNED_IDS = [1, VS, *[QWEN2_5.video_token_id] * 3, VE, 2]


def _pruned_prompt() -> PrunedPrompt:
    return PrunedPrompt(QWEN2_5, PRUNED_IDS, video_grid_thw=[[2, 2, 4]], second_per_grid_ts=[1.0])


def _layout() -> PromptLayout:
    return PromptLayout.from_tokens(QWEN2_5, IDS, image_grid_thw=[[1, 2, 4]], video_grid_thw=[[1, 2, 4]])


# Bad values, as factories (each example gets objects of its own).
BAD_VALUES = [
    lambda: None,
    lambda: -1,
    lambda: 0,
    lambda: 2**31,
    lambda: 2**62 + 1,
    lambda: 2**63,
    lambda: -(2**63),
    lambda: 2**100,
    lambda: 1.5,
    lambda: math.nan,
    lambda: math.inf,
    lambda: True,
    lambda: np.int64(-3),
    lambda: "",
    lambda: "qwen2_vl",
    lambda: b"\x00\x01",
    lambda: {},
    lambda: {1: 2, 3: 4},
    lambda: {1, 2, 3},
    lambda: object(),
    lambda: [],
    lambda: [[]],
    lambda: [1, [2, 3]],
    lambda: [1.5, 2.5],
    lambda: [True, False],
    lambda: [[1, 2]],
    lambda: [[0, 2, 2]],
    lambda: [[-1, 2, 4]],
    lambda: [[1, 3, 5]],
    lambda: [[2**31, 2, 2]],
    lambda: [[1, 2**20, 2**20]],
    lambda: [[2**62, 2**62, 2**62]],
    lambda: [[1, 2, 4], [1, 2, 4]],
    lambda: [(2**62, 2**62)],
    lambda: [(-5, 3)],
    lambda: [(0, 2**40)],
    lambda: [[1, 2, 3, 4]],
    lambda: np.zeros((2, 2, 2), np.int64),
    lambda: np.array([[1.5, 2.0, 4.0]]),
    lambda: np.full((1, 3), 2**40, np.int64),
    lambda: np.array([[1, 2, 4]], np.uint64) + np.uint64(2**63),
    lambda: np.ma.masked_array([[1, 2, 4]], mask=[[0, 1, 0]]),
    lambda: np.array(["a", "b"]),
    lambda: np.array([1, 2, 3], dtype=object),
    lambda: torch.tensor([[1.0, 2.0, 4.0]]),
    lambda: torch.zeros(3, dtype=torch.bool),
    lambda: torch.zeros((2, 3, 4), dtype=torch.int64),
    lambda: torch.tensor([1.0], dtype=torch.float64),
    lambda: torch.tensor([[1, 2, 4]], dtype=torch.int64, device="meta"),
    lambda: torch.tensor([9]),
    lambda: torch.tensor([-1]),
    lambda: [feature("image", 2, 2)],
    lambda: [feature("video", 2**62, 2**62, video_grid_thw=[2**31, 2, 2])],
    lambda: [feature("audio", 2, 2, audio_feature_lengths=2**40)],
    lambda: [feature("sound", 2, 2)],
    lambda: [FeatureSpec("image", None, {})],
    lambda: {"model_type": "qwen2_vl", "vision_config": {"spatial_merge_size": -2}},
    lambda: {"model_type": "qwen2_5_omni", "thinker_config": None},
    lambda: {**HF_CONFIG, "image_token_id": 2**60},
    lambda: {**HF_CONFIG, "model_type": ["qwen2_vl"]},
    lambda: {**HF_CONFIG, "vision_config": {"spatial_merge_size": "2", "tokens_per_second": 2}},
    lambda: {**HF_CONFIG, "vision_config": {"spatial_merge_size": 2, "tokens_per_second": math.inf}},
    lambda: MRopeConfig(family="hunyuan_vl"),
    lambda: OMNI,
    lambda: b"MRLY" + b"\x03" + bytes(60),
    lambda: _layout().to_bytes()[:-1],
    lambda: _layout(),
]
bad_values = st.sampled_from(BAD_VALUES).map(lambda make: make())


class Entry:
    """One public entry point: a valid call, and the arguments the fuzz replaces."""

    def __init__(self, name, call, args: dict, state=None, signature_of=None):
        self.name, self.call, self.args, self.state = name, call, args, state
        # every parameter of the public function (a message may name one the call left at its default)
        self.params = tuple(inspect.signature(signature_of or call).parameters)

    def __repr__(self) -> str:
        return self.name


def _tracker() -> PositionTracker:
    tracker = PositionTracker(QWEN2_5, max_num_reqs=3, max_num_batched_tokens=32, layout_rows=8)
    tracker.add_request("live", IDS, image_grid_thw=[[1, 2, 4]], video_grid_thw=[[1, 2, 4]])
    tracker.prepare(["live"], [4])
    return tracker


def _tracker_state(tracker: PositionTracker):
    pool = tracker._pool
    return (
        tracker.slot_state.copy(),
        pool.rows.shape,
        pool.rows[: pool.top].copy(),
        pool.scales[: pool.top].copy(),
        pool.top,
        dict(tracker._slot_of),
        tracker.nbytes(),
    )


def _method_entry(cls, make, snapshot, method: str, args: dict) -> Entry:
    """An entry calling `method` of the object `make` builds, its state taken by `snapshot`."""

    def call(target, **kwargs):
        return getattr(target, method)(**kwargs)

    return Entry(f"{cls.__name__}.{method}", call, args, state=(make, snapshot), signature_of=getattr(cls, method))


def _tracker_entry(method: str, args: dict) -> Entry:
    return _method_entry(PositionTracker, _tracker, _tracker_state, method, args)


def _batch_positions() -> BatchPositions:
    engine = BatchPositions(QWEN2_5, max_num_reqs=3, max_num_tokens=32)
    engine.admit(1, _layout())
    engine.admit(2, num_tokens=5)
    return engine


def _batch_state(engine: BatchPositions):
    return (
        engine._slot_of.copy(),
        engine._deltas.numpy().copy(),
        dict(engine._key_of),
        *_tracker_state(engine.tracker),
    )


def _batch_entry(method: str, args: dict) -> Entry:
    return _method_entry(BatchPositions, _batch_positions, _batch_state, method, args)


SGLANG_ARGS = dict(
    spatial_merge_size=2,
    image_token_id=IMG,
    video_token_id=QWEN2_5.video_token_id,
    vision_start_token_id=VS,
    model_type="qwen2_5_vl",
    tokens_per_second=2,
    input_ids=torch.tensor([IDS]),
    image_grid_thw=torch.tensor([[1, 2, 4]]),
    video_grid_thw=torch.tensor([[1, 2, 4]]),
    second_per_grid_ts=torch.tensor([1.0]),
)
# one audio clip of AUDIO_FRAMES mel frames (Qwen2.5-Omni: its token count from the frames)
AUDIO_FRAMES = 40
AUDIO_IDS = [1, OMNI.audio_start_token_id, *[OMNI.audio_token_id] * OMNI.spec.audio_tokens(AUDIO_FRAMES, OMNI)]
AUDIO_IDS += [OMNI.audio_end_token_id, 2]
QWEN3_OMNI = MRopeConfig(family="qwen3_omni", model_type="qwen3_omni_moe", semantics="sglang-0.5")
# a video of 2 frames of 2 x 2 merged patches at 2/3 s a grid (SGLang's float32 rule carries the fraction)
OMNI_IDS = [1, QWEN3_OMNI.vision_start_token_id, *[QWEN3_OMNI.video_token_id] * 8, QWEN3_OMNI.vision_end_token_id, 2]
ERNIE = load_config_dict("ernie4_5_moe_vl")
ERNIE_IDS = [
    1,
    ERNIE["image_start_token_id"],
    ERNIE["im_patch_id"],
    ERNIE["im_patch_id"],
    ERNIE["image_end_token_id"],
    2,
]
GLM = load_config_dict("glm4v")
GLM_IDS = [1, GLM["image_start_token_id"], GLM["image_token_id"], GLM["image_token_id"], GLM["image_end_token_id"], 2]


def _layout_state(layout: PromptLayout):
    return layout.rows.copy(), layout.scales.copy(), layout.num_tokens, layout.delta, layout.config


ENTRIES = [
    Entry("prompt_positions", prompt_positions, dict(config=QWEN2_5, token_ids=IDS, **GRIDS)),
    Entry(
        "prompt_positions (Omni)",
        prompt_positions,
        dict(config=OMNI, token_ids=[1, 2, 3], audio_feature_lengths=None, use_audio_in_video=False),
    ),
    Entry(
        "prompt_positions (SGLang Qwen3-Omni)",
        prompt_positions,
        dict(config=QWEN3_OMNI, token_ids=OMNI_IDS, video_grid_thw=[[2, 4, 4]], second_per_grid_ts=[2 / 3]),
    ),
    Entry("canvas_positions", canvas_positions, dict(config=CANVAS, token_ids=[1, 2, 3], mm_token_type_ids=[0, 0, 0])),
    Entry(
        "canvas_layout",
        canvas_layout,
        dict(config=CANVAS, token_ids=[1, 2, 3], mm_token_type_ids=[0, 0, 0], target_sizes=None),
    ),
    Entry("PromptLayout.from_tokens", PromptLayout.from_tokens, dict(config=QWEN2_5, token_ids=IDS, **GRIDS)),
    Entry(
        "PromptLayout.from_ranges",
        PromptLayout.from_ranges,
        dict(config=QWEN2_5, num_tokens=len(IDS), token_ids=None, interleave="transformers", **RANGES),
    ),
    Entry("PromptLayout.from_bytes", PromptLayout.from_bytes, dict(data=_layout().to_bytes())),
    Entry(
        "PromptLayout",
        PromptLayout,
        dict(rows=_layout().rows, scales=_layout().scales, num_tokens=11, delta=_layout().delta),
    ),
    Entry(
        "PromptLayout.positions",
        lambda layout, **kw: layout.positions(**kw),
        dict(start=1, end=5),
        state=(_layout, _layout_state),
        signature_of=PromptLayout.positions,
    ),
    Entry(
        "PromptLayout.write_positions",
        lambda layout, **kw: layout.write_positions(**kw),
        dict(out=np.zeros((3, 8), np.int64), out_offset=1, start=0, end=4),
        state=(_layout, _layout_state),
        signature_of=PromptLayout.write_positions,
    ),
    Entry(
        "next_positions",
        next_positions,
        dict(out=np.zeros((3, 8), np.int64), out_offset=0, delta=5, context_len=3, num_new_tokens=4),
    ),
    Entry("MRopeConfig.from_hf_config", MRopeConfig.from_hf_config, dict(source=HF_CONFIG, semantics="reference")),
    Entry("MRopeConfig", MRopeConfig, dict(family="qwen2_5_vl", model_type="qwen2_5_vl", spatial_merge_size=2)),
    Entry(
        "vllm.get_mrope_input_positions",
        get_mrope_input_positions,
        dict(config=QWEN2_5, input_tokens=IDS, mm_features=_features()),
    ),
    Entry(
        "vllm.layout_from_features",
        layout_from_features,
        dict(config=QWEN2_5, num_tokens=len(IDS), mm_features=_features()),
    ),
    Entry(
        "hf.get_rope_index",
        hf.get_rope_index,
        dict(
            config=QWEN2_5,
            input_ids=torch.tensor([IDS]),
            image_grid_thw=torch.tensor([[1, 2, 4]]),
            video_grid_thw=torch.tensor([[1, 2, 4]]),
            attention_mask=None,
            second_per_grid_ts=torch.tensor([1.0]),
        ),
    ),
    Entry(
        "hf.get_rope_index (Qwen2.5-Omni, audio)",
        hf.get_rope_index,
        dict(
            config=OMNI,
            input_ids=torch.tensor([AUDIO_IDS]),
            image_grid_thw=None,
            video_grid_thw=None,
            attention_mask=None,
            audio_feature_lengths=torch.tensor([AUDIO_FRAMES]),
            use_audio_in_video=False,
        ),
    ),
    Entry("sglang.get_rope_index", sglang_get_rope_index, SGLANG_ARGS),
    Entry(
        "sglang.get_rope_index_glm4v",
        sglang_get_rope_index_glm4v,
        dict(
            input_ids=torch.tensor([GLM_IDS, GLM_IDS]),
            hf_config=types.SimpleNamespace(
                **{k: v for k, v in GLM.items() if k != "vision_config"},
                vision_config=types.SimpleNamespace(**GLM["vision_config"]),
            ),
            image_grid_thw=torch.tensor([[1, 2, 4], [1, 2, 4]]),
            video_grid_thw=None,
            attention_mask=torch.ones((2, len(GLM_IDS)), dtype=torch.int64),
        ),  # fmt: skip
    ),
    Entry(
        "PositionTracker",
        PositionTracker,
        dict(config=QWEN2_5, max_num_reqs=2, max_num_batched_tokens=16, max_model_len=64, layout_rows=4),
    ),
    Entry("BatchPositions", BatchPositions, dict(config=QWEN2_5, max_num_reqs=2, max_num_tokens=16, max_model_len=64)),
    Entry(
        "evs.PrunedPrompt",
        PrunedPrompt,
        dict(
            config=QWEN2_5,
            token_ids=PRUNED_IDS,
            video_grid_thw=[[2, 2, 4]],
            image_grid_thw=None,
            second_per_grid_ts=[1.0],
        ),
    ),
    Entry(
        "evs.PrunedPrompt.layout",
        lambda prompt, **kw: prompt.layout(**kw),
        dict(retention_masks=[[True, True, True, False]]),
        state=(_pruned_prompt, lambda prompt: (prompt.num_tokens, tuple(prompt.num_kept))),
        signature_of=PrunedPrompt.layout,
    ),
    Entry(
        "sglang.get_rope_index_qwen3_omni",
        sglang_get_rope_index_qwen3_omni,
        dict(
            spatial_merge_size=2,
            image_token_id=QWEN3_OMNI.image_token_id,
            video_token_id=QWEN3_OMNI.video_token_id,
            vision_start_token_id=QWEN3_OMNI.vision_start_token_id,
            tokens_per_second=None,
            input_ids=torch.tensor([OMNI_IDS]),
            image_grid_thw=None,
            video_grid_thw=torch.tensor([[2, 4, 4]]),
            second_per_grid_ts=torch.tensor([2 / 3]),
            audio_token_id=QWEN3_OMNI.audio_token_id,
            audio_start_token_id=QWEN3_OMNI.audio_start_token_id,
            position_id_per_seconds=13,
            use_audio_in_video=False,
            audio_seqlens=None,
        ),
    ),
    Entry(
        "sglang.get_rope_index_ernie45",
        sglang_get_rope_index_ernie45,
        dict(
            input_ids=torch.tensor([ERNIE_IDS]),
            hf_config=types.SimpleNamespace(**ERNIE),
            image_grid_thw=torch.tensor([[1, 2, 4]]),
            video_grid_thw=None,
        ),  # fmt: skip
    ),
    _batch_entry("admit", dict(req_pool_idx=3, layout=_layout(), num_tokens=None)),
    _batch_entry(
        "positions",
        dict(req_pool_indices=[1, 2], prefix_lens=[0, 0], extend_lens=[4, 5], seq_lens=None, spec_positions=None),
    ),
    _batch_entry("positions", dict(req_pool_indices=[1, 2], seq_lens=[12, 6])),
    _batch_entry("positions", dict(req_pool_indices=torch.tensor([1, 2]), spec_positions=torch.tensor([11, 12, 5, 6]))),
    _batch_entry("release", dict(req_pool_idx=2)),
    _tracker_entry("add_request", dict(req_id="new", token_ids=IDS, num_computed_tokens=0, **GRIDS)),
    _tracker_entry("add_request_from_ranges", dict(req_id="new", num_tokens=len(IDS), num_computed_tokens=0, **RANGES)),
    _tracker_entry(
        "add_request_from_features",
        dict(req_id="new", prompt_token_ids=IDS, mm_features=_features(), num_computed_tokens=0),
    ),
    _tracker_entry("add_request_layout", dict(req_id="new", layout=_layout(), num_computed_tokens=0)),
    _tracker_entry(
        "add_request_pruned",
        dict(req_id="new", prompt=_pruned_prompt(), num_computed_tokens=0, retention_masks=[[True, True, True, False]]),
    ),
    _tracker_entry("prepare", dict(req_ids=["live"], num_scheduled_tokens=[3], num_computed_tokens=None)),
    _tracker_entry("prepare_slots", dict(slots=[0], num_scheduled_tokens=[3], num_computed_tokens=None)),
    _tracker_entry("remove_request", dict(req_id="live")),
    _tracker_entry("rollback", dict(req_id="live", num_tokens=2)),
    _tracker_entry("mrope_position_delta", dict(req_id="live")),
]
# names a message may give besides the entry point's own arguments: the config's fields (a config given as a
# dict), and the range form's names, under which vLLM's features (their ranges and data fields) are reported
SPECIAL_NAMES = (
    "config",
    "token ids",
    *(field.name for field in attrs.fields(MRopeConfig)),
    *("image_ranges", "video_ranges", "audio_ranges", "image_grid_thw", "video_grid_thw", "second_per_grid_ts"),
    "audio_feature_lengths",
)


def _names(entry: Entry) -> tuple[str, ...]:
    # (the call's own keywords too: SGLang's functions take some of theirs through **kwargs)
    return (*entry.params, *entry.args, *SPECIAL_NAMES)


def _check_bad_call(entry: Entry, data) -> None:
    name = data.draw(st.sampled_from(sorted(entry.args)), label="argument")
    value = data.draw(bad_values, label="value")
    kwargs = {**{k: copy.copy(v) for k, v in entry.args.items()}, name: value}
    target = before = None
    if entry.state is not None:
        make, snapshot = entry.state
        target = make()
        before = snapshot(target)
    try:
        entry.call(target, **kwargs) if target is not None else entry.call(**kwargs)
    except (ValueError, TypeError, KeyError) as exc:
        message = str(exc)
        assert any(arg in message for arg in _names(entry)), f"{entry}: {name}={value!r}: {message}"
        if target is not None:
            after = entry.state[1](target)
            assert unchanged(before, after), f"{entry}: {name}={value!r} was refused ({message}) but changed the state"


def unchanged(before: tuple, after: tuple) -> bool:
    """Whether two snapshots of an entry's state are equal, field by field (arrays by value)."""
    return all(
        np.array_equal(was, now) if isinstance(was, np.ndarray) else was == now
        for was, now in zip(before, after, strict=True)
    )


def check_valid_call(entry: Entry) -> None:
    if entry.state is None:
        entry.call(**entry.args)
    else:
        entry.call(entry.state[0](), **entry.args)


def fuzz_tests(entries: list, examples: int, slow_examples: int) -> tuple:
    """The three tests of a module's `entries`: each valid call accepted, and bad arguments refused cleanly at
    `examples` per entry (`slow_examples` in the slow run). test_rope_state_bad_input.py takes them too."""
    ignore_defaults = pytest.mark.filterwarnings("ignore::mrope_tracker.core.config.ConfigDefaultWarning")
    each_entry = pytest.mark.parametrize("entry", entries, ids=repr)

    @ignore_defaults
    @each_entry
    def test_the_valid_call_is_accepted(entry):
        """Each entry's own call is valid, so that a refusal of a replaced argument is the bad value's doing."""
        check_valid_call(entry)

    @ignore_defaults
    @each_entry
    @settings(max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data())
    def test_bad_arguments_are_refused_cleanly(entry, data):
        """A bad argument is accepted or refused with ValueError/TypeError/KeyError naming an argument, the
        state unchanged; nothing else escapes."""
        _check_bad_call(entry, data)

    @pytest.mark.slow
    @ignore_defaults
    @each_entry
    @settings(max_examples=slow_examples, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data())
    def test_bad_arguments_are_refused_cleanly_at_length(entry, data):
        """The same, with many more examples (the slow run)."""
        _check_bad_call(entry, data)

    return (
        test_the_valid_call_is_accepted,
        test_bad_arguments_are_refused_cleanly,
        test_bad_arguments_are_refused_cleanly_at_length,
    )


(
    test_the_valid_call_is_accepted,
    test_bad_arguments_are_refused_cleanly,
    test_bad_arguments_are_refused_cleanly_at_length,
) = fuzz_tests(ENTRIES, 25, 400)
