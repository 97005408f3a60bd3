"""Integer positions of a scanned prompt: the reference rules, one tensor per segment.

* Text: a run of n tokens from base B gets B, B+1, ..., B+n-1 on all three rows.
* Vision block at base s (the item's first token is at s = B + text before it):
  token k = f*h'*w' + i*w' + j sits at (s + tau(f), s + i, s + j), and the next
  base is 1 + the block's maximum over all rows, s + max(tau(t-1), h'-1, w'-1) + 1
  (transformers 4.x and vLLM agree). tau(f) = f for Qwen2-VL; trunc(f * sp * r)
  computed in float32 for Qwen2.5-VL and the Omni thinkers, as transformers
  4.51 does (4.57 truncates sp for Qwen2.5-VL first, a known divergence); 0
  for images and for the per-frame blocks of Qwen3-VL and GLM.
* Standalone audio (Omni): n_a tokens continuing the text, s, s+1, ..., on all rows.
* Audio in video (Omni), the identity rule: with b the base at vision_start,
  the interleave starts at s (Qwen2.5-Omni: audio_start shares b, s = b + 1;
  Qwen3-Omni: audio_start at b + 1, s = b + 2). Whatever the interleave, the
  k-th video token (in prompt order) is token k of the video grid and the k-th
  audio token sits at s + k on all rows. The closing tokens sit at e = 1 + the
  largest position in the block's last run of same-kind tokens (transformers
  appends the interleave chunk by chunk and restarts after the last one):
  Qwen2.5-Omni puts audio_end and vision_end both at e and continues at e + 1;
  Qwen3-Omni puts them at e and e + 1 and continues at e + 2.
* Isaac (vLLM 0.33): an image at base s sits at (s, i, j), H and W without
  the base; the next base is still 1 + the block's maximum over all rows,
  but text after the last item resumes at that item's T + 1, even where
  its H and W rows went higher.
* Keye-VL, Keye-VL-1.5 and openPangu-VL frames are per-frame blocks like
  Qwen3-VL's: frame f at s_f, the next text or frame at 1 + its maximum.
* delta = max over all rows and tokens + 1 - L.
"""

from __future__ import annotations

import torch

from ._inputs import Rules
from ._scan import Audio, AudioInVideo, Item, Vision


def linear(base: int, n: int) -> torch.Tensor:
    """Text (and Omni audio): base, base+1, ... on all three rows, (3, n) int64."""
    return torch.arange(n).view(1, -1).expand(3, -1) + base


def vision(s, tau: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """Block of t = len(tau) frames of h x w at base s: token f*h*w + i*w + j at (s+tau[f], s+i, s+j)."""
    t = tau.numel()
    rows_t = tau.view(t, 1, 1).expand(t, h, w)
    rows_h = torch.arange(h, dtype=tau.dtype).view(1, h, 1).expand(t, h, w)
    rows_w = torch.arange(w, dtype=tau.dtype).view(1, 1, w).expand(t, h, w)
    return torch.stack([rows_t, rows_h, rows_w]).reshape(3, -1) + s


def temporal(rules: Rules, t: int, sp: torch.Tensor | None) -> torch.Tensor:
    """Frame times f * sp * r for f < t as float32: int64 arange times the 0-d float32
    sp, times the Python float r, exactly the ops transformers uses."""
    return torch.arange(t) * sp * rules.r


def tau(rules: Rules, item: Vision | AudioInVideo) -> torch.Tensor:
    """Temporal index of every frame of a block, int64."""
    if item.sp is None:  # images, per-frame blocks (t = 1) and Qwen2-VL videos: f
        return torch.arange(item.t)
    return temporal(rules, item.t, item.sp).long()  # trunc toward zero; the values are >= 0


def last_run_start(is_video: torch.Tensor) -> int:
    """Index where the final run of same-kind tokens of an interleave begins."""
    changes = (is_video[1:] != is_video[:-1]).nonzero()
    return int(changes[-1]) + 1 if changes.numel() else 0


def audio_in_video(rules: Rules, s: int, item: AudioInVideo) -> tuple[torch.Tensor, int]:
    """Positions of the interleave at base s by the identity rule, and e."""
    video = vision(s, tau(rules, item), item.h, item.w)
    audio = linear(s, item.num_audio)
    block = torch.empty(3, item.is_video.numel(), dtype=torch.int64)
    block[:, item.is_video] = video  # boolean-mask assignment keeps prompt order
    block[:, ~item.is_video] = audio
    e = int(block[:, last_run_start(item.is_video) :].max()) + 1
    return block, e


def positions(rules: Rules, length: int, items: list[Item]) -> tuple[torch.Tensor, int]:
    """(3, length) int64 positions and delta of a prompt with these items."""
    segments: list[torch.Tensor] = []
    st, base = 0, 0  # next token index without a position, next base position
    last_t = None  # Isaac: T of the last item's last token
    for item in items:
        if isinstance(item, AudioInVideo) and rules.family == "qwen2_5_omni":
            # Text through vision_start (at b), then audio_start again at b.
            segments.append(linear(base, item.start - 1 - st))
            b = base + (item.start - 2 - st)
            segments.append(linear(b, 1))
            block, e = audio_in_video(rules, b + 1, item)
            segments += [block, torch.full((3, 2), e, dtype=torch.int64)]  # audio_end, vision_end at e
            st, base = item.end + 2, e + 1
            continue
        # Text up to the item (for Qwen3-Omni audio in video: through vision_start
        # at b and audio_start at b + 1); the item starts at s.
        segments.append(linear(base, item.start - st))
        s = base + (item.start - st)
        if isinstance(item, Audio):
            segments.append(linear(s, item.length))
            base = s + item.length
        elif isinstance(item, Vision):
            block = vision(s, tau(rules, item), item.h, item.w)
            if rules.raw_spatial:
                block[1:] -= s  # the raw row and column
            segments.append(block)
            base = int(block.max()) + 1
            last_t = int(block[0, -1])
        else:  # Qwen3-Omni audio in video: audio_end, vision_end are text from e
            block, base = audio_in_video(rules, s, item)
            segments.append(block)
        st = item.end
    if rules.raw_spatial and last_t is not None:
        base = last_t + 1  # Isaac: trailing text after the last image's T
    segments.append(linear(base, length - st))  # trailing text
    out = torch.cat(segments, dim=1)
    return out, int(out.max()) + 1 - length
