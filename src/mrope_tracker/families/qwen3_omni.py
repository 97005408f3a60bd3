"""Qwen3-Omni-MoE thinker: Qwen2.5-Omni's structure with its own audio
encoder length, consecutive bos/eos pairs, and a time-ordered interleave.

- Audio tokens for F mel frames, with a window W = 2 * n_window (100 in the
  published checkpoint): r = F mod W, g = (r-1)//2 + 1,
  n = ((g-1)//2 + 1 - 1)//2 + 1 + 13 * (F // W). transformers 4.57 and vLLM
  0.33 hard-code W = 100; transformers 5 reads `audio_config.n_window`.
- Temporal scale `position_id_per_seconds` (13 published; the transformers
  config class says 25).
- Audio in video: vision_start at b, audio_start at b+1, content from b+2;
  audio_end at e and vision_end at e+1. Processors lay the block out by a
  two-pointer merge: a video token (time f * sp * r) goes first when its
  time is <= the next audio index.
- Positions are integers, tau(f) = trunc(f * sp * r) as for Qwen2.5-Omni, the
  way engines look them up in an integer rotary cache; transformers keeps
  them as float32 (see docs/semantics.md), and SGLang 0.5 truncates those
  float32 positions at the end (the `sglang-0.5` preset, core/float_carry.py).
"""

import attrs
import numpy as np

from . import interleave
from ._spec import Family, first, get
from .qwen2_5_omni import TRANSFORMERS_THINKER_BATCH, read_omni_audio, thinker_config_dict
from .qwen2_vl import QWEN_VISION_IDS, read_qwen_vision


def read_config(scopes, semantics="reference") -> dict:
    kwargs = {**read_qwen_vision(scopes), **read_omni_audio(scopes)}
    kwargs["tokens_per_second"] = first(scopes, ("position_id_per_seconds",))
    if semantics == "transformers-5":  # the only stack that reads the window from the config
        kwargs["n_window"] = get(first(scopes, ("audio_config",)), "n_window")
    return kwargs


def config_dict(config) -> dict:
    thinker = {"model_type": "qwen3_omni_moe_thinker", **thinker_config_dict(config)}
    thinker["audio_config"] = {"n_window": config.n_window}
    return {"model_type": "qwen3_omni_moe", "thinker_config": thinker}


def audio_tokens(mel_frames: np.ndarray, config) -> np.ndarray:
    window = 2 * config.n_window
    rest = mel_frames % window
    g = (rest - 1) // 2 + 1
    return ((g - 1) // 2 + 1 - 1) // 2 + 1 + 13 * (mel_frames // window)


def _merge_as_given(t, h, w, sp, num_audio, config):
    return interleave.merge_runs(t, h, w, sp, num_audio, config.tokens_per_second)


def _merge_float32_sp(t, h, w, sp, num_audio, config):
    """vLLM's processor merges on times from the float32-rounded sp."""
    return interleave.merge_runs(t, h, w, float(np.float32(sp)), num_audio, config.tokens_per_second)


FAMILY = Family(
    name="qwen3_omni",
    model_types={"qwen3_omni_moe": "thinker_config", "qwen3_omni_moe_thinker": ""},
    defaults={
        **QWEN_VISION_IDS,
        "audio_token_id": 151675,
        "audio_start_token_id": 151669,
        "audio_end_token_id": 151670,
        "spatial_merge_size": 2,
        "tokens_per_second": 13.0,
        "n_window": 50,
    },
    read_config=read_config,
    scaled_time=True,
    audio_tokens=audio_tokens,
    av_pair="consecutive",
    interleaves={"transformers": _merge_as_given, "vllm": _merge_float32_sp},
    default_second_per_grid_ts=2.0,
    presets={
        "vllm-0.33": frozenset({"tau_f64", "av_eos_block", "av_merge_tau"}),
        "transformers-4.57": frozenset({"items_after_vision_start"}),
        # SGLang 0.5.23 keeps transformers' float32 positions and truncates them (docs/semantics.md, S1)
        "sglang-0.5": frozenset({"float_carry"}),
    },
    # the Qwen2.5-Omni thinker's batch, padded with 0
    transformers_batch={
        convention: attrs.evolve(rules, pad=0) for convention, rules in TRANSFORMERS_THINKER_BATCH.items()
    },
    float_positions=True,
    float_times=frozenset({"transformers-4.57", "transformers-5"}),
    transformers_classes={
        model_type: ("qwen3_omni_moe", "Qwen3OmniMoeThinkerForConditionalGeneration", "Qwen3OmniMoeThinkerConfig")
        for model_type in ("qwen3_omni_moe", "qwen3_omni_moe_thinker")
    },
    config_dict=config_dict,
    fallback_notes={
        "tokens_per_second": "read from the thinker's position_id_per_seconds; the published checkpoint sets 13, "
        "transformers' config class 25",
        "n_window": "read from the thinker's audio_config.n_window under transformers-5; the published checkpoint "
        "sets 50",
    },
)
