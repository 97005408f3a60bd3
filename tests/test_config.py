"""`MRopeConfig.from_hf_config`: the values that decide positions, read from a
config.json path, a model folder, a dict or an attribute-style config object."""

from __future__ import annotations

import copy
import json
import pathlib
import types
import warnings

import attrs
import pytest
from family_prompts import MODEL_TYPES

from mrope_tracker import SUPPORTED_MODEL_TYPES, MRopeConfig
from mrope_tracker.core import config as config_module
from mrope_tracker.core.config import ConfigDefaultWarning

# Trimmed published configs (the same values as tests/data/configs/*.json).
QWEN2_VL = {
    "architectures": ["Qwen2VLForConditionalGeneration"],
    "model_type": "qwen2_vl",
    "image_token_id": 151655,
    "video_token_id": 151656,
    "vision_start_token_id": 151652,
    "vision_end_token_id": 151653,
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
    "vision_config": {"patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2},
}
QWEN2_5_VL = {
    "architectures": ["Qwen2_5_VLForConditionalGeneration"],
    "model_type": "qwen2_5_vl",
    "image_token_id": 151655,
    "video_token_id": 151656,
    "vision_start_token_id": 151652,
    "vision_end_token_id": 151653,
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
    "vision_config": {"patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "tokens_per_second": 2},
}
OMNI_THINKER = {
    "model_type": "qwen2_5_omni_thinker",
    "audio_token_index": 151646,
    "image_token_index": 151655,
    "video_token_index": 151656,
    "audio_start_token_id": 151647,
    "audio_end_token_id": 151648,
    "vision_start_token_id": 151652,
    "vision_end_token_id": 151653,
    "position_id_per_seconds": 25,
    "seconds_per_chunk": 2,
    "vision_config": {"patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2},
    "text_config": {"rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}},
}
QWEN2_5_OMNI = {"architectures": ["Qwen2_5OmniModel"], "model_type": "qwen2_5_omni", "thinker_config": OMNI_THINKER}

PUBLISHED = {
    "qwen2_vl": QWEN2_VL,
    "qwen2_5_vl": QWEN2_5_VL,
    "qwen2_5_omni": QWEN2_5_OMNI,
    "qwen2_5_omni_thinker": OMNI_THINKER,
}


def _namespace(value):
    """A config dict as nested attribute objects, like a transformers config."""
    if isinstance(value, dict):
        return types.SimpleNamespace(**{key: _namespace(item) for key, item in value.items()})
    return value


def _from_partial(hf, **kwargs) -> MRopeConfig:
    """from_hf_config on a config that leaves values to the family defaults
    (the warning that gives is tested apart)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigDefaultWarning)
        return MRopeConfig.from_hf_config(hf, **kwargs)


@pytest.fixture
def fresh_warnings(monkeypatch):
    """No (model_type, field) warned about yet in this process."""
    monkeypatch.setattr(config_module, "_WARNED_DEFAULTS", set())


def _with(config: dict, path: tuple[str, ...], value) -> dict:
    """A deep copy of `config` with config[path[0]]...[path[-1]] set (or removed when value is ...)."""
    out = copy.deepcopy(config)
    node = out
    for key in path[:-1]:
        node = node[key]
    if value is ...:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return out


# --------------------------------------------------------------------------
# published configs
# --------------------------------------------------------------------------


def test_qwen2_vl_published():
    """Qwen2-VL: merge 2, the published ids, no temporal scale and no audio."""
    config = MRopeConfig.from_hf_config(QWEN2_VL)
    assert (config.family, config.model_type) == ("qwen2_vl", "qwen2_vl")
    assert config.spatial_merge_size == 2
    assert (config.image_token_id, config.video_token_id) == (151655, 151656)
    assert (config.vision_start_token_id, config.vision_end_token_id) == (151652, 151653)
    assert config.tokens_per_second is None and config.seconds_per_chunk is None
    assert config.audio_token_id is None and not config.is_omni and config.audio_chunk_positions is None


def test_qwen2_5_vl_published():
    """Qwen2.5-VL reads vision_config.tokens_per_second (2 in the published checkpoints)."""
    config = MRopeConfig.from_hf_config(QWEN2_5_VL)
    assert (config.family, config.model_type) == ("qwen2_5_vl", "qwen2_5_vl")
    assert config.tokens_per_second == 2.0 and isinstance(config.tokens_per_second, float)
    assert config.audio_token_id is None and config.seconds_per_chunk is None


@pytest.mark.parametrize("hf", [QWEN2_5_OMNI, OMNI_THINKER], ids=["full", "thinker"])
def test_omni_published(hf):
    """Qwen2.5-Omni (full config through thinker_config, or the thinker's own): the _index ids,
    r = position_id_per_seconds = 25, seconds_per_chunk 2, chunk C = int(25 * 2) = 50."""
    config = MRopeConfig.from_hf_config(hf)
    assert config.family == "qwen2_5_omni" and config.is_omni
    assert config.model_type == hf["model_type"]
    assert (config.image_token_id, config.video_token_id, config.audio_token_id) == (151655, 151656, 151646)
    assert (config.audio_start_token_id, config.audio_end_token_id) == (151647, 151648)
    assert (config.vision_start_token_id, config.vision_end_token_id) == (151652, 151653)
    assert config.tokens_per_second == 25.0 and config.seconds_per_chunk == 2.0
    assert config.audio_chunk_positions == 50


def test_full_and_thinker_omni_configs_agree():
    """The full Omni config and its thinker config give equal position settings."""
    full = MRopeConfig.from_hf_config(QWEN2_5_OMNI)
    thinker = MRopeConfig.from_hf_config(OMNI_THINKER)
    assert (full.model_type, thinker.model_type) == ("qwen2_5_omni", "qwen2_5_omni_thinker")
    same = "qwen2_5_omni"  # (a model type of the family: the two differ in nothing else)
    assert attrs.evolve(full, model_type=same) == attrs.evolve(thinker, model_type=same)
    assert (full.kernel_params == thinker.kernel_params).all()


def test_supported_model_types():
    """Every supported model type maps to its family."""
    assert SUPPORTED_MODEL_TYPES == MODEL_TYPES


# --------------------------------------------------------------------------
# input forms
# --------------------------------------------------------------------------


@pytest.mark.parametrize("model_type", sorted(PUBLISHED))
def test_json_path(tmp_path, model_type):
    """A config.json path (str or pathlib.Path) reads the same as the dict."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(PUBLISHED[model_type]), encoding="utf-8")
    expected = MRopeConfig.from_hf_config(PUBLISHED[model_type])
    assert MRopeConfig.from_hf_config(str(path)) == expected
    assert MRopeConfig.from_hf_config(pathlib.Path(path)) == expected


@pytest.mark.parametrize("model_type", sorted(PUBLISHED))
def test_attribute_object(model_type):
    """A nested attribute object (transformers-style config, sub-configs as objects) reads the same as the dict."""
    expected = MRopeConfig.from_hf_config(PUBLISHED[model_type])
    assert MRopeConfig.from_hf_config(_namespace(PUBLISHED[model_type])) == expected


def test_attribute_object_with_dict_sub_configs():
    """An attribute object whose thinker and vision configs are plain dicts reads the same."""
    outer = types.SimpleNamespace(model_type="qwen2_5_omni", thinker_config=copy.deepcopy(OMNI_THINKER))
    assert MRopeConfig.from_hf_config(outer) == MRopeConfig.from_hf_config(QWEN2_5_OMNI)
    vl = types.SimpleNamespace(model_type="qwen2_5_vl", vision_config={"spatial_merge_size": 1, "tokens_per_second": 3})
    config = _from_partial(vl)
    assert (config.spatial_merge_size, config.tokens_per_second) == (1, 3.0)


def test_mrope_config_passes_through():
    """An MRopeConfig is returned as is."""
    config = MRopeConfig(family="qwen2_5_vl", tokens_per_second=2)
    assert MRopeConfig.from_hf_config(config) is config


# --------------------------------------------------------------------------
# key spellings, sources and defaults
# --------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", ["_id", "_index"])
@pytest.mark.parametrize("model_type", ["qwen2_vl", "qwen2_5_vl", "qwen2_5_omni_thinker"])
def test_id_spellings(model_type, suffix):
    """image/video (and Omni audio) token ids are read under either *_token_id or *_token_index."""
    hf = {"model_type": model_type, f"image_token{suffix}": 11, f"video_token{suffix}": 12}
    if model_type == "qwen2_5_omni_thinker":
        hf[f"audio_token{suffix}"] = 13
    config = _from_partial(hf)
    assert (config.image_token_id, config.video_token_id) == (11, 12)
    if config.is_omni:
        assert config.audio_token_id == 13


def test_custom_ids_are_read():
    """Every special token id comes from the config, not from the published defaults."""
    thinker = dict(
        OMNI_THINKER,
        audio_token_index=1,
        image_token_index=2,
        video_token_index=3,
        audio_start_token_id=4,
        audio_end_token_id=5,
        vision_start_token_id=6,
        vision_end_token_id=7,
    )
    config = MRopeConfig.from_hf_config({"model_type": "qwen2_5_omni", "thinker_config": thinker})
    got = (
        config.audio_token_id,
        config.image_token_id,
        config.video_token_id,
        config.audio_start_token_id,
        config.audio_end_token_id,
        config.vision_start_token_id,
        config.vision_end_token_id,
    )
    assert got == (1, 2, 3, 4, 5, 6, 7)


def test_full_omni_reads_thinker_not_top_level():
    """A full Omni config takes its ids and scales from thinker_config, not from top-level keys."""
    hf = dict(QWEN2_5_OMNI, image_token_id=1, position_id_per_seconds=3)
    config = MRopeConfig.from_hf_config(hf)
    assert config.image_token_id == 151655 and config.tokens_per_second == 25.0


def test_omni_scale_is_position_id_per_seconds():
    """Omni's temporal scale is the thinker's position_id_per_seconds, not
    vision_config.tokens_per_second (divergence D7 in docs/semantics.md: transformers' choice)."""
    thinker = _with(OMNI_THINKER, ("position_id_per_seconds",), 13)
    thinker = _with(thinker, ("vision_config", "tokens_per_second"), 25)
    config = MRopeConfig.from_hf_config(thinker)
    # C = int(13 * 2) = 26
    assert config.tokens_per_second == 13.0 and config.audio_chunk_positions == 26


def test_omni_chunk_truncates():
    """The interleave chunk is int(r * seconds_per_chunk): r 2.5, 1.5 s -> int(3.75) = 3."""
    thinker = dict(OMNI_THINKER, position_id_per_seconds=2.5, seconds_per_chunk=1.5)
    assert MRopeConfig.from_hf_config(thinker).audio_chunk_positions == 3


def test_qwen2_vl_ignores_tokens_per_second_in_vision_config():
    """Qwen2-VL has no temporal scale even when its vision config carries tokens_per_second."""
    hf = _with(QWEN2_VL, ("vision_config", "tokens_per_second"), 2)
    assert MRopeConfig.from_hf_config(hf).tokens_per_second is None


@pytest.mark.parametrize(
    ("hf", "expected"),
    [
        # transformers config-class defaults: merge 2, published ids;
        # Qwen2.5-VL tokens_per_second 4; Omni position_id_per_seconds 25, seconds_per_chunk 2.
        ({"model_type": "qwen2_vl"}, dict(spatial_merge_size=2, tokens_per_second=None, seconds_per_chunk=None)),
        ({"model_type": "qwen2_vl", "vision_config": {}}, dict(spatial_merge_size=2, tokens_per_second=None)),
        ({"model_type": "qwen2_5_vl"}, dict(spatial_merge_size=2, tokens_per_second=4.0, seconds_per_chunk=None)),
        (
            {"model_type": "qwen2_5_vl", "vision_config": {"spatial_merge_size": 1}},
            dict(spatial_merge_size=1, tokens_per_second=4.0),
        ),
        (
            {"model_type": "qwen2_5_omni_thinker"},
            dict(
                spatial_merge_size=2,
                tokens_per_second=25.0,
                seconds_per_chunk=2.0,
                audio_token_id=151646,
                audio_start_token_id=151647,
                audio_end_token_id=151648,
            ),
        ),
        ({"model_type": "qwen2_5_omni", "thinker_config": {}}, dict(tokens_per_second=25.0, seconds_per_chunk=2.0)),
    ],
    ids=[
        "qwen2_vl",
        "qwen2_vl_empty_vision",
        "qwen2_5_vl",
        "qwen2_5_vl_merge_only",
        "omni_thinker",
        "omni_empty_thinker",
    ],
)
def test_defaults_for_missing_keys(hf, expected, fresh_warnings):
    """Missing keys take the transformers defaults; the published ids fill in missing ids."""
    with pytest.warns(ConfigDefaultWarning):
        config = MRopeConfig.from_hf_config(hf)
    for name, value in expected.items():
        assert getattr(config, name) == value, name
    assert (config.image_token_id, config.video_token_id) == (151655, 151656)
    assert (config.vision_start_token_id, config.vision_end_token_id) == (151652, 151653)


def test_none_values_take_defaults():
    """A key present with the value None (as transformers writes unset fields) takes the default."""
    hf = {"model_type": "qwen2_5_vl", "image_token_id": None, "vision_config": {"tokens_per_second": None}}
    config = _from_partial(hf)
    assert config.image_token_id == 151655 and config.tokens_per_second == 4.0


# --------------------------------------------------------------------------
# rejections
# --------------------------------------------------------------------------


def _rejects(exc, match, hf, **kwargs):
    with pytest.raises(Exception) as info:
        MRopeConfig.from_hf_config(hf, **kwargs)
    assert type(info.value) is exc, f"expected {exc.__name__}, got {type(info.value).__name__}: {info.value}"
    info.match(match)
    return info.value


@pytest.mark.parametrize("model_type", ["glm4v_text", "qwen2_5_omni_talker", "llama", "", None, 7])
def test_unsupported_model_type(model_type):
    """An unsupported model_type is a ValueError naming model_type and listing every supported one."""
    error = _rejects(ValueError, "model_type", {"model_type": model_type})
    for supported in SUPPORTED_MODEL_TYPES:
        assert supported in str(error)


def test_missing_model_type():
    """A config without model_type is a ValueError listing the supported types."""
    error = _rejects(ValueError, "model_type", _namespace({"vision_config": {"spatial_merge_size": 2}}))
    assert all(name in str(error) for name in SUPPORTED_MODEL_TYPES)


def test_full_omni_without_thinker_config():
    """A full Omni config without thinker_config is a ValueError naming it."""
    _rejects(ValueError, "thinker_config", {"model_type": "qwen2_5_omni"})


@pytest.mark.parametrize("value", [None, 5, 1.5, [QWEN2_VL], (1,), b"{}", True])
def test_not_a_config(value):
    """Anything but a path, a dict or a config object is a TypeError naming config."""
    _rejects(TypeError, "config", value)


def test_missing_path(tmp_path):
    """A path that cannot be read is a ValueError naming config."""
    _rejects(ValueError, "config", str(tmp_path / "missing.json"))


def test_invalid_json(tmp_path):
    """A file that is not valid JSON is a ValueError naming config."""
    path = tmp_path / "config.json"
    path.write_text("{model_type: qwen2_vl", encoding="utf-8")
    _rejects(ValueError, "config", path)


@pytest.mark.parametrize("merge", [0, -2, 1.5, 2.0, True, "2"])
def test_bad_spatial_merge_size(merge):
    """A spatial_merge_size that is not a positive int is a ValueError naming it."""
    _rejects(ValueError, "spatial_merge_size", _with(QWEN2_5_VL, ("vision_config", "spatial_merge_size"), merge))


@pytest.mark.parametrize(
    ("hf", "names"),
    [
        (dict(QWEN2_VL, video_token_id=151655), ("image_token_id", "video_token_id")),
        (dict(QWEN2_VL, vision_end_token_id=151652), ("vision_start_token_id", "vision_end_token_id")),
        (dict(OMNI_THINKER, audio_token_index=151655), ("image_token_id", "audio_token_id")),
        (dict(OMNI_THINKER, audio_end_token_id=151647), ("audio_start_token_id", "audio_end_token_id")),
        (dict(OMNI_THINKER, audio_start_token_id=151652), ("audio_start_token_id", "vision_start_token_id")),
    ],
    ids=["image_video", "vision_start_end", "audio_image", "audio_start_end", "audio_vision_start"],
)
def test_duplicate_token_ids(hf, names):
    """Two special tokens sharing an id is a ValueError naming the ids."""
    error = _rejects(ValueError, "token id", hf)
    assert all(name in str(error) for name in names)


@pytest.mark.parametrize("value", [-1, 1.0, "151655", True])
def test_bad_token_id(value):
    """A token id that is not a non-negative int is a ValueError naming it."""
    _rejects(ValueError, "image_token_id", dict(QWEN2_VL, image_token_id=value))


@pytest.mark.parametrize("value", [0, -2, float("nan"), float("inf")])
def test_bad_tokens_per_second(value):
    """A non-positive or non-finite Qwen2.5-VL tokens_per_second is a ValueError naming it."""
    _rejects(ValueError, "tokens_per_second", _with(QWEN2_5_VL, ("vision_config", "tokens_per_second"), value))


@pytest.mark.parametrize("value", [0, -25, float("nan"), float("inf")])
def test_bad_position_id_per_seconds(value):
    """A non-positive or non-finite Omni position_id_per_seconds is a ValueError naming the temporal scale."""
    _rejects(ValueError, "tokens_per_second", dict(OMNI_THINKER, position_id_per_seconds=value))


@pytest.mark.parametrize("value", [0, -2, float("nan"), float("inf"), 0.01])
def test_bad_seconds_per_chunk(value):
    """A seconds_per_chunk that is not positive, not finite, or whose chunk int(r * s) is 0
    (25 * 0.01 = 0.25) is a ValueError naming it."""
    _rejects(ValueError, "seconds_per_chunk", dict(OMNI_THINKER, seconds_per_chunk=value))


@pytest.mark.parametrize(
    ("hf", "name"),
    [
        (_with(QWEN2_5_VL, ("vision_config", "tokens_per_second"), "fast"), "tokens_per_second"),
        (dict(OMNI_THINKER, position_id_per_seconds="fast"), "tokens_per_second|position_id_per_seconds"),
        (dict(OMNI_THINKER, seconds_per_chunk="two"), "seconds_per_chunk"),
        (_with(QWEN2_5_VL, ("vision_config", "tokens_per_second"), [2]), "tokens_per_second"),
    ],
    ids=[
        "tokens_per_second_string",
        "position_id_per_seconds_string",
        "seconds_per_chunk_string",
        "tokens_per_second_list",
    ],
)
def test_non_numeric_scales(hf, name):
    """A temporal scale or chunk length that is not a number is rejected with a message naming it."""
    with pytest.raises((ValueError, TypeError), match=name):
        MRopeConfig.from_hf_config(hf)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(family="qwen2_5_vl", tokens_per_second=1e39), "tokens_per_second"),
        (dict(family="qwen2_5_omni", tokens_per_second=1e20, seconds_per_chunk=1), "tokens_per_second"),
        (dict(family="qwen2_5_omni", tokens_per_second=25, seconds_per_chunk=1e7), "seconds_per_chunk"),
        (dict(family="qwen2_vl", image_token_id=2**53), "image_token_id"),
    ],
)
def test_values_the_kernels_cannot_represent(kwargs, match):
    """Time scales past 1e6 (float32 and int64 chunk limits) and token ids past 2**53 are a ValueError naming the
    field."""
    with pytest.raises(ValueError, match=match):
        MRopeConfig(**kwargs)


# --------------------------------------------------------------------------
# the newer families and the semantics presets
# --------------------------------------------------------------------------

DATA_CONFIGS = pathlib.Path(__file__).parent / "data" / "configs"


@pytest.mark.parametrize(
    ("name", "family", "ids"),
    [
        ("qwen3_vl.json", "qwen3_vl", dict(image_token_id=151655, video_token_id=151656, vision_start_token_id=151652)),
        (
            "glm4v.json",
            "glm4v",
            dict(
                image_token_id=151343,
                vision_start_token_id=151339,
                video_start_token_id=151341,
                video_end_token_id=151342,
            ),
        ),
        ("glm4v_moe.json", "glm4v", dict(image_token_id=151363, video_token_id=151364, vision_end_token_id=151340)),
        (
            "qwen3_omni_moe.json",
            "qwen3_omni",
            dict(audio_token_id=151675, audio_start_token_id=151669, tokens_per_second=13.0, n_window=50),
        ),
        (
            "qwen2_5_omni.json",
            "qwen2_5_omni",
            dict(audio_token_id=151646, tokens_per_second=25.0, seconds_per_chunk=2.0),
        ),
    ],
)
def test_published_configs(name, family, ids):
    """Each published config (path and model folder) reads into its family with the published ids."""
    path = DATA_CONFIGS / name
    if not path.exists():
        pytest.skip(f"{path} not copied yet")
    config = MRopeConfig.from_hf_config(path)
    assert config.family == family
    for key, value in ids.items():
        assert getattr(config, key) == value, key


def test_model_folder(tmp_path):
    """A model folder is read through the config.json inside it."""
    (tmp_path / "config.json").write_text(json.dumps(QWEN2_5_VL), encoding="utf-8")
    assert MRopeConfig.from_hf_config(tmp_path) == MRopeConfig.from_hf_config(QWEN2_5_VL)


def test_ids_in_text_config():
    """Ids may sit in text_config, as some published files put them."""
    hf = {
        "model_type": "qwen3_vl",
        "text_config": {
            "image_token_id": 7,
            "video_token_id": 8,
            "vision_start_token_id": 9,
            "vision_end_token_id": 10,
        },
    }
    config = _from_partial(hf)  # (no spatial_merge_size)
    assert (config.image_token_id, config.video_token_id, config.vision_start_token_id, config.vision_end_token_id) == (
        7,
        8,
        9,
        10,
    )


@pytest.mark.parametrize("semantics", ["reference", "vllm-0.33", "transformers-4.57", "transformers-5"])
def test_semantics_presets(semantics):
    """Every preset is accepted for every family and reported by config.semantics."""
    for hf in (
        QWEN2_VL,
        QWEN2_5_VL,
        {"model_type": "qwen3_vl"},
        {"model_type": "glm4v"},
        {"model_type": "qwen3_omni_moe_thinker"},
    ):
        assert _from_partial(hf, semantics=semantics).semantics == semantics


def test_unknown_semantics():
    """An unknown preset is a ValueError naming semantics and listing the presets."""
    error = _rejects(ValueError, "semantics", QWEN2_VL, semantics="vllm")
    assert "vllm-0.33" in str(error) and "transformers-5" in str(error)


def test_semantics_switch_keeps_the_rest():
    """from_hf_config on an MRopeConfig switches only its semantics."""
    config = MRopeConfig.from_hf_config(QWEN2_5_VL)
    switched = MRopeConfig.from_hf_config(config, semantics="vllm-0.33")
    assert switched.semantics == "vllm-0.33" and attrs.evolve(switched, semantics="reference") == config
    assert MRopeConfig.from_hf_config(switched) is switched


def test_field_a_family_does_not_use():
    """A field the family has no use for is a ValueError naming it."""
    with pytest.raises(ValueError, match="video_start_token_id"):
        MRopeConfig(family="qwen3_vl", video_start_token_id=5)
    with pytest.raises(ValueError, match="seconds_per_chunk"):
        MRopeConfig(family="qwen3_omni", seconds_per_chunk=2)


# --------------------------------------------------------------------------
# values left to the family defaults
# --------------------------------------------------------------------------


def test_a_missing_scale_warns_once_naming_it(fresh_warnings):
    """A config without tokens_per_second takes Qwen2.5-VL's default 4 with one warning that names the key,
    the default and the published 2; the same model type and key do not warn again."""
    hf = _with(QWEN2_5_VL, ("vision_config", "tokens_per_second"), ...)
    with pytest.warns(ConfigDefaultWarning) as record:
        config = MRopeConfig.from_hf_config(hf)
    assert config.tokens_per_second == 4.0
    assert len(record) == 1
    message = str(record[0].message)
    assert "tokens_per_second" in message and "4.0" in message and "set 2" in message
    assert record[0].filename == __file__  # points at the caller of from_hf_config
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert MRopeConfig.from_hf_config(hf) == config  # once per process


def test_each_missing_key_warns_once(fresh_warnings):
    """Every position-changing value left out is named, once per model type and key."""
    with pytest.warns(ConfigDefaultWarning) as record:
        MRopeConfig.from_hf_config({"model_type": "glm4v"})
    named = sorted(str(w.message).split("no ", 1)[1].split(";", 1)[0] for w in record)
    assert named == sorted(
        [
            "image_token_id",
            "spatial_merge_size",
            "video_end_token_id",
            "video_start_token_id",
            "video_token_id",
            "vision_end_token_id",
            "vision_start_token_id",
        ]
    )
    assert any("151363" in str(w.message) for w in record)  # GLM-4.5V's image token, named as a hint


def test_complete_configs_and_direct_construction_do_not_warn(fresh_warnings):
    """Published configs, an MRopeConfig built directly and Qwen3-Omni's window outside transformers-5 (a
    constant of those stacks, not a config value) give no warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for hf in PUBLISHED.values():
            MRopeConfig.from_hf_config(hf)
        MRopeConfig(family="qwen2_5_vl")
        MRopeConfig.from_hf_config(pathlib.Path(__file__).parent / "data" / "configs" / "qwen3_omni_moe.json")
