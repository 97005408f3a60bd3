"""Training parity: a drop-in for transformers' ``get_rope_index``, and `patch`.

`get_rope_index` returns what the installed transformers' own
``get_rope_index`` returns for a padded batch: the same ``(3, B, L)``
positions and ``(B, 1)`` deltas, with the same dtypes and the same values,
padding included. One jitted call computes the whole batch; transformers
loops in Python over every row and every item.

What differs between transformers lines, besides the position rules
themselves (the `semantics` presets, docs/semantics.md), is how a batch is
packed (the batch "convention"):

================  ==========================  ============================
                  transformers 4.x (4.57)     transformers 5.x (5.24)
================  ==========================  ============================
kept tokens       ``attention_mask == 1``     VL: ``attention_mask != 0``;
                                              Omni: ``== 1``
padding value     1; Qwen3-Omni 0             VL 0; Qwen2.5-Omni 1;
                                              Qwen3-Omni 0
delta length      VL: the padded row (D10);   the row's kept tokens
                  Omni: the kept tokens
no grids at all   ``attention_mask`` cumsum   VL: the per-row path (text);
                  (or arange, VL only)        Omni: the cumsum, as 4.x
================  ==========================  ============================

Qwen3-Omni positions are float32 (its video times are not truncated), and
so are its deltas. The Omni thinkers of both lines need ``attention_mask``;
here None means every token is kept.

`patch(model)` puts this function in place of a loaded model's own
``get_rope_index`` (on the module that owns it) and returns a handle that
undoes it.
"""

from __future__ import annotations

import functools
import importlib.metadata
import inspect

import attrs
import numpy as np
import torch

from .config import SUPPORTED_MODEL_TYPES, MRopeConfig
from .families import SEMANTICS
from .inputs import (
    EMPTY_FLOAT,
    EMPTY_GRID,
    EMPTY_INT,
    as_audio_lengths,
    as_grid,
    as_second_per_grid_ts,
    audio_token_counts,
)
from .kernels import layout_codes as C
from .kernels.jit_options import jit
from .kernels.layout_emit import NUM_STATE, S_COUNT
from .kernels.prompt import _fill_prompt
from .positions import prompt_positions

__all__ = [
    "CONVENTIONS",
    "Patch",
    "default_semantics",
    "get_rope_index",
    "installed_transformers",
    "mm_token_type_ids",
    "patch",
]

CONVENTIONS = ("transformers-4", "transformers-5")
_OMNI = ("qwen2_5_omni", "qwen3_omni")
_ERR_EMPTY_ROW = -1  # a row with no kept token (transformers cannot position it either)
_NO_OUT = np.zeros((3, 0, 0), np.int64)  # "write no positions" for the batch kernel
_CPU = torch.device("cpu")


# --------------------------------------------------------------------------
# Which transformers line
# --------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def installed_transformers() -> str | None:
    """The installed transformers version, or None (read from the package
    metadata: importing transformers itself takes seconds)."""
    try:
        return importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        return None


def _major(version: str | None) -> int | None:
    if version is None:
        return None
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() else None


def default_semantics() -> str:
    """The preset of the installed transformers: "transformers-5" for 5.x,
    "transformers-4.57" for 4.x (verified on 4.57.6), "reference" when
    transformers is not installed."""
    major = _major(installed_transformers())
    if major is None:
        return "reference"
    return "transformers-5" if major >= 5 else "transformers-4.57"


def _default_convention(semantics: str) -> str:
    """The batch convention of a transformers preset, else of the installed line."""
    if semantics == "transformers-5":
        return "transformers-5"
    if semantics == "transformers-4.57":
        return "transformers-4"
    major = _major(installed_transformers())
    return "transformers-5" if major is not None and major >= 5 else "transformers-4"


# --------------------------------------------------------------------------
# The batch kernel
# --------------------------------------------------------------------------


KEEP_ONE, KEEP_NONZERO, KEEP_ALL = 0, 1, 2  # which tokens a row keeps: mask == 1, mask != 0, every one


@jit
def _kept(mask, b, j, keep_rule) -> bool:
    return keep_rule == KEEP_ALL or (mask[b, j] == 1 if keep_rule == KEEP_ONE else mask[b, j] != 0)


@jit
def _gather(ids, mask, b, keep_rule, row_ids):
    """Row b's kept tokens: (count, first, one past the last, the ids). A row
    kept in one piece (left or right padding) is a slice of `ids`, else they
    are copied into `row_ids`."""
    width = ids.shape[1]
    if keep_rule == KEEP_ALL:
        return width, 0, width, ids[b]
    n = 0
    if keep_rule == KEEP_ONE:  # (branch-free counts: these loops vectorise)
        for j in range(width):
            n += mask[b, j] == 1
    else:
        for j in range(width):
            n += mask[b, j] != 0
    if n == 0:
        return 0, 0, 0, ids[b, :0]
    lo = 0
    while not _kept(mask, b, lo, keep_rule):
        lo += 1
    hi = width
    while not _kept(mask, b, hi - 1, keep_rule):
        hi -= 1
    if hi - lo == n:
        return n, lo, hi, ids[b, lo:hi]
    k = 0
    for j in range(lo, hi):
        if _kept(mask, b, j, keep_rule):
            row_ids[k] = ids[b, j]
            k += 1
    return n, lo, hi, row_ids[:n]


@jit
def _scatter(out, b, row_out, n, lo, hi, mask, keep_rule, fill):
    """Write a row's positions into ``out[:, b]``, `fill` where nothing is kept."""
    for r in range(3):
        if hi - lo == n:
            out[r, b, :lo] = fill
            out[r, b, lo:hi] = row_out[r]
            out[r, b, hi:] = fill
        else:
            k = 0
            for j in range(out.shape[2]):
                if _kept(mask, b, j, keep_rule):
                    out[r, b, j] = row_out[r, k]
                    k += 1
                else:
                    out[r, b, j] = fill


@jit
def _batch_kernel(
    out, deltas, kept, starts, ids, mask, keep_rule, fill, padded_delta,
    params, image_grid, video_grid, video_sp, audio_tokens, use_av, write,
):  # fmt: skip
    """Positions of every row of a padded batch, in one call (without `write`,
    the rows are only checked and their items counted; `out` is not touched).

    Row b's kept tokens (by `keep_rule` on ``mask[b]``) are positioned by the
    prompt builder with the items that remain (images, videos and audio
    tracks are consumed in batch order) and written into ``out[:, b]``;
    every other column gets `fill`. ``deltas[b]`` is max + 1 minus the kept
    tokens, or minus the row width with `padded_delta`; ``kept[b]`` the kept
    tokens; ``starts[b]`` the first image, video and audio item of row b
    (``starts[B]``: all items consumed). Returns (row, code, a, b, c, d):
    row == B when every row was positioned, else the row that failed and the
    builder's error code."""
    num_rows, width = ids.shape
    row_ids = np.empty(width, np.int64)
    buf = np.empty(3 * width, np.int64)
    state = np.empty(NUM_STATE, np.int64)
    p_image = 0
    p_video = 0
    p_audio = 0
    for b in range(num_rows):
        starts[b, 0] = p_image
        starts[b, 1] = p_video
        starts[b, 2] = p_audio
        n, lo, hi, row = _gather(ids, mask, b, keep_rule, row_ids)
        if n == 0:
            return b, _ERR_EMPTY_ROW, 0, 0, 0, 0
        row_out = buf[: 3 * n if write else 0].reshape((3, n if write else 0))
        code, a, bb, c, d, delta = _fill_prompt(
            state, row_out, row, params, image_grid[p_image:], video_grid[p_video:], video_sp[p_video:],
            audio_tokens[p_audio:], use_av,
        )  # fmt: skip
        # Items left over are the next rows' items, not an error here.
        if code != C.OK and code != C.ERR_MISSING_ITEMS:
            return b, code, a, bb, c, d
        p_image += state[S_COUNT + C.MOD_IMAGE]
        p_video += state[S_COUNT + C.MOD_VIDEO]
        p_audio += state[S_COUNT + C.MOD_AUDIO]
        kept[b] = n
        deltas[b] = delta + (n - width if padded_delta else 0)
        if write:
            _scatter(out, b, row_out, n, lo, hi, mask, keep_rule, fill)
    starts[num_rows, 0] = p_image
    starts[num_rows, 1] = p_video
    starts[num_rows, 2] = p_audio
    return num_rows, 0, 0, 0, 0, 0


# --------------------------------------------------------------------------
# Qwen3-Omni's float32 positions, as transformers computes them
# --------------------------------------------------------------------------

_F32_ONE = np.float32(1)
_F32_ZERO = np.float32(0)


@jit
def _float_row(out, ids, params, image_grid, video_grid, video_sp, audio_tokens, use_av):
    """One row of Qwen3-Omni positions in float32, step by step as transformers
    (4.57 and 5.x) computes them: each item is bos (vision_start, audio_start,
    or both for audio in video), its content at base s, and eos (1 or 2) at 1 +
    the maximum of the last piece appended; video frame f sits at
    s + float32(float32(f * sp) * r), untruncated; an audio-in-video block is
    the merge of its video and audio positions, a video token first when its
    value is <= the audio token's. Every sum is rounded to float32 where
    transformers rounds it. Items are taken in order from the grids given.
    Returns 0, or 1 when the row is not laid out as transformers assumes (the
    caller then asks the torch reference, which names the problem)."""
    n = ids.shape[0]
    merge = np.int64(params[C.P_MERGE])
    image_id = np.int64(params[C.P_IMAGE])
    video_id = np.int64(params[C.P_VIDEO])
    audio_id = np.int64(params[C.P_AUDIO])
    vision_start = np.int64(params[C.P_VISION_START])
    vision_end = np.int64(params[C.P_VISION_END])
    audio_start = np.int64(params[C.P_AUDIO_START])
    audio_end = np.int64(params[C.P_AUDIO_END])
    r = np.float32(params[C.P_SCALE_R])
    n_image = 0
    n_video = 0
    n_audio = 0
    st = 0
    prev_max = _F32_ZERO  # maximum of the last piece appended
    has_prev = False
    while True:
        q = st
        while q < n and ids[q] != vision_start and ids[q] != audio_start:
            q += 1
        if q >= n:
            break
        base = prev_max + _F32_ONE if has_prev else _F32_ZERO
        for k in range(q - st):
            value = np.float32(k) + base
            out[0, st + k] = value
            out[1, st + k] = value
            out[2, st + k] = value
        base = base + np.float32(q - st)
        paired = ids[q] == vision_start and q + 1 < n and ids[q + 1] == audio_start
        bos = 2 if paired else 1
        for k in range(bos):
            value = np.float32(k) + base
            out[0, q + k] = value
            out[1, q + k] = value
            out[2, q + k] = value
        base = base + np.float32(bos)
        c = q + bos
        eos = 1
        if ids[q] == audio_start:  # an audio clip
            if n_audio >= audio_tokens.shape[0]:
                return 1
            m = audio_tokens[n_audio]
            n_audio += 1
            end = c + m
            if end >= n or ids[end] != audio_end:
                return 1
            for a in range(m):
                value = np.float32(a) + base
                out[0, c + a] = value
                out[1, c + a] = value
                out[2, c + a] = value
            last = np.float32(m - 1) + base
        elif paired:  # audio in video: transformers merges by value, whatever the tokens
            if n_video >= video_grid.shape[0] or n_audio >= audio_tokens.shape[0]:
                return 1
            hh = video_grid[n_video, 1] // merge
            ww = video_grid[n_video, 2] // merge
            num_video = video_grid[n_video, 0] * hh * ww
            sp = video_sp[n_video]
            m = audio_tokens[n_audio]
            n_video += 1
            n_audio += 1
            end = c + num_video + m
            if end + 1 >= n or ids[end] != audio_end or ids[end + 1] != vision_end:
                return 1
            v = 0
            a = 0
            k = c
            while v < num_video and a < m:
                f = v // (hh * ww)
                vt = (np.float32(f) * sp) * r + base
                at = np.float32(a) + base
                if vt <= at:
                    out[0, k] = vt
                    out[1, k] = np.float32((v // ww) % hh) + base
                    out[2, k] = np.float32(v % ww) + base
                    v += 1
                else:
                    out[0, k] = at
                    out[1, k] = at
                    out[2, k] = at
                    a += 1
                k += 1
            last = np.float32(-1)
            while v < num_video:  # the rest of the video: the last piece
                f = v // (hh * ww)
                vt = (np.float32(f) * sp) * r + base
                vh = np.float32((v // ww) % hh) + base
                vw = np.float32(v % ww) + base
                out[0, k] = vt
                out[1, k] = vh
                out[2, k] = vw
                last = max(last, vt, vh, vw)
                v += 1
                k += 1
            while a < m:  # or the rest of the audio
                at = np.float32(a) + base
                out[0, k] = at
                out[1, k] = at
                out[2, k] = at
                last = max(last, at)
                a += 1
                k += 1
            eos = 2
        else:  # an image or a video: one block
            if c >= n:
                return 1
            if ids[c] == image_id and n_image < image_grid.shape[0]:
                t, h, w = image_grid[n_image, 0], image_grid[n_image, 1], image_grid[n_image, 2]
                sp = _F32_ZERO
                n_image += 1
            elif ids[c] == video_id and n_video < video_grid.shape[0]:
                t, h, w = video_grid[n_video, 0], video_grid[n_video, 1], video_grid[n_video, 2]
                sp = video_sp[n_video]
                n_video += 1
            else:
                return 1
            hh = h // merge
            ww = w // merge
            end = c + t * hh * ww
            if end >= n or ids[end] != vision_end:
                return 1
            last = np.float32(-1)
            k = c
            for f in range(t):
                vt = (np.float32(f) * sp) * r + base
                for i in range(hh):
                    vh = np.float32(i) + base
                    for j in range(ww):
                        vw = np.float32(j) + base
                        out[0, k] = vt
                        out[1, k] = vh
                        out[2, k] = vw
                        k += 1
                last = max(last, vt, vh, np.float32(ww - 1) + base)
        base = last + _F32_ONE
        for k in range(eos):
            value = np.float32(k) + base
            out[0, end + k] = value
            out[1, end + k] = value
            out[2, end + k] = value
        prev_max = np.float32(eos - 1) + base
        has_prev = True
        st = end + eos
    if st < n:
        base = prev_max + _F32_ONE if has_prev else _F32_ZERO
        for k in range(n - st):
            value = np.float32(k) + base
            out[0, st + k] = value
            out[1, st + k] = value
            out[2, st + k] = value
    return 0


@jit
def _float_batch(positions, deltas, rows, starts, ids, mask, keep_rule, params, image_grid, video_grid, video_sp, audio_tokens, use_av):  # fmt: skip
    """`_float_row` for the rows listed in `rows` (their items from `starts`),
    written into the float32 ``positions[:, b]``; ``deltas[b]`` = max + 1 - n
    in float32. Returns the first row refused, or -1."""
    width = ids.shape[1]
    row_ids = np.empty(width, np.int64)
    buf = np.empty(3 * width, np.float32)
    for b in rows:
        n, lo, hi, row = _gather(ids, mask, b, keep_rule, row_ids)
        row_out = buf[: 3 * n].reshape((3, n))
        code = _float_row(
            row_out, row, params, image_grid[starts[b, 0] : starts[b + 1, 0]], video_grid[starts[b, 1] : starts[b + 1, 1]],
            video_sp[starts[b, 1] : starts[b + 1, 1]], audio_tokens[starts[b, 2] : starts[b + 1, 2]], use_av,
        )  # fmt: skip
        if code:
            return b
        top = row_out[0, 0]
        for r in range(3):
            for k in range(n):
                top = max(top, row_out[r, k])
        deltas[b] = (top + _F32_ONE) - np.float32(n)
        _scatter(positions, b, row_out, n, lo, hi, mask, keep_rule, _F32_ZERO)
    return -1


# --------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------


def _describe(value) -> str:
    if isinstance(value, (np.ndarray, torch.Tensor)):
        return f"{type(value).__name__} of dtype {value.dtype} and shape {tuple(value.shape)}"
    return f"{type(value).__name__} {value!r}"[:200]


def _numpy(value, name: str) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        if value.device.type == "cpu" and not value.requires_grad:
            return value.numpy()  # a view
        return value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, (list, tuple)):
        try:
            return np.array(value)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{name}: expected a rectangular (batch, length) array, got {_describe(value)} ({exc})") from None
    raise TypeError(f"{name}: expected a torch tensor, numpy array or list of rows, got {_describe(value)}")


def _input_ids(input_ids) -> tuple[np.ndarray, torch.dtype, torch.device]:
    """(int64 (B, L) array, the dtype positions take, the device results go to)."""
    if type(input_ids) is torch.Tensor and input_ids.dtype is torch.int64 and input_ids.dim() == 2:
        if input_ids.device.type == "cpu" and input_ids.is_contiguous():  # what a training step passes
            return input_ids.numpy(), torch.int64, _CPU
    arr = _numpy(input_ids, "input_ids")
    if arr.ndim != 2:
        raise ValueError(f"input_ids: expected shape (batch, length), got {_describe(input_ids)}")
    if arr.dtype.kind not in "iu" or arr.dtype == np.bool_:
        raise TypeError(f"input_ids: expected integer token ids, got {_describe(input_ids)}")
    if isinstance(input_ids, torch.Tensor):
        dtype, device = input_ids.dtype, input_ids.device
    else:
        dtype, device = torch.int64, torch.device("cpu")
    return np.ascontiguousarray(arr, dtype=np.int64), dtype, device


def _mask(attention_mask, shape) -> np.ndarray | None:
    if attention_mask is None:
        return None
    if type(attention_mask) is torch.Tensor and attention_mask.dtype is torch.int64 and attention_mask.shape == shape:
        if attention_mask.device.type == "cpu" and attention_mask.is_contiguous():
            return attention_mask.numpy()
    arr = _numpy(attention_mask, "attention_mask")
    if arr.shape != shape:
        raise ValueError(f"attention_mask: expected shape {shape} (that of input_ids), got {_describe(attention_mask)}")
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"attention_mask: expected 0/1 numbers or bools, got {_describe(attention_mask)}")
    return arr


def _grid_or_none(value, name: str):
    """None stays None (transformers tells "no grids" from an empty tensor)."""
    return None if value is None else as_grid(value, name)


def mm_token_type_ids(config, input_ids) -> torch.Tensor:
    """The ``mm_token_type_ids`` transformers 5.x processors return with the
    ids: 0 text, 1 image, 2 video (GLM: an image token inside
    begin/end_of_video is a video frame), 3 audio (Omni). (B, L) int64."""
    cfg = config if type(config) is MRopeConfig else MRopeConfig.from_hf_config(config)
    ids, _, device = _input_ids(input_ids)
    return torch.from_numpy(_type_ids(cfg, ids)).to(device)


def _type_ids(cfg: MRopeConfig, ids: np.ndarray) -> np.ndarray:
    types = np.zeros(ids.shape, np.int64)
    image = ids == cfg.image_token_id
    if cfg.spec.video_brackets:
        inside = np.cumsum(ids == cfg.video_start_token_id, axis=1) > np.cumsum(ids == cfg.video_end_token_id, axis=1)
        types[image & ~inside] = 1
        types[image & inside] = 2
    else:
        types[image] = 1
        types[ids == cfg.video_token_id] = 2
    if cfg.audio_token_id is not None:
        types[ids == cfg.audio_token_id] = 3
    return types


def _check_types(cfg: MRopeConfig, ids: np.ndarray, keep: np.ndarray, given) -> None:
    """transformers 5.x groups tokens by ``mm_token_type_ids``; we read the
    ids. They agree when the types are the processor's: refuse others."""
    arr = _numpy(given, "mm_token_type_ids")
    if arr.shape != ids.shape:
        raise ValueError(f"mm_token_type_ids: expected shape {ids.shape} (that of input_ids), got {_describe(given)}")
    expected = _type_ids(cfg, ids)
    bad = (arr != expected) & keep
    if bad.any():
        b, j = (int(v) for v in np.argwhere(bad)[0])
        raise ValueError(
            f"mm_token_type_ids: expected the processor's types (0 text, 1 image, 2 video) of input_ids, "
            f"got {int(arr[b, j])} at row {b}, token {j} (id {int(ids[b, j])}, type {int(expected[b, j])})"
        )


# --------------------------------------------------------------------------
# The drop-in
# --------------------------------------------------------------------------


def _config(config, semantics: str | None) -> MRopeConfig:
    if semantics is not None and semantics not in SEMANTICS:
        raise ValueError(f"semantics: expected one of {', '.join(SEMANTICS)}, got {semantics!r}")
    if type(config) is MRopeConfig:
        if semantics is None or semantics == config.semantics:
            return config
        return attrs.evolve(config, semantics=semantics)
    return MRopeConfig.from_hf_config(config, semantics=default_semantics() if semantics is None else semantics)


@functools.lru_cache(maxsize=64)
def _unit_rate(config: MRopeConfig) -> MRopeConfig:
    return attrs.evolve(config, tokens_per_second=1.0)


def get_rope_index(
    config,
    input_ids,
    image_grid_thw=None,
    video_grid_thw=None,
    attention_mask=None,
    *,
    second_per_grid_ts=None,
    audio_feature_lengths=None,
    use_audio_in_video: bool = False,
    video_timestamps=None,
    mm_token_type_ids=None,
    semantics: str | None = None,
    convention: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' ``get_rope_index`` for a padded batch:
    ``(position_ids (3, B, L), mrope_position_deltas (B, 1))``.

    `config`: anything `MRopeConfig.from_hf_config` reads (a config.json
    path, a model folder, a dict, a transformers config) or an
    `MRopeConfig`. `input_ids` (B, L), left- or right-padded or not;
    `attention_mask` (B, L) or None. Grids are (t, h, w) before merging,
    concatenated over the rows in row order, as transformers takes them (one
    row per image and per video); `second_per_grid_ts` one value per video;
    `audio_feature_lengths` (Omni) one mel-frame count per audio track,
    video tracks included, in batch order. `video_timestamps` is accepted
    and unused (Qwen3-VL and GLM tell time in the text).
    `mm_token_type_ids` (transformers 5.x), when given, must be the
    processor's types of `input_ids`.

    `semantics`: the position rules (default: the installed transformers'
    preset, `default_semantics()`). `convention`: how the batch is packed,
    "transformers-4" or "transformers-5" (default: that of a transformers
    preset, else of the installed line); see the module docstring.
    Positions are int64 (the dtype of `input_ids` when it is a tensor), and
    float32 for Qwen3-Omni, as transformers returns them; results are on
    `input_ids`' device.
    """
    cfg = _config(config, semantics)
    if convention is None:
        convention = _default_convention(cfg.semantics)
    elif convention not in CONVENTIONS:
        raise ValueError(f"convention: expected one of {', '.join(CONVENTIONS)}, got {convention!r}")
    del video_timestamps  # time is text for Qwen3-VL and GLM
    if not isinstance(use_audio_in_video, (bool, np.bool_)):
        raise TypeError(f"use_audio_in_video: expected a bool, got {_describe(use_audio_in_video)}")
    ids, dtype, device = _input_ids(input_ids)
    mask = _mask(attention_mask, ids.shape)
    family = cfg.family
    omni = family in _OMNI
    v5 = convention == "transformers-5"
    images = _grid_or_none(image_grid_thw, "image_grid_thw")
    videos = _grid_or_none(video_grid_thw, "video_grid_thw")
    if images is None and videos is None and (omni or not v5):
        return _fallback(cfg, ids, mask, dtype, device, v5)
    if mask is None:
        mask, rule = ids, KEEP_ALL  # (the kernel never reads it)
    else:
        rule = KEEP_NONZERO if v5 and not omni else KEEP_ONE
        if mask.dtype.kind == "f":  # the rule on the floats, as transformers applies it
            mask, rule = (mask != 0 if rule == KEEP_NONZERO else mask == 1).astype(np.int64), KEEP_NONZERO
        elif mask.dtype != np.int64 or not mask.flags.c_contiguous:
            mask = np.ascontiguousarray(mask, dtype=np.int64)
    if mm_token_type_ids is not None and not omni:
        _check_types(cfg, ids, _keep(mask, rule), mm_token_type_ids)
    images = EMPTY_GRID if images is None else images
    videos = EMPTY_GRID if videos is None else videos
    run_cfg = cfg
    if second_per_grid_ts is None and videos.shape[0] == 0:
        sp = EMPTY_FLOAT
    else:
        sp = as_second_per_grid_ts(second_per_grid_ts, videos.shape[0], cfg)
        if family == "qwen2_5_vl" and v5 and sp.shape[0]:
            # transformers 5 scales frame f by (r * sp) rounded to float32,
            # not (f * sp) * r: position the videos with r = 1 and that product
            sp = (sp * np.float32(cfg.tokens_per_second)).astype(np.float32)
            run_cfg = _unit_rate(cfg)
    lengths = EMPTY_INT if audio_feature_lengths is None else as_audio_lengths(audio_feature_lengths, cfg)
    audio = audio_token_counts(cfg, lengths)
    num_rows, width = ids.shape
    fill = 0 if family == "qwen3_omni" or (v5 and not omni) else 1
    # Qwen3-Omni under a transformers preset: float32 times, computed below
    floats = family == "qwen3_omni" and cfg.semantics in ("transformers-4.57", "transformers-5")
    out = _NO_OUT if floats else np.empty((3, num_rows, width), np.int64)
    deltas = np.empty(num_rows, np.int64)
    kept = np.empty(num_rows, np.int64)
    starts = np.zeros((num_rows + 1, 3), np.int64)
    use_av = bool(use_audio_in_video)
    padded_delta = not omni and not v5  # D10: transformers 4.x VL models take the padded length
    row, code, a, b, c, d = _batch_kernel(
        out, deltas, kept, starts, ids, mask, rule, fill, padded_delta,
        run_cfg.kernel_params, images, videos, sp, audio, use_av, not floats,
    )  # fmt: skip
    if row < num_rows:
        _row_error(run_cfg, row, code, ids, _keep(mask, rule), images, videos, sp, lengths, starts, use_av)
    _check_all_used(starts[num_rows], images, videos, audio)
    if floats:
        return _qwen3_omni_floats(cfg, ids, mask, rule, images, videos, sp, audio, lengths, starts, use_av, device)
    if family == "qwen3_omni":  # truncated times, as float32 (the dtype transformers' model code expects)
        return (
            torch.from_numpy(out.astype(np.float32)).to(device),
            torch.from_numpy(deltas.astype(np.float32)).unsqueeze(1).to(device),
        )
    positions = torch.from_numpy(out)
    if dtype is not torch.int64:
        positions = positions.to(dtype)
    deltas = torch.from_numpy(deltas.reshape(num_rows, 1))
    if device.type != "cpu":
        return positions.to(device), deltas.to(device)
    return positions, deltas


def _keep(mask: np.ndarray, rule: int) -> np.ndarray:
    """The kept tokens as a (B, L) bool array."""
    if rule == KEEP_ALL:
        return np.ones(mask.shape, np.bool_)
    return mask == 1 if rule == KEEP_ONE else mask != 0


def _fallback(cfg: MRopeConfig, ids, mask, dtype, device, v5: bool):
    """transformers' path without grids: positions from the attention mask's
    cumsum (pads 1), or an arange when there is no mask (VL, 4.x)."""
    num_rows, width = ids.shape
    if cfg.family not in _OMNI and mask is None:
        positions = torch.arange(width, dtype=torch.int64).view(1, 1, -1).expand(3, num_rows, -1)
        return positions.to(device), torch.zeros((num_rows, 1), dtype=dtype, device=device)
    if mask is None:  # the Omni thinkers always pass one
        mask = np.ones(ids.shape, np.int64)
    as_float = cfg.family == "qwen3_omni"
    values = mask.astype(np.float32 if as_float else np.int64)
    pos = np.cumsum(values, axis=-1, dtype=values.dtype) - values.dtype.type(1)
    pos[mask == 0] = 1
    top = pos.max(axis=-1, keepdims=True)
    if cfg.family in _OMNI:
        deltas = top + values.dtype.type(1) - mask.astype(np.int64).sum(axis=-1, keepdims=True).astype(values.dtype)
    else:
        deltas = top + 1 - width
    positions = torch.from_numpy(np.ascontiguousarray(np.broadcast_to(pos, (3, num_rows, width))))
    return positions.to(device), torch.from_numpy(np.ascontiguousarray(deltas)).to(device)


def _row_items(starts, row, images, videos, sp, lengths, end: bool):
    """The items of `row` (end) or every item from its first one on."""
    lo = starts[row]
    hi = starts[row + 1] if end else (images.shape[0], videos.shape[0], lengths.shape[0])
    return {
        "image_grid_thw": images[lo[0] : hi[0]],
        "video_grid_thw": videos[lo[1] : hi[1]],
        "second_per_grid_ts": sp[lo[1] : hi[1]] if sp.shape[0] else None,
        "audio_feature_lengths": lengths[lo[2] : hi[2]],
    }


def _row_error(cfg, row, code, ids, keep, images, videos, sp, lengths, starts, use_av) -> None:
    """Raise the error of a row the batch kernel refused, with the message
    `prompt_positions` gives for it (the row's items counted from its first)."""
    if code == _ERR_EMPTY_ROW:
        raise ValueError(f"attention_mask: expected at least one kept token in every row, got none in row {row}")
    items = _row_items(starts, row, images, videos, sp, lengths, end=False)
    try:  # (a truncated second_per_grid_ts truncates to itself)
        prompt_positions(cfg, ids[row][keep[row]], use_audio_in_video=use_av, **items)
    except (ValueError, TypeError) as exc:
        raise type(exc)(f"input_ids row {row} (items counted from its first): {exc}") from None
    raise AssertionError(f"get_rope_index: the batch kernel refused row {row} (code {code}) that prompt_positions accepts")


def _check_all_used(used, images, videos, audio) -> None:
    used = used.tolist()
    if used == [images.shape[0], videos.shape[0], audio.shape[0]]:
        return
    for name, n, total in (
        ("image_grid_thw", used[0], images.shape[0]),
        ("video_grid_thw", used[1], videos.shape[0]),
        ("audio_feature_lengths", used[2], audio.shape[0]),
    ):
        if n != total:
            raise ValueError(f"{name}: expected one entry per item in input_ids ({int(n)}), got {int(total)}")


def _qwen3_omni_floats(cfg, ids, mask, rule, images, videos, sp, audio, lengths, starts, use_av, device):
    """Qwen3-Omni as transformers returns it: float32 positions (times kept
    fractional) and float32 deltas, every row by `_float_row`."""
    num_rows, width = ids.shape
    positions = np.empty((3, num_rows, width), np.float32)
    deltas = np.empty(num_rows, np.float32)
    rows = np.arange(num_rows, dtype=np.int64)
    refused = _float_batch(positions, deltas, rows, starts, ids, mask, rule, cfg.kernel_params, images, videos, sp, audio, use_av)  # fmt: skip
    if refused >= 0:  # not laid out as transformers assumes: the reference says why
        from . import reference

        items = _row_items(starts, refused, images, videos, sp, lengths, end=True)
        row_ids = ids[refused][_keep(mask, rule)[refused]]
        try:
            reference.prompt_positions(cfg, row_ids, use_audio_in_video=use_av, float_positions=True, **items)
        except (ValueError, TypeError) as exc:
            raise type(exc)(f"input_ids row {refused}: {exc}") from None
        raise AssertionError(f"get_rope_index: row {refused}: the float path refused what the reference accepts")
    return torch.from_numpy(positions).to(device), torch.from_numpy(deltas).unsqueeze(1).to(device)


# --------------------------------------------------------------------------
# patch
# --------------------------------------------------------------------------

# transformers' argument names -> ours
_ARGUMENTS = {
    "input_ids": "input_ids",
    "image_grid_thw": "image_grid_thw",
    "video_grid_thw": "video_grid_thw",
    "attention_mask": "attention_mask",
    "second_per_grid_ts": "second_per_grid_ts",
    "second_per_grids": "second_per_grid_ts",
    "audio_seqlens": "audio_feature_lengths",
    "use_audio_in_video": "use_audio_in_video",
    "mm_token_type_ids": "mm_token_type_ids",
}


class Patch:
    """What `patch` changed: `undo()` (or calling it, or leaving a ``with``
    block) puts every patched module's own ``get_rope_index`` back."""

    def __init__(self, entries: list[tuple[object, str, object]]) -> None:
        self._entries = entries  # (module, dotted name, what its __dict__ held, or _MISSING)

    @property
    def modules(self) -> list[str]:
        """Dotted names of the patched modules ("" for the model itself)."""
        return [name for _, name, _ in self._entries]

    def undo(self) -> None:
        for module, _, previous in reversed(self._entries):
            if previous is _MISSING:
                module.__dict__.pop("get_rope_index", None)
            else:
                module.__dict__["get_rope_index"] = previous
        self._entries = []

    __call__ = undo

    def __enter__(self) -> "Patch":
        return self

    def __exit__(self, *exc) -> None:
        self.undo()


_MISSING = object()


def _candidates(model):
    """(dotted name, module) of the model and its submodules."""
    if isinstance(model, torch.nn.Module):
        yield from model.named_modules()
        return
    seen = set()
    stack = [("", model)]
    while stack:
        name, obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        yield name, obj
        for attr in ("model", "thinker"):
            sub = getattr(obj, attr, None)
            if sub is not None:
                stack.append((f"{name}.{attr}" if name else attr, sub))


def _model_type(module) -> str | None:
    config = getattr(module, "config", None)
    return getattr(config, "model_type", None) if config is not None else None


def patch(model, *, semantics: str | None = None) -> Patch:
    """Replace a loaded transformers model's ``get_rope_index`` with
    `get_rope_index` here, in place, on every module that owns one and whose
    config is a supported model type (``model.model`` of a Qwen2-VL
    ForConditionalGeneration, the thinker of an Omni model; an Omni talker
    keeps its own). Returns a `Patch`: ``undo()``, call it, or use it as a
    context manager.

    `semantics` picks the position rules (default: the installed
    transformers' preset); the batch convention is always the installed
    transformers line's, since the model's own code consumes the result.
    Raises ValueError for a model with no supported module.
    """
    if semantics is not None and semantics not in SEMANTICS:
        raise ValueError(f"semantics: expected one of {', '.join(SEMANTICS)}, got {semantics!r}")
    major = _major(installed_transformers())
    convention = "transformers-5" if major is not None and major >= 5 else "transformers-4"
    entries = []
    found_types = []
    for name, module in _candidates(model):
        own = getattr(type(module), "get_rope_index", None)
        if not callable(own):
            continue
        model_type = _model_type(module)
        found_types.append(model_type)
        if model_type not in SUPPORTED_MODEL_TYPES:
            continue
        cfg = MRopeConfig.from_hf_config(module.config, semantics=default_semantics() if semantics is None else semantics)
        previous = module.__dict__.get("get_rope_index", _MISSING)
        module.__dict__["get_rope_index"] = _replacement(cfg, convention, inspect.signature(own))
        entries.append((module, name, previous))
    if not entries:
        what = type(model).__name__
        seen = f" (modules with a get_rope_index: model types {sorted(set(map(str, found_types)))})" if found_types else ""
        raise ValueError(
            f"model: expected a transformers model of a supported family ({', '.join(sorted(SUPPORTED_MODEL_TYPES))}) "
            f"with a get_rope_index, got {what}{seen}"
        )
    return Patch(entries)


def _replacement(cfg: MRopeConfig, convention: str, signature: inspect.Signature):
    """A function with transformers' own signature (minus self) that calls ours."""
    params = list(signature.parameters.values())[1:]  # drop self
    bound_signature = signature.replace(parameters=params)

    def get_rope_index_patched(*args, **kwargs):
        bound = bound_signature.bind(*args, **kwargs)
        ours = {}
        for name, value in bound.arguments.items():
            if name in _ARGUMENTS:
                ours[_ARGUMENTS[name]] = value
            elif bound_signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
                for key, extra in value.items():  # transformers 5 passes its model kwargs through
                    if key in _ARGUMENTS and _ARGUMENTS[key] not in ours:
                        ours[_ARGUMENTS[key]] = extra
        ids = ours.pop("input_ids", None)
        if ids is None:
            raise ValueError("input_ids: expected the token ids (get_rope_index needs them), got None")
        use_av = ours.pop("use_audio_in_video", False)
        return get_rope_index(
            cfg, ids, use_audio_in_video=bool(use_av) if use_av is not None else False, convention=convention, **ours
        )

    get_rope_index_patched.__signature__ = bound_signature
    get_rope_index_patched.__doc__ = f"mrope_tracker.hf.get_rope_index ({cfg.family}, {cfg.semantics}), patched in."
    return get_rope_index_patched
