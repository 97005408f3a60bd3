"""Argument checking for the torch reference: the config's raw fields and the item arguments.

The reference reads only raw fields from the config (``family``,
``spatial_merge_size``, the token ids, ``tokens_per_second``, ``n_window``),
from any object that carries them, and takes no default or derived constant
from `MRopeConfig`. Every rejection names the argument, what was expected and
what came: a wrong type or dtype is a TypeError, a wrong shape or value a
ValueError.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

_INT64_MAX = np.iinfo(np.int64).max

REFERENCE_FAMILIES = (
    "qwen2_vl",
    "qwen2_5_vl",
    "qwen2_5_omni",
    "qwen3_vl",
    "glm4v",
    "qwen3_omni",
    "paddleocr_vl",
    "ernie4_5_moe_vl",
    "glm_ocr",
    "bailing_moe_v3_vl",
    "cohere_compass",
    "text_only",
    "keye",
    "keye_vl1_5",
    "isaac",
    "openpangu_vl",
    "hunyuan_vl",
)
OMNI = ("qwen2_5_omni", "qwen3_omni")
# Families served with images only: vLLM 0.33's processors register no video for them.
IMAGE_ONLY = ("paddleocr_vl", "bailing_moe_v3_vl", "isaac", "hunyuan_vl")
# GLM's layout: frames reuse the image token between <|begin_of_video|> and <|end_of_video|>.
GLM = ("glm4v", "glm_ocr")
# Families whose items all sit at sequential positions like text (vLLM's
# text-only Qwen3.5 and MiniCPM-V 4.6): no ids, every token at its index.
SEQUENTIAL = ("text_only",)
# Families whose video frames sit at s + trunc(f * sp * r) (sp: second_per_grid_ts).
SCALED = ("qwen2_5_vl", "qwen2_5_omni", "qwen3_omni")
# Families whose every video frame is its own block with tau = 0 (time is text).
# Keye-VL and Keye-VL-1.5 frames follow each other with no text between them,
# or with timestamps; openPangu-VL's are separated by an end/start pair.
PER_FRAME = ("qwen3_vl", "glm4v", "glm_ocr", "keye", "keye_vl1_5", "openpangu_vl", "cohere_compass")
# Families whose image blocks sit at (s, i, j), H and W without the base (Isaac, as vLLM 0.33).
RAW_SPATIAL = ("isaac",)
# Families with HunYuan-VL's XD-RoPE: four axes, images as runs of h'(w' + 1) + 2
# image tokens whose grid part sits at (index, column, row, image ordinal).
XD = ("hunyuan_vl",)

# Seconds per temporal patch when second_per_grid_ts is not given: what each
# family's transformers 4.57 processor sends with its default fps and
# temporal_patch_size 2. Qwen2.5-VL: get_rope_index's own default 1.0.
# Qwen2.5-Omni: processor fps 2.0 -> 2 / 2.0. Qwen3-Omni: processor fps 1.0 ->
# 2 / 1.0 (vLLM 0.33 uses 2.0 as well). The Omni get_rope_index itself has no
# default: it indexes the missing argument and fails.
DEFAULT_SECONDS_PER_GRID = {"qwen2_5_vl": 1.0, "qwen2_5_omni": 1.0, "qwen3_omni": 2.0}


def describe(value) -> str:
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return f"{type(value).__name__} of dtype {value.dtype} and shape {tuple(value.shape)}"
    return f"{type(value).__name__} {value!r}"[:200]


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


# --------------------------------------------------------------------------
# Config: raw fields only
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Rules:
    """What the reference needs of a model config, checked once per call."""

    family: str
    merge: int
    image: int | None  # None for text_only
    video: int | None  # None for GLM (frames reuse the image token) and the image-only families
    vision_start: int | None
    vision_end: int | None
    audio: int | None
    audio_start: int | None
    audio_end: int | None
    video_start: int | None  # GLM <|begin_of_video|>, ERNIE <|VIDEO_START|>
    video_end: int | None  # GLM <|end_of_video|>, ERNIE <|VIDEO_END|>
    r: float | None  # tokens_per_second (Omni: position_id_per_seconds)
    n_window: int | None  # Qwen3-Omni audio encoder window (half of it, as in audio_config)
    tmerge: int = 1  # frames merged into one temporal patch of a video (ERNIE's temporal_conv_size)
    # SGLang 0.5's Qwen3-Omni rule: transformers' float32 positions, each truncated to an int (`_float.truncated`)
    float_carry: bool = False

    @property
    def image_only(self) -> bool:
        return self.family in IMAGE_ONLY

    @property
    def sequential(self) -> bool:
        return self.family in SEQUENTIAL

    @property
    def bracketed(self) -> bool:
        """Videos sit between video_start and video_end, and an image token there is the video's."""
        return self.video_start is not None

    @property
    def omni(self) -> bool:
        return self.family in OMNI

    @property
    def scaled(self) -> bool:
        return self.family in SCALED

    @property
    def per_frame(self) -> bool:
        return self.family in PER_FRAME

    @property
    def raw_spatial(self) -> bool:
        return self.family in RAW_SPATIAL

    @property
    def xd(self) -> bool:
        return self.family in XD


def _field(config, name: str, required: bool):
    value = getattr(config, name, None)
    if value is None:
        if required:
            raise ValueError(f"config.{name}: expected a value for {config.family}, got None")
        return None
    return value


def _token_id(config, name: str, required: bool) -> int | None:
    value = _field(config, name, required)
    if value is not None and (not _is_int(value) or value < 0):
        raise ValueError(f"config.{name}: expected a token id (int >= 0), got {describe(value)}")
    return None if value is None else int(value)


def read_config(config) -> Rules:
    """The raw fields of `config` that decide positions, checked for its family."""
    family = getattr(config, "family", None)
    if family not in REFERENCE_FAMILIES:
        raise ValueError(f"config.family: expected one of {', '.join(REFERENCE_FAMILIES)}, got {family!r}")
    merge = getattr(config, "spatial_merge_size", None)
    if not _is_int(merge) or merge < 1:
        raise ValueError(f"config.spatial_merge_size: expected a positive int, got {describe(merge)}")
    omni, glm, ernie = family in OMNI, family in GLM, family == "ernie4_5_moe_vl"
    r = n_window = None
    tmerge = 1
    if ernie:
        tmerge = getattr(config, "temporal_merge_size", None)
        if not _is_int(tmerge) or tmerge < 1:
            raise ValueError(f"config.temporal_merge_size: expected a positive int, got {describe(tmerge)}")
        tmerge = int(tmerge)
    if family in SCALED:
        r = _field(config, "tokens_per_second", True)
        if isinstance(r, (bool, np.bool_)) or not isinstance(r, (int, float, np.integer, np.floating)):
            raise TypeError(f"config.tokens_per_second: expected a positive number, got {describe(r)}")
        if not math.isfinite(float(r)) or float(r) <= 0:
            raise ValueError(f"config.tokens_per_second: expected a finite number > 0, got {r!r}")
        r = float(r)
    if family == "qwen3_omni":
        n_window = _field(config, "n_window", True)
        if not _is_int(n_window) or n_window < 1:
            raise ValueError(f"config.n_window: expected a positive int, got {describe(n_window)}")
        n_window = int(n_window)
    no_video = glm or family in IMAGE_ONLY or family in SEQUENTIAL
    ids = {
        "image": None if family in SEQUENTIAL else _token_id(config, "image_token_id", True),
        # ERNIE: videos may use the image token between its brackets, so its own video token is optional
        "video": None if no_video else _token_id(config, "video_token_id", not ernie),
        # The Omni audio-in-video block is recognised by its brackets; elsewhere they are text.
        "vision_start": _token_id(config, "vision_start_token_id", omni),
        "vision_end": _token_id(config, "vision_end_token_id", omni),
        "audio": _token_id(config, "audio_token_id", True) if omni else None,
        "audio_start": _token_id(config, "audio_start_token_id", True) if omni else None,
        "audio_end": _token_id(config, "audio_end_token_id", True) if omni else None,
        "video_start": _token_id(config, "video_start_token_id", True) if glm or ernie else None,
        "video_end": _token_id(config, "video_end_token_id", True) if glm or ernie else None,
    }
    special = {f"{name}_token_id": value for name, value in ids.items() if value is not None}
    if len(set(special.values())) != len(special):
        raise ValueError(f"config token ids: expected distinct ids, got {special}")
    # the one preset whose rule the reference states itself: SGLang 0.5 on Qwen3-Omni (docs/semantics.md, S1)
    float_carry = family == "qwen3_omni" and getattr(config, "semantics", None) == "sglang-0.5"
    return Rules(family=family, merge=int(merge), r=r, n_window=n_window, tmerge=tmerge, float_carry=float_carry, **ids)


# --------------------------------------------------------------------------
# Arrays
# --------------------------------------------------------------------------


def _has_bool(seq) -> bool:
    """True when a (nested) list/tuple holds a bool; numpy would silently make it 0/1."""
    return any(isinstance(x, (bool, np.bool_)) or (isinstance(x, (list, tuple)) and _has_bool(x)) for x in seq)


def as_tensor(name: str, value, kind: str, ndim: int) -> torch.Tensor:
    """A list/tuple, numpy array or torch tensor as a CPU tensor of integer (kind "int")
    or real (kind "real") numbers with `ndim` dimensions."""
    expected = f"{'integer' if kind == 'int' else 'real'} numbers in a {ndim}-D list, numpy array or torch tensor"
    if isinstance(value, torch.Tensor):
        dtype = value.dtype
        ok = dtype != torch.bool and not dtype.is_complex and (kind == "real" or not dtype.is_floating_point)
        tensor = value.detach().cpu()
    elif isinstance(value, (np.ndarray, list, tuple)):
        if isinstance(value, (list, tuple)) and _has_bool(value):
            raise TypeError(f"{name}: expected {expected}, got a bool element in {describe(value)}")
        try:  # an empty list carries no dtype: take it as int64
            array = np.asarray(value, dtype=np.int64 if isinstance(value, (list, tuple)) and not value else None)
        except ValueError as exc:  # ragged nested lists
            raise ValueError(f"{name}: expected {expected}, got a ragged sequence ({exc})") from None
        ok = array.dtype.kind in ("iu" if kind == "int" else "iuf")
        if ok and array.dtype.kind == "u" and array.size and int(array.max()) > _INT64_MAX:
            raise ValueError(f"{name}: expected values that fit in int64, got {describe(value)}")
        if ok and array.dtype.kind in "iu":
            array = array.astype(np.int64, copy=False)
        tensor = torch.from_numpy(array.copy()) if ok else None  # copy: contiguous, own memory
    else:
        raise TypeError(f"{name}: expected {expected}, got {describe(value)}")
    if not ok:
        raise TypeError(f"{name}: expected {expected}, got {describe(value)}")
    if tensor.dim() != ndim:
        raise ValueError(f"{name}: expected {expected}, got {tensor.dim()}-D shape {tuple(tensor.shape)}")
    return tensor.to(torch.int64) if kind == "int" else tensor


def is_empty(value) -> bool:
    """`None` or a sequence/array/tensor with no rows means "no items"."""
    if value is None:
        return True
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return value.ndim >= 1 and value.shape[0] == 0
    return isinstance(value, (list, tuple)) and len(value) == 0


def grids(name: str, value, merge: int, *, image: bool, tmerge: int = 1) -> list[tuple[int, int, int]]:
    """Validated LLM grids (t/tmerge, h/m, w/m) from (t, h, w) rows before merging."""
    if is_empty(value):
        return []
    grid = as_tensor(name, value, "int", 2)
    if grid.shape[1] != 3:
        raise ValueError(f"{name}: expected shape (n, 3) rows of (t, h, w), got shape {tuple(grid.shape)}")
    out = []
    for k, (t, h, w) in enumerate(grid.tolist()):
        where = f"{name}[{k}]"
        if min(t, h, w) < 1:
            raise ValueError(f"{where}: expected every dimension >= 1, got (t, h, w) = {(t, h, w)}")
        if h % merge or w % merge:
            raise ValueError(
                f"{where}: expected h and w divisible by spatial_merge_size {merge}, got (t, h, w) = {(t, h, w)}"
            )
        if image and t != 1:
            raise ValueError(f"{where}: expected t == 1 for an image, got (t, h, w) = {(t, h, w)}")
        if t % tmerge:
            raise ValueError(
                f"{where}: expected t divisible by temporal_merge_size {tmerge} (whole frame groups), "
                f"got (t, h, w) = {(t, h, w)}"
            )
        out.append((t // tmerge, h // merge, w // merge))
    return out


def video_scales(rules: Rules, value, videos: list) -> list[torch.Tensor | None]:
    """Seconds per temporal patch `sp` of every video as 0-d float32 tensors; None
    for families whose frames carry no time scale (Qwen2-VL numbers frames 0, 1,
    2, ...; Qwen3-VL and GLM write time as text)."""
    name = "second_per_grid_ts"
    if not rules.scaled:
        if value is not None:
            how = "time is written as text" if rules.per_frame else "frames are numbered 0, 1, 2, ..."
            raise ValueError(f"{name}: expected None for {rules.family} ({how}), got {describe(value)}")
        return [None] * len(videos)
    if value is None:
        sp = torch.full((len(videos),), DEFAULT_SECONDS_PER_GRID[rules.family], dtype=torch.float32)
    elif is_empty(value):
        sp = torch.zeros(0, dtype=torch.float32)
    else:
        sp = as_tensor(name, value, "real", 1).to(torch.float32)
    if sp.numel() != len(videos):
        raise ValueError(f"{name}: expected one value per video ({len(videos)}), got {sp.numel()}")
    bad = ~torch.isfinite(sp) | (sp < 0)
    if bool(bad.any()):
        k = int(bad.nonzero()[0])
        raise ValueError(f"{name}[{k}]: expected a finite number >= 0 (as float32), got {float(sp[k])}")
    for k, (t, _, _) in enumerate(videos):
        last = torch.tensor(t - 1) * sp[k] * rules.r  # the float32 ops of the temporal index
        if float(last) >= 2**31:
            raise ValueError(
                f"{name}[{k}]: expected (t - 1) * sp * tokens_per_second below 2**31, "
                f"got {float(last)} (sp {float(sp[k])} too large)"
            )
    return [sp[k] for k in range(len(videos))]


def audio_count(frames: int, n_window: int | None) -> int:
    """Audio tokens of a clip with `frames` mel frames (plain formula, may be <= 0).

    Without n_window (Qwen2.5-Omni): ((F - 1) // 2 + 1 - 2) // 2 + 1 (a stride-2
    convolution, then stride-2 pooling). With n_window (Qwen3-Omni), the encoder
    works on windows of W = 2 * n_window frames, 13 tokens per full window, and
    the rest r = F mod W gives g = (r - 1) // 2 + 1, then ((g - 1) // 2 + 1 - 1) // 2 + 1.
    transformers 4.57's `_get_feat_extract_output_lengths` (qwen3_omni_moe)
    hard-codes W = 100, which is the published n_window 50.
    """
    if n_window is None:
        return ((frames - 1) // 2 + 1 - 2) // 2 + 1
    window = 2 * n_window
    rest = frames % window
    g = (rest - 1) // 2 + 1
    return ((g - 1) // 2 + 1 - 1) // 2 + 1 + 13 * (frames // window)


def audio_lengths(rules: Rules, value) -> list[int]:
    """Audio token counts of every audio track, in prompt order."""
    name = "audio_feature_lengths"
    if not rules.omni:
        if not is_empty(value):
            raise ValueError(f"{name}: expected None or empty for {rules.family} (no audio), got {describe(value)}")
        return []
    if is_empty(value):
        return []
    counts = []
    for k, frames in enumerate(as_tensor(name, value, "int", 1).tolist()):
        n = audio_count(frames, rules.n_window) if frames > 0 else 0
        if n < 1:
            raise ValueError(f"{name}[{k}]: expected enough mel frames for one audio token, got {frames} ({n} tokens)")
        counts.append(n)
    return counts
