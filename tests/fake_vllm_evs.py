"""Stand-ins for the vLLM 0.33 code the EVS hook patches (`mrope_tracker.vllm.evs_plugin`).

Names and parameters are those tests/data/vllm-0.33.0-rope-api.json records
from vLLM 0.33.0's source (test_vllm_evs_plugin.py checks them against it).
Each stand-in does what its vLLM original does that the hook relies on:

- ``MultiModalPruner``: keeps its arguments; ``_num_window_embeds`` counts the
  request's items with embedding rows in the window; its own ``recompute``
  (never reached for a marked model) says so;
- the pruning models' ``_postprocess_video_embeds_evs`` call their module's
  ``compute_retention_mask`` by its global name, once per video in order,
  keep the masked rows and append the position channels (zeros here: the
  hook overwrites them), Qwen3-VL's rows being the whole span (each frame's
  text rows, then its kept tokens), its last channel marking video rows.
"""

from __future__ import annotations

import sys
import types

import numpy as np
import torch

PRUNER_MODULE = "vllm.v1.worker.gpu.model_states.mm_pruning"
QWEN2_5_MODULE = "vllm.model_executor.models.qwen2_5_vl"
QWEN3_MODULE = "vllm.model_executor.models.qwen3_vl"


class MultiModalPruner:
    def __init__(self, model, rope_state, encoder_cache, inputs_embeds_size):
        self.model = model
        self.rope_state = rope_state
        self.encoder_cache = encoder_cache
        self.inputs_embeds_size = inputs_embeds_size

    def strip(self, mm_embeds):
        return [m[:, : self.inputs_embeds_size] for m in mm_embeds]

    def recompute(self, mm_embeds, input_batch, req_states):
        return "vllm's own recompute"

    def _num_window_embeds(self, req_id, query_start, query_end):
        features = self.encoder_cache.mm_features[req_id]
        return sum(
            1
            for f in features
            if f.mm_position.offset < query_end and f.mm_position.offset + f.mm_position.length > query_start
        )


def copy_mm_embedding_modality(src, dst):
    return dst


class Qwen2_5_VLForConditionalGeneration:
    def __init__(self, config):
        self.config = config

    def _postprocess_video_embeds_evs(self, video_embeds_split, video_input):
        module = sys.modules[QWEN2_5_MODULE]
        out = []
        for emb, size in zip(video_embeds_split, video_input["video_grid_thw"]):
            mask = module.compute_retention_mask(emb, size, spatial_merge_size=2, q=0.5)
            out.append(torch.cat([emb[mask], torch.zeros(int(mask.sum()), 4, dtype=emb.dtype)], dim=1))
        return tuple(out)


class Qwen3VLForConditionalGeneration:
    def __init__(self, config):
        self.config = config

    def _postprocess_video_embeds_evs(self, video_embeds_split, video_input):
        module = sys.modules[QWEN3_MODULE]
        out = []
        for emb, size, text in zip(video_embeds_split, video_input["video_grid_thw"], video_input["frame_text"]):
            mask_fn = module.compute_retention_mask  # vLLM picks EVS or VidCom2's by global name
            mask = mask_fn(emb, size, spatial_merge_size=2, q=0.5)
            per_frame = mask.reshape(size[0], -1).sum(dim=1).tolist()
            kept = emb[mask]
            rows, is_video, at = [], [], 0
            for f, count in enumerate(per_frame):
                rows.append(torch.zeros(text[f], emb.shape[1], dtype=emb.dtype))  # the frame's text rows
                rows.append(kept[at : at + count])
                is_video += [0] * text[f] + [1] * count
                at += count
            rows.append(torch.zeros(1, emb.shape[1], dtype=emb.dtype))  # the last vision end
            is_video.append(0)
            channels = torch.zeros(len(is_video), 5, dtype=emb.dtype)
            channels[:, 4] = torch.tensor(is_video, dtype=emb.dtype)
            out.append(torch.cat([torch.cat(rows), channels], dim=1))
        return tuple(out)


class MaskQueue:
    """Plays vLLM's ``compute_retention_mask``: returns the given masks in order."""

    def __init__(self):
        self.masks = []

    def __call__(self, emb, size, spatial_merge_size, q):
        return torch.as_tensor(np.asarray(self.masks.pop(0), bool))


def add_evs_fakes(modules: dict, monkeypatch) -> MaskQueue:
    """Put the stand-ins into `modules` and sys.modules (fresh classes each
    time, so a patch never outlives its test); returns the mask queue both
    model modules' mask functions read."""
    masks = MaskQueue()
    pruner = modules.get(PRUNER_MODULE) or types.ModuleType(PRUNER_MODULE)
    pruner.MultiModalPruner = type("MultiModalPruner", (MultiModalPruner,), {})
    pruner.copy_mm_embedding_modality = copy_mm_embedding_modality
    modules[PRUNER_MODULE] = pruner
    qwen2_5 = types.ModuleType(QWEN2_5_MODULE)
    qwen2_5.Qwen2_5_VLForConditionalGeneration = type(
        "Qwen2_5_VLForConditionalGeneration", (Qwen2_5_VLForConditionalGeneration,), {}
    )
    qwen2_5.compute_retention_mask = masks
    qwen3 = types.ModuleType(QWEN3_MODULE)
    qwen3.Qwen3VLForConditionalGeneration = type(
        "Qwen3VLForConditionalGeneration", (Qwen3VLForConditionalGeneration,), {}
    )
    qwen3.compute_retention_mask = masks
    qwen3.vidcom2_compute_retention_mask = masks
    modules[QWEN2_5_MODULE], modules[QWEN3_MODULE] = qwen2_5, qwen3
    for name in (PRUNER_MODULE, QWEN2_5_MODULE, QWEN3_MODULE):
        monkeypatch.setitem(sys.modules, name, modules[name])
    return masks
