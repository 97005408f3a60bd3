"""transformers 5.24's ``MiniCPMV4_7Model.get_rope_index`` for a padded batch
(`hf.get_rope_index` calls it for a canvas config).

Each row is laid out on its own over the tokens ``attention_mask`` keeps
(``!= 0``) with `mrope_tracker.canvas`, its crops' sizes taken in batch
order from ``target_sizes`` and ``target_sizes_videos``; padding sits at 0,
and a row's delta is its largest position + 1 - ``attention_mask.sum()``,
as transformers computes them. Sizes left over after the last row are
refused (transformers ignores them).
"""

from __future__ import annotations

import attrs
import numpy as np
import torch

from ..core.canvas import canvas_layout
from ..core.config import MRopeConfig
from ..families.minicpmv4_7 import MERGE_OF_MODE

__all__ = ["canvas_rope_index"]

_FIELDS = {1: ("image", "target_sizes"), 2: ("video", "target_sizes_videos")}


def _array(value, name: str, ndim: int) -> np.ndarray:
    arr = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
    if arr.size == 0 and ndim == 2:
        return np.zeros((0, 2), np.int64)
    if arr.ndim != ndim or arr.dtype.kind not in "biu":
        raise ValueError(f"{name}: expected a {ndim}-D integer array, got {type(value).__name__} of shape {arr.shape}")
    return arr.astype(np.int64)


def _runs(kinds: np.ndarray, kind: int) -> int:
    """How many crops (maximal runs of one non-zero label) of `kind`."""
    if kinds.shape[0] == 0:
        return 0
    starts = np.concatenate(([True], kinds[1:] != kinds[:-1]))
    return int(np.count_nonzero(starts & (kinds == kind)))


def canvas_rope_index(
    cfg: MRopeConfig, ids: np.ndarray, mask, mm_token_type_ids, target_sizes, target_sizes_videos, downsample_mode
) -> tuple[torch.Tensor, torch.Tensor]:
    """(positions (3, B, L) int64, deltas (B, 1) int64) of a padded batch; `ids`
    is (B, L) int64, `mask` None or a (B, L) array."""
    if downsample_mode is not None:
        if downsample_mode not in MERGE_OF_MODE:
            raise ValueError(f"downsample_mode: expected one of {', '.join(MERGE_OF_MODE)}, got {downsample_mode!r}")
        if MERGE_OF_MODE[downsample_mode] != cfg.spatial_merge_size:
            cfg = attrs.evolve(cfg, spatial_merge_size=MERGE_OF_MODE[downsample_mode])
    num_rows, width = ids.shape
    if mm_token_type_ids is None:
        kinds = np.zeros(ids.shape, np.int64)
    else:
        kinds = _array(mm_token_type_ids, "mm_token_type_ids", 2)
        if kinds.shape != ids.shape:
            raise ValueError(f"mm_token_type_ids: expected shape {ids.shape} (that of input_ids), got {kinds.shape}")
    keep = np.ones(ids.shape, np.bool_) if mask is None else mask != 0
    seq_lens = np.full(num_rows, width, np.int64) if mask is None else mask.sum(axis=-1)
    sizes = {
        1: _array(target_sizes, "target_sizes", 2) if target_sizes is not None else np.zeros((0, 2), np.int64),
        2: _array(target_sizes_videos, "target_sizes_videos", 2)
        if target_sizes_videos is not None
        else np.zeros((0, 2), np.int64),
    }
    taken = {1: 0, 2: 0}
    positions = np.zeros((3, num_rows, width), np.int64)
    tops = np.zeros(num_rows, np.int64)
    for row in range(num_rows):
        row_ids, row_kinds = ids[row][keep[row]], kinds[row][keep[row]]
        if row_ids.shape[0] == 0:
            continue
        row_sizes = {}
        for kind in (1, 2):
            n = _runs(row_kinds, kind)
            row_sizes[kind] = sizes[kind][taken[kind] : taken[kind] + n]
            taken[kind] += n
        try:
            layout = canvas_layout(cfg, row_ids, row_kinds, target_sizes=row_sizes[1], target_sizes_videos=row_sizes[2])
        except (ValueError, TypeError) as exc:
            raise type(exc)(f"input_ids row {row} (sizes counted from its first crop): {exc}") from None
        positions[:, row, keep[row]] = layout.positions()
        tops[row] = layout.max_position
    for kind, (name, field) in _FIELDS.items():
        if taken[kind] != sizes[kind].shape[0]:
            raise ValueError(
                f"{field}: expected one (h, w) per {name} crop in the batch ({taken[kind]}), got {sizes[kind].shape[0]}"
            )
    deltas = (tops + 1 - seq_lens).astype(np.int64).reshape(-1, 1)
    return torch.from_numpy(positions), torch.from_numpy(deltas)
