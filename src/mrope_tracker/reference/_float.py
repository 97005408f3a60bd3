"""Qwen3-Omni float32 positions, as transformers 4.57.6's Qwen3-Omni ``get_rope_index`` computes them,
and SGLang 0.5.23's integer positions made from them (`truncated`).

That function (``Qwen3OmniMoePreTrainedModelForConditionalGeneration``) keeps the
temporal values f * sp * r of video frames untruncated, so positions and delta
are float32 and every position after a video with a fractional f * sp * r is
fractional too. This module restates its steps so that the float32 rounding
happens in the same places:

* each item is bos, content, eos: vision_start (image, video), audio_start
  (audio) or vision_start audio_start (audio in video) before the content, and
  vision_end, audio_end or audio_end vision_end after it;
* from the running base B: text before the bos at B, B+1, ...; B += its length;
  bos at B, B+1; B += its length; content at s = B; eos at e, e+1 with
  e = 1 + max of the last piece appended (the whole block for images, videos and
  audio); the next text starts at 1 + the last eos;
* audio in video: transformers does not read which token sits where; it merges
  the video tokens (T value s + f*sp*r, frame-major) and the audio tokens
  (s + a) itself, a video token first when its value is <= the audio token's,
  and gives the block's slots the positions in that order. The last piece is
  the rest of whichever stream outlasted the other, so e = 1 + the largest
  position of the block's final run of same-kind tokens.

The whole computation is float32 (transformers mixes int64 and float32 tensors;
the two agree while positions stay below 2**24).
"""

from __future__ import annotations

import torch

from ._inputs import Rules
from ._integer import last_run_start, temporal, vision
from ._scan import Audio, AudioInVideo, Item, Vision


def _run(base: torch.Tensor, n: int) -> torch.Tensor:
    """n consecutive float32 positions from base on all three rows."""
    return torch.arange(n).view(1, -1).expand(3, -1) + base


def _merge_is_video(video_t: torch.Tensor, audio_t: torch.Tensor) -> torch.Tensor:
    """Kinds of the merged order of two non-decreasing value sequences, a video value
    going first when it is <= the audio value (a stable merge, by searchsorted:
    video k lands at k + #audio values < it)."""
    num_video, num_audio = video_t.numel(), audio_t.numel()
    is_video = torch.zeros(num_video + num_audio, dtype=torch.bool)
    slots = torch.arange(num_video) + torch.searchsorted(audio_t, video_t, side="left")
    is_video[slots] = True
    return is_video


def _content(rules: Rules, s: torch.Tensor, item: Item) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions of an item's content at base s, and the maximum of its last piece."""
    if isinstance(item, Audio):
        block = _run(s, item.length)
        return block, block.max()
    if isinstance(item, Vision):
        frame_t = torch.zeros(1) if item.sp is None else temporal(rules, item.t, item.sp)
        block = vision(s, frame_t, item.h, item.w)
        return block, block.max()
    video = vision(s, temporal(rules, item.t, item.sp), item.h, item.w)
    audio = _run(s, item.num_audio)
    is_video = _merge_is_video(video[0], audio[0])
    block = torch.empty(3, is_video.numel(), dtype=torch.float32)
    block[:, is_video] = video
    block[:, ~is_video] = audio
    return block, block[:, last_run_start(is_video) :].max()


def check_brackets(rules: Rules, ids: torch.Tensor, items: list[Item]) -> None:
    """transformers takes the token before an image/video/audio for its bos and the
    one after for its eos without looking; require them to be there."""
    length = ids.numel()
    for item in items:
        if isinstance(item, AudioInVideo):
            continue  # the scan has checked vision_start audio_start ... audio_end vision_end
        what = "audio" if isinstance(item, Audio) else "vision"
        bos, eos = (rules.audio_start, rules.audio_end) if what == "audio" else (rules.vision_start, rules.vision_end)
        got_bos = int(ids[item.start - 1]) if item.start > 0 else None
        got_eos = int(ids[item.end]) if item.end < length else None
        if (got_bos, got_eos) != (bos, eos):
            raise ValueError(
                f"token_ids: float_positions follows transformers, which expects {what}_start ({bos}) before and "
                f"{what}_end ({eos}) after the placeholders at [{item.start}, {item.end}), got {got_bos} and {got_eos}"
            )


def positions(rules: Rules, ids: torch.Tensor, items: list[Item]) -> tuple[torch.Tensor, float]:
    """(3, L) float32 positions and the float delta, Qwen3-Omni as transformers 4.57.6."""
    length = ids.numel()
    check_brackets(rules, ids, items)
    pieces: list[torch.Tensor] = []
    st = 0
    for item in items:
        paired = isinstance(item, AudioInVideo)
        bos_len = eos_len = 2 if paired else 1
        base = pieces[-1].max() + 1 if pieces else torch.tensor(0.0)
        text_len = item.start - bos_len - st
        if text_len:
            pieces.append(_run(base, text_len))
            base = base + text_len
        pieces.append(_run(base, bos_len))
        base = base + bos_len
        block, last_max = _content(rules, base, item)
        pieces += [block, _run(last_max + 1, eos_len)]
        st = item.end + eos_len
    if st < length:
        base = pieces[-1].max() + 1 if pieces else torch.tensor(0.0)
        pieces.append(_run(base, length - st))
    out = torch.cat(pieces, dim=1)
    return out, float(out.max() + 1 - length)


def truncated(rules: Rules, ids: torch.Tensor, items: list[Item]) -> tuple[torch.Tensor, int]:
    """(3, L) int64 positions and int delta by SGLang 0.5.23's Qwen3-Omni rule.

    SGLang's ``get_rope_index_qwen3_omni`` (sglang/srt/layers/rotary_embedding/
    mrope_rope_index.py) computes the float32 positions above, and prefill casts
    them to int64: truncation, the positions being >= 0. Its delta is the float
    delta truncated toward zero, which puts the first decode token one past
    where prefill ended whenever that delta is negative and fractional (SGLang
    defect 1 in docs/semantics.md). Here the delta is taken from the integer
    positions, so decoding continues at the last prefill position + 1."""
    floats, _ = positions(rules, ids, items)
    out = floats.to(torch.int64)
    return out, int(out.max()) + 1 - ids.numel()
