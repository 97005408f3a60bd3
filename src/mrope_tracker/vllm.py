"""vLLM adapter: positions from vLLM 0.33's multimodal features, without importing vLLM.

vLLM hands a model's ``SupportsMRoPE.get_mrope_input_positions(input_tokens,
mm_features)`` the prompt ids and one ``MultiModalFeatureSpec`` per item.
This module reads those objects by duck typing, so it works with vLLM's own
classes and with any stand-in that has the same attributes:

- ``feature.modality``: ``"image"``, ``"video"`` or ``"audio"``;
- ``feature.mm_position``: a ``PlaceholderRange`` with ``.offset``,
  ``.length`` and ``.is_embed`` (a bool tensor, array or sequence, or None);
- ``feature.data``: a mapping from field name to an element whose ``.data`` is
  a tensor or a list: ``image_grid_thw`` / ``video_grid_thw`` (3 ints, before
  spatial merging), ``second_per_grid_ts`` (a float32 scalar),
  ``use_audio_in_video`` (a bool scalar), ``audio_feature_lengths`` (mel
  frames). Other fields (``timestamps``, pixel values) are ignored: Qwen3-VL's
  timestamps are text tokens, and nothing else changes a position.

How vLLM's placeholder ranges map onto `PromptLayout.from_ranges`
(docs/semantics.md; vLLM's ``PlaceholderFeaturesInfo.to_range``):

- images, plain videos and audio clips: the range is the pad run; passed as is.
- Qwen3-VL, GLM and openPangu-VL videos: the range spans the frames with the
  text between them (timestamps, per-frame start/end tokens); ``is_embed``
  marks the pads, one run per frame. Passed with its ``is_embed``.
- Keye-VL-1.5 videos: ``video_grid_thw`` holds one row per frame (frames of
  differing sizes); each frame becomes a video of its own, its range the
  frame's ``is_embed`` run, as vLLM's own code locates them.
- No token id is read, so families whose ids are unknown (openPangu-VL) work.
- Omni audio-in-video: the video and its audio track carry the same range,
  from ``audio_start`` to ``audio_end`` inclusive (vLLM PR #26334 put both
  placeholders there). Our range is the interleave alone, one token in from
  each end; the audio feature only supplies the track's mel-frame count.
  vLLM's processor laid the interleave out, so Qwen2.5-Omni blocks are
  built with the ``"vllm"`` interleave convention.

Each feature is read once: O(items), no token is scanned. Positions follow
``config.semantics``: use ``semantics="vllm-0.33"`` to reproduce vLLM 0.33
bit for bit, ``"reference"`` for the transformers 4.x rules.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from .families import FAMILIES
from .inputs import as_config
from .layout import PromptLayout

__all__ = ["layout_from_features", "get_mrope_input_positions"]

_MODALITIES = ("image", "video", "audio")


def _describe(value) -> str:
    if isinstance(value, (np.ndarray, torch.Tensor)):
        return f"{type(value).__name__} of shape {tuple(value.shape)} and dtype {value.dtype}"
    return f"{type(value).__name__} {value!r}"[:120]


def _plain(value):
    """A tensor / numpy array / list / scalar as a numpy array (on the host)."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return np.asarray(value)


def _as_int(value, where: str, minimum: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{where}: expected an int, got {_describe(value)}")
    if value < minimum:
        raise ValueError(f"{where}: expected an int >= {minimum}, got {value}")
    return int(value)


class _Feature:
    """One feature, read and checked: where it sits and what its fields say."""

    def __init__(self, index: int, feature) -> None:
        self.index = index
        where = f"mm_features[{index}]"
        for attr in ("modality", "mm_position", "data"):
            if not hasattr(feature, attr):
                raise TypeError(
                    f"{where}: expected a MultiModalFeatureSpec-like object with .{attr}, got {_describe(feature)}"
                )
        self.modality = feature.modality
        if self.modality not in _MODALITIES:
            raise ValueError(f"{where}.modality: expected one of {_MODALITIES}, got {self.modality!r}")
        position = feature.mm_position
        for attr in ("offset", "length"):
            if not hasattr(position, attr):
                raise TypeError(
                    f"{where}.mm_position: expected a PlaceholderRange-like object with .{attr}, got "
                    f"{_describe(position)}"
                )
        self.offset = _as_int(position.offset, f"{where}.mm_position.offset", 0)
        self.length = _as_int(position.length, f"{where}.mm_position.length", 1)
        self.is_embed = self._read_is_embed(getattr(position, "is_embed", None))
        if not isinstance(feature.data, Mapping):
            raise TypeError(f"{where}.data: expected a mapping of field name to element, got {_describe(feature.data)}")
        self.data = feature.data

    def _read_is_embed(self, is_embed):
        if is_embed is None:
            return None
        where = f"mm_features[{self.index}].mm_position.is_embed"
        mask = _plain(is_embed)
        if mask.ndim != 1 or mask.shape[0] != self.length:
            raise ValueError(f"{where}: expected {self.length} flags (the range's length), got {_describe(mask)}")
        if mask.dtype != np.bool_:
            if mask.dtype.kind not in "iu" or not np.isin(mask, (0, 1)).all():
                raise TypeError(f"{where}: expected bools, got {_describe(mask)}")
            mask = mask.astype(np.bool_)
        return mask

    def field(self, name: str, required: bool = True):
        """The field's value as a numpy array, or None if absent and optional."""
        where = f"mm_features[{self.index}].data[{name!r}]"
        if name not in self.data or self.data[name] is None:
            if required:
                raise ValueError(f"{where}: a {self.modality} feature needs this field; present: {sorted(self.data)}")
            return None
        element = self.data[name]
        if not hasattr(element, "data"):
            raise TypeError(
                f"{where}: expected a field element with .data (a tensor or list), got {_describe(element)}"
            )
        return _plain(element.data)

    def grid(self) -> list[int]:
        name = f"{self.modality}_grid_thw"
        grid = self.field(name)
        if grid.shape != (3,) or grid.dtype.kind not in "iu":
            raise ValueError(
                f"mm_features[{self.index}].data[{name!r}]: expected 3 ints (t, h, w), got {_describe(grid)}"
            )
        return [int(x) for x in grid]

    def frame_groups(self, merge: int) -> list[tuple[int, int, list[int]]]:
        """(offset, length, [1, h, w]) of every frame of a video whose grid holds
        one (t, h, w) row per group of frames (Keye-VL-1.5; a row of t frames
        is t frames of [1, h, w], as vLLM's split_thw makes them), located by
        the is_embed runs as vLLM 0.33 does (no mask: back to back)."""
        name = "video_grid_thw"
        where = f"mm_features[{self.index}].data[{name!r}]"
        grid = self.field(name)
        if grid.ndim == 1:
            grid = grid.reshape(1, -1)
        if grid.ndim != 2 or grid.shape[1] != 3 or grid.shape[0] == 0 or grid.dtype.kind not in "iu":
            raise ValueError(f"{where}: expected (n, 3) ints, one (t, h, w) row per frame group, got {_describe(grid)}")
        rows = [[int(x) for x in row] for row in grid]
        sizes = []
        for k, (t, h, w) in enumerate(rows):
            if min(t, h, w) < 1 or h % merge or w % merge:
                raise ValueError(
                    f"{where}[{k}]: expected positive (t, h, w) with h and w divisible by {merge}, got {(t, h, w)}"
                )
            sizes += [(h // merge) * (w // merge)] * t
        if self.is_embed is None:
            runs = [] if sum(sizes) != self.length else [(0, self.length)]
        else:
            flags = np.concatenate(([False], self.is_embed, [False]))
            edges = np.flatnonzero(flags[1:] != flags[:-1])
            runs = [(int(a), int(b - a)) for a, b in zip(edges[::2], edges[1::2], strict=True)]
        if self.is_embed is None and runs:
            # no mask: the frames follow each other back to back
            runs, at = [], 0
            for size in sizes:
                runs.append((at, size))
                at += size
        found = [n for _, n in runs]
        if found != sizes:
            raise ValueError(
                f"mm_features[{self.index}].mm_position.is_embed: expected runs of {sizes} embedding tokens "
                f"(one per frame of {where}), got {found}"
            )
        frames = [[1, h, w] for t, h, w in rows for _ in range(t)]  # vLLM's split_thw
        return [(self.offset + start, n, grid) for (start, n), grid in zip(runs, frames, strict=True)]

    def scalar(self, name: str, kinds: str, required: bool = True):
        value = self.field(name, required)
        if value is None:
            return None
        if value.size != 1 or value.dtype.kind not in kinds:
            raise ValueError(f"mm_features[{self.index}].data[{name!r}]: expected one scalar, got {_describe(value)}")
        return value.reshape(()).item()

    def use_audio_in_video(self) -> bool:
        return self.modality == "video" and bool(self.scalar("use_audio_in_video", "bui", required=False))


def _checked_features(mm_features) -> list[_Feature]:
    if isinstance(mm_features, (str, bytes)) or not isinstance(mm_features, Sequence):
        raise TypeError(
            f"mm_features: expected a list of MultiModalFeatureSpec-like objects, got {_describe(mm_features)}"
        )
    features = [_Feature(i, f) for i, f in enumerate(mm_features)]
    # vLLM sorts by offset too (stable: an audio track keeps its place after its video)
    return sorted(features, key=lambda f: f.offset)


def _pair_audio_tracks(config, features: list[_Feature]) -> dict[int, _Feature]:
    """Audio-in-video videos -> the audio feature with the same range (by feature index)."""
    av_videos = [f for f in features if f.use_audio_in_video()]
    if not av_videos:
        return {}
    family = FAMILIES[config.family]
    if not family.has_audio:
        raise ValueError(
            f"mm_features[{av_videos[0].index}].data['use_audio_in_video']: only Omni models interleave audio with "
            "video; "
            f"expected False for {config.family}"
        )
    plain = [f for f in features if f.modality == "video" and not f.use_audio_in_video()]
    if plain:
        raise ValueError(
            f"mm_features[{plain[0].index}].data['use_audio_in_video']: expected True like "
            f"mm_features[{av_videos[0].index}]; "
            "one request interleaves the audio of all its videos or of none"
        )
    audio_at = {}
    for f in features:
        if f.modality == "audio":
            audio_at.setdefault(f.offset, []).append(f)
    tracks = {}
    for video in av_videos:
        where = f"mm_features[{video.index}]"
        candidates = audio_at.get(video.offset, [])
        if not candidates:
            raise ValueError(
                f"{where}: an audio-in-video video needs an audio feature with the same range (offset "
                f"{video.offset}); none found"
            )
        audio = candidates.pop(0)
        if audio.length != video.length:
            raise ValueError(
                f"mm_features[{audio.index}].mm_position.length: expected {video.length}, the length of its video "
                f"{where}, got {audio.length}"
            )
        if video.length < 3:
            raise ValueError(
                f"{where}.mm_position.length: an audio-in-video range holds audio_start, the interleave and audio_end; "
                f"expected >= 3, got {video.length}"
            )
        tracks[video.index] = audio
    return tracks


def layout_from_features(config, num_tokens: int, mm_features) -> PromptLayout:
    """A prompt's `PromptLayout` from vLLM's multimodal features, in O(items)."""
    config = as_config(config)
    family = FAMILIES[config.family]
    features = _checked_features(mm_features)
    if "image_token_id" not in config.spec.defaults:
        # text_only (MiniCPM-V 4.6): vLLM places every token, vision or not, at its index
        # (a family whose ids are only unknown, openPangu-VL, still has its items placed)
        return PromptLayout.from_ranges(config, num_tokens)
    tracks = _pair_audio_tracks(config, features)
    track_indices = {audio.index for audio in tracks.values()}

    image_ranges, image_grids = [], []
    video_ranges, video_grids, video_sp = [], [], []
    audio_ranges, audio_lengths = [], []
    for f in features:
        if f.modality == "image":
            image_ranges.append((f.offset, f.length, f.is_embed))
            image_grids.append(f.grid())
        elif f.modality == "video" and family.per_frame_grids:
            # Keye-VL-1.5: one grid row per frame group; each becomes a video of its own
            for offset, length, grid in f.frame_groups(config.spatial_merge_size):
                video_ranges.append((offset, length))
                video_grids.append(grid)
                video_sp.append(None)
        elif f.modality == "video":
            video_grids.append(f.grid())
            video_sp.append(f.scalar("second_per_grid_ts", "fiu", required=False))
            if f.index in tracks:
                # vLLM's range starts at audio_start and ends with audio_end
                video_ranges.append((f.offset + 1, f.length - 2))
                audio_lengths.append(_mel_frames(tracks[f.index]))
            else:
                video_ranges.append((f.offset, f.length, f.is_embed))
        elif f.index not in track_indices:
            audio_ranges.append((f.offset, f.length, f.is_embed))
            audio_lengths.append(_mel_frames(f))

    if not family.scaled_time or all(sp is None for sp in video_sp):
        # vLLM's Qwen2-VL, Qwen3-VL and GLM never read a time scale
        second_per_grid_ts = None
    else:
        default = family.default_second_per_grid_ts
        second_per_grid_ts = [default if sp is None else float(sp) for sp in video_sp]
    extra = {"interleave": "vllm"} if tracks else {}
    return PromptLayout.from_ranges(
        config,
        num_tokens,
        image_ranges=image_ranges or None,
        image_grid_thw=image_grids or None,
        video_ranges=video_ranges or None,
        video_grid_thw=video_grids or None,
        second_per_grid_ts=second_per_grid_ts,
        audio_ranges=audio_ranges or None,
        audio_feature_lengths=audio_lengths or None,
        use_audio_in_video=bool(tracks),
        **extra,
    )


def _mel_frames(feature: _Feature) -> int:
    frames = feature.scalar("audio_feature_lengths", "iu")
    return _as_int(frames, f"mm_features[{feature.index}].data['audio_feature_lengths']", 1)


def _num_tokens(input_tokens) -> int:
    if isinstance(input_tokens, (str, bytes)) or not hasattr(input_tokens, "__len__"):
        raise TypeError(f"input_tokens: expected a sequence of token ids, got {_describe(input_tokens)}")
    num = len(input_tokens)
    if num == 0:
        raise ValueError("input_tokens: expected at least one token, got an empty sequence")
    return num


def get_mrope_input_positions(config, input_tokens, mm_features) -> tuple[torch.Tensor, int]:
    """vLLM's ``SupportsMRoPE.get_mrope_input_positions``: the prompt's (num_dims, L) int64
    positions and its delta, from the placeholder ranges (the ids are only counted)."""
    layout = layout_from_features(config, _num_tokens(input_tokens), mm_features)
    return torch.from_numpy(layout.positions()), int(layout.delta)
