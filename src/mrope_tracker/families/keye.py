"""Keye-VL-8B-Preview (Kwai): Qwen2-VL images, and every video frame its own
tau = 0 block, the frames back to back in one run of video tokens.

Image: ``vision_start I*(h'w') vision_end``; video: ``vision_start
V*(t h'w') vision_end``, as Qwen2-VL lays them out. vLLM 0.33's Keye model
splits a video row (t, h, w) into t one-frame blocks that follow each other
with no text between them: frame f sits at (s_f, s_f + i, s_f + j), and s_(f+1)
= s_f + max(h', w'), one past the frame's largest position. So T moves
forward by max(h', w') per frame, not by 1 (docs/semantics.md, "Keye-VL").
The remote-code checkpoint has no transformers implementation: vLLM's rule
is the only one, and the reference follows it.
"""

from ._spec import Family
from .qwen2_vl import QWEN_VISION_IDS, read_qwen_vision

FAMILY = Family(
    name="keye",
    model_types={"keye": ""},
    defaults={**QWEN_VISION_IDS, "spatial_merge_size": 2},
    read_config=read_qwen_vision,
    video_blocks="frames",
)
