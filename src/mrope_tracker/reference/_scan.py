"""Finding the multimodal items of a prompt in its token ids (no positions here).

The scan walks the prompt from left to right; the next placeholder token at or
after the current index starts the next item of its kind, which then takes
exactly as many tokens as its grid or audio length says:

* image: t*h'*w' image tokens (t = 1), the next row of ``image_grid_thw``;
* video (Qwen2-VL, Qwen2.5-VL, Omni): t*h'*w' video tokens, the next video;
* video frame (Qwen3-VL, GLM): h'*w' tokens, the next frame of the current
  video; a video of ``video_grid_thw`` row (t, h, w) appears as t such runs
  (transformers 4.57 splits the row into t rows with t = 1). GLM frames use the
  image token and are told from images by the enclosing
  ``<|begin_of_video|> ... <|end_of_video|>``; one such pair holds one video;
* audio (Omni): n_a audio tokens, the next audio length;
* audio in video (Omni with ``use_audio_in_video``): ``vision_start audio_start``
  then any interleave of the video's t*h'*w' video tokens and its n_a audio
  tokens, then ``audio_end vision_end``.

All other tokens (vision_start/end, timestamps, brackets) are text. Items must
be used up exactly: a placeholder with no item left, an item left over, a run
cut short or a foreign token inside a block is a ValueError.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ._inputs import Rules


@dataclass(frozen=True)
class Vision:
    """An image, a whole video, or one video frame (t = 1): tokens [start, start + t*h*w)."""

    start: int
    t: int
    h: int
    w: int
    sp: torch.Tensor | None  # 0-d float32 seconds per temporal patch (scaled videos), else None

    @property
    def end(self) -> int:
        return self.start + self.t * self.h * self.w


@dataclass(frozen=True)
class Audio:
    """A standalone audio clip: tokens [start, start + length)."""

    start: int
    length: int

    @property
    def end(self) -> int:
        return self.start + self.length


@dataclass(frozen=True)
class AudioInVideo:
    """The interleave of an Omni audio-in-video block: tokens [start, end), between
    ``vision_start audio_start`` (at start-2, start-1) and ``audio_end vision_end``
    (at end, end+1). `is_video` marks the video tokens in prompt order."""

    start: int
    t: int
    h: int
    w: int
    sp: torch.Tensor
    num_audio: int
    is_video: torch.Tensor  # (t*h*w + num_audio,) bool

    @property
    def end(self) -> int:
        return self.start + self.is_video.numel()


Item = Vision | Audio | AudioInVideo


def check_run(ids: torch.Tensor, start: int, n: int, token: int, what: str) -> None:
    """Tokens start ... start+n-1 must all be the placeholder `token`."""
    length = ids.numel()
    wrong = (ids[start : min(start + n, length)] != token).nonzero()
    if wrong.numel():
        q = start + int(wrong[0])
        raise ValueError(
            f"{what}: expected {n} placeholder tokens from index {start}, got token id {int(ids[q])} at index {q} "
            f"instead of {token} (placeholder count does not match the grid)"
        )
    if start + n > length:
        raise ValueError(
            f"{what}: expected {n} placeholder tokens from index {start}, got the prompt cut off after {length - start}"
        )


def _inside_brackets(ids: torch.Tensor, open_id: int, close_id: int) -> torch.Tensor:
    """Per token, the index of the `open_id` token whose bracket encloses it, or -1
    (the last bracket token at or before it is `close_id`, or there is none)."""
    index = torch.arange(ids.numel())
    last_open = torch.where(ids == open_id, index, -1).cummax(0).values
    last_close = torch.where(ids == close_id, index, -1).cummax(0).values
    return torch.where(last_open > last_close, last_open, -1)


class _Supply:
    """The items of one kind, handed out in prompt order."""

    def __init__(self, arg: str, kind: str, values: list) -> None:
        self.arg, self.kind, self.values, self.used = arg, kind, values, 0

    def take(self, at: int):
        if self.used == len(self.values):
            raise ValueError(
                f"{self.arg}: expected an item for the {self.kind} placeholder at token {at}, "
                f"got only {len(self.values)} (more {self.kind} items in the prompt than given)"
            )
        self.used += 1
        return self.used - 1, self.values[self.used - 1]

    def check_used_up(self) -> None:
        if self.used != len(self.values):
            raise ValueError(
                f"{self.arg}: expected {len(self.values)} {self.kind} items in the prompt, "
                f"got {self.used} (fewer items than given)"
            )


def _audio_in_video(rules: Rules, ids: torch.Tensor, o: int, k: int, grid, sp, n_a: int) -> AudioInVideo:
    """The block whose interleave starts at `o`, right after vision_start audio_start."""
    length = ids.numel()
    t, h, w = grid
    num_video = t * h * w
    what = f"video_grid_thw[{k}] (audio in video)"
    # The interleave is the longest run of video/audio tokens from o.
    outside = (~torch.isin(ids[o:], torch.tensor([rules.video, rules.audio]))).nonzero()
    end = o + int(outside[0]) if outside.numel() else length
    is_video = ids[o:end] == rules.video
    found_video = int(is_video.sum())
    found_audio = (end - o) - found_video
    if (found_video, found_audio) != (num_video, n_a):
        after = "the prompt end" if end == length else f"token id {int(ids[end])} at index {end}"
        raise ValueError(
            f"{what}: expected {num_video} video and {n_a} audio tokens between audio_start and audio_end "
            f"from index {o}, found {found_video} video and {found_audio} audio tokens before {after}"
        )
    closing = ids[end : end + 2].tolist()
    if closing != [rules.audio_end, rules.vision_end]:
        cut = " (block cut off)" if end + 2 > length else ""
        raise ValueError(
            f"{what}: expected audio_end, vision_end ({rules.audio_end}, {rules.vision_end}) after "
            f"the interleave at index {end}, got token ids {closing}{cut}"
        )
    return AudioInVideo(start=o, t=t, h=h, w=w, sp=sp, num_audio=n_a, is_video=is_video)


class _Frames:
    """Per-frame families (GLM-4.xV, Keye-VL-1.5): the video whose frames are being read, and (GLM) its bracket."""

    def __init__(self, videos: list, supply: _Supply):
        self.videos, self.supply = videos, supply
        self.video, self.read, self.bracket = None, 0, -1

    def take(self, ids: torch.Tensor, o: int, token: int, in_bracket: int, bracketed: bool) -> Vision:
        if self.video is not None and self.read < self.videos[self.video][0]:
            if bracketed and in_bracket != self.bracket:
                raise ValueError(
                    f"video_grid_thw[{self.video}]: expected {self.videos[self.video][0]} frames inside one "
                    f"<|begin_of_video|> ... <|end_of_video|>, got {self.read} before the bracket closed"
                )
        else:
            if self.video is not None and bracketed and in_bracket == self.bracket:
                raise ValueError(
                    f"video_grid_thw[{self.video}]: expected {self.videos[self.video][0]} frames inside one "
                    f"<|begin_of_video|> ... <|end_of_video|>, got another frame at index {o}"
                )
            self.video, _ = self.supply.take(o)
            self.read, self.bracket = 0, in_bracket
        _, h, w = self.videos[self.video]
        check_run(ids, o, h * w, token, f"video_grid_thw[{self.video}] frame {self.read}")
        self.read += 1
        return Vision(start=o, t=1, h=h, w=w, sp=None)

    def check_done(self) -> None:
        if self.video is not None and self.read < self.videos[self.video][0]:
            raise ValueError(
                f"video_grid_thw[{self.video}]: expected {self.videos[self.video][0]} frames in the prompt, "
                f"got {self.read}"
            )


def _take_audio_in_video(rules, ids, o, after_brackets, video_supply, audio_supply, sps, num_audios) -> AudioInVideo:
    k, grid = video_supply.take(o)
    if not after_brackets:
        raise ValueError(
            f"video_grid_thw[{k}] (audio in video): expected vision_start, audio_start before "
            f"the first video token at index {o}, got token ids {ids[max(o - 2, 0) : o].tolist()}"
        )
    if audio_supply.used == num_audios:
        raise ValueError(
            f"audio_feature_lengths: expected an audio track for video {k} (block at index "
            f"{o}), got only {num_audios} lengths"
        )
    _, n_a = audio_supply.take(o)
    return _audio_in_video(rules, ids, o, k, grid, sps[k], n_a)


def scan(
    rules: Rules, ids: torch.Tensor, images: list, videos: list, sps: list, audios: list, use_audio_in_video: bool
) -> list[Item]:
    """The prompt's items in token order (see the module docstring)."""
    image_supply = _Supply("image_grid_thw", "image", images)
    video_supply = _Supply("video_grid_thw", "video", videos)
    audio_supply = _Supply("audio_feature_lengths", "audio", audios)
    placeholder_ids = [x for x in (rules.image, rules.video, rules.audio) if x is not None]
    placeholder_at = torch.isin(ids, torch.tensor(placeholder_ids, dtype=torch.int64)).nonzero().flatten()  # sorted
    bracket = _inside_brackets(ids, rules.video_start, rules.video_end) if rules.bracketed else None
    frames = _Frames(videos, video_supply)

    items: list[Item] = []
    st = 0
    while True:
        k_at = int(torch.searchsorted(placeholder_at, st))
        if k_at == placeholder_at.numel():
            break
        o = int(placeholder_at[k_at])
        token = int(ids[o])
        after_brackets = (
            rules.omni and o - 2 >= st and ids[o - 2 : o].tolist() == [rules.vision_start, rules.audio_start]
        )
        if use_audio_in_video and token in (rules.video, rules.audio) and (token == rules.video or after_brackets):
            item = _take_audio_in_video(rules, ids, o, after_brackets, video_supply, audio_supply, sps, len(audios))
            st = item.end + 2  # audio_end, vision_end
            items.append(item)
            continue
        if token == rules.audio:
            k, n_a = audio_supply.take(o)
            check_run(ids, o, n_a, token, f"audio_feature_lengths[{k}]")
            item = Audio(start=o, length=n_a)
        elif rules.per_frame and (token == rules.video or (bracket is not None and int(bracket[o]) >= 0)):
            item = frames.take(ids, o, token, -1 if bracket is None else int(bracket[o]), bracket is not None)
        else:
            # ERNIE: an image token between the video brackets is the video's
            is_image = token == rules.image and (bracket is None or int(bracket[o]) < 0)
            supply = image_supply if is_image else video_supply
            k, (t, h, w) = supply.take(o)
            check_run(ids, o, t * h * w, token, f"{supply.arg}[{k}]")
            item = Vision(start=o, t=t, h=h, w=w, sp=None if is_image else sps[k])
        st = item.end
        items.append(item)

    frames.check_done()
    for supply in (image_supply, video_supply, audio_supply):
        supply.check_used_up()
    return items
