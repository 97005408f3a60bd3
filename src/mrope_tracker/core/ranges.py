"""The range form's inputs: placeholder ranges, frame masks and interleaves.

Engines hold each item as a placeholder range: ``(offset, length)`` or
``(offset, length, is_embed)`` (vLLM's `PlaceholderRange`), where `is_embed`
marks the tokens that carry embeddings. `Ranges` turns them into what the
range builder reads, in O(items + frames + interleave runs), never reading
a token:
- one (offset, length) per image, audio clip and plain video;
- for families whose every video frame is its own block (Qwen3-VL, GLM),
  one range per frame. A video's range spans its frames and the timestamp
  text between them; its `is_embed` mask locates the frames (without a mask
  the frames must be back to back, or `Family.frame_gap` tokens apart);
- for an audio-in-video block, the interleave as runs of (kind, count),
  recomputed by the processor convention that laid it out
  (`families.interleave`), or given explicitly.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ..families import RUN_AUDIO, RUN_VIDEO
from ..kernels import layout_codes as C
from ..kernels.frames import locate_frames
from .config import MRopeConfig
from .inputs import EMPTY_RANGES, Items, as_ranges, describe, ready

__all__ = ["Ranges"]

_INT64 = np.dtype(np.int64)
_NO_RUNS = np.zeros((0, 2), np.int64)
_NO_BOUNDS = np.zeros(1, np.int64)
_RUN_KINDS = {"video": RUN_VIDEO, "audio": RUN_AUDIO, RUN_VIDEO: RUN_VIDEO, RUN_AUDIO: RUN_AUDIO}
# The most video frames one prompt may hold in the range form where tables or runs are made per frame (per-frame
# video blocks, audio-in-video interleaves): a range is only two ints, so without a bound a wild frame count
# would allocate without limit (MemoryError) before anything refused it. A 24-hour video at 2 fps has 172,800.
MAX_FRAMES = 1 << 20


def check_frame_count(video_grid: np.ndarray, name: str = "video_grid_thw") -> None:
    """Refuse videos of more than MAX_FRAMES frames in all, before anything is made per frame."""
    frames = sum(video_grid[:, 0].tolist())  # Python ints: no int64 overflow
    if frames > MAX_FRAMES:
        raise ValueError(
            f"{name}: expected at most {MAX_FRAMES} video frames in all (the range form's bound), got {frames}"
        )


def _as_mask(value, name: str, length: int) -> np.ndarray | None:
    """An is_embed mask as a numpy bool array of `length` (None stays None)."""
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    mask = np.asarray(value)
    if mask.dtype != np.bool_:
        if mask.dtype.kind not in "iu" or (mask.size and not np.isin(mask, (0, 1)).all()):
            raise TypeError(f"{name}: expected a bool mask (sequence, array or tensor), got {describe(value)}")
        mask = mask.astype(bool)
    if mask.ndim != 1 or mask.shape[0] != length:
        raise ValueError(f"{name}: expected a 1-D mask of the range's length {length}, got shape {mask.shape}")
    return mask


def _split(value, name: str) -> tuple[np.ndarray, list | None]:
    """(n, 2) int64 (offset, length) rows and the n is_embed masks (or Nones;
    None for the whole list when no item has one). Items may be (offset,
    length), (offset, length, is_embed), or objects with .offset, .length and
    optionally .is_embed (vLLM's PlaceholderRange)."""
    if value is None:
        return EMPTY_RANGES, None
    if ready(value, _INT64, 2, 2):
        return value, None
    if isinstance(value, (list, tuple)) and value:
        first = value[0]
        if hasattr(first, "offset") or any(isinstance(item, (list, tuple)) and len(item) == 3 for item in value):
            # (some items may carry a mask and others not)
            pairs, masks = [], []
            for k, item in enumerate(value):
                if hasattr(item, "offset"):
                    try:
                        pairs.append((int(item.offset), int(item.length)))
                    except (TypeError, ValueError) as exc:
                        raise TypeError(f"{name}[{k}]: expected integer .offset and .length, got {exc}") from None
                    masks.append(getattr(item, "is_embed", None))
                elif isinstance(item, (list, tuple)) and len(item) in (2, 3):
                    pairs.append(tuple(item[:2]))
                    masks.append(item[2] if len(item) == 3 else None)
                else:
                    raise TypeError(
                        f"{name}[{k}]: expected (offset, length) or (offset, length, is_embed), got {describe(item)}"
                    )
            rows = as_ranges(pairs, name)
            if all(m is None for m in masks):
                return rows, None
            return rows, [_as_mask(m, f"{name}[{k}] is_embed", int(rows[k, 1])) for k, m in enumerate(masks)]
    return as_ranges(value, name), None


def _embedded_run(rows: np.ndarray, masks: list | None, name: str) -> np.ndarray:
    """Ranges whose mask marks one contiguous run: narrowed to that run."""
    if masks is None:
        return rows
    rows = rows.copy()
    for k, mask in enumerate(masks):
        if mask is None:
            continue
        hits = np.flatnonzero(mask)
        if hits.size == 0 or hits[-1] - hits[0] + 1 != hits.size:
            raise ValueError(
                f"{name}[{k}] is_embed: expected one contiguous run of embedding tokens, got {hits.size} "
                "tokens in several runs"
                if hits.size
                else f"{name}[{k}] is_embed: expected embedding tokens, got none"
            )
        rows[k, 0] += hits[0]
        rows[k, 1] = hits.size
    return rows


def _frame_ranges(config: MRopeConfig, video_grid: np.ndarray, rows: np.ndarray, masks: list) -> np.ndarray:
    """One (offset, length) per frame of every video, located from the masks."""
    m = config.spatial_merge_size
    check_frame_count(video_grid)
    grids, spans = video_grid.tolist(), rows.tolist()  # Python ints: numpy scalars cost more per read
    # every video's frames must fit its range before the table of frames is sized from the grids
    for n, (t, h, w) in enumerate(grids):
        hw = (h // m) * (w // m)
        offset, length = spans[n]
        if t < 1 or hw < 1:
            raise ValueError(
                f"video_grid_thw[{n}]: expected positive (t, h, w) of at least one merged patch, got {(t, h, w)}"
            )
        mask = None if masks is None else masks[n]
        gap = config.spec.frame_gap  # text tokens between frames (openPangu's [ve][vs])
        if mask is None and length != t * hw + gap * (t - 1):
            how = f"{gap} tokens apart" if gap else "back to back"
            raise ValueError(
                f"video_ranges[{n}]: without is_embed, expected the video's {t} frames of {hw} tokens {how} "
                f"(length {t * hw + gap * (t - 1)}), got length {length}; pass is_embed to locate frames "
                "among other text"
            )
        if mask is not None and t * hw > length:  # too short for its frames: say how many it holds
            fit = length // hw
            found = _walk(mask, offset, fit, hw, np.empty((fit, 2), np.int64))
            _frames_error(n, t, hw, fit if found < 0 else found)
    out = np.empty((sum(g[0] for g in grids), 2), np.int64)
    gap = config.spec.frame_gap
    q = 0
    for n, (t, h, w) in enumerate(grids):
        hw = (h // m) * (w // m)
        offset, length = spans[n]
        if masks is None or masks[n] is None:
            out[q : q + t, 0] = offset + (hw + gap) * np.arange(t)
            out[q : q + t, 1] = hw
        else:
            found = _walk(masks[n], offset, t, hw, out[q : q + t])
            if found >= 0:
                _frames_error(n, t, hw, found)
        q += t
    return out


def _walk(mask: np.ndarray, offset: int, t: int, hw: int, frames: np.ndarray) -> int:
    """The mask walked once by a kernel (kernels/frames.py): no token is read.
    -1 when it holds exactly `t` frames of `hw` tokens, else how many it found."""
    return locate_frames(mask.view(np.uint8), offset, t, hw, frames)


def _frames_error(n: int, t: int, hw: int, found: int):
    raise ValueError(
        f"video_ranges[{n}] is_embed: expected exactly {t} frames of {hw} embedding tokens, "
        f"found {found} before a short run or extra embedding tokens"
    )


def _sp_float64(second_per_grid_ts, items: Items) -> np.ndarray:
    """Seconds per grid as given (float64 when given so), for processor arithmetic."""
    if second_per_grid_ts is None or not items.video_sp.shape[0]:
        return items.video_sp.astype(np.float64)
    if isinstance(second_per_grid_ts, torch.Tensor):
        return second_per_grid_ts.detach().cpu().numpy().astype(np.float64).reshape(-1)
    return np.asarray(second_per_grid_ts, dtype=np.float64).reshape(-1)


def _explicit_runs(value, n: int, num_video: int, num_audio: int) -> list[tuple[int, int]]:
    runs = []
    try:
        for kind, count in value:
            if (
                kind not in _RUN_KINDS
                or isinstance(count, bool)
                or not isinstance(count, (int, np.integer))
                or count < 0
            ):
                raise ValueError
            runs.append((_RUN_KINDS[kind], int(count)))
    except (TypeError, ValueError):
        raise ValueError(
            f"interleave[{n}]: expected (kind, count) pairs with kind 'video' or 'audio' and count >= 0, got "
            f"{describe(value)}"
        ) from None
    got_video = sum(c for k, c in runs if k == RUN_VIDEO)
    got_audio = sum(c for k, c in runs if k == RUN_AUDIO)
    if got_video != num_video or got_audio != num_audio:
        raise ValueError(
            f"interleave[{n}]: expected runs of {num_video} video and {num_audio} audio tokens, "
            f"got {got_video} and {got_audio}"
        )
    return runs


class Ranges:
    """Normalised placeholder ranges of one prompt, ready for the range builder."""

    __slots__ = ("image", "video", "audio", "video_items", "av_runs", "av_bounds", "given")

    def __init__(
        self,
        config: MRopeConfig,
        items: Items,
        image_ranges,
        video_ranges,
        audio_ranges,
        interleave="transformers",
        second_per_grid_ts=None,
    ):
        image, image_masks = _split(image_ranges, "image_ranges")
        video, video_masks = _split(video_ranges, "video_ranges")
        audio, audio_masks = _split(audio_ranges, "audio_ranges")
        self._set(
            config, items, image, image_masks, video, video_masks, audio, audio_masks, interleave, second_per_grid_ts
        )

    @classmethod
    def from_rows(
        cls,
        config: MRopeConfig,
        items: Items,
        image: np.ndarray,
        image_masks: list | None,
        video: np.ndarray,
        video_masks: list | None,
        audio: np.ndarray,
        audio_masks: list | None,
        interleave="transformers",
        second_per_grid_ts=None,
        video_given: np.ndarray | None = None,
    ) -> Ranges:
        """Ranges a caller has already split (core/features.py): per modality, the
        (n, 2) int64 (offset, length) rows, and their is_embed masks (C-contiguous
        numpy bools of each range's length, or None), or None when no range
        has one. `video_given`: the videos' ranges as the caller got them, where
        `video` holds pieces of them (Keye-VL-1.5's frames), for `check_inside`.
        Everything else is checked as by the constructor."""
        self = cls.__new__(cls)
        self._set(
            config, items, image, image_masks, video, video_masks, audio, audio_masks, interleave, second_per_grid_ts
        )
        if video_given is not None:
            self.given = (self.given[0], video_given, self.given[2])
        return self

    def _set(
        self, config, items, image, image_masks, video, video_masks, audio, audio_masks, interleave, second_per_grid_ts
    ) -> None:
        num_videos = items.video_grid.shape[0]
        if image.shape[0] != items.image_grid.shape[0]:
            raise ValueError(
                f"image_ranges: expected one range per image_grid_thw row ({items.image_grid.shape[0]}), got "
                f"{image.shape[0]}"
            )
        if video.shape[0] != num_videos:
            raise ValueError(
                f"video_ranges: expected one range per video_grid_thw row ({num_videos}), got {video.shape[0]}"
            )
        av = items.use_audio_in_video
        tracks = audio.shape[0] + (num_videos if av else 0)
        if tracks != items.audio_tokens.shape[0]:
            what = f"{audio.shape[0]} audio ranges" + (f" + {num_videos} video tracks" if av else "")
            raise ValueError(
                f"audio_feature_lengths: expected {tracks} lengths ({what}), got {items.audio_tokens.shape[0]}"
            )
        self.given = (image, video, audio)  # as given, before masks narrow them (check_inside)
        self.image = _embedded_run(image, image_masks, "image_ranges")
        self.audio = _embedded_run(audio, audio_masks, "audio_ranges")
        self.video_items = video  # one row per video, as given
        if config.spec.video_blocks == "frames":
            self.video = _frame_ranges(config, items.video_grid, video, video_masks)
        else:
            for k, mask in enumerate(video_masks or ()):
                if av and mask is not None and not mask.all():
                    raise ValueError(
                        f"video_ranges[{k}] is_embed: expected an audio-in-video interleave range "
                        "whose every token is embedded (video or audio)"
                    )
            self.video = video if av else _embedded_run(video, video_masks, "video_ranges")
        # without audio-in-video blocks the builder never reads the bounds
        self.av_runs, self.av_bounds = _NO_RUNS, np.zeros(num_videos + 1, np.int64) if av else _NO_BOUNDS
        if isinstance(interleave, str) and config.is_omni and interleave not in config.spec.interleaves:
            raise ValueError(
                f"interleave: expected one of {', '.join(config.spec.interleaves)} or explicit runs, got {interleave!r}"
            )
        if av and num_videos and not config.switches & {"av_shift", "av_merge_tau"}:  # else positions follow counts
            self._interleaves(config, items, interleave, second_per_grid_ts)

    def _interleaves(self, config: MRopeConfig, items: Items, interleave, second_per_grid_ts) -> None:
        """Runs of every audio-in-video block, in O(runs)."""
        num_videos = items.video_grid.shape[0]
        conventions = config.spec.interleaves
        if isinstance(interleave, str):
            if interleave not in conventions:
                raise ValueError(
                    f"interleave: expected one of {', '.join(conventions)} or explicit runs, got {interleave!r}"
                )
        elif not isinstance(interleave, Sequence) or len(interleave) != num_videos:
            raise ValueError(
                f"interleave: expected a convention name or one run list per video ({num_videos}), "
                f"got {describe(interleave)}"
            )
        # which audio track each video carries: tracks and clips in prompt order
        order = sorted(
            [(int(o), 1, k) for k, o in enumerate(self.video[:, 0])]
            + [(int(o), 0, k) for k, o in enumerate(self.audio[:, 0])]
        )
        track_of, used = {}, 0
        for _, is_video, k in order:
            if is_video:
                track_of[k] = used
            used += 1
        sp64 = _sp_float64(second_per_grid_ts, items)
        m = config.spatial_merge_size
        check_frame_count(items.video_grid)
        runs, bounds = [], [0]
        for n in range(num_videos):
            t, h, w = (int(v) for v in items.video_grid[n])
            h, w = h // m, w // m
            num_audio = int(items.audio_tokens[track_of[n]])
            # checked before the runs are made: they grow with the audio tokens, which a wild length makes huge
            if t * h * w + num_audio != int(self.video[n, 1]):
                raise ValueError(
                    f"video_ranges[{n}]: expected an audio-in-video interleave of {t * h * w} video and {num_audio} "
                    f"audio tokens (audio_feature_lengths[{track_of[n]}]), length {t * h * w + num_audio}, got length "
                    f"{int(self.video[n, 1])}"
                )
            if isinstance(interleave, str):
                block = conventions[interleave](t, h, w, float(sp64[n]), num_audio, config)
            else:
                block = _explicit_runs(interleave[n], n, t * h * w, num_audio)
            runs.extend(block)
            bounds.append(len(runs))
        self.av_runs = np.array(runs, np.int64).reshape(-1, 2)
        self.av_bounds = np.array(bounds, np.int64)

    def check_inside(self, num_tokens: int) -> None:
        """Refuse a range that runs past the prompt's end, even where only its
        non-embedding tail does (the builder sees the embedding runs alone)."""
        for name, rows in zip(("image_ranges", "video_ranges", "audio_ranges"), self.given):
            if rows.shape[0] == 0:
                continue
            for k, (offset, length) in enumerate(rows.tolist()):  # Python ints: no int64 overflow
                if offset + length > num_tokens:
                    raise ValueError(
                        f"{name}[{k}]: expected a range inside the prompt of {num_tokens} tokens, got offset {offset} "
                        f"and length {length}, which end at {offset + length}"
                    )

    def by_modality(self) -> dict:
        return {C.MOD_IMAGE: self.image, C.MOD_VIDEO: self.video, C.MOD_AUDIO: self.audio}
