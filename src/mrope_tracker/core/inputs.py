"""The public boundary: check user inputs and convert them for the kernels.

Every array handed to a kernel leaves here C-contiguous, writable, aligned
and of the exact dtype its kernel was compiled for (int64, or float32 for
`second_per_grid_ts`), so numba never compiles a second specialisation at run
time. A bad input raises TypeError or ValueError with a message naming the
argument, what was expected and what came (core/errors.py turns the kernels'
error codes into such messages).
"""

from __future__ import annotations

import marshal
import operator

import numpy as np
import torch

from ..kernels import layout_codes as C
from ..kernels.records import MARSHAL_INTS, read_int_records, read_int_rows
from .config import MRopeConfig

_INT64 = np.dtype(np.int64)
_INT64_MAX = np.iinfo(np.int64).max
_NDARRAY = np.ndarray
_TENSOR = torch.Tensor
_FLOAT32 = np.dtype(np.float32)
# numpy's array flag bits (NPY_ARRAY_C_CONTIGUOUS, NPY_ARRAY_ALIGNED and
# NPY_ARRAY_WRITEABLE, fixed in its C API): `flags.num` tests all three in
# one attribute read, where `flags.c_contiguous` and the like take one each.
READY_FLAGS = 0x0001 | 0x0100 | 0x0400
# Shared empty inputs. Writable on purpose: numba types read-only arrays
# differently, and a zero-size array cannot be written anyway.
EMPTY_GRID = np.zeros((0, 3), np.int64)
EMPTY_RANGES = np.zeros((0, 2), np.int64)
EMPTY_INT = np.zeros(0, np.int64)
EMPTY_FLOAT = np.zeros(0, np.float32)
EMPTY_OUT = np.zeros((3, 0), np.int64)  # "write no positions" for the builders
# A zero-row layout table: "emit no rows", so the token builder writes positions only (prompt_positions)
NO_ROWS = np.zeros((0, C.NUM_COLS), np.int64)
NO_SCALES = np.zeros((0, C.NUM_SCALE_COLS), np.float32)

MODALITY_NAMES = {C.MOD_IMAGE: "image", C.MOD_VIDEO: "video", C.MOD_AUDIO: "audio"}


def describe(value) -> str:
    if isinstance(value, (np.ndarray, torch.Tensor)):
        return f"{type(value).__name__} of dtype {value.dtype} and shape {tuple(value.shape)}"
    return f"{type(value).__name__} {value!r}"[:200]


_BOOLS = (bool, np.bool_)


def _has_bool(seq) -> bool:
    """A bool inside a list of numbers or of rows: numpy would silently take it
    as 0 or 1. Plain loops over type(): this runs on every list input, and a
    nested generator cost more than the kernel it feeds. Deeper nesting makes a
    3-D array, which the shape checks refuse anyway."""
    for x in seq:
        tx = type(x)
        if tx is int or tx is float:
            continue
        if tx is list or tx is tuple:
            for y in x:
                if type(y) in _BOOLS:
                    return True
        elif tx in _BOOLS:
            return True
    return False


def plain_ndarray(value: np.ndarray, name: str) -> np.ndarray:
    """An ndarray subclass as a plain ndarray view of the same data (numba
    compiles only for plain arrays). A masked array is refused: its mask has
    no meaning for positions, and reading its data would silently take the
    masked values."""
    if isinstance(value, np.ma.MaskedArray):
        raise TypeError(f"{name}: expected a plain numpy array, got a masked array (pass its .filled() values)")
    return value if type(value) is np.ndarray else value.view(np.ndarray)


def _to_numpy(value, name: str) -> np.ndarray:
    """Any array-like to numpy, without copying numpy arrays or CPU tensors."""
    tv = type(value)
    if tv is _NDARRAY:
        return value
    if tv is _TENSOR:
        return tensor_values(value, name)
    if tv is list or tv is tuple:
        if _has_bool(value):
            raise TypeError(f"{name}: expected integers, got a bool inside {describe(value)}")
        try:
            return np.array(value)
        except (ValueError, TypeError, OverflowError) as exc:
            raise ValueError(
                f"{name}: expected a rectangular array of numbers, got {describe(value)} ({exc})"
            ) from None
    if isinstance(value, torch.Tensor):
        return tensor_values(value, name)
    if isinstance(value, np.ndarray):
        return plain_ndarray(value, name)
    if isinstance(value, (str, bytes, dict, set)) or not hasattr(value, "__len__"):
        raise TypeError(f"{name}: expected a list, numpy array or torch tensor, got {describe(value)}")
    if isinstance(value, (list, tuple)) and _has_bool(value):
        raise TypeError(f"{name}: expected integers, got a bool inside {describe(value)}")
    try:
        return np.asarray(value)
    except (ValueError, TypeError, OverflowError) as exc:
        raise ValueError(f"{name}: expected a rectangular array of numbers, got {describe(value)} ({exc})") from None


def _as_int64(arr: np.ndarray) -> np.ndarray:
    """C-contiguous, writable, aligned, native int64 (a copy only when needed)."""
    if arr.dtype is _INT64 and arr.flags.num & READY_FLAGS == READY_FLAGS:
        return arr
    return arr.astype(np.int64, order="C")


def _plain_ints(value, width: int = 0) -> np.ndarray | None:
    """A list or tuple of plain ints (width 0), or of equal rows of `width`
    plain ints, as a new int64 array, decoded from its marshal bytes in one C
    pass and one kernel call; None for anything else (a bool, a float, a
    ragged row, ...), which the checked path then explains."""
    n = len(value)
    if not MARSHAL_INTS or n == 0:
        return None
    try:
        data = marshal.dumps(value, 2)
    except ValueError:  # objects marshal cannot write (numpy scalars, ...)
        return None
    if width:
        out = np.empty((n, width), np.int64)
        return out if read_int_rows(data, out) < 0 else None
    out = np.empty(n, np.int64)
    return out if read_int_records(data, out) < 0 else None


def check_fits_int64(arr: np.ndarray, name: str, what: str = "values") -> None:
    """A ValueError naming `name` where a uint64 array holds a value a cast to int64 would wrap negative."""
    if arr.dtype.kind == "u" and arr.dtype.itemsize == 8 and arr.size and arr.max() > _INT64_MAX:
        raise ValueError(f"{name}: expected {what} below 2**63, got {int(arr.max())}")


def as_int_array(value, name: str, ndim: int, shape_hint: str) -> np.ndarray:
    """An integer array of `ndim` dimensions as C-contiguous writable int64."""
    if ndim == 1 and (type(value) is list or type(value) is tuple):
        fast = _plain_ints(value)
        if fast is not None:
            return fast
    arr = _to_numpy(value, name)
    kind = arr.dtype.kind
    if kind != "i":
        if arr.size == 0 and kind == "f" and not isinstance(value, (np.ndarray, torch.Tensor)):
            arr = arr.astype(np.int64)  # an empty list has no dtype of its own
        elif kind != "u":
            raise TypeError(f"{name}: expected integers, got {describe(value)}")
        else:
            check_fits_int64(arr, name)
    if arr.ndim != ndim:
        raise ValueError(f"{name}: expected shape {shape_hint}, got {describe(value)}")
    return _as_int64(arr)


def ready(arr, dtype: np.dtype, ndim: int, width: int = 0) -> bool:
    """Whether a kernel can take `arr` as is: a numpy array of exactly `dtype`
    (native order), `ndim` dimensions (and `width` columns when given),
    C-contiguous, writable and aligned. Anything else is converted (or
    refused), so numba never compiles a new specialisation in the middle of
    serving."""
    return (
        type(arr) is np.ndarray
        and arr.dtype is dtype
        and arr.ndim == ndim
        and arr.flags.num & READY_FLAGS == READY_FLAGS
        and (not width or arr.shape[1] == width)
    )


def true_runs(flags: np.ndarray) -> np.ndarray:
    """(offset, length) of each run of True in a 1-D bool array, as an (n, 2)
    int64 array, from one pass over its edges."""
    edges = np.flatnonzero(np.diff(flags.view(np.int8), prepend=0, append=0))
    return np.stack([edges[0::2], edges[1::2] - edges[0::2]], axis=1)


def tensor_values(value: torch.Tensor, name: str, *, widen_bfloat16: bool = False) -> np.ndarray:
    """The one reader of tensors for every entry point: a CPU tensor's numpy view where it needs no grad, else a
    detached host copy, bfloat16 widened to float32 where asked (exact; numpy has no bfloat16). What numpy
    cannot read (a meta tensor, which holds no values; a dtype numpy lacks) is a TypeError naming `name`."""
    try:  # the common case first, asked of torch itself (testing is_cpu and requires_grad first costs more)
        return value.numpy()  # a view: no detach/cpu round trip (microseconds on small tensors)
    except (RuntimeError, NotImplementedError, TypeError):  # needs grad, not on the CPU, ...: below
        pass
    if value.device.type == "meta":
        raise TypeError(f"{name}: expected a tensor that holds values (CPU or GPU), got one on the meta device")
    value = value.detach()
    if widen_bfloat16 and value.dtype is torch.bfloat16:
        value = value.float()
    try:
        return value.cpu().numpy()
    except (RuntimeError, NotImplementedError, TypeError) as exc:  # an unsupported dtype, ...
        raise TypeError(f"{name}: expected a tensor numpy can read, got {describe(value)} ({exc})") from None


def as_token_ids(token_ids) -> np.ndarray:
    """1-D integer tokens as int64; a ready int64 numpy array passes straight through.

    The forms engines pass are tested first, by exact type: a tensor becomes
    its numpy view, and a 1-D numpy array of signed integers (any width,
    strided, read-only, misaligned or byte-swapped) takes one copy as
    C-contiguous int64. Everything else goes through `as_int_array`."""
    ids = token_ids
    if type(ids) is _TENSOR:
        ids = tensor_values(ids, "token_ids")
    if type(ids) is _NDARRAY and ids.ndim == 1 and ids.dtype.kind == "i" and ids.shape[0]:
        if ids.dtype is not _INT64 or ids.flags.num & READY_FLAGS != READY_FLAGS:
            # (1-D: the copy is C-contiguous whatever the source's order; `copy` costs less than `astype`)
            ids = ids.copy() if ids.dtype is _INT64 else ids.astype(_INT64)
        return ids
    ids = as_int_array(token_ids, "token_ids", 1, "(num_tokens,)")  # (the user's own value: messages describe it)
    if ids.shape[0] == 0:
        raise ValueError("token_ids: expected at least one token, got an empty sequence")
    return ids


def as_grid(value, name: str) -> np.ndarray:
    """(n, 3) integer grids; None or empty means no items."""
    if value is None:
        return EMPTY_GRID
    tv = type(value)
    if tv is list or tv is tuple:  # (first: the commonest form besides canonical arrays)
        fast = _plain_ints(value, 3)
        if fast is not None:
            return fast
    else:  # numpy arrays and tensors (as their numpy view) of signed integers, by exact type
        arr = tensor_values(value, name) if tv is _TENSOR else value
        if type(arr) is _NDARRAY and arr.ndim == 2 and arr.shape[1] == 3 and arr.dtype.kind == "i":
            if arr.dtype is _INT64 and arr.flags.num & READY_FLAGS == READY_FLAGS:
                return arr
            # any other layout or width: one copy (C order; `copy` costs less than `astype`)
            return arr.copy() if arr.dtype is _INT64 else arr.astype(_INT64, order="C")
    arr = _to_numpy(value, name)
    if arr.size == 0 and (arr.ndim == 1 or arr.shape[-1:] == (3,)):
        return EMPTY_GRID
    if arr.ndim != 2 or arr.shape[1] != 3:
        if arr.dtype.kind not in "iu":
            raise TypeError(f"{name}: expected integer (t, h, w) rows, got {describe(value)}")
        raise ValueError(f"{name}: expected shape (num_items, 3) of (t, h, w) rows, got {describe(value)}")
    return as_int_array(arr, name, 2, "(num_items, 3)")


def as_ranges(value, name: str) -> np.ndarray:
    """(n, 2) (offset, length) rows; also accepts objects with .offset and .length
    (such as vLLM's PlaceholderRange)."""
    if value is None:
        return EMPTY_RANGES
    if ready(value, _INT64, 2, 2):
        return value
    if type(value) is list or type(value) is tuple:
        fast = _plain_ints(value, 2)
        if fast is not None:
            return fast
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
            raise TypeError(f"{name}: expected integer (offset, length) rows, got {describe(value)}")
        raise ValueError(f"{name}: expected shape (num_items, 2) of (offset, length) rows, got {describe(value)}")
    return as_int_array(arr, name, 2, "(num_items, 2)")


# (config, scaled_time, int_sp, default time) of the last config whose times
# were read: `spec` and `switches` are dict lookups, a good part of a small
# prompt's call. Swapped whole (one tuple: safe between threads).
_last_time_rules: tuple = (object(), False, False, 0.0)  # (no caller's config is that first entry's)


def _time_rules(config: MRopeConfig) -> tuple:
    global _last_time_rules
    rules = _last_time_rules
    if rules[0] is not config:
        spec = config.spec
        rules = (config, spec.scaled_time, "int_sp" in config.switches, spec.default_second_per_grid_ts)
        _last_time_rules = rules
    return rules


def _all_floats(seq) -> bool:
    for x in seq:
        if type(x) is not float:
            return False
    return True


def as_second_per_grid_ts(value, num_videos: int, config: MRopeConfig) -> np.ndarray:
    """One float32 per video (the reference holds them as a float32 tensor);
    the family's default when omitted. Families without a time scale refuse it."""
    _, scaled_time, int_sp, default = _time_rules(config)
    if not scaled_time:
        if value is None:
            return EMPTY_FLOAT
        raise ValueError(
            f"second_per_grid_ts: {config.family} takes no time scale (its frames are numbered, or timed by text); "
            f"expected None, got {describe(value)}"
        )
    if value is None:
        if num_videos == 0:
            return EMPTY_FLOAT
        return np.full(num_videos, default, np.float32)
    # a 1-D float array or a list of Python floats, one time per video (the commonest forms), by exact type
    tv = type(value)
    if tv is _NDARRAY and value.ndim == 1 and value.dtype.kind == "f" and value.shape[0] == num_videos:
        arr = value
        if arr.dtype is not _FLOAT32 or arr.flags.num & READY_FLAGS != READY_FLAGS:
            arr = arr.astype(_FLOAT32)  # (1-D: the copy is C-contiguous whatever the source's order)
    elif (tv is list or tv is tuple) and len(value) == num_videos and _all_floats(value):
        arr = np.array(value, _FLOAT32)  # (rounded to nearest, as astype from float64 rounds)
    else:
        arr = _to_numpy(value, "second_per_grid_ts")
        if arr.dtype.kind not in "iuf" or arr.ndim != 1:
            if arr.dtype.kind not in "iuf":
                raise TypeError(f"second_per_grid_ts: expected real numbers, got {describe(value)}")
            raise ValueError(f"second_per_grid_ts: expected shape (num_videos,), got {describe(value)}")
        if arr.shape[0] != num_videos:
            raise ValueError(f"second_per_grid_ts: expected one value per video ({num_videos}), got {arr.shape[0]}")
        if not ready(arr, _FLOAT32, 1):
            arr = arr.astype(np.float32, order="C")
    if int_sp:  # transformers 4.57 casts it to the int64 frame index dtype (D2)
        arr = np.trunc(arr)
    return arr


def as_audio_lengths(value, config: MRopeConfig) -> np.ndarray:
    if value is None:
        return EMPTY_INT
    if config.is_omni and ready(value, _INT64, 1):
        return value
    arr = as_int_array(value, "audio_feature_lengths", 1, "(num_audio_tracks,)")
    if arr.shape[0] and not config.is_omni:
        raise ValueError(f"audio_feature_lengths: {config.family} has no audio; expected None, got {describe(value)}")
    return arr


def audio_token_counts(config: MRopeConfig, audio_lengths: np.ndarray) -> np.ndarray:
    """Tokens of every audio track, by the family's encoder formula."""
    if audio_lengths.shape[0] == 0:
        return EMPTY_INT
    if audio_lengths.shape[0] <= 8:  # numpy arithmetic on a few elements costs microseconds
        return np.array([config.spec.audio_tokens(f, config) for f in audio_lengths.tolist()], np.int64)
    return _as_int64(np.asarray(config.spec.audio_tokens(audio_lengths, config)))


def as_flag(value, name: str) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{name}: expected a bool, got {describe(value)}")


def as_config(config) -> MRopeConfig:
    if type(config) is MRopeConfig:
        return config
    return MRopeConfig.from_hf_config(config)


_INDEX_LIMIT = 2**62  # keeps every sum of indices inside int64 in the kernels


def as_index(value, name: str, minimum: int = 0, maximum: int = _INDEX_LIMIT) -> int:
    """A plain int in [minimum, maximum] (numpy integers accepted, bools refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected an int, got {describe(value)}")
    value = operator.index(value)
    if not minimum <= value <= maximum:
        raise ValueError(f"{name}: expected an int in [{minimum}, {maximum}], got {value}")
    return value


def normalize_items(
    config, image_grid_thw, video_grid_thw, second_per_grid_ts, audio_feature_lengths, use_audio_in_video
):
    """(image_grid, video_grid, video_sp, audio_tokens, use_audio_in_video),
    each ready for the kernels, and the audio lengths in mel frames (for
    messages): every item argument of `prompt_positions`, `PromptLayout`
    and the tracker is brought to the kernels' canonical form here, once.
    None and canonical grids are the common cases, so they are tested
    inline (`ready`'s test of a grid), not through a call: on a small
    prompt a call is a good part of the time."""
    image_grid = image_grid_thw
    if image_grid is None:
        image_grid = EMPTY_GRID
    elif not (
        type(image_grid) is np.ndarray
        and image_grid.dtype is _INT64
        and image_grid.ndim == 2
        and image_grid.shape[1] == 3
        and image_grid.flags.num & READY_FLAGS == READY_FLAGS
    ):
        image_grid = as_grid(image_grid, "image_grid_thw")
    video_grid = video_grid_thw
    if video_grid is None:
        video_grid = EMPTY_GRID
    elif not (
        type(video_grid) is np.ndarray
        and video_grid.dtype is _INT64
        and video_grid.ndim == 2
        and video_grid.shape[1] == 3
        and video_grid.flags.num & READY_FLAGS == READY_FLAGS
    ):
        video_grid = as_grid(video_grid, "video_grid_thw")
    if config.video_token_id is None or config.image_token_id is None:
        check_served_modalities(config, image_grid, video_grid)
    if second_per_grid_ts is None and video_grid_thw is None:
        video_sp = EMPTY_FLOAT
    else:
        video_sp = as_second_per_grid_ts(second_per_grid_ts, video_grid.shape[0], config)
    if audio_feature_lengths is None:
        audio_lengths = audio_tokens = EMPTY_INT
    else:
        audio_lengths = as_audio_lengths(audio_feature_lengths, config)
        audio_tokens = audio_token_counts(config, audio_lengths)
    if use_audio_in_video is False:
        av = False
    else:
        av = as_flag(use_audio_in_video, "use_audio_in_video")
        if av and not config.is_omni:
            raise ValueError(
                "use_audio_in_video: only the Omni families interleave audio with video; expected False for "
                f"{config.family}"
            )
    return (image_grid, video_grid, video_sp, audio_tokens, av), audio_lengths


def canvas_error(config) -> ValueError:
    """The grid entry points' refusal of a config whose prompts lie on a canvas."""
    return ValueError(
        f"config: expected a family of (t, h, w) grids; {config.model_type} places its prompts on a canvas "
        "from per-crop sizes: use mrope_tracker.canvas_positions or mrope_tracker.canvas_layout, or "
        "PositionTracker.add_request_canvas"
    )


def check_served_modalities(config, image_grid, video_grid) -> None:
    """Refuse items of a modality the family is served without (no placeholder
    id for it among the family's ids): videos of the image-only families,
    anything for text_only. A family whose id is only unknown (openPangu-VL's
    stand-ins) still takes the items, from ranges."""
    if config.canvas:
        raise canvas_error(config)
    served = config.spec.defaults
    for name, grid, key in (
        ("image_grid_thw", image_grid, "image_token_id"),
        ("video_grid_thw", video_grid, "video_token_id"),
    ):
        if key not in served and grid.shape[0]:
            what = "no vision items: every token sits at its index" if "image_token_id" not in served else "images only"
            raise ValueError(
                f"{name}: expected None for {config.family} ({what}; vLLM 0.33 lays out no such item for it), "
                f"got {grid.shape[0]} item(s)"
            )


class Items:
    """Normalised multimodal inputs of one prompt, ready for the kernels
    (`kernel_args`), plus the mel-frame lengths the messages quote."""

    __slots__ = ("image_grid", "video_grid", "video_sp", "audio_tokens", "use_audio_in_video", "audio_lengths")

    def __init__(self, kernel_args, audio_lengths):
        self.image_grid, self.video_grid, self.video_sp, self.audio_tokens, self.use_audio_in_video = kernel_args
        self.audio_lengths = audio_lengths

    @property
    def kernel_args(self) -> tuple:
        return self.image_grid, self.video_grid, self.video_sp, self.audio_tokens, self.use_audio_in_video

    @classmethod
    def normalize(
        cls, config, image_grid_thw, video_grid_thw, second_per_grid_ts, audio_feature_lengths, use_audio_in_video
    ) -> Items:
        """Check and convert the user's arguments (see `normalize_items`)."""
        return cls(
            *normalize_items(
                config, image_grid_thw, video_grid_thw, second_per_grid_ts, audio_feature_lengths, use_audio_in_video
            )
        )


def count_items(items: Items, modality: int) -> int:
    if modality == C.MOD_IMAGE:
        return items.image_grid.shape[0]
    if modality == C.MOD_VIDEO:
        return items.video_grid.shape[0]
    return items.audio_tokens.shape[0]
