"""HunYuan-VL's XD-RoPE positions (four axes), stated on their own.

transformers 5.24 (``HunYuanVLModel.get_rope_index``) puts every token at its
index on all four axes, then rewrites the image tokens. The processor writes
an image as one run of image tokens: a token, h' rows of w' + 1 tokens (each
row ends in a newline embedding), a token. The two tokens at the ends of the
run keep their index; the grid tokens keep it on the first axis only, and
take the column, the row and the image's ordinal (0 for the prompt's first
image) on the other three. A run is found as transformers finds it: a
maximal run of the image token, whatever surrounds it.
"""

from __future__ import annotations

import torch

XD_AXES = 4


def _runs(is_image: torch.Tensor) -> list[tuple[int, int]]:
    """[start, end) of every maximal run of True."""
    padded = torch.cat([torch.zeros(1, dtype=torch.int8), is_image.to(torch.int8), torch.zeros(1, dtype=torch.int8)])
    edges = torch.diff(padded)
    starts = torch.nonzero(edges == 1).flatten().tolist()
    ends = torch.nonzero(edges == -1).flatten().tolist()
    return list(zip(starts, ends))


def positions(ids: torch.Tensor, images: list[tuple[int, int, int]], image_id: int) -> tuple[torch.Tensor, int]:
    """((4, L) int64 positions, delta) of a prompt whose images have the LLM
    grids `images` (t', h', w'), in prompt order."""
    length = ids.numel()
    out = torch.arange(length, dtype=torch.int64).view(1, -1).repeat(XD_AXES, 1)
    runs = _runs(ids == image_id)
    if len(runs) > len(images):
        start, end = runs[len(images)]
        raise ValueError(
            f"token_ids: expected {len(images)} runs of image tokens (one per image_grid_thw row), got a run more at "
            f"token_ids[{start}:{end}]"
        )
    if len(runs) < len(images):
        raise ValueError(
            f"image_grid_thw: expected one row per run of image tokens ({len(runs)}), got {len(images)} rows"
        )
    for k, ((start, end), (_, h, w)) in enumerate(zip(runs, images)):
        width = w + 1  # the newline column
        expected = h * width + 2
        if end - start != expected:
            raise ValueError(
                f"token_ids: image {k} (LLM grid {h} x {w}) expects a run of h'(w' + 1) + 2 = {expected} image tokens "
                f"from token_ids[{start}], got {end - start}"
            )
        grid = slice(start + 1, end - 1)
        out[1, grid] = torch.arange(width).repeat(h)  # column, the newline last
        out[2, grid] = torch.arange(h).repeat_interleave(width)  # row
        out[3, grid] = k
    return out, int(out.max()) + 1 - length
