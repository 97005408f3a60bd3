"""vLLM 0.33's multimodal features, read by duck typing into the range builder's inputs.

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

How vLLM's placeholder ranges map onto the range form (`Ranges`,
docs/semantics.md; vLLM's ``PlaceholderFeaturesInfo.to_range``):

- images, plain videos and audio clips: the range is the pad run; passed as is.
- Qwen3-VL, GLM and openPangu-VL videos: the range spans the frames with the
  text between them (timestamps, per-frame start/end tokens); ``is_embed``
  marks the pads, one run per frame, which the frame walk (kernels/frames.py)
  locates.
- Keye-VL-1.5 videos: ``video_grid_thw`` holds one row per frame (frames of
  differing sizes); each frame becomes a video of its own, its range the
  frame's ``is_embed`` run, as vLLM's own code locates them.
- No token id is read, so families whose ids are unknown (openPangu-VL) work;
  a family served without vision items (``text_only``: MiniCPM-V 4.6) has
  every token at its index, its features ignored, as vLLM places them.
- Omni audio-in-video: the video and its audio track carry the same range,
  from ``audio_start`` to ``audio_end`` inclusive (vLLM PR #26334 put both
  placeholders there). Our range is the interleave alone, one token in from
  each end; the audio feature only supplies the track's mel-frame count.
  vLLM's processor laid the interleave out, so Qwen2.5-Omni blocks are
  built with the ``"vllm"`` interleave convention.

Each feature is read once: O(items), no token is read. The features go
straight to kernel-ready arrays (`Items`, `Ranges.from_rows`) without the
general argument converters, because admission runs once per request on the
engine's critical path; every check of the general path is still made, here
or by the range builder.
"""

from __future__ import annotations

from collections import UserDict
from collections.abc import Mapping, Sequence
from operator import attrgetter

import numpy as np
import torch

from .config import MRopeConfig
from .inputs import (
    EMPTY_FLOAT,
    EMPTY_GRID,
    EMPTY_INT,
    EMPTY_RANGES,
    Items,
    as_index,
    canvas_error,
    describe,
    normalize_items,
    true_runs,
)
from .ranges import Ranges

__all__ = ["read_features", "count_prompt_tokens", "sequence_length", "time_scales"]

_MODALITIES = ("image", "video", "audio")
_TENSOR = torch.Tensor
# torch dtypes read without numpy: grids (ints) and scalars (by numpy kind)
_GRID_DTYPES = (torch.int64, torch.int32)
_SCALAR_KINDS = {torch.float32: "f", torch.float64: "f", torch.int64: "i", torch.int32: "i", torch.bool: "b"}
_BY_OFFSET = attrgetter("offset")
_GRID_FIELDS = {"image": "image_grid_thw", "video": "video_grid_thw"}


def _plain(value):
    """A tensor / numpy array / list / scalar as a numpy array (on the host)."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return np.asarray(value)


def _as_int(value, where: str, minimum: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{where}: expected an int, got {describe(value)}")
    if value < minimum:
        raise ValueError(f"{where}: expected an int >= {minimum}, got {value}")
    return int(value)


class Feature:
    """One feature, read and checked: where it sits and what its fields say."""

    __slots__ = ("index", "modality", "offset", "length", "is_embed", "data")

    def __init__(self, index: int, feature) -> None:
        self.index = index
        try:
            modality, position, data = feature.modality, feature.mm_position, feature.data
        except AttributeError:
            for attr in ("modality", "mm_position", "data"):
                if not hasattr(feature, attr):
                    raise TypeError(
                        f"mm_features[{index}]: expected a MultiModalFeatureSpec-like object with .{attr}, got "
                        f"{describe(feature)}"
                    ) from None
            raise
        self.modality = modality
        if modality not in _MODALITIES:
            raise ValueError(f"mm_features[{index}].modality: expected one of {_MODALITIES}, got {modality!r}")
        try:
            offset, length = position.offset, position.length
        except AttributeError:
            for attr in ("offset", "length"):
                if not hasattr(position, attr):
                    raise TypeError(
                        f"mm_features[{index}].mm_position: expected a PlaceholderRange-like object with .{attr}, "
                        f"got {describe(position)}"
                    ) from None
            raise
        # plain ints in range pass without building the messages' names
        if type(offset) is not int or offset < 0:
            offset = _as_int(offset, f"mm_features[{index}].mm_position.offset", 0)
        if type(length) is not int or length < 1:
            length = _as_int(length, f"mm_features[{index}].mm_position.length", 1)
        self.offset, self.length = offset, length
        self.is_embed = self._read_is_embed(getattr(position, "is_embed", None))
        if type(data) is not dict:
            if isinstance(data, UserDict):  # vLLM's MultiModalKwargsItem: its dict answers without Python calls
                data = data.data
            elif not isinstance(data, Mapping):
                raise TypeError(
                    f"mm_features[{index}].data: expected a mapping of field name to element, got {describe(data)}"
                )
        self.data = data

    def _read_is_embed(self, is_embed):
        """The mask as a C-contiguous numpy bool array of the range's length (or None)."""
        if is_embed is None:
            return None
        if (
            type(is_embed) is _TENSOR
            and is_embed.dtype is torch.bool
            and is_embed.is_cpu
            and is_embed.ndim == 1
            and is_embed.shape[0] == self.length
            and is_embed.is_contiguous()
        ):
            return is_embed.numpy()  # vLLM's form: a view, no copy
        where = f"mm_features[{self.index}].mm_position.is_embed"
        mask = _plain(is_embed)
        if mask.ndim != 1 or mask.shape[0] != self.length:
            raise ValueError(f"{where}: expected {self.length} flags (the range's length), got {describe(mask)}")
        if mask.dtype != np.bool_:
            if mask.dtype.kind not in "iu" or not np.isin(mask, (0, 1)).all():
                raise TypeError(f"{where}: expected bools, got {describe(mask)}")
            mask = mask.astype(np.bool_)
        # the frame walk is compiled for contiguous masks only
        return np.ascontiguousarray(mask)

    def element(self, name: str, required: bool = True):
        """The field's `.data` as given (a tensor, list, ...), or None if absent and optional."""
        data = self.data
        element = data[name] if name in data else None
        if element is None:
            if required:
                where = f"mm_features[{self.index}].data[{name!r}]"
                raise ValueError(f"{where}: a {self.modality} feature needs this field; present: {sorted(data)}")
            return None
        try:
            return element.data
        except AttributeError:
            raise TypeError(
                f"mm_features[{self.index}].data[{name!r}]: expected a field element with .data (a tensor or list), "
                f"got {describe(element)}"
            ) from None

    def grid(self) -> list[int]:
        name = _GRID_FIELDS[self.modality]
        value = self.element(name)
        if type(value) is _TENSOR and value.dtype in _GRID_DTYPES and value.shape == (3,):
            return value.tolist()
        grid = _plain(value)
        if grid.shape != (3,) or grid.dtype.kind not in "iu":
            raise ValueError(
                f"mm_features[{self.index}].data[{name!r}]: expected 3 ints (t, h, w), got {describe(grid)}"
            )
        return [int(x) for x in grid]

    def frame_groups(self, merge: int) -> list[tuple[int, int, list[int]]]:
        """(offset, length, [1, h, w]) of every frame of a video whose grid holds
        one (t, h, w) row per group of frames (Keye-VL-1.5; a row of t frames
        is t frames of [1, h, w], as vLLM's split_thw makes them), located by
        the is_embed runs as vLLM 0.33 does (no mask: back to back)."""
        name = "video_grid_thw"
        where = f"mm_features[{self.index}].data[{name!r}]"
        grid = _plain(self.element(name))
        if grid.ndim == 1:
            grid = grid.reshape(1, -1)
        if grid.ndim != 2 or grid.shape[1] != 3 or grid.shape[0] == 0 or grid.dtype.kind not in "iu":
            raise ValueError(f"{where}: expected (n, 3) ints, one (t, h, w) row per frame group, got {describe(grid)}")
        rows = [[int(x) for x in row] for row in grid]
        for k, (t, h, w) in enumerate(rows):
            if min(t, h, w) < 1 or h % merge or w % merge:
                raise ValueError(
                    f"{where}[{k}]: expected positive (t, h, w) with h and w divisible by {merge}, got {(t, h, w)}"
                )
        # every frame holds at least one token: more frames than the range's tokens cannot fit (checked
        # before the per-frame lists are made, which a wild frame count would make huge)
        if sum(t for t, _, _ in rows) > self.length:
            raise ValueError(
                f"{where}: expected at most {self.length} frames in all (the range's length), got "
                f"{sum(t for t, _, _ in rows)}"
            )
        sizes = []
        for t, h, w in rows:
            sizes += [(h // merge) * (w // merge)] * t
        if self.is_embed is None:
            runs = [] if sum(sizes) != self.length else [(0, self.length)]
        else:
            runs = [(a, n) for a, n in true_runs(self.is_embed).tolist()]
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
        value = self.element(name, required)
        if value is None:
            return None
        if type(value) is _TENSOR and _SCALAR_KINDS.get(value.dtype, "?") in kinds and value.numel() == 1:
            return value.item()
        value = _plain(value)
        if value.size != 1 or value.dtype.kind not in kinds:
            raise ValueError(f"mm_features[{self.index}].data[{name!r}]: expected one scalar, got {describe(value)}")
        return value.reshape(()).item()

    def use_audio_in_video(self) -> bool:
        return self.modality == "video" and bool(self.scalar("use_audio_in_video", "bui", required=False))

    def mel_frames(self) -> int:
        frames = self.scalar("audio_feature_lengths", "iu")
        return _as_int(frames, f"mm_features[{self.index}].data['audio_feature_lengths']", 1)


def checked_features(mm_features) -> list[Feature]:
    """Every feature read and checked, in prompt order (by offset)."""
    if type(mm_features) is not list and (
        isinstance(mm_features, (str, bytes)) or not isinstance(mm_features, Sequence)
    ):
        raise TypeError(
            f"mm_features: expected a list of MultiModalFeatureSpec-like objects, got {describe(mm_features)}"
        )
    features = [Feature(i, f) for i, f in enumerate(mm_features)]
    if len(features) > 1:
        # vLLM sorts by offset too (stable: an audio track keeps its place after its video)
        features.sort(key=_BY_OFFSET)
    return features


def _pair_audio_tracks(config: MRopeConfig, features: list[Feature]) -> dict[int, Feature]:
    """Audio-in-video videos -> the audio feature with the same range (by feature index)."""
    av_videos = [f for f in features if f.use_audio_in_video()]
    if not av_videos:
        return {}
    if not config.is_omni:
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


def _masks(masks: list) -> list | None:
    """The masks of one modality, or None when no range has one (what `Ranges.from_rows` takes)."""
    for mask in masks:
        if mask is not None:
            return masks
    return None


def time_scales(config: MRopeConfig, video_sp: list) -> np.ndarray | None:
    """The videos' ``second_per_grid_ts`` as the range builder takes them, from
    each video feature's value (None where it carries none: the family
    default); None for a family that never reads a time scale (vLLM's
    Qwen2-VL, Qwen3-VL and GLM) or when no video carries one."""
    if not video_sp or not config.spec.scaled_time or all(sp is None for sp in video_sp):
        return None
    default = config.spec.default_second_per_grid_ts
    return np.array([default if sp is None else float(sp) for sp in video_sp], np.float64)


def read_features(config: MRopeConfig, mm_features) -> tuple[Items, Ranges]:
    """A prompt's multimodal features as the range builder's inputs, in O(items):
    the checked `Items` and `Ranges` that `build_rows_from_ranges` (core/layout.py)
    takes, as `PromptLayout.from_ranges` would make them from the same ranges."""
    if config.canvas:
        raise canvas_error(config)
    features = checked_features(mm_features)
    if not features or "image_token_id" not in config.spec.defaults:
        # no item, or text_only (MiniCPM-V 4.6): vLLM places every token, vision or not, at its index
        # (a family whose ids are only unknown, openPangu-VL, still has its items placed)
        items = Items((EMPTY_GRID, EMPTY_GRID, EMPTY_FLOAT, EMPTY_INT, False), EMPTY_INT)
        return items, Ranges.from_rows(config, items, EMPTY_RANGES, None, EMPTY_RANGES, None, EMPTY_RANGES, None)
    tracks = _pair_audio_tracks(config, features)
    track_indices = {audio.index for audio in tracks.values()} if tracks else ()

    image_ranges, image_masks, image_grids = [], [], []
    video_ranges, video_masks, video_grids, video_sp = [], [], [], []
    audio_ranges, audio_masks, audio_lengths = [], [], []
    whole_videos = []  # Keye-VL-1.5's video ranges, whose frames become videos of their own
    for f in features:
        modality = f.modality
        if modality == "image":
            image_ranges.append((f.offset, f.length))
            image_masks.append(f.is_embed)
            image_grids.append(f.grid())
        elif modality == "video" and config.spec.per_frame_grids:
            # Keye-VL-1.5: one grid row per frame group; each frame becomes a video of its own
            whole_videos.append((f.offset, f.length))
            for offset, length, grid in f.frame_groups(config.spatial_merge_size):
                video_ranges.append((offset, length))
                video_masks.append(None)
                video_grids.append(grid)
                video_sp.append(None)
        elif modality == "video":
            video_grids.append(f.grid())
            video_sp.append(f.scalar("second_per_grid_ts", "fiu", required=False))
            if f.index in tracks:
                # vLLM's range starts at audio_start and ends with audio_end
                video_ranges.append((f.offset + 1, f.length - 2))
                video_masks.append(None)
                audio_lengths.append(tracks[f.index].mel_frames())
            else:
                video_ranges.append((f.offset, f.length))
                video_masks.append(f.is_embed)
        elif f.index not in track_indices:
            audio_ranges.append((f.offset, f.length))
            audio_masks.append(f.is_embed)
            audio_lengths.append(f.mel_frames())

    second_per_grid_ts = time_scales(config, video_sp)
    items = Items(
        *normalize_items(
            config,
            np.array(image_grids, np.int64) if image_grids else None,
            np.array(video_grids, np.int64) if video_grids else None,
            second_per_grid_ts,
            np.array(audio_lengths, np.int64) if audio_lengths else None,
            bool(tracks),
        )
    )
    ranges = Ranges.from_rows(
        config,
        items,
        np.array(image_ranges, np.int64) if image_ranges else EMPTY_RANGES,
        _masks(image_masks),
        np.array(video_ranges, np.int64) if video_ranges else EMPTY_RANGES,
        _masks(video_masks),
        np.array(audio_ranges, np.int64) if audio_ranges else EMPTY_RANGES,
        _masks(audio_masks),
        interleave="vllm" if tracks else "transformers",
        second_per_grid_ts=second_per_grid_ts,
        video_given=np.array(whole_videos, np.int64) if whole_videos else None,
    )
    return items, ranges


# the most tokens a prompt may have (positions and sums stay well inside int64)
MAX_PROMPT_TOKENS = 2**40


def sequence_length(prompt, name: str) -> int:
    """The length of a prompt's ids, only counted: a list, tuple or other
    sequence, or a 1-D array or tensor. A dict, a set, a string or a 2-D
    array has a length too, but is no prompt: refused."""
    if type(prompt) is list:
        return len(prompt)
    if isinstance(prompt, (np.ndarray, torch.Tensor)):
        if prompt.ndim != 1:
            raise ValueError(f"{name}: expected a 1-D sequence of token ids, got {describe(prompt)}")
        return prompt.shape[0]
    if not isinstance(prompt, Sequence) or isinstance(prompt, (str, bytes, bytearray)):
        raise TypeError(
            f"{name}: expected a sequence of token ids (a list, tuple, 1-D array or tensor), got {describe(prompt)}"
        )
    return len(prompt)


def count_prompt_tokens(prompt, name: str) -> int:
    """A prompt's token count from its ids (a sequence, only counted) or from the count itself."""
    if type(prompt) is list:
        num = len(prompt)
    elif isinstance(prompt, (int, np.integer)) and not isinstance(prompt, (bool, np.bool_)):
        return as_index(prompt, name, minimum=1, maximum=MAX_PROMPT_TOKENS)
    else:
        try:
            num = sequence_length(prompt, name)
        except TypeError:
            raise TypeError(
                f"{name}: expected a sequence of token ids or their number, got {describe(prompt)}"
            ) from None
    if num > MAX_PROMPT_TOKENS:
        raise ValueError(f"{name}: expected at most {MAX_PROMPT_TOKENS} tokens, got {num}")
    if num == 0:
        raise ValueError(f"{name}: expected at least one token, got an empty sequence")
    return num
