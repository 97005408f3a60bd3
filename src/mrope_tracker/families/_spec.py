"""What a model family is, as one record: `Family`.

Each family module (qwen2_vl.py, glm4v.py, ...) builds one `Family`. It holds
everything particular to the family, so the rest of the package (config,
input normalisation, the layout builders) reads switches from it and never
tests a family's name:
- which model types it serves and where their ids sit in a published config;
- its default ids and scales;
- how its videos appear in the prompt (one block, or one block per frame,
  possibly inside begin/end-of-video brackets);
- its temporal rule, its audio token count and, for Omni families, how an
  audio-in-video block is laid out (bos/eos pairs, interleave conventions).

The kernels only see the resulting numbers (`kernel_params`) and layout rows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs
import numpy as np

# What a semantics preset can switch, per family (docs/semantics.md, "Presets"):
PRESET_SWITCHES = frozenset(
    {
        "tau_f64",  # temporal products in float64 from the float32 sp (vLLM 0.33, D3)
        "tau_rate_first",  # f * float32(sp * r): transformers 5's order of the float32 products
        "int_sp",  # second_per_grid_ts truncated to an integer first (transformers 4.57, D2)
        "next_hw",  # after a vision block, text resumes at s + max(h', w') (transformers 5, D1)
        "av_shift",  # Qwen2.5-Omni audio-in-video positions one token early (vLLM 0.33, D5)
        "av_eos_block",  # audio-in-video eos after the whole block's maximum (vLLM 0.33, D8)
        # Qwen3-Omni audio-in-video positions merged on truncated tau, whatever the layout (vLLM 0.33, D8)
        "av_merge_tau",
    }
)

# An interleave is a run-length list of (kind, count): kind 0 video, 1 audio.
RUN_VIDEO = 0
RUN_AUDIO = 1

# The semantics presets (docs/semantics.md); "reference" is the default.
SEMANTICS = ("reference", "vllm-0.33", "transformers-4.57", "transformers-5")

# How transformers packs a padded batch: one convention per transformers line (mrope_tracker.hf).
CONVENTIONS = ("transformers-4", "transformers-5")


def get(obj: Any, key: str, default: Any = None) -> Any:
    """`key` of a dict or an attribute-style config object (None-safe)."""
    if obj is None:
        return default
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


def first(objs, keys: tuple[str, ...], default: Any = None) -> Any:
    """The first key present (not None) in the first object that has it:
    published configs put ids at the top level or in `text_config`."""
    for obj in objs:
        for key in keys:
            value = get(obj, key)
            if value is not None:
                return value
    return default


def plain_number(value):
    """`value` as a published config.json writes it: whole numbers as ints."""
    return int(value) if value is not None and float(value).is_integer() else value


@attrs.frozen(kw_only=True)
class BatchRules:
    """How one transformers line's ``get_rope_index`` packs a padded batch of
    a family, which `mrope_tracker.hf.get_rope_index` reproduces."""

    # the kept tokens: "one" (attention_mask == 1) or "nonzero" (attention_mask != 0)
    keep: str
    # the position written at every token that is not kept
    pad: int
    # delta = max + 1 - the padded row length (D10), instead of - the row's kept tokens
    padded_delta: bool
    # a batch with no grids at all: "rows" (the per-row path, as with grids),
    # "cumsum" (positions from the attention mask's cumsum; no mask: every
    # token kept) or "cumsum_or_arange" (the same, but with no mask an arange
    # and zero deltas in input_ids' dtype)
    text_only: str
    # mm_token_type_ids, when given, must be the processor's types of the ids
    # (the model groups tokens by them); else they are ignored
    type_ids: bool


@attrs.frozen
class Family:
    """Everything that makes one family's positions its own."""

    name: str
    # model_type -> key of the nested config that holds the ids ("" for the config itself)
    model_types: Mapping[str, str]
    # MRopeConfig field -> default, for every field the family uses; fields
    # it does not list must stay None
    defaults: Mapping[str, Any]
    # (config scopes, in lookup order; semantics) -> MRopeConfig keyword arguments (None: default)
    read_config: Callable[[tuple, str], dict]
    # videos: "block" (one grid block), or "frames" (each frame its own tau = 0 block)
    video_blocks: str = "block"
    # frames reuse the image token inside video_start ... video_end (GLM)
    video_brackets: bool = False
    # video frames are time-scaled by tokens_per_second (else tau(f) = f)
    scaled_time: bool = False
    # audio: mel frames -> tokens (numpy int64 array in, array out), or None
    audio_tokens: Callable[[np.ndarray, Any], np.ndarray] | None = None
    # audio-in-video: bos/eos pairs "shared" (both at one position) or "consecutive"
    av_pair: str | None = None
    # audio-in-video interleave conventions: name -> (t, h, w, sp float64, n_audio, config) -> [(kind, count)]
    interleaves: Mapping[str, Callable] = attrs.field(factory=dict)
    default_second_per_grid_ts: float = 1.0
    # semantics preset -> the switches it turns on for this family (see
    # PRESET_SWITCHES); "reference" turns on none
    presets: Mapping[str, frozenset] = attrs.field(factory=dict)
    # transformers' own get_rope_index for the family, per batch convention
    # (CONVENTIONS); a convention it lacks is refused by mrope_tracker.hf
    transformers_batch: Mapping[str, BatchRules] = attrs.field(factory=dict)
    # transformers returns positions and deltas as float32, whole or not (Qwen3-Omni)
    float_positions: bool = False
    # the presets under which the video times stay unrounded float32 (D8)
    float_times: frozenset = frozenset()
    # model_type -> (module under transformers.models, the class owning
    # get_rope_index, its config class): where transformers implements it
    transformers_classes: Mapping[str, tuple[str, str, str]] = attrs.field(factory=dict)
    # an MRopeConfig -> its values as a published config.json holds them (for
    # running transformers' own code on it), or None
    config_dict: Callable[[Any], dict] | None = None

    @property
    def has_audio(self) -> bool:
        return self.audio_tokens is not None
