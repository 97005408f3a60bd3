"""The public boundary: normalise user inputs for the kernels and turn kernel
error codes into messages.

Every array handed to a kernel leaves here C-contiguous, writable and of the
exact dtype its kernel was compiled for (int64, or float32 for
`second_per_grid_ts`), so numba never compiles a second specialisation at run
time. Messages name the argument, what was expected and what came.
"""

from __future__ import annotations

import operator

import numpy as np
import torch

from .config import MRopeConfig
from .kernels import layout_codes as C

_INT64 = np.dtype(np.int64)
_FLOAT32 = np.dtype(np.float32)
# Shared empty inputs. Writable on purpose: numba types read-only arrays
# differently, and a zero-size array cannot be written anyway.
EMPTY_GRID = np.zeros((0, 3), np.int64)
EMPTY_RANGES = np.zeros((0, 2), np.int64)
EMPTY_INT = np.zeros(0, np.int64)
EMPTY_FLOAT = np.zeros(0, np.float32)
EMPTY_OUT = np.zeros((3, 0), np.int64)  # "write no positions" for the builders

MODALITY_NAMES = {C.MOD_IMAGE: "image", C.MOD_VIDEO: "video", C.MOD_AUDIO: "audio"}


def _describe(value) -> str:
    if isinstance(value, (np.ndarray, torch.Tensor)):
        return f"{type(value).__name__} of dtype {value.dtype} and shape {tuple(value.shape)}"
    return f"{type(value).__name__} {value!r}"[:200]


def _has_bool(seq) -> bool:
    """A bool inside a (nested) list: numpy would silently take it as 0 or 1."""
    return any(isinstance(x, (bool, np.bool_)) or (isinstance(x, (list, tuple)) and _has_bool(x)) for x in seq)


def _to_numpy(value, name: str) -> np.ndarray:
    """Any array-like to numpy, without copying numpy or CPU tensors."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    if isinstance(value, (str, bytes, dict, set)) or not hasattr(value, "__len__"):
        raise TypeError(f"{name}: expected a list, numpy array or torch tensor, got {_describe(value)}")
    if isinstance(value, (list, tuple)) and _has_bool(value):
        raise TypeError(f"{name}: expected integers, got a bool inside {_describe(value)}")
    try:
        return np.asarray(value)
    except (ValueError, TypeError, OverflowError) as exc:
        raise ValueError(f"{name}: expected a rectangular array of numbers, got {_describe(value)} ({exc})") from None


def as_int_array(value, name: str, ndim: int, shape_hint: str) -> np.ndarray:
    """An integer array of `ndim` dimensions as C-contiguous writable int64."""
    arr = _to_numpy(value, name)
    if arr.size == 0 and arr.dtype.kind == "f" and not isinstance(value, (np.ndarray, torch.Tensor)):
        arr = arr.astype(np.int64)  # an empty list has no dtype of its own
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name}: expected integers, got {_describe(value)}")
    if arr.ndim != ndim:
        raise ValueError(f"{name}: expected shape {shape_hint}, got {_describe(value)}")
    if arr.dtype.kind == "u" and arr.size and arr.max() > np.iinfo(np.int64).max:
        raise ValueError(f"{name}: expected values below 2**63, got {arr.max()}")
    return np.require(arr, np.int64, ["C", "W"])


def ready(arr, dtype: np.dtype, ndim: int, width: int = 0) -> bool:
    """Whether a kernel can take `arr` as is: a numpy array of exactly `dtype`
    (native order), `ndim` dimensions (and `width` columns when given),
    C-contiguous and writable. Anything else is converted (or refused), so
    numba never compiles a new specialisation in the middle of serving."""
    if type(arr) is not np.ndarray or arr.dtype is not dtype or arr.ndim != ndim:
        return False
    if width and arr.shape[1] != width:
        return False
    flags = arr.flags
    return flags.c_contiguous and flags.writeable


def as_token_ids(token_ids) -> np.ndarray:
    """1-D integer tokens as int64; a ready int64 numpy array passes straight through."""
    ids = token_ids if ready(token_ids, _INT64, 1) else as_int_array(token_ids, "token_ids", 1, "(num_tokens,)")
    if ids.shape[0] == 0:
        raise ValueError("token_ids: expected at least one token, got an empty sequence")
    return ids


def as_grid(value, name: str) -> np.ndarray:
    """(n, 3) integer grids; None or empty means no items."""
    if value is None:
        return EMPTY_GRID
    if ready(value, _INT64, 2, 3):
        return value
    arr = _to_numpy(value, name)
    if arr.size == 0 and (arr.ndim == 1 or arr.shape[-1:] == (3,)):
        return EMPTY_GRID
    if arr.ndim != 2 or arr.shape[1] != 3:
        if arr.dtype.kind not in "iu":
            raise TypeError(f"{name}: expected integer (t, h, w) rows, got {_describe(value)}")
        raise ValueError(f"{name}: expected shape (num_items, 3) of (t, h, w) rows, got {_describe(value)}")
    return as_int_array(arr, name, 2, "(num_items, 3)")


def as_ranges(value, name: str) -> np.ndarray:
    """(n, 2) (offset, length) rows; also accepts objects with .offset and .length
    (such as vLLM's PlaceholderRange)."""
    if value is None:
        return EMPTY_RANGES
    if ready(value, _INT64, 2, 2):
        return value
    if isinstance(value, (list, tuple)) and value and hasattr(value[0], "offset"):
        try:
            value = [(int(item.offset), int(item.length)) for item in value]
        except (AttributeError, TypeError, ValueError) as exc:
            raise TypeError(f"{name}: expected objects with integer .offset and .length, got {exc}") from None
    arr = _to_numpy(value, name)
    if arr.size == 0 and (arr.ndim == 1 or arr.shape[-1:] == (2,)):
        return EMPTY_RANGES
    if arr.ndim != 2 or arr.shape[1] != 2:
        if arr.dtype.kind not in "iu":
            raise TypeError(f"{name}: expected integer (offset, length) rows, got {_describe(value)}")
        raise ValueError(f"{name}: expected shape (num_items, 2) of (offset, length) rows, got {_describe(value)}")
    return as_int_array(arr, name, 2, "(num_items, 2)")


def as_second_per_grid_ts(value, num_videos: int, config: MRopeConfig) -> np.ndarray:
    """One float32 per video (the reference holds them as a float32 tensor);
    1.0 when omitted (spec §2.2)."""
    if value is None:
        if num_videos == 0:
            return EMPTY_FLOAT
        return np.ones(num_videos, np.float32)
    if config.family != "qwen2_vl" and ready(value, _FLOAT32, 1) and value.shape[0] == num_videos:
        return value
    if config.family == "qwen2_vl":
        raise ValueError(
            f"second_per_grid_ts: Qwen2-VL numbers frames 0, 1, 2, ... and takes no time scale; expected None, got {_describe(value)}"
        )
    arr = _to_numpy(value, "second_per_grid_ts")
    if arr.dtype.kind not in "iuf" or arr.ndim != 1:
        if arr.dtype.kind not in "iuf":
            raise TypeError(f"second_per_grid_ts: expected real numbers, got {_describe(value)}")
        raise ValueError(f"second_per_grid_ts: expected shape (num_videos,), got {_describe(value)}")
    if arr.shape[0] != num_videos:
        raise ValueError(
            f"second_per_grid_ts: expected one value per video ({num_videos}), got {arr.shape[0]}"
        )
    return np.require(arr, np.float32, ["C", "W"])


def as_audio_lengths(value, config: MRopeConfig) -> np.ndarray:
    if value is None:
        return EMPTY_INT
    if config.is_omni and ready(value, _INT64, 1):
        return value
    arr = as_int_array(value, "audio_feature_lengths", 1, "(num_audio_tracks,)")
    if arr.shape[0] and not config.is_omni:
        raise ValueError(f"audio_feature_lengths: {config.family} has no audio; expected None, got {_describe(value)}")
    return arr


def as_flag(value, name: str) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{name}: expected a bool, got {_describe(value)}")


def as_config(config) -> MRopeConfig:
    if type(config) is MRopeConfig:
        return config
    return MRopeConfig.from_hf_config(config)


_INDEX_LIMIT = 2**62  # keeps every sum of indices inside int64 in the kernels


def as_index(value, name: str, minimum: int = 0, maximum: int = _INDEX_LIMIT) -> int:
    """A plain int in [minimum, maximum] (numpy integers accepted, bools refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected an int, got {_describe(value)}")
    value = operator.index(value)
    if not minimum <= value <= maximum:
        raise ValueError(f"{name}: expected an int in [{minimum}, {maximum}], got {value}")
    return value


def normalize_items(config, image_grid_thw, video_grid_thw, second_per_grid_ts, audio_feature_lengths, use_audio_in_video):
    """(image_grid, video_grid, video_sp, audio_lengths, use_audio_in_video),
    each ready for the kernels. None is the common case for most arguments,
    so it is tested inline rather than through a call."""
    image_grid = EMPTY_GRID if image_grid_thw is None else as_grid(image_grid_thw, "image_grid_thw")
    video_grid = EMPTY_GRID if video_grid_thw is None else as_grid(video_grid_thw, "video_grid_thw")
    if second_per_grid_ts is None and video_grid_thw is None:
        video_sp = EMPTY_FLOAT
    else:
        video_sp = as_second_per_grid_ts(second_per_grid_ts, video_grid.shape[0], config)
    audio_lengths = EMPTY_INT if audio_feature_lengths is None else as_audio_lengths(audio_feature_lengths, config)
    if use_audio_in_video is False:
        av = False
    else:
        av = as_flag(use_audio_in_video, "use_audio_in_video")
        if av and not config.is_omni:
            raise ValueError(
                f"use_audio_in_video: only Qwen2.5-Omni interleaves audio with video; expected False for {config.family}"
            )
    return image_grid, video_grid, video_sp, audio_lengths, av


class Items:
    """Normalised multimodal inputs of one prompt, ready for the kernels."""

    __slots__ = ("image_grid", "video_grid", "video_sp", "audio_lengths", "use_audio_in_video")

    def __init__(self, image_grid, video_grid, video_sp, audio_lengths, use_audio_in_video):
        self.image_grid = image_grid
        self.video_grid = video_grid
        self.video_sp = video_sp
        self.audio_lengths = audio_lengths
        self.use_audio_in_video = use_audio_in_video

    @classmethod
    def normalize(
        cls, config, image_grid_thw, video_grid_thw, second_per_grid_ts, audio_feature_lengths, use_audio_in_video
    ) -> "Items":
        """Check and convert the user's arguments (see `normalize_items`)."""
        return cls(*normalize_items(
            config, image_grid_thw, video_grid_thw, second_per_grid_ts, audio_feature_lengths, use_audio_in_video))  # fmt: skip


NO_ITEMS = (EMPTY_GRID, EMPTY_GRID, EMPTY_FLOAT, EMPTY_INT, False)  # normalized items of a prompt given none


def _grid_text(grids: np.ndarray, n: int) -> str:
    return str(tuple(int(v) for v in grids[n])) if n < grids.shape[0] else "?"


def layout_error(code: int, a: int, b: int, c: int, config: MRopeConfig, items: Items, ids=None, ranges=None, num_tokens=None):
    """The exception for a builder kernel's error code (never raised by kernels themselves)."""
    mod = MODALITY_NAMES.get(a, "?")
    grids = {C.MOD_IMAGE: items.image_grid, C.MOD_VIDEO: items.video_grid}
    grid_name = {C.MOD_IMAGE: "image_grid_thw", C.MOD_VIDEO: "video_grid_thw", C.MOD_AUDIO: "audio_feature_lengths"}
    m = config.spatial_merge_size
    placeholder = {C.MOD_IMAGE: config.image_token_id, C.MOD_VIDEO: config.video_token_id, C.MOD_AUDIO: config.audio_token_id}

    def item_text(modality, n):
        if modality == C.MOD_AUDIO:
            return f"audio_feature_lengths[{n}] = {int(items.audio_lengths[n])}" if n < items.audio_lengths.shape[0] else "audio"
        return f"{grid_name[modality]}[{n}] = {_grid_text(grids[modality], n)}"

    if code == C.ERR_GRID_DIM:
        return ValueError(f"{grid_name[a]}[{b}]: expected positive (t, h, w), got {_grid_text(grids[a], b)}")
    if code == C.ERR_GRID_MERGE:
        return ValueError(
            f"{grid_name[a]}[{b}]: expected h and w divisible by spatial_merge_size {m}, got {_grid_text(grids[a], b)}"
        )
    if code == C.ERR_IMAGE_T:
        return ValueError(f"image_grid_thw[{a}]: expected t == 1 for an image, got {_grid_text(items.image_grid, a)}")
    if code == C.ERR_SP_VALUE:
        return ValueError(f"second_per_grid_ts[{a}]: expected a finite number >= 0, got {float(items.video_sp[a])}")
    if code == C.ERR_TAU_OVERFLOW:
        return ValueError(
            f"second_per_grid_ts[{a}]: expected temporal positions below 2**31, got {float(items.video_sp[a])} s per "
            f"grid x {config.tokens_per_second} x {int(items.video_grid[a, 0]) - 1} frames"
        )
    if code == C.ERR_AUDIO_SHORT:
        return ValueError(f"audio_feature_lengths[{a}]: expected at least 3 mel frames (one audio token), got {b}")
    if code == C.ERR_PLACEHOLDER_SHORT:
        return ValueError(
            f"token_ids: {item_text(a, b)} expects a run of {mod} tokens ({placeholder[a]}), "
            f"but token_ids[{c}] = {int(ids[c])} interrupts it"
        )
    if code == C.ERR_CUT_OFF:
        return ValueError(f"token_ids: {item_text(a, b)} is cut off by the end of the prompt ({c} tokens missing)")
    if code == C.ERR_EXTRA_ITEM:  # token scan only: the range form matches counts before building
        return ValueError(
            f"token_ids: more {mod} items than {grid_name[a]} has entries ({_count(items, a)}); "
            f"an extra {mod} starts at token_ids[{b}]"
        )
    if code == C.ERR_MISSING_ITEMS:  # token scan only
        return ValueError(f"{grid_name[a]}: got {c} {mod} entries but token_ids hold only {b} {mod} items")
    if code == C.ERR_AV_NOT_IN_BLOCK:
        return ValueError(
            f"token_ids: use_audio_in_video=True expects every video as vision_start audio_start <interleave> "
            f"audio_end vision_end, but video {a} starts at token_ids[{b}] without that prefix"
        )
    if code == C.ERR_AV_NO_AUDIO:
        return ValueError(
            f"audio_feature_lengths: video {a} carries its audio (use_audio_in_video=True) but no audio length is left "
            f"(got {items.audio_lengths.shape[0]})"
        )
    if code == C.ERR_AV_BAD_TOKEN:
        return ValueError(
            f"token_ids: the audio-in-video block of video {a} expects token {c} at token_ids[{b}], got {int(ids[b])}"
        )
    if code == C.ERR_AV_CUT_OFF:
        return ValueError(f"token_ids: the audio-in-video block of video {a} is cut off by the end of the prompt ({b} tokens missing)")
    name = f"{mod}_ranges"
    if code == C.ERR_RANGE_NEGATIVE:
        return ValueError(f"{name}[{b}]: expected a non-negative offset and length, got {c}")
    if code == C.ERR_RANGE_OVERLAP:
        return ValueError(
            f"{name}[{b}]: expected ranges in prompt order that do not overlap (next free token {c}), "
            f"got {tuple(int(v) for v in ranges[a][b])}"
        )
    if code == C.ERR_RANGE_OUT:
        return ValueError(f"{name}[{b}]: expected a range inside the prompt's {num_tokens} tokens, got one ending at {c}")
    if code == C.ERR_RANGE_LENGTH:
        return ValueError(f"{name}[{b}]: expected length {c} from {item_text(a, b)}, got {int(ranges[a][b][1])}")
    if code == C.ERR_AV_RANGE_CONTEXT:
        return ValueError(
            f"video_ranges[{a}]: an audio-in-video interleave needs vision_start, audio_start before it and audio_end, "
            f"vision_end after it inside the prompt's {num_tokens} tokens, got offset {b}"
        )
    raise AssertionError(f"unknown layout error code {code}")  # internal invariant


def _count(items: Items, modality: int) -> int:
    if modality == C.MOD_IMAGE:
        return items.image_grid.shape[0]
    if modality == C.MOD_VIDEO:
        return items.video_grid.shape[0]
    return items.audio_lengths.shape[0]
