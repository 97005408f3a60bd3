"""EVS video pruning by the reference rule: pruning deletes tokens.

vLLM's EVS (``--video-pruning-rate``) keeps a share of a video's tokens, chosen
once the vision encoder has run, and lays the prompt out with only that many
placeholders. The reference rule: the pruned prompt is the unpruned prompt with
the dropped video tokens deleted, and every token left keeps the position it has
in the unpruned prompt. So this module rebuilds the unpruned prompt, marks the
tokens that survive, and the positions are the unpruned prompt's, gathered.

How vLLM 0.33 lays a pruned video out (docs/semantics.md, "EVS"):

* Qwen2.5-VL: ``vision_start``, K video tokens, ``vision_end``, where K is the
  number of kept tokens; the unpruned prompt has t*h'*w' there.
* Qwen3-VL: per frame, its timestamp text, ``vision_start``, its video tokens,
  ``vision_end``. All K kept tokens sit in frame 0's run and the later frames'
  runs are empty; the model's input for the span is the frames in order, each
  with the kept tokens of its own frame, so token j of the span is the j-th
  surviving token of the unpruned span.
"""

from __future__ import annotations

import numpy as np
import torch

from ._inputs import Rules, as_tensor, describe

# Families whose videos vLLM 0.33 prunes.
REFERENCE_PRUNABLE = ("qwen2_5_vl", "qwen3_vl")


def masks(name: str, value, videos: list) -> list[torch.Tensor]:
    """One bool mask per video over its t*h'*w' tokens (frame-major), at least one token kept."""
    if value is None or not isinstance(value, (list, tuple)):
        raise TypeError(f"{name}: expected a list with one mask per video, got {describe(value)}")
    if len(value) != len(videos):
        raise ValueError(f"{name}: expected one mask per video ({len(videos)}), got {len(value)}")
    out = []
    for k, (mask, (t, h, w)) in enumerate(zip(value, videos)):
        where = f"{name}[{k}]"
        if isinstance(mask, torch.Tensor) and mask.dtype == torch.bool:
            mask = mask.to(torch.int64)
        elif isinstance(mask, np.ndarray) and mask.dtype == np.bool_:
            mask = mask.astype(np.int64)
        mask = as_tensor(where, mask, "int", 1)
        if mask.numel() != t * h * w:
            raise ValueError(f"{where}: expected {t * h * w} entries (t*h'*w' of video {k}), got {mask.numel()}")
        if bool(((mask != 0) & (mask != 1)).any()):
            raise ValueError(f"{where}: expected 0/1 entries, got {sorted(set(mask.tolist()))[:4]}")
        if int(mask.sum()) == 0:
            raise ValueError(f"{where}: expected at least one kept token, got none")
        out.append(mask.bool())
    return out


def _pad_run(ids: torch.Tensor, start: int, n: int, token: int, what: str) -> None:
    run = ids[start : start + n]
    if run.numel() != n or not bool((run == token).all()):
        raise ValueError(f"{what}: expected {n} video tokens ({token}) from index {start}, got {run.tolist()[:8]}...")


def unpruned(rules: Rules, ids: torch.Tensor, videos: list, kept: list[torch.Tensor]):
    """(unpruned token ids, bool mask of the tokens that survive pruning)."""
    if rules.family not in REFERENCE_PRUNABLE:
        raise ValueError(f"config.family: expected one of {', '.join(REFERENCE_PRUNABLE)} (EVS), got {rules.family!r}")
    pieces, keep = [], []
    at = 0

    def copy_text(end: int) -> None:
        pieces.append(ids[at:end])
        keep.append(torch.ones(end - at, dtype=torch.bool))

    def insert_video(mask: torch.Tensor) -> None:
        pieces.append(torch.full((mask.numel(),), rules.video, dtype=ids.dtype))
        keep.append(mask)

    video_at = (ids == rules.video).nonzero().flatten().tolist()
    for k, ((t, h, w), mask) in enumerate(zip(videos, kept)):
        first = next((i for i in video_at if i >= at), None)
        if first is None:
            raise ValueError(f"video_grid_thw: expected {len(videos)} videos in token_ids, found {k}")
        n_kept = int(mask.sum())
        _pad_run(ids, first, n_kept, rules.video, f"retention_masks[{k}] ({n_kept} kept)")
        copy_text(first)
        if not rules.per_frame:
            insert_video(mask)
            at = first + n_kept
            continue
        # Qwen3-VL: frame 0's run holds every kept token; frames 1.. are empty vision_start/end pairs.
        frames = mask.view(t, h * w)
        insert_video(frames[0])
        at = first + n_kept
        for f in range(1, t):
            pair = next(
                (
                    i
                    for i in range(at, ids.numel() - 1)
                    if int(ids[i]) == rules.vision_start and int(ids[i + 1]) == rules.vision_end
                ),
                None,
            )
            if pair is None:
                raise ValueError(
                    f"retention_masks[{k}]: expected {t} frames, each an empty vision_start, vision_end pair after "
                    f"frame 0, found {f}"
                )
            copy_text(pair + 1)
            insert_video(frames[f])
            at = pair + 1
    if any(i >= at for i in video_at):
        extra = next(i for i in video_at if i >= at)
        raise ValueError(f"token_ids: expected {len(videos)} videos, got another video token at index {extra}")
    copy_text(ids.numel())
    return torch.cat(pieces), torch.cat(keep)
