"""vLLM 0.33.0's own positions (tests/data/vllm-0.33.0.jsonl) against ours.

The file holds 240 prompts (40 per family: Qwen2-VL, Qwen2.5-VL, Qwen2.5-Omni,
Qwen3-VL, GLM-4.1V, Qwen3-Omni) laid out by vLLM 0.33.0's processors, with the
positions and delta its `get_mrope_input_positions` returned and the
`PlaceholderRange`s it reported. With ``semantics="vllm-0.33"`` we must give
exactly those values, from the tokens and from the ranges (the adapter). With
``semantics="reference"`` every difference must be one of the divergences
named in docs/semantics.md (D3, D5, D6, D8): the classifier below recomputes
each differing vector with the package's own switches for those divergences
alone and checks the inputs really expose the divergence it names.
"""

from __future__ import annotations

import itertools
from collections import Counter

import attrs
import numpy as np
import pytest
from family_prompts import FAMILIES as RECORDED_FAMILIES
from family_prompts import MODEL_TYPES
from strategies import audio_tokens, tau_values
from test_vllm_adapter import adapter
from vllm_features import VECTORS, vector_features

from mrope_tracker import MRopeConfig, PromptLayout, prompt_positions
from mrope_tracker.families import FAMILIES

IDS = [f"{i:03d}-{v['family']}" for i, v in enumerate(VECTORS)]
ALL = pytest.mark.parametrize("index", range(len(VECTORS)), ids=IDS)


def family_of(vector: dict) -> str:
    """A recorded vector's family: its config's model_type in the tests' model-type map."""
    return MODEL_TYPES[vector["config"]["model_type"]]


def config_of(vector: dict, semantics: str) -> MRopeConfig:
    config = MRopeConfig.from_hf_config(vector["config"], semantics=semantics)
    assert config.family == family_of(vector)
    return config


def token_form(vector: dict, config: MRopeConfig):
    kwargs = {
        name: vector[name]
        for name in ("image_grid_thw", "video_grid_thw", "second_per_grid_ts", "audio_feature_lengths")
        if vector[name] is not None
    }
    return prompt_positions(config, vector["token_ids"], use_audio_in_video=vector["use_audio_in_video"], **kwargs)


def matches(vector: dict, result) -> bool:
    positions, delta = result
    return np.asarray(positions).tolist() == vector["positions"] and delta == vector["delta"]


def test_vectors_cover_every_family():
    """The recorded file holds 40 prompts of each of the six families, each family under one name of its own."""
    assert Counter(family_of(v) for v in VECTORS) == {family: 40 for family in RECORDED_FAMILIES}
    names = {(v["family"], family_of(v)) for v in VECTORS}
    assert len(names) == len({name for name, _ in names}) == len({family for _, family in names})


@ALL
def test_token_form_reproduces_vllm(index):
    """prompt_positions in vllm-0.33 semantics gives vLLM 0.33.0's positions and delta."""
    vector = VECTORS[index]
    assert matches(vector, token_form(vector, config_of(vector, "vllm-0.33")))


@ALL
def test_adapter_reproduces_vllm(index):
    """get_mrope_input_positions on vLLM's placeholder ranges gives vLLM 0.33.0's positions and delta."""
    vector = VECTORS[index]
    assert matches(vector, adapter(vector, vector_features(vector), "vllm-0.33"))


@ALL
def test_adapter_reference_equals_token_form(index):
    """In reference semantics the range form (vLLM's interleave convention) equals the token scan."""
    vector = VECTORS[index]
    positions, delta = adapter(vector, vector_features(vector), "reference")
    expected, expected_delta = token_form(vector, config_of(vector, "reference"))
    np.testing.assert_array_equal(positions.numpy(), expected)
    assert delta == expected_delta


# ---------------------------------------------------------------- the classifier
#
# Each switch of a family's "vllm-0.33" preset is one named divergence. A
# differing vector is explained by the smallest set of switches that,
# turned on alone over the reference rules, reproduces it exactly.

DIVERGENCE_OF_SWITCH = {
    "tau_f64": "D3",  # float64 temporal products of the float32 sp
    "av_shift": "D5",  # Qwen2.5-Omni audio-in-video one token early, from vLLM's own chunk walk
    "av_eos_block": "D8",  # Qwen3-Omni eos after the whole block's maximum
    "av_merge_tau": "D8",  # Qwen3-Omni merge on the truncated tau
}


def with_switches(monkeypatch, vector: dict, switches) -> MRopeConfig:
    """The reference config of the vector's family with only `switches` on."""
    family = FAMILIES[family_of(vector)]
    monkeypatch.setitem(
        FAMILIES, family.name, attrs.evolve(family, presets={**family.presets, "reference": frozenset(switches)})
    )
    return config_of(vector, "reference")


def smallest_explaining_switches(monkeypatch, vector: dict) -> frozenset | None:
    preset = sorted(FAMILIES[family_of(vector)].presets.get("vllm-0.33", ()))
    for size in range(1, len(preset) + 1):
        for switches in itertools.combinations(preset, size):
            with monkeypatch.context() as m:
                if matches(vector, token_form(vector, with_switches(m, vector, switches))):
                    return frozenset(switches)
    return None


def tau64(t: int, sp: float, r: float) -> list[int]:
    """vLLM 0.33's temporal index: int(f * (sp * r)) in float64 of the float32 sp."""
    factor = float(np.float32(sp)) * float(r)
    return [int(f * factor) for f in range(t)]


def video_scales(vector: dict, config: MRopeConfig):
    """(k, t', h', w', sp) of every video, sp defaulted as the family does."""
    m = config.spatial_merge_size
    default = config.spec.default_second_per_grid_ts
    for k, (t, h, w) in enumerate(vector["video_grid_thw"] or []):
        sps = vector["second_per_grid_ts"]
        yield k, t, h // m, w // m, default if sps is None else sps[k]


def exposes_d3(vector: dict, config: MRopeConfig) -> bool:
    """Some video frame's float64 and float32 temporal indices differ."""
    if not config.spec.scaled_time:
        return False
    r = config.tokens_per_second
    return any(tau64(t, sp, r) != tau_values(t, sp, r).tolist() for _, t, _, _, sp in video_scales(vector, config))


def av_blocks(vector: dict):
    """(k, offset, length, layout runs) of each audio-in-video block, from vLLM's is_embed."""
    if not vector["use_audio_in_video"]:
        return
    for k, (offset, length, video_flags) in enumerate(vector["vllm_placeholder_ranges"].get("video", [])):
        kinds = ["video" if flag else "audio" for flag in video_flags[1:-1]]
        yield k, offset, length, [(kind, len(list(g))) for kind, g in itertools.groupby(kinds)]


def generator_runs(t: int, hw: int, tau: list[int], num_audio: int, chunk: int) -> list[tuple[str, int]]:
    """vLLM 0.33's Qwen2.5-Omni position generator: chunks that hold frames, each
    followed by up to `chunk` audio tokens; empty chunks skipped; leftover audio last."""
    runs, used = [], 0
    for c in range(tau[-1] // chunk + 1):
        frames = sum(1 for x in tau if x // chunk == c)
        if frames == 0:
            continue
        runs.append(("video", frames * hw))
        take = min(chunk, num_audio - used)
        if take > 0:
            runs.append(("audio", take))
            used += take
    if used < num_audio:
        runs.append(("audio", num_audio - used))
    return [(kind, sum(n for _, n in g)) for kind, g in itertools.groupby(runs, key=lambda run: run[0])]


def d6_generator_interleaves(vector: dict, config: MRopeConfig) -> list | None:
    """Per video, vLLM's generator runs, if they differ from the token layout for some block."""
    scales = {k: (t, h, w, sp) for k, t, h, w, sp in video_scales(vector, config)}
    lengths = iter(vector["audio_feature_lengths"])
    interleaves, differs = [], False
    for k, _, _, layout in av_blocks(vector):
        t, h, w, sp = scales[k]
        tau = tau64(t, sp, config.tokens_per_second)
        runs = generator_runs(t, h * w, tau, audio_tokens(next(lengths)), config.audio_chunk_positions)
        interleaves.append(runs)
        differs |= runs != layout
    return interleaves if differs else None


def reference_on_interleaves(vector: dict, config: MRopeConfig, interleaves) -> np.ndarray:
    """Reference positions with the audio-in-video blocks laid out as `interleaves` (range form)."""
    ranges = vector["vllm_placeholder_ranges"]
    return PromptLayout.from_ranges(
        config,
        len(vector["token_ids"]),
        image_ranges=[(o, n) for o, n, _ in ranges.get("image", [])] or None,
        image_grid_thw=vector["image_grid_thw"],
        video_ranges=[(o + 1, n - 2) for o, n, _ in ranges["video"]],
        video_grid_thw=vector["video_grid_thw"],
        second_per_grid_ts=vector["second_per_grid_ts"],
        audio_feature_lengths=vector["audio_feature_lengths"],
        use_audio_in_video=True,
        interleave=interleaves,
    ).positions()


def check_d6(monkeypatch, vector: dict, switches: frozenset, interleaves) -> None:
    """D6 recomputed: vLLM's block contents (one token early, D5) are the reference
    positions of vLLM's generator runs, not of the tokens' own layout."""
    with monkeypatch.context() as m:
        config = with_switches(m, vector, switches & {"tau_f64"})
        on_generator = reference_on_interleaves(vector, config, interleaves)
        on_layout = np.asarray(token_form(vector, config)[0])
    recorded = np.array(vector["positions"])
    for _, offset, length, _ in av_blocks(vector):
        start, end = offset + 1, offset + length - 1  # the interleave; vision_start sits at offset - 1
        # relative to the content base s = position(vision_start) + 1, which earlier blocks may move
        ours = on_generator[:, start:end] - on_generator[0, offset - 1]
        theirs = recorded[:, start - 1 : end - 1] - recorded[0, offset - 1]
        np.testing.assert_array_equal(theirs, ours)
    assert not np.array_equal(on_generator, on_layout)


def test_reference_differences_are_named_divergences(monkeypatch):
    """Every vector where reference semantics differ from vLLM 0.33 is explained by D3, D5, D6 or D8 alone."""
    found = Counter()
    for index, vector in enumerate(VECTORS):
        reference = config_of(vector, "reference")
        if matches(vector, token_form(vector, reference)):
            continue
        switches = smallest_explaining_switches(monkeypatch, vector)
        assert switches is not None, f"vector {IDS[index]}: no set of vllm-0.33 switches explains the difference"
        unknown = switches - DIVERGENCE_OF_SWITCH.keys()
        assert not unknown, f"vector {IDS[index]}: switches {sorted(unknown)} have no named divergence"
        reasons = {DIVERGENCE_OF_SWITCH[s] for s in switches}
        family = reference.family
        has_av = any(True for _ in av_blocks(vector))
        if "D3" in reasons:
            assert exposes_d3(vector, reference), f"vector {IDS[index]}: D3 named, but no frame's tau differs"
        if "D5" in reasons:
            assert family == "qwen2_5_omni" and has_av, f"vector {IDS[index]}: D5 named without a Qwen2.5-Omni block"
            interleaves = d6_generator_interleaves(vector, reference)
            if interleaves is not None:
                check_d6(monkeypatch, vector, switches, interleaves)
                reasons.add("D6")
        if "D8" in reasons:
            assert family == "qwen3_omni" and has_av, f"vector {IDS[index]}: D8 named without a Qwen3-Omni block"
        found.update(reasons)
    assert set(found) == {"D3", "D5", "D6", "D8"}, f"divergences seen: {dict(found)}"
