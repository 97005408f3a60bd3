"""Test oracle: transformers 4.57.6's own ``get_rope_index``, run without weights.

Every family's ``get_rope_index`` is a method that reads only ``self.config``
(and, for the Omni thinkers, ``self.spatial_merge_size`` and two helper
methods). We build the real transformers config class from a published
config dict and call the method unbound on a small stand-in object, so no
model (and no weight) is ever created.

What this module assumes about transformers 4.57.6 (read from its code and
checked by tests/test_transformers_oracle.py):

- Qwen2-VL, Qwen2.5-VL, Qwen3-VL and GLM-4.1V/4.5V take ``attention_mask=None``
  as "no padding"; the Omni thinkers only call ``get_rope_index`` with a mask
  (Qwen3-Omni indexes it unconditionally), so we pass a mask of ones.
- Qwen2.5-VL casts each ``second_per_grid_ts`` value to int64 before
  multiplying (0.5 -> 0), and uses 1.0 when the argument is None.
- The Omni thinkers have no default for ``second_per_grids``; their
  processors do: Qwen2.5-Omni fps 2.0 (sp = 1.0), Qwen3-Omni fps 1.0
  (sp = 2.0). We fill those in when the argument is None.
- Qwen3-VL carries video time only as text: ``video_timestamps`` is accepted
  for symmetry with vLLM and ignored. It splits each video grid row into
  ``t`` rows of one frame.
- Qwen3-Omni returns float32 positions and deltas; the others int64.
- Padding (left or right) is dropped per row. VL models fill pad positions
  with 1 and take the delta against the padded row length; Qwen2.5-Omni
  fills with 1 and Qwen3-Omni with 0, both against the unpadded length.
"""

from __future__ import annotations

import json
import types

import numpy as np
import torch
from family_prompts import CONFIG_NAMES, load_config
from family_prompts import MODEL_TYPES as _MODEL_TYPES  # model_type -> family

__all__ = ["hf_positions", "hf_processor_interleave", "hf_rope_index", "oracle_family"]

# The Omni processors' default second_per_grid_ts (temporal_patch_size 2 / default fps).
_PROCESSOR_SECOND_PER_GRID = {"qwen2_5_omni": 1.0, "qwen3_omni": 2.0}
_OMNI = ("qwen2_5_omni", "qwen3_omni")


def _as_config_dict(config) -> dict:
    """A family name (its first published config), a config file stem, or a dict."""
    if isinstance(config, str):
        return load_config(CONFIG_NAMES[config][0] if config in CONFIG_NAMES else config)
    if isinstance(config, dict):
        return config
    raise TypeError(f"config: expected a family name or a config dict, got {type(config).__name__}")


def oracle_family(config) -> str:
    """The family ("qwen2_vl", ..., "qwen3_omni") transformers runs for this config."""
    model_type = _as_config_dict(config).get("model_type")
    if model_type not in _MODEL_TYPES:
        raise ValueError(f"config.model_type: expected one of {sorted(_MODEL_TYPES)}, got {model_type!r}")
    return _MODEL_TYPES[model_type]


def _stand_in(config_json: str):
    """(family, the model class, an object that has what get_rope_index reads):
    the package's own stand-in for transformers' models (mrope_tracker.hf.native)."""
    from mrope_tracker.hf import native as hf_native

    family = _MODEL_TYPES[json.loads(config_json)["model_type"]]
    model_cls, stub = hf_native._stand_in(config_json)
    return family, model_cls, stub


def _long_2d(value, width: int | None = None):
    if value is None:
        return None
    tensor = torch.as_tensor(np.asarray(value, dtype=np.int64))
    if width is not None:
        if tensor.numel() == 0:
            return None  # "no items" is None for transformers
        tensor = tensor.reshape(-1, width)
    return tensor


def hf_rope_index(
    config,
    input_ids,
    attention_mask=None,
    image_grid_thw=None,
    video_grid_thw=None,
    second_per_grid_ts=None,
    audio_feature_lengths=None,
    use_audio_in_video=False,
    video_timestamps=None,
):
    """transformers 4.57.6's ``get_rope_index`` for a batch: ((3, B, L), (B, 1)).

    `config` is a family name (published config) or a config dict. Grids are
    (t, h, w) before merging, in prompt order across the batch; video rows
    count temporal patches (Qwen3-VL and GLM: frames). `second_per_grid_ts`
    is passed as float32, as the processors' tensors are. `video_timestamps`
    is ignored (Qwen3-VL encodes time as text tokens)."""
    del video_timestamps
    family, model_cls, stub = _stand_in(json.dumps(_as_config_dict(config), sort_keys=True))
    ids = torch.as_tensor(np.asarray(input_ids, dtype=np.int64))
    if ids.dim() == 1:
        ids = ids.unsqueeze(0)
    if ids.dim() != 2:
        raise ValueError(f"input_ids: expected shape (B, L), got {tuple(ids.shape)}")
    mask = None
    if attention_mask is not None:
        mask = torch.as_tensor(np.asarray(attention_mask, dtype=np.int64)).reshape(ids.shape)
    images = _long_2d(image_grid_thw, 3)
    videos = _long_2d(video_grid_thw, 3)
    sp = None if second_per_grid_ts is None else torch.as_tensor(np.asarray(second_per_grid_ts, dtype=np.float32))
    if family in _OMNI:
        if mask is None:
            mask = torch.ones_like(ids)
        if sp is None and videos is not None:
            sp = torch.full((videos.shape[0],), _PROCESSOR_SECOND_PER_GRID[family], dtype=torch.float32)
        audio = _long_2d(audio_feature_lengths)
        return model_cls.get_rope_index(
            stub,
            ids,
            images,
            videos,
            mask,
            use_audio_in_video=bool(use_audio_in_video),
            audio_seqlens=audio,
            second_per_grids=sp,
        )
    if (audio_feature_lengths is not None and len(audio_feature_lengths)) or use_audio_in_video:
        raise ValueError(f"audio_feature_lengths, use_audio_in_video: {family} has no audio")
    if family == "qwen2_5_vl":
        return model_cls.get_rope_index(stub, ids, images, videos, second_per_grid_ts=sp, attention_mask=mask)
    if sp is not None:
        raise ValueError(f"second_per_grid_ts: {family} takes none, got {second_per_grid_ts!r}")
    return model_cls.get_rope_index(stub, ids, images, videos, attention_mask=mask)


def hf_positions(family_config, prompt, **kwargs):
    """One unpadded prompt through transformers: ((3, L) tensor, delta).

    `prompt` is a `family_prompts.FamilyPrompt` (its config is used when
    `family_config` is None) or a token id sequence with the keyword
    arguments of `hf_rope_index`. The delta is an int, or a float for
    Qwen3-Omni (float32 in transformers)."""
    if hasattr(prompt, "token_ids"):
        if kwargs:
            raise TypeError(f"hf_positions: keyword arguments come from the prompt object, got {sorted(kwargs)}")
        kwargs = prompt.hf_kwargs()
        token_ids = prompt.token_ids
        if family_config is None:
            family_config = prompt.config
    else:
        token_ids = prompt
    positions, deltas = hf_rope_index(family_config, [list(token_ids)], **kwargs)
    delta = deltas.reshape(-1)[0]
    delta = delta.item() if delta.dtype.is_floating_point else int(delta)
    return positions[:, 0, :], delta


# Placeholder strings for the processor stand-in (any distinct strings do).
_PROCESSOR_TOKENS = dict(
    image_token="<|IMAGE|>",
    audio_token="<|AUDIO|>",
    video_token="<|VIDEO|>",
    vision_bos_token="<|vision_bos|>",
    vision_eos_token="<|vision_eos|>",
    audio_bos_token="<|audio_bos|>",
    audio_eos_token="<|audio_eos|>",
)
_PROCESSORS = {
    "qwen2_5_omni": ("qwen2_5_omni", "Qwen2_5OmniProcessor", 25.0),
    "qwen3_omni": ("qwen3_omni_moe", "Qwen3OmniMoeProcessor", 13.0),
}


def hf_processor_interleave(
    family: str,
    grid,
    second_per_grid_t: float,
    num_audio: int,
    position_id_per_seconds: float | None = None,
    seconds_per_chunk: float = 2.0,
) -> str:
    """How transformers 4.57.6's Omni processor lays out one audio-in-video
    block: "V"/"A" per token between ``vision_bos audio_bos`` and
    ``audio_eos vision_eos``, from its own ``replace_multimodal_special_tokens``
    (merge size 2; the rate defaults to the processor's own default)."""
    import importlib

    module_name, class_name, default_rate = _PROCESSORS[family]
    processing = importlib.import_module(f"transformers.models.{module_name}.processing_{module_name}")
    cls = getattr(processing, class_name)
    merge = types.SimpleNamespace(merge_size=2)
    stub = types.SimpleNamespace(image_processor=merge, video_processor=merge, **_PROCESSOR_TOKENS)
    stub.get_chunked_index = types.MethodType(cls.get_chunked_index, stub)
    tok = _PROCESSOR_TOKENS
    text = tok["vision_bos_token"] + tok["video_token"] + tok["vision_eos_token"]
    (out,) = cls.replace_multimodal_special_tokens(
        stub,
        [text],
        audio_lengths=iter([num_audio]),
        image_grid_thw=iter([]),
        video_grid_thw=iter([np.asarray(grid, dtype=np.int64)]),
        video_second_per_grid=iter([second_per_grid_t]),
        use_audio_in_video=True,
        position_id_per_seconds=default_rate if position_id_per_seconds is None else position_id_per_seconds,
        seconds_per_chunk=seconds_per_chunk,
    )
    head = tok["vision_bos_token"] + tok["audio_bos_token"]
    tail = tok["audio_eos_token"] + tok["vision_eos_token"]
    if not (out.startswith(head) and out.endswith(tail)):
        raise AssertionError(f"unexpected processor output {out[:80]!r}")
    body = out[len(head) : len(out) - len(tail)]
    kinds = body.replace(tok["video_token"], "V").replace(tok["audio_token"], "A")
    if set(kinds) - {"V", "A"}:
        raise AssertionError(f"unexpected tokens in the interleave: {body[:80]!r}")
    return kinds
