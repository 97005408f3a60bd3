"""MiniCPM-V 4.7's canvas prompts (per-crop sizes instead of grids), laid out
as its processor lays them out, with stand-in marker ids."""

from __future__ import annotations

import attrs
import numpy as np

from mrope_tracker import MRopeConfig

from .workloads import TEXT_ID

# stand-in ids (the published ones were not found): <image>, </image>, <slice>, </slice>, newline, image, video
_CANVAS_IDS = (900, 901, 902, 903, 904, 910, 911)


def minicpmv4_7() -> MRopeConfig:
    """MiniCPM-V 4.7 with stand-in marker ids, "16x" (merge 4)."""
    start, end, slice_start, slice_end, newline = _CANVAS_IDS[:5]
    return MRopeConfig(
        family="minicpmv4_7",
        vision_start_token_id=start,
        vision_end_token_id=end,
        slice_start_token_id=slice_start,
        slice_end_token_id=slice_end,
        newline_token_id=newline,
    )


@attrs.frozen(eq=False)
class CanvasPrompt:
    """A MiniCPM-V 4.7 prompt: ids, modality labels and per-crop patch grids."""

    token_ids: np.ndarray
    mm_token_type_ids: np.ndarray
    kwargs: dict  # target_sizes, target_sizes_videos

    @property
    def num_tokens(self) -> int:
        return int(self.token_ids.shape[0])


def _canvas_prompt(pictures) -> CanvasPrompt:
    """`pictures`: (kind 1 image / 2 video, frames, thumbnail (h, w), slices (h, w), rows, cols), each
    between 20 text tokens, laid out as MiniCPM-V 4.7's processor does."""
    start, end, slice_start, slice_end, newline, image, video = _CANVAS_IDS
    ids, kinds, sizes = [TEXT_ID] * 20, [0] * 20, {1: [], 2: []}

    def crop(kind, size, opening, closing):
        n = (size[0] // 4) * (size[1] // 4)
        ids.extend([opening] + [image if kind == 1 else video] * n + [closing])
        kinds.extend([0] + [kind] * n + [0])
        sizes[kind].append(size)

    for kind, frames, thumb, piece, rows, cols in pictures:
        for _ in range(frames):
            crop(kind, thumb, start, end)
            for k in range(rows * cols):
                if k and k % cols == 0:
                    ids.append(newline)
                    kinds.append(0)
                crop(kind, piece, slice_start, slice_end)
        ids.extend([TEXT_ID] * 20)
        kinds.extend([0] * 20)
    arrays = {
        "target_sizes": np.array(sizes[1], np.int64).reshape(-1, 2),
        "target_sizes_videos": np.array(sizes[2], np.int64).reshape(-1, 2),
    }
    return CanvasPrompt(np.array(ids, np.int64), np.array(kinds, np.int64), arrays)


def canvas_cases() -> list[tuple[str, CanvasPrompt]]:
    """A picture sliced 3 x 3, ten such pictures, and a 64-frame video (2 x 2 slices a frame)."""
    sliced = (1, 1, (56, 56), (64, 64), 3, 3)
    cases = [
        ("1 picture, 3 x 3 slices", _canvas_prompt([sliced])),
        ("10 pictures, 3 x 3 slices", _canvas_prompt([sliced] * 10)),
        ("1 video of 64 frames, 2 x 2 slices", _canvas_prompt([(2, 64, (48, 48), (32, 32), 2, 2)])),
    ]
    return [(f"{name}, {prompt.num_tokens:,} tokens", prompt) for name, prompt in cases]
