"""Qwen2.5-Omni thinker: Qwen2.5-VL's vision blocks, audio clips, and videos
that carry their audio track interleaved with their frames.

- Audio: ``audio_start A*n audio_end`` with n = ((F-1)//2 + 1 - 2)//2 + 1
  tokens for F mel frames (a stride-2 convolution, then stride-2 pooling);
  its positions continue the text.
- Video time scale: the thinker's `position_id_per_seconds` (transformers).
  vLLM 0.33 reads `vision_config.tokens_per_second` instead (default 25); the
  published configs set neither differently, so both give 25.
- Audio in video: ``vision_start audio_start [interleave] audio_end
  vision_end``; the bos pair shares one position and so does the eos pair.
  Interleave conventions for the range form: transformers' processor
  (default), vLLM's processor, or the model's own chunking.
"""

import numpy as np

from . import interleave
from ._spec import BatchRules, Family, first, get, plain_number
from .qwen2_vl import QWEN_VISION_IDS, qwen_vision_ids, read_qwen_vision

OMNI_AUDIO_IDS = {"audio_token_id": 151646, "audio_start_token_id": 151647, "audio_end_token_id": 151648}

# transformers' Omni thinkers, alike on both lines: `attention_mask == 1`
# kept, padding 1, deltas against the kept tokens, a text-only batch from the
# mask's cumsum, and no mm_token_type_ids.
TRANSFORMERS_THINKER_BATCH = {
    convention: BatchRules(keep="one", pad=1, padded_delta=False, text_only="cumsum", type_ids=False)
    for convention in ("transformers-4", "transformers-5")
}


def read_omni_audio(scopes) -> dict:
    text = tuple(get(s, "text_config") for s in scopes)
    where = (*scopes, *text)
    return {
        "audio_token_id": first(where, ("audio_token_id", "audio_token_index")),
        "audio_start_token_id": first(where, ("audio_start_token_id",)),
        "audio_end_token_id": first(where, ("audio_end_token_id",)),
    }


def read_config(scopes, semantics="reference") -> dict:
    kwargs = {**read_qwen_vision(scopes), **read_omni_audio(scopes)}
    if semantics == "vllm-0.33":
        # vLLM scales Omni time by the vision config's rate, which published
        # configs leave out: 25 is vLLM's own default then, not a fallback of ours
        kwargs["tokens_per_second"] = get(first(scopes, ("vision_config",)), "tokens_per_second", 25)
    else:
        kwargs["tokens_per_second"] = first(scopes, ("position_id_per_seconds",))
    kwargs["seconds_per_chunk"] = first(scopes, ("seconds_per_chunk",))
    return kwargs


def thinker_config_dict(config) -> dict:
    """An Omni thinker's config.json values (ids, time scale, merge size)."""
    return {
        **qwen_vision_ids(config),
        "audio_token_id": config.audio_token_id,
        "audio_start_token_id": config.audio_start_token_id,
        "audio_end_token_id": config.audio_end_token_id,
        "position_id_per_seconds": plain_number(config.tokens_per_second),
        "vision_config": {"spatial_merge_size": config.spatial_merge_size},
    }


def config_dict(config) -> dict:
    thinker = {"model_type": "qwen2_5_omni_thinker", **thinker_config_dict(config)}
    thinker["seconds_per_chunk"] = plain_number(config.seconds_per_chunk)
    return {"model_type": "qwen2_5_omni", "thinker_config": thinker}


def audio_tokens(mel_frames: np.ndarray, config) -> np.ndarray:
    return ((mel_frames - 1) // 2 + 1 - 2) // 2 + 1


def chunk_positions(config) -> int:
    """C = int(r * seconds_per_chunk): one interleave chunk, in positions."""
    return int(config.tokens_per_second * config.seconds_per_chunk)


def _convention(fn):
    def runs(t, h, w, sp, num_audio, config):
        return fn(t, h, w, sp, num_audio, config.tokens_per_second, chunk_positions(config))

    return runs


FAMILY = Family(
    name="qwen2_5_omni",
    model_types={"qwen2_5_omni": "thinker_config", "qwen2_5_omni_thinker": ""},
    defaults={
        **QWEN_VISION_IDS,
        **OMNI_AUDIO_IDS,
        "spatial_merge_size": 2,
        "tokens_per_second": 25.0,
        "seconds_per_chunk": 2.0,
    },
    read_config=read_config,
    scaled_time=True,
    audio_tokens=audio_tokens,
    av_pair="shared",
    interleaves={
        "transformers": _convention(interleave.hf_walker_runs),
        "vllm": _convention(interleave.vllm_chunk_runs),
        "model": _convention(interleave.model_walker_runs),
    },
    presets={
        "vllm-0.33": frozenset({"tau_f64", "av_shift"}),
        "transformers-4.57": frozenset({"items_after_vision_start"}),
    },
    transformers_batch=TRANSFORMERS_THINKER_BATCH,
    transformers_classes={
        model_type: ("qwen2_5_omni", "Qwen2_5OmniThinkerForConditionalGeneration", "Qwen2_5OmniThinkerConfig")
        for model_type in ("qwen2_5_omni", "qwen2_5_omni_thinker")
    },
    config_dict=config_dict,
    fallback_notes={
        "tokens_per_second": "read from the thinker's position_id_per_seconds; the published checkpoints set 25",
        "seconds_per_chunk": "read from the thinker's seconds_per_chunk; the published checkpoints set 2",
    },
)
