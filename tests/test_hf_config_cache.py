"""hf.get_rope_index keeps the parse of a config object it has seen, and never serves a stale one.

The oracle is a fresh parse (`MRopeConfig.from_hf_config`) of the config as it reads at the time of the call.
"""

from __future__ import annotations

import copy
import gc
import types
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mrope_tracker import MRopeConfig, hf
from mrope_tracker.core import config_cache

transformers = pytest.importorskip("transformers")

SEMANTICS = "reference"
_PARSE = MRopeConfig.from_hf_config  # the plain parse, kept before `parses` counts the cache's


def _transformers_config(name: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return transformers.AutoConfig.from_pretrained(f"tests/data/configs/{name}.json")


@pytest.fixture
def qwen25(monkeypatch):
    monkeypatch.chdir(__import__("pathlib").Path(__file__).resolve().parent.parent)
    return _transformers_config("qwen2_5_vl")


@pytest.fixture
def parses(monkeypatch):
    """How many times the cache parsed a config."""
    calls = []
    real = MRopeConfig.from_hf_config

    def counting(source, *, semantics=None):
        calls.append(source)
        return real(source, semantics=semantics)

    monkeypatch.setattr(config_cache.MRopeConfig, "from_hf_config", counting)
    return calls


def _fresh(config) -> MRopeConfig:
    return _PARSE(copy.deepcopy(config), semantics=SEMANTICS)


def test_a_config_object_is_parsed_once(qwen25, parses):
    """Repeated calls with one unchanged config object reuse its parse."""
    first = config_cache.parsed_config(qwen25, SEMANTICS)
    assert all(config_cache.parsed_config(qwen25, SEMANTICS) is first for _ in range(3))
    assert len(parses) == 1 and first == _fresh(qwen25)
    assert config_cache.parsed_config(qwen25, "vllm-0.33").semantics == "vllm-0.33"  # a preset of its own
    assert len(parses) == 2


def test_a_field_the_positions_read_changed_in_place_is_read_again(qwen25, parses):
    """Mutating a sub-config's field, a token id, or replacing a sub-config: the next call parses again."""
    before = config_cache.parsed_config(qwen25, SEMANTICS)
    qwen25.vision_config.tokens_per_second = 4
    after = config_cache.parsed_config(qwen25, SEMANTICS)
    assert after.tokens_per_second == 4 and after == _fresh(qwen25) and after != before
    qwen25.image_token_id = 7
    assert config_cache.parsed_config(qwen25, SEMANTICS).image_token_id == 7
    qwen25.vision_config = copy.deepcopy(qwen25.vision_config)
    qwen25.vision_config.spatial_merge_size = 1
    assert config_cache.parsed_config(qwen25, SEMANTICS).spatial_merge_size == 1
    assert len(parses) == 4


def test_a_field_the_positions_do_not_read_keeps_the_parse(qwen25, parses):
    """A change nothing positional depends on (what transformers itself sets on a config) costs no parse."""
    first = config_cache.parsed_config(qwen25, SEMANTICS)
    qwen25.output_attentions = not qwen25.output_attentions
    qwen25.vision_config.depth = 3
    assert config_cache.parsed_config(qwen25, SEMANTICS) is first and len(parses) == 1


def test_get_rope_index_follows_a_mutated_model_config(qwen25):
    """Through the drop-in: positions after an in-place edit are those of the edited config."""
    grid = torch.tensor([[2, 4, 4]])  # a video of 2 temporal patches: tokens_per_second sets their T
    video_ids = torch.tensor([[101, 151652, *[151656] * 8, 151653, 102]])
    kwargs = dict(video_grid_thw=grid, second_per_grid_ts=torch.tensor([1.0]), semantics=SEMANTICS)
    before = hf.get_rope_index(qwen25, video_ids, **kwargs)[0]
    qwen25.vision_config.tokens_per_second = 5
    after = hf.get_rope_index(qwen25, video_ids, **kwargs)[0]
    assert torch.equal(after, hf.get_rope_index(_fresh(qwen25), video_ids, **kwargs)[0])
    assert not torch.equal(before, after)


def test_a_dead_config_leaves_the_cache(qwen25):
    """The cache holds no config alive: its entry goes with it, so a reused id never finds an old parse."""
    config = copy.deepcopy(qwen25)  # not the fixture's, which pytest holds to the end of the test
    config_cache.parsed_config(config, SEMANTICS)
    key = (id(config), SEMANTICS)
    assert key in config_cache._entries
    del config
    gc.collect()
    assert key not in config_cache._entries


def test_objects_without_weak_references_and_dicts_are_parsed_every_call(qwen25, parses):
    """A dict, or an object that takes no weak reference, is parsed every call (and so is never stale)."""
    source = qwen25.to_dict()
    for _ in range(2):
        config_cache.parsed_config(source, SEMANTICS)
    names = dict(source, vision_config=types.SimpleNamespace(**source["vision_config"]))
    namespace = types.SimpleNamespace(**names)  # SimpleNamespace takes no weak reference
    for _ in range(2):
        assert config_cache.parsed_config(namespace, SEMANTICS) == _fresh(qwen25)
    assert len(parses) == 4


def test_a_bad_config_raises_the_plain_parses_error(qwen25):
    """A config the parse refuses raises the same error as the plain parse (naming the config, not ours)."""
    qwen25.model_type = "nope"
    with pytest.raises(ValueError, match="config.model_type: expected one of") as cached:
        config_cache.parsed_config(qwen25, SEMANTICS)
    with pytest.raises(ValueError) as plain:
        MRopeConfig.from_hf_config(qwen25, semantics=SEMANTICS)
    assert str(cached.value) == str(plain.value)


try:  # transformers 5's configs check their fields' types as they are set
    from huggingface_hub.errors import StrictDataclassFieldValidationError as REFUSED_EDIT
except ImportError:  # (the hub transformers 4.57 installs: configs take any value)
    REFUSED_EDIT = ()

FIELDS = {  # (owner path, field) -> values to try, including absent (None deletes it)
    ("", "image_token_id"): [151655, 11, None],
    ("", "vision_start_token_id"): [151652, 12],
    ("vision_config", "tokens_per_second"): [2, 1, 4, 2.5],
    ("vision_config", "spatial_merge_size"): [2, 1, 4],
    ("", "text_config"): ["keep", "drop"],
}


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from([(k, v) for k, vs in FIELDS.items() for v in vs]), min_size=1, max_size=6))
@pytest.mark.filterwarnings("ignore")
def test_random_edits_never_serve_a_stale_parse(edits):
    """After any sequence of edits, the cached parse equals a fresh parse of the config as it reads now."""
    config = _transformers_config("qwen2_5_vl")
    for (owner, field), value in edits:
        target = getattr(config, owner) if owner else config
        if value == "keep":
            continue
        if value is None or value == "drop":
            target.__dict__.pop(field, None)
        else:
            try:
                setattr(target, field, value)
            except REFUSED_EDIT:  # transformers 5 checks a field's type as it is set (2.5 for an int)
                target.__dict__[field] = value  # what a config read from an older file may hold
        try:
            expected = _fresh(config)
        except (ValueError, TypeError) as exc:
            with pytest.raises(type(exc)):
                config_cache.parsed_config(config, SEMANTICS)
            continue
        assert config_cache.parsed_config(config, SEMANTICS) == expected
