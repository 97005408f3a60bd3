"""Qwen3-VL (dense and MoE), and the Qwen3.5 multimodal checkpoints that reuse
its rules: every image and every video frame is its own block with tau = 0.

A video with t temporal patches appears as t runs of h'*w' video tokens,
each normally wrapped as ``<timestamp text> vision_start V*h'w' vision_end``:
time is only told through the timestamp text, which is ordinary text.
`video_grid_thw` keeps one (t, h, w) row per video, as the processors give
it; the builders split it into frames.
"""

from ._spec import Family
from .qwen2_vl import QWEN_VISION_IDS, TRANSFORMERS_VL_BATCH, qwen_vision_ids, read_qwen_vision


def config_dict(config) -> dict:
    return {
        "model_type": "qwen3_vl",
        **qwen_vision_ids(config),
        "vision_config": {"spatial_merge_size": config.spatial_merge_size},
    }


FAMILY = Family(
    name="qwen3_vl",
    # vLLM 0.33 also serves Cosmos3 (its config class Cosmos3OmniConfig), Cosmos3-Edge,
    # Intern-S1-Pro and Intern-S2 (Preview, Mobius) with the Qwen3-VL processor and rule
    model_types={
        "qwen3_vl": "",
        "qwen3_vl_moe": "",
        "qwen3_5": "",
        "qwen3_5_moe": "",
        "cosmos3_omni": "",
        "cosmos3_edge": "",
        "interns1_pro": "",
        "intern_s2_preview": "",
        "interns2_mobius": "",
    },
    defaults={**QWEN_VISION_IDS, "spatial_merge_size": 2},
    read_config=read_qwen_vision,
    video_blocks="frames",
    presets={
        "transformers-4.57": frozenset({"items_after_vision_start"}),
        "sglang-0.5": frozenset({"items_after_vision_start"}),
    },
    transformers_batch=TRANSFORMERS_VL_BATCH,
    transformers_classes={
        "qwen3_vl": ("qwen3_vl", "Qwen3VLModel", "Qwen3VLConfig"),
        "qwen3_vl_moe": ("qwen3_vl_moe", "Qwen3VLMoeModel", "Qwen3VLMoeConfig"),
        "qwen3_5": ("qwen3_5", "Qwen3_5Model", "Qwen3_5Config"),
        "qwen3_5_moe": ("qwen3_5_moe", "Qwen3_5MoeModel", "Qwen3_5MoeConfig"),
    },
    config_dict=config_dict,
)
