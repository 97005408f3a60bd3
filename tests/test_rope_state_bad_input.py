"""Random bad arguments to `RopeState`'s public methods (issue 27, item 7; the device state's share of
test_bad_input_fuzz.py, whose bad values and checks these tests use).

Each example takes a valid call of one method on a state holding one
admitted request, replaces one argument with a bad value, and requires the
call to be accepted or refused with a ValueError, TypeError or KeyError that
names an argument; a refused call leaves the state's host records, staged
writes, dense overrides, sizes and positions buffer as they were. The state
runs in debug mode, where `prepare_positions` checks its tensors on the
host (without it the step launches the kernel unchecked, as vLLM's does).
Without a GPU the kernels run in triton's interpreter.
"""

from __future__ import annotations

import os
import types

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from triton_support import require_triton  # noqa: E402

require_triton(module_level=True)

import pytest  # noqa: E402
from test_bad_input_fuzz import (  # noqa: E402
    HF_CONFIG,
    IDS,
    QWEN2_5,
    Entry,
    _features,
    _layout,
    _method_entry,
    _pruned_prompt,
    fuzz_tests,
    unchanged,
)

from mrope_tracker.device.evs_rows import PrunedRopeState  # noqa: E402
from mrope_tracker.device.factory import get_rope_state  # noqa: E402
from mrope_tracker.vllm import RopeState  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
MAX_NUM_REQS = 3


def _state() -> RopeState:
    state = RopeState(3, MAX_NUM_REQS, 32, 64, DEVICE, config=QWEN2_5, block_size=16, debug=True)
    state.init_prefill_positions(1, QWEN2_5, IDS, _features())
    state.apply_staged_writes()
    return state


def _snapshot(state: RopeState):
    staging = state._staging
    return (
        state._records.copy(),
        tuple(sorted(state.nbytes().items())),
        state.max_num_rows,
        staging._used,
        tuple(staging._by_destination),
        tuple(sorted(state._overrides._dense)),
        state._overrides.dirty,
        state.positions.cpu().numpy().copy(),
    )


def _entry(method: str, args: dict):
    return _method_entry(RopeState, _state, _snapshot, method, args)


MASK = [True, True, True, False]  # test_bad_input_fuzz's pruned prompt: its second frame pruned to one token


def _pruned_state() -> PrunedRopeState:
    state = PrunedRopeState(3, MAX_NUM_REQS, 32, 64, DEVICE, config=QWEN2_5, block_size=16, debug=True)
    state.init_prefill_pruned(1, _pruned_prompt())
    return state


def _pruned_entry(method: str, args: dict):
    return _method_entry(PrunedRopeState, _pruned_state, _snapshot, method, args)


def _index(values, dtype):
    return torch.tensor(values, dtype=dtype, device=DEVICE)


# what vLLM's runner passes the plugin's factory: its ModelConfig, as far as the factory reads it
MODEL_CONFIG = types.SimpleNamespace(uses_mrope=True, hf_config=HF_CONFIG, mrope_num_dims=3, multimodal_config=None)

ENTRIES = [
    Entry(
        "get_rope_state",
        get_rope_state,
        dict(model_config=MODEL_CONFIG, model=None, max_num_reqs=2, max_num_tokens=16, max_model_len=64, device=DEVICE),
    ),
    _entry(
        "init_prefill_positions",
        dict(req_idx=2, model=QWEN2_5, prefill_token_ids=IDS, mm_features=_features()),
    ),
    Entry(
        "RopeState",
        RopeState,
        dict(num_dims=3, max_num_reqs=2, max_num_tokens=16, max_model_len=64, device=DEVICE, config=QWEN2_5),
    ),
    _entry("init_prefill_layout", dict(req_idx=2, layout=_layout())),
    _pruned_entry("init_prefill_pruned", dict(req_idx=2, prompt=_pruned_prompt(), retention_masks=[MASK])),
    _pruned_entry("set_retention_mask", dict(req_idx=1, video_index=0, retention_mask=MASK)),
    _entry("remove_request", dict(req_idx=1)),
    _entry("get_positions", dict(num_tokens=8)),
    _entry(
        "prepare_positions",
        dict(
            idx_mapping=_index([1], torch.int64),
            query_start_loc=_index([0, 4], torch.int32),
            prefill_lens=_index([0, len(IDS), 0], torch.int32),
            num_computed_tokens=_index([0, 0, 0], torch.int32),
        ),
    ),
    _entry("read_prefill_positions", dict(req_idx=1, length=4)),
    _entry(
        "update_prefill_positions",
        dict(req_idx=1, positions=torch.arange(3 * 6, dtype=torch.int32, device=DEVICE).view(3, 6), delta=-2),
    ),
]


(
    test_the_valid_call_is_accepted,
    test_bad_arguments_are_refused_cleanly,
    test_bad_arguments_are_refused_cleanly_at_length,
) = fuzz_tests(ENTRIES, 15, 200)


def test_no_model_is_refused_by_name_when_none_was_seen():
    """Found by this fuzz: a state given its config, never a model object, took `model=None` for the model it
    had seen (none), and attrs raised about a None config without naming the argument."""
    state = _state()
    before = _snapshot(state)
    with pytest.raises(TypeError, match="model: expected a vLLM model"):
        state.init_prefill_positions(2, None, IDS, _features())
    assert unchanged(before, _snapshot(state))


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        (dict(model_config=None), TypeError, "model_config: expected vLLM's ModelConfig"),
        (dict(model_config=types.SimpleNamespace(uses_mrope=True)), TypeError, r"model_config: .*\.hf_config"),
        (dict(device=2**63), ValueError, "device: expected a torch device"),
    ],
)
def test_the_factory_names_what_it_cannot_read(change, error, match):
    """Found by this fuzz: a model_config without vLLM's fields raised AttributeError, and a device index past
    int64 torch's own unnamed ValueError."""
    args = dict(model_config=MODEL_CONFIG, model=None, max_num_reqs=2, max_num_tokens=16, max_model_len=64)
    with pytest.raises(error, match=match):
        get_rope_state(**{"device": DEVICE, **args, **change})


@pytest.mark.parametrize(
    ("mask", "error", "match"),
    [
        ([1, [2, 3], 1, 0], ValueError, r"retention_masks\[0\]: expected a 1-D bool"),
        (torch.ones(4, dtype=torch.bool, device="meta"), TypeError, r"retention_masks\[0\]: expected a tensor that"),
    ],
)
def test_a_mask_numpy_cannot_read_is_refused_by_name(mask, error, match):
    """Found by this fuzz: a ragged list reached numpy's unnamed ValueError, a meta tensor torch's
    NotImplementedError."""
    state = _pruned_state()
    before = _snapshot(state)
    with pytest.raises(error, match=match):
        state.set_retention_mask(1, 0, mask)
    assert unchanged(before, _snapshot(state))
