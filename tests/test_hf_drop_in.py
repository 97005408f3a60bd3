"""`mrope_tracker.hf.get_rope_index` against the installed transformers' own
``get_rope_index`` (4.57.6 or 5.24, whichever is installed), bit for bit:
random padded batches of every family, left and right padding, 1 to 8 rows,
text-only rows mixed with multimodal ones; then `patch` on real models.
PaddleOCR-VL, ERNIE-4.5-VL (its transformers 5 config, ``ernie4_5_vl_moe``),
GLM-OCR and Cohere Compass exist in transformers 5 only: their cases skip
under 4.x.

transformers is the oracle (through `mrope_tracker.hf.native`, which calls
its method on a stand-in holding the real config class). The prompts are
laid out as the processors lay them out (tests/family_prompts.py). Omni
audio-in-video blocks are drawn in the layout transformers' get_rope_index
assumes (it assigns positions by its own chunking, whatever the tokens):
Qwen2.5-Omni the model's chunking, Qwen3-Omni the merge on float32 times.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

pytest.importorskip("transformers")

from family_prompts import (  # noqa: E402
    CONFIG_NAMES,
    FAMILIES,
    TEXT_IDS,
    VLLM_FAMILIES,
    family_prompts,
    interleave_matches_model,
    load_config,
)
from strategies import examples  # noqa: E402

from mrope_tracker import MRopeConfig, hf, prompt_positions  # noqa: E402
from mrope_tracker.families import FAMILIES as RECORDS  # noqa: E402
from mrope_tracker.hf import native as hf_native  # noqa: E402
from mrope_tracker.hf import patching as hf_patching  # noqa: E402

_OMNI = ("qwen2_5_omni", "qwen3_omni")
_MAJOR = int(hf.installed_transformers().split(".")[0])
PAD_ID = 0  # not a special token of any family
# every family with a transformers get_rope_index (in some line); the installed line may lack some
HF_FAMILIES = FAMILIES + tuple(f for f in VLLM_FAMILIES if RECORDS[f].transformers_classes)
_INSTALLED_TYPES = frozenset(hf_native.supported_model_types())


def oracle_configs(family: str) -> tuple[str, ...]:
    """The family's published configs whose model type the installed transformers implements
    (skips the test when there is none)."""
    names = tuple(n for n in CONFIG_NAMES[family] if load_config(n)["model_type"] in _INSTALLED_TYPES)
    if not names:
        pytest.skip(f"transformers {hf.installed_transformers()} has no get_rope_index for {family}")
    return names


# transformers' Python loops are slow: fewer examples than the profile's.
batches = settings(
    max_examples=examples(75, minimum=8),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)


# --------------------------------------------------------------------------
# Batches
# --------------------------------------------------------------------------


def _prompt_kwargs(family: str, av: bool) -> dict:
    kw = dict(max_items=3, max_text=5, max_t=12)
    if family in _OMNI:
        kw["use_audio_in_video"] = av
        if av and family == "qwen2_5_omni":
            kw["interleave"] = "model"
    return kw


@st.composite
def batches_of(draw, family: str):
    """(config dict, rows (FamilyPrompt), left padding?, extra pad columns, with mask?)."""
    config_name = draw(st.sampled_from(oracle_configs(family)))
    av = family in _OMNI and draw(st.booleans())
    size = draw(st.integers(1, 8))
    rows = []
    for _ in range(size):
        kw = _prompt_kwargs(family, av)
        if draw(st.integers(0, 3)) == 0:
            kw["max_items"] = 0  # a text-only row
        prompt = draw(family_prompts(family, config_name=config_name, **kw))
        assume(interleave_matches_model(prompt))
        rows.append(prompt)
    left = draw(st.booleans())
    extra = draw(st.integers(0, 3))
    return load_config(config_name), rows, left, extra, av


def pack(rows, left: bool, extra: int):
    """input_ids, attention_mask and the batch's concatenated items (None when absent)."""
    width = max(p.num_tokens for p in rows) + extra
    ids = np.full((len(rows), width), PAD_ID, np.int64)
    mask = np.zeros((len(rows), width), np.int64)
    for b, p in enumerate(rows):
        n = p.num_tokens
        lo = width - n if left else 0
        ids[b, lo : lo + n] = p.token_ids
        mask[b, lo : lo + n] = 1
    images = [g for p in rows for g in p.image_grid_thw]
    videos = [g for p in rows for g in p.video_grid_thw]
    sps = [s for p in rows for s in (p.second_per_grid_ts or ())]
    audio = [a for p in rows for a in (p.audio_feature_lengths or ())]
    items = dict(
        image_grid_thw=torch.tensor(images, dtype=torch.int64) if images else None,
        video_grid_thw=torch.tensor(videos, dtype=torch.int64) if videos else None,
        second_per_grid_ts=torch.tensor(sps, dtype=torch.float32) if sps else None,
        audio_feature_lengths=torch.tensor(audio, dtype=torch.int64) if audio else None,
    )
    return torch.from_numpy(ids), torch.from_numpy(mask), items


def assert_same(ours, theirs) -> None:
    """Values, dtypes and shapes of (positions, deltas) equal."""
    for got, want, name in zip(ours, theirs, ("position_ids", "mrope_position_deltas")):
        assert got.dtype == want.dtype, (name, got.dtype, want.dtype)
        assert tuple(got.shape) == tuple(want.shape), (name, got.shape, want.shape)
        assert torch.equal(got, want), (name, got, want)


def both(config, ids, mask, items, av=False, **extra):
    """(ours, transformers') on the same arguments."""
    ours = hf.get_rope_index(config, ids, attention_mask=mask, use_audio_in_video=av, **items, **extra)
    theirs = hf_native.rope_index(config, ids, attention_mask=mask, use_audio_in_video=av, **items, **extra)
    return ours, theirs


# --------------------------------------------------------------------------
# Random batches
# --------------------------------------------------------------------------


@pytest.mark.parametrize("family", HF_FAMILIES)
@batches
@given(data=st.data())
def test_padded_batches_equal_transformers(family, data):
    """Random padded batches (left or right, 1-8 rows, text-only rows mixed in): the installed transformers'
    output, exactly."""
    oracle_configs(family)
    config, rows, left, extra, av = data.draw(batches_of(family))
    ids, mask, items = pack(rows, left, extra)
    if family in _OMNI and items["video_grid_thw"] is None:
        items.pop("second_per_grid_ts")
    if family not in _OMNI:  # the processors' types (transformers 5 groups by them; we check them)
        items["mm_token_type_ids"] = hf.mm_token_type_ids(config, ids)
    assert_same(*both(config, ids, mask, items, av))


@pytest.mark.parametrize("family", [f for f in HF_FAMILIES if f not in _OMNI])
@batches
@given(data=st.data())
def test_unpadded_batches_without_mask_equal_transformers(family, data):
    """VL models take attention_mask=None as "no padding": same rows of equal length, no mask."""
    oracle_configs(family)
    config, rows, _, _, _ = data.draw(batches_of(family))
    width = rows[0].num_tokens
    rows = [p for p in rows if p.num_tokens == width] or rows[:1]
    ids, _, items = pack(rows, True, 0)
    assert_same(*both(config, ids, None, items))


# (the Omni thinkers always pass attention_mask: transformers needs one there)
@pytest.mark.parametrize("family, masked", [(f, m) for f in HF_FAMILIES for m in (True, False) if m or f not in _OMNI])
def test_text_only_batch_without_grids_equals_transformers(family, masked):
    """No grids at all: transformers' fallback (mask cumsum, arange) or its per-row path (5.x VL), exactly."""
    config = load_config(oracle_configs(family)[0])
    rng = np.random.default_rng(7)
    lengths = [9, 4, 12]
    width = 14
    ids = torch.full((3, width), PAD_ID, dtype=torch.int64)
    mask = torch.zeros((3, width), dtype=torch.int64)
    for b, n in enumerate(lengths):
        lo = width - n if b % 2 else 0
        ids[b, lo : lo + n] = torch.from_numpy(rng.choice(np.array(TEXT_IDS), n))
        mask[b, lo : lo + n] = 1
    assert_same(*both(config, ids, mask if masked else None, {}))


def test_bool_mask_is_read_as_transformers_reads_it():
    """A bool attention_mask (left padding) gives transformers' positions, pads and deltas."""
    config = load_config("qwen2_vl")
    c = MRopeConfig.from_hf_config(config)
    row = [5, c.vision_start_token_id] + [c.image_token_id] * 4 + [c.vision_end_token_id, 6]
    ids = torch.tensor([[PAD_ID, PAD_ID] + row, [7] * 10])
    mask = torch.tensor([[False, False] + [True] * 8, [True] * 10])
    items = dict(image_grid_thw=torch.tensor([[1, 4, 4]]))
    assert_same(*both(config, ids, mask, items))


# --------------------------------------------------------------------------
# Fixed cases that pin the divergences of each line
# --------------------------------------------------------------------------


def _video_batch(config_name: str, grid, sp):
    config = load_config(config_name)
    c = MRopeConfig.from_hf_config(config)
    n = grid[0] * (grid[1] // 2) * (grid[2] // 2)
    row = [5, c.vision_start_token_id] + [c.video_token_id] * n + [c.vision_end_token_id, 6, 7]
    ids = torch.tensor([[PAD_ID] * 3 + row, row + [PAD_ID] * 3])
    mask = (ids != PAD_ID).long()
    items = dict(
        video_grid_thw=torch.tensor([grid, grid]), second_per_grid_ts=torch.tensor([sp, sp], dtype=torch.float32)
    )
    return config, ids, mask, items


def test_qwen2_5_vl_fractional_seconds_follow_the_installed_line():
    """Qwen2.5-VL at 4 fps (sp 0.5): 4.57 truncates sp (D2), 5.x resumes at s + max(h', w') (D1); ours follows."""
    config, ids, mask, items = _video_batch("qwen2_5_vl", (4, 2, 4), 0.5)
    ours, theirs = both(config, ids, mask, items)
    assert_same(ours, theirs)
    video_t = ours[0][0, 1, 2:10].tolist()  # right-padded row: VS at 1, the video from 2
    assert video_t == ([2] * 8 if _MAJOR < 5 else [2, 2, 3, 3, 4, 4, 5, 5])


def test_qwen2_5_vl_time_scale_order_of_transformers_5():
    """A time scale that is not a power of two (r = 3, fps 1.2): the float32 products in transformers' order."""
    config, ids, mask, items = _video_batch("qwen2_5_vl", (12, 2, 2), float(np.float32(2 / 1.2)))
    config = {**config, "vision_config": {**config["vision_config"], "tokens_per_second": 3}}
    assert_same(*both(config, ids, mask, items))


def test_installed_line_preset_in_prompt_positions():
    """prompt_positions with the installed line's preset (r = 3, fps 1.2, a long video) equals transformers' own
    row: the product order (transformers 5: f * float32(sp * r)), D1 and D2 all follow the preset."""
    config, ids, _, items = _video_batch("qwen2_5_vl", (12, 2, 2), float(np.float32(2 / 1.2)))
    config = {**config, "vision_config": {**config["vision_config"], "tokens_per_second": 3}}
    row = ids[1:2, :-3]  # the right-padded row, unpadded
    grid, sp = items["video_grid_thw"][:1], items["second_per_grid_ts"][:1]
    theirs = hf_native.rope_index(
        config, row, attention_mask=torch.ones_like(row), video_grid_thw=grid, second_per_grid_ts=sp
    )
    preset = MRopeConfig.from_hf_config(config, semantics=hf.default_semantics())
    positions, delta = prompt_positions(preset, row[0].tolist(), video_grid_thw=grid, second_per_grid_ts=sp)
    np.testing.assert_array_equal(positions, theirs[0][:, 0].numpy())
    assert delta == int(theirs[1][0, 0])


def test_qwen2_vl_long_video_d1():
    """Qwen2-VL, a video longer than it is wide: the base after it as the installed line puts it (D1 on 5.x)."""
    config, ids, mask, items = _video_batch("qwen2_vl", (6, 4, 4), 1.0)
    items.pop("second_per_grid_ts")
    ours, theirs = both(config, ids, mask, items)
    assert_same(ours, theirs)
    vision_end = ours[0][0, 1, 2 + 24].item()  # the right-padded row's vision_end
    assert vision_end == (8 if _MAJOR < 5 else 4)  # R-max: 2 + 5 + 1; R-hw: 2 + max(2, 2)


def test_ernie_long_video_resumes_at_the_frame_size_on_transformers_5():
    """ERNIE-4.5-VL (transformers 5's config, its own video token), 8 frames of 1x2 merged patches: 4 temporal
    patches. transformers 5 resumes after the video at s + max(h', w') (D1); vLLM 0.33's rule past the last patch."""
    oracle_configs("ernie4_5_moe_vl")  # (transformers 5 only)
    config = load_config("ernie4_5_vl_moe")
    c = MRopeConfig.from_hf_config(config)
    row = [5, c.video_start_token_id] + [c.video_token_id] * 8 + [c.video_end_token_id, 6]
    ids = torch.tensor([row + [PAD_ID] * 2, [PAD_ID] * 2 + row])
    mask = (ids != PAD_ID).long()
    types = hf.mm_token_type_ids(config, ids)
    assert types[0].tolist() == [0, 0] + [2] * 8 + [0] * 4  # the brackets are text
    items = dict(video_grid_thw=torch.tensor([[8, 2, 4]] * 2), mm_token_type_ids=types)
    ours, theirs = both(config, ids, mask, items)
    assert_same(ours, theirs)
    assert ours[0][0, 0, 2:10].tolist() == [2, 2, 3, 3, 4, 4, 5, 5]  # T: the video's temporal patches from s = 2
    assert ours[0][:, 0, 10].tolist() == [4, 4, 4]  # <|VIDEO_END|> at s + max(1, 2)
    assert ours[1][0].item() == 6 - 12  # the maximum is the last patch's T (5)
    vllm = MRopeConfig.from_hf_config(config, semantics="vllm-0.33")
    positions, delta = prompt_positions(vllm, row, video_grid_thw=[[8, 2, 4]])
    assert positions[:, 10].tolist() == [6, 6, 6] and delta == 8 - 12  # one past the last patch; 6 at 7 ends it


def test_qwen3_omni_fractional_times_are_float32():
    """Qwen3-Omni at fps 3 (sp 2/3): float32 positions with fractional times, equal to transformers'."""
    config = load_config("qwen3_omni_moe")
    c = MRopeConfig.from_hf_config(config)
    row = [5, c.vision_start_token_id] + [c.video_token_id] * 6 + [c.vision_end_token_id, 6]
    ids = torch.tensor([row + [PAD_ID], [PAD_ID, PAD_ID] + row[:-1]])
    mask = (ids != PAD_ID).long()
    items = dict(
        video_grid_thw=torch.tensor([[3, 2, 4], [3, 2, 4]]),
        second_per_grid_ts=torch.tensor([2 / 3, 2 / 3], dtype=torch.float32),
    )
    ours, theirs = both(config, ids, mask, items)
    assert_same(ours, theirs)
    assert ours[0].dtype == torch.float32 and not torch.equal(ours[0], ours[0].round())


def test_qwen3_omni_window_of_transformers_5():
    """A Qwen3-Omni config with n_window 25: 5.x reads it, 4.57 keeps 50; audio token counts follow the line."""
    config = load_config("qwen3_omni_moe")
    thinker = {**config["thinker_config"], "audio_config": {**config["thinker_config"]["audio_config"], "n_window": 25}}
    config = {**config, "thinker_config": thinker}
    frames = 130
    window = 50 if _MAJOR >= 5 else 100
    rest = frames % window
    g = (rest - 1) // 2 + 1
    n = ((g - 1) // 2 + 1 - 1) // 2 + 1 + 13 * (frames // window)
    c = MRopeConfig.from_hf_config(config)
    row = (
        [5, c.audio_start_token_id]
        + [c.audio_token_id] * n
        + [c.audio_end_token_id, 6, c.vision_start_token_id, c.image_token_id, c.vision_end_token_id]
    )
    ids = torch.tensor([row])
    items = dict(image_grid_thw=torch.tensor([[1, 2, 2]]), audio_feature_lengths=torch.tensor([frames]))
    assert_same(*both(config, ids, torch.ones_like(ids), items))


# --------------------------------------------------------------------------
# Inputs transformers would not take the way we do
# --------------------------------------------------------------------------


def test_wrong_mm_token_type_ids_are_refused():
    """mm_token_type_ids that disagree with the ids are refused, naming the row and token."""
    config = load_config("qwen2_vl")
    c = MRopeConfig.from_hf_config(config)
    ids = torch.tensor([[5, c.vision_start_token_id] + [c.image_token_id] * 4 + [c.vision_end_token_id]])
    types = hf.mm_token_type_ids(config, ids)
    assert types.tolist() == [[0, 0, 1, 1, 1, 1, 0]]
    types[0, 3] = 2
    with pytest.raises(ValueError, match="mm_token_type_ids.*row 0, token 3"):
        hf.get_rope_index(config, ids, image_grid_thw=[[1, 4, 4]], mm_token_type_ids=types)


def test_grids_left_over_or_missing_are_refused():
    """More grids than the batch's images, or too few, raise ValueError naming the argument."""
    config = load_config("qwen2_vl")
    c = MRopeConfig.from_hf_config(config)
    ids = torch.tensor([[5, c.vision_start_token_id] + [c.image_token_id] * 4 + [c.vision_end_token_id]] * 2)
    with pytest.raises(ValueError, match="image_grid_thw: expected one entry per item"):
        hf.get_rope_index(config, ids, image_grid_thw=[[1, 4, 4]] * 3)
    with pytest.raises(ValueError, match="input_ids row 1"):
        hf.get_rope_index(config, ids, image_grid_thw=[[1, 4, 4]])


def test_a_row_without_kept_tokens_is_refused():
    """A row whose mask keeps nothing raises ValueError naming attention_mask (transformers fails on it too)."""
    config = load_config("qwen2_vl")
    c = MRopeConfig.from_hf_config(config)
    ids = torch.tensor([[5, c.vision_start_token_id] + [c.image_token_id] * 4 + [c.vision_end_token_id]] * 2)
    mask = torch.ones_like(ids)
    mask[1] = 0
    with pytest.raises(ValueError, match="attention_mask.*row 1"):
        hf.get_rope_index(config, ids, image_grid_thw=[[1, 4, 4]], attention_mask=mask)


def test_bad_arguments_name_themselves():
    """1-D input_ids, a mask of another shape, an unknown convention: errors that name the argument."""
    config = load_config("qwen2_vl")
    with pytest.raises(ValueError, match="input_ids"):
        hf.get_rope_index(config, torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="attention_mask"):
        hf.get_rope_index(config, torch.tensor([[1, 2, 3]]), attention_mask=torch.ones(1, 4))
    with pytest.raises(ValueError, match="convention"):
        hf.get_rope_index(config, torch.tensor([[1, 2, 3]]), convention="transformers-6")
    with pytest.raises(ValueError, match="semantics"):
        hf.get_rope_index(config, torch.tensor([[1, 2, 3]]), semantics="hf")


@pytest.mark.parametrize("config_name", ["paddleocr_vl", "ernie4_5_vl_moe", "glm_ocr", "cohere_compass"])
def test_families_of_transformers_5_refuse_the_4x_convention(config_name):
    """transformers 4.x has no get_rope_index for these families: its batch convention is refused, naming it."""
    config = load_config(config_name)
    c = MRopeConfig.from_hf_config(config)
    ids = torch.tensor([[5, c.vision_start_token_id] + [c.image_token_id] * 4 + [c.vision_end_token_id]])
    with pytest.raises(ValueError, match=r"convention: expected one of transformers-5 for .*got 'transformers-4'"):
        hf.get_rope_index(config, ids, image_grid_thw=[[1, 4, 4]], convention="transformers-4")


def test_default_semantics_is_the_installed_line():
    """Without `semantics`, the preset of the installed transformers is used."""
    assert hf.default_semantics() == ("transformers-5" if _MAJOR >= 5 else "transformers-4.57")


# --------------------------------------------------------------------------
# patch
# --------------------------------------------------------------------------


def _tiny_qwen2_vl():
    """A randomly initialised one-layer Qwen2-VL with tiny sizes (no weights loaded)."""
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration
    from transformers.utils import logging as hf_logging

    text = dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=151700,
        max_position_embeddings=1024,
    )
    if _MAJOR >= 5:  # rope_scaling became rope_parameters
        rope = {"rope_parameters": {"rope_type": "default", "mrope_section": [2, 1, 1], "rope_theta": 1e6}}
    else:
        rope = {"rope_scaling": {"type": "mrope", "mrope_section": [2, 1, 1]}}
    vision = dict(
        depth=1,
        embed_dim=32,
        hidden_size=32,
        num_heads=2,
        mlp_ratio=2,
        spatial_merge_size=2,
        patch_size=14,
        temporal_patch_size=2,
        in_channels=3,
    )
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        config = Qwen2VLConfig(text_config={**text, **rope}, vision_config=vision, **rope, **text)
    finally:
        hf_logging.set_verbosity(verbosity)
    torch.manual_seed(0)
    return Qwen2VLForConditionalGeneration(config).eval()


def test_patch_on_a_tiny_model_gives_the_same_logits(monkeypatch):
    """patch() puts ours in model.model, the forward pass uses it and gives the same logits; undo() restores."""
    model = _tiny_qwen2_vl()
    c = MRopeConfig.from_hf_config(model.config)
    row = [5, c.vision_start_token_id] + [c.image_token_id] * 4 + [c.vision_end_token_id, 6, 7]
    ids = torch.tensor([[PAD_ID, PAD_ID] + row, row + [8, 9]])
    mask = (ids != PAD_ID).long()
    inputs = dict(
        input_ids=ids,
        attention_mask=mask,
        image_grid_thw=torch.tensor([[1, 4, 4]] * 2),
        pixel_values=torch.randn(32, 3 * 2 * 14 * 14),
    )
    if _MAJOR >= 5:
        inputs["mm_token_type_ids"] = hf.mm_token_type_ids(c, ids)
    with torch.no_grad():
        before = model(**inputs).logits
    calls = []
    real = hf.get_rope_index

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(hf_patching, "get_rope_index", counting)  # what patch() calls
    handle = hf.patch(model)
    assert handle.modules == ["model"]
    model.model.rope_deltas = None
    with torch.no_grad():
        after = model(**inputs).logits
    assert calls and torch.equal(before, after)
    handle.undo()
    assert "get_rope_index" not in model.model.__dict__
    calls.clear()
    model.model.rope_deltas = None
    with torch.no_grad():
        model(**inputs)
    assert not calls


class _StandIn:
    """A module-like object: a config and transformers' own get_rope_index (so its signature)."""

    def __init__(self, config):
        self.config = config
        self.spatial_merge_size = config.vision_config.spatial_merge_size


def _stand_in_class(module: str, class_name: str):
    import importlib

    modeling = importlib.import_module(f"transformers.models.{module}.modeling_{module}")
    owner = getattr(modeling, class_name)
    attrs_ = {
        name: getattr(owner, name)
        for name in ("get_rope_index", "get_llm_pos_ids_for_vision", "get_chunked_index", "get_vision_position_ids")
        if hasattr(owner, name)
    }
    return type(f"StandIn{class_name}", (_StandIn,), attrs_)


def _hf_config(config_dict: dict, module: str, class_name: str):
    import importlib

    configuration = importlib.import_module(f"transformers.models.{module}.configuration_{module}")
    return getattr(configuration, class_name)(**{k: v for k, v in config_dict.items() if not k.startswith("_")})


def test_patch_finds_the_omni_thinker_and_keeps_its_positional_signature():
    """An Omni model: the thinker is patched; called positionally as the model calls it, it equals transformers."""
    config = load_config("qwen2_5_omni")
    thinker_cls = _stand_in_class("qwen2_5_omni", "Qwen2_5OmniThinkerForConditionalGeneration")
    thinker = thinker_cls(_hf_config(config["thinker_config"], "qwen2_5_omni", "Qwen2_5OmniThinkerConfig"))
    model = type("Outer", (), {})()
    model.thinker = thinker
    c = MRopeConfig.from_hf_config(config)
    row = [5, c.vision_start_token_id] + [c.image_token_id] * 4 + [c.vision_end_token_id, c.audio_start_token_id]
    row += [c.audio_token_id] * 25 + [c.audio_end_token_id, 6]
    ids = torch.tensor([[PAD_ID] + row, row + [PAD_ID]])
    mask = (ids != PAD_ID).long()
    args = (ids, torch.tensor([[1, 4, 4]] * 2), None, mask, False, torch.tensor([100, 100]), None)
    expected = type(thinker).get_rope_index(thinker, *args)
    with hf.patch(model) as handle:
        assert handle.modules == ["thinker"]
        assert_same(thinker.get_rope_index(*args), expected)
    assert "get_rope_index" not in thinker.__dict__


def test_patch_keeps_qwen2_5_vl_keywords_and_positions():
    """Qwen2.5-VL's own signature (second_per_grid_ts; mm_token_type_ids on 5.x) binds as transformers binds it."""
    config = load_config("qwen2_5_vl")
    owner = _stand_in_class("qwen2_5_vl", "Qwen2_5_VLModel")(_hf_config(config, "qwen2_5_vl", "Qwen2_5_VLConfig"))
    _, ids, mask, items = _video_batch("qwen2_5_vl", (4, 2, 4), 0.5)
    kwargs = dict(
        image_grid_thw=None,
        video_grid_thw=items["video_grid_thw"],
        second_per_grid_ts=items["second_per_grid_ts"],
        attention_mask=mask,
    )
    if _MAJOR >= 5:
        kwargs["mm_token_type_ids"] = hf.mm_token_type_ids(config, ids)
    expected = type(owner).get_rope_index(owner, ids, **kwargs)
    handle = hf.patch(owner)
    try:
        assert_same(owner.get_rope_index(ids, **kwargs), expected)
    finally:
        handle()
    assert "get_rope_index" not in owner.__dict__


@pytest.mark.parametrize(
    "config_name, module, model_class, config_class",
    [
        ("paddleocr_vl", "paddleocr_vl", "PaddleOCRVLModel", "PaddleOCRVLConfig"),
        ("ernie4_5_vl_moe", "ernie4_5_vl_moe", "Ernie4_5_VLMoeModel", "Ernie4_5_VLMoeConfig"),
        ("glm_ocr", "glm_ocr", "GlmOcrModel", "GlmOcrConfig"),
        ("cohere_compass", "cohere_compass", "CohereCompassModel", "CohereCompassConfig"),
    ],
)
def test_patch_serves_the_families_of_transformers_5(config_name, module, model_class, config_class):
    """PaddleOCR-VL, ERNIE-4.5-VL, GLM-OCR, Cohere Compass (5.x only): patched, the model's own call (ids and
    mm_token_type_ids positionally, the rest by keyword) returns transformers' positions."""
    family = MRopeConfig.from_hf_config(load_config(config_name)).family
    oracle_configs(family)  # (transformers 5 only)
    config = load_config(config_name)
    owner = _stand_in_class(module, model_class)(_hf_config(config, module, config_class))
    c = MRopeConfig.from_hf_config(config)
    start, end = (c.vision_start_token_id, c.vision_end_token_id)
    row = [5, start] + [c.image_token_id] * 4 + [end, 6]
    ids = torch.tensor([[PAD_ID, PAD_ID] + row, row + [7, 8]])
    mask = (ids != PAD_ID).long()
    types = hf.mm_token_type_ids(config, ids)
    kwargs = dict(image_grid_thw=torch.tensor([[1, 4, 4]] * 2), video_grid_thw=None, attention_mask=mask)
    expected = type(owner).get_rope_index(owner, ids, types, **kwargs)
    with hf.patch(owner) as handle:
        assert handle.modules == [""]
        assert_same(owner.get_rope_index(ids, types, **kwargs), expected)
    assert "get_rope_index" not in owner.__dict__


def test_patch_refuses_a_model_without_a_supported_get_rope_index():
    """A model with no supported family raises ValueError naming the model."""
    with pytest.raises(ValueError, match="model: expected a transformers model of a supported family.*Linear"):
        hf.patch(torch.nn.Linear(2, 2))
    talker = type("Talker", (), {"get_rope_index": lambda self, *a: None})()
    talker.config = type("C", (), {"model_type": "qwen2_5_omni_talker"})()
    with pytest.raises(ValueError, match="qwen2_5_omni_talker"):
        hf.patch(talker)


def test_warmup_compiles_both_batch_kernels():
    """hf.warmup() leaves the batch kernel compiled, once for the integer and the float32 paths."""
    from mrope_tracker.kernels import hf_batch

    hf.warmup()
    assert len(hf_batch.batch_kernel.signatures) == 1  # one compiled version serves both paths
