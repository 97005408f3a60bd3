"""Keye-VL-1.5 (Kwai): Qwen2-VL images, and every video frame its own tau = 0
block, each frame with a size of its own (slow frames large, fast ones small).

Its processor gives ``video_grid_thw`` as one ``[1, h, w]`` row per frame
(``num_frames`` groups them into videos) and lays a video out as, per frame,
``<frame>`` + the timestamp as text, then ``<fast_start>`` for a fast frame,
``V*(h'w')``, and ``<fast_end>`` for a fast frame. Everything but the video
tokens is text, so a frame is an image-like block at the running base and
each row of ``video_grid_thw`` can be taken as a video of its own. vLLM 0.33
finds the frames from the placeholder's is_embed runs; the vLLM adapter
splits such a video feature into one video per frame (`per_frame_grids`).

The ids of ``<frame>``, ``<fast_start>`` and ``<fast_end>`` are not needed:
they are text.
"""

from ._spec import Family
from .qwen2_vl import QWEN_VISION_IDS, read_qwen_vision

FAMILY = Family(
    name="keye_vl1_5",
    # "KeyeVL1_5" is the published checkpoint's; "keye_vl1_5" the name vLLM's module goes by
    model_types={"KeyeVL1_5": "", "keye_vl1_5": ""},
    defaults={**QWEN_VISION_IDS, "spatial_merge_size": 2},
    read_config=read_qwen_vision,
    video_blocks="frames",
    per_frame_grids=True,
)
