"""SGLang 0.5.23's own position functions, called as its processors call them.

`load(path)` imports ``sglang/srt/layers/rotary_embedding/mrope_rope_index.py``
from a file (unpacked from the released wheel: it needs only the standard
library and torch), never the sglang package. `sglang_positions` runs it on
a `family_prompts.FamilyPrompt` under a model type, with the arguments
SGLang's processors pass (sglang/srt/multimodal/processors/qwen_vl.py,
glm4v.py, ernie45_vl.py). Used by tests/test_sglang_oracle.py and by
tests/record_sglang_vectors.py; nothing of SGLang's is copied here.
"""

from __future__ import annotations

import types

import numpy as np
import torch
from mrope_tracker.bench.sglang_sources import load_rope_index

# model_type -> (family, the config file in tests/data/configs its prompts are drawn with):
# every model type SGLang 0.5.23 positions with mrope_rope_index.py that this repository knows
SERVED = {
    "qwen2_vl": ("qwen2_vl", "qwen2_vl"),
    "qwen2_5_vl": ("qwen2_5_vl", "qwen2_5_vl"),
    "paddleocr_vl": ("paddleocr_vl", "paddleocr_vl"),
    "qwen3_vl": ("qwen3_vl", "qwen3_vl"),
    "qwen3_vl_moe": ("qwen3_vl", "qwen3_vl"),
    "qwen3_5": ("qwen3_vl", "qwen3_vl"),
    "qwen3_5_moe": ("qwen3_vl", "qwen3_vl"),
    "intern_s2_preview": ("qwen3_vl", "qwen3_vl"),
    "interns2_mobius": ("qwen3_vl", "qwen3_vl"),
    "cosmos3_omni": ("qwen3_vl", "qwen3_vl"),
    "cosmos3_edge": ("qwen3_vl", "qwen3_vl"),
    "qwen3_omni_moe": ("qwen3_omni", "qwen3_omni_moe"),
    "glm4v": ("glm4v", "glm4v"),
    "glm4v_moe": ("glm4v", "glm4v_moe"),
    "glm_ocr": ("glm_ocr", "glm_ocr"),
    "ernie4_5_moe_vl": ("ernie4_5_moe_vl", "ernie4_5_moe_vl"),
}


def load(path: str) -> types.ModuleType:
    """SGLang's mrope_rope_index.py as a module of its own (no sglang import)."""
    return load_rope_index(path)


def config_for(prompt, model_type: str) -> dict:
    """The prompt's config under `model_type` (the family's published config, relabelled;
    a PaddleOCR-VL vision config given the tokens_per_second SGLang requires, defect 3)."""
    config = {**prompt.config, "model_type": model_type}
    if model_type == "paddleocr_vl":
        config["vision_config"] = {**config["vision_config"], "tokens_per_second": 2}
    return config


def _grid(rows):
    return torch.tensor(rows, dtype=torch.long) if rows else None


def sglang_positions(module, prompt, model_type: str) -> tuple[np.ndarray, float]:
    """((3, L) int64 positions, delta) from SGLang's function: the positions as
    prefill casts them to int64, the delta as the function returns it (a float
    for Qwen3-Omni). Raises whatever SGLang's code raises."""
    config = config_for(prompt, model_type)
    ids = torch.tensor([list(prompt.token_ids)], dtype=torch.long)
    images, videos = _grid(prompt.image_grid_thw), _grid(prompt.video_grid_thw)
    family = SERVED[model_type][0]
    if family in ("glm4v", "glm_ocr"):
        hf = types.SimpleNamespace(
            image_token_id=config["image_token_id"],
            video_start_token_id=config["video_start_token_id"],
            video_end_token_id=config["video_end_token_id"],
            vision_config=types.SimpleNamespace(**config["vision_config"]),
        )
        positions, delta = module.get_rope_index_glm4v(ids, hf, images, videos, None)
    elif family == "ernie4_5_moe_vl":
        keys = ("im_patch_id", "video_start_token_id", "video_end_token_id", "spatial_conv_size", "temporal_conv_size")
        hf = types.SimpleNamespace(**{key: config[key] for key in keys})
        positions, delta = module.get_rope_index_ernie45(ids, hf, images, videos)
    else:
        positions, delta = _qwen(module, prompt, config, model_type, ids, images, videos)
    return positions[:, 0].to(torch.int64).numpy(), float(delta.reshape(-1)[0])


def _qwen(module, prompt, config, model_type, ids, images, videos):
    """get_rope_index with the arguments qwen_vl.py's processor passes."""
    thinker = config.get("thinker_config", config)
    vision = thinker["vision_config"]
    times = prompt.second_per_grid_ts
    extra = {}
    if model_type == "qwen3_omni_moe":
        lengths = prompt.audio_feature_lengths
        extra = {
            "audio_token_id": thinker["audio_token_id"],
            "audio_start_token_id": thinker["audio_start_token_id"],
            "position_id_per_seconds": thinker.get("position_id_per_seconds"),
            "use_audio_in_video": prompt.use_audio_in_video,
            "audio_seqlens": None if lengths is None else torch.tensor(lengths, dtype=torch.long),
        }
    return module.get_rope_index(
        spatial_merge_size=vision["spatial_merge_size"],
        image_token_id=thinker["image_token_id"],
        video_token_id=thinker.get("video_token_id"),
        vision_start_token_id=thinker["vision_start_token_id"],
        model_type=model_type,
        tokens_per_second=vision.get("tokens_per_second"),
        input_ids=ids,
        image_grid_thw=images,
        video_grid_thw=videos,
        second_per_grid_ts=None if times is None else torch.tensor(times, dtype=torch.float32),
        **extra,
    )
