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


@jit
def _batch_kernel(out, deltas, starts, ids, keep, params, image_grid, video_grid, video_sp, audio_tokens, use_av):
    """Positions of every row of a padded batch, in one call.

    Row b's kept tokens (``keep[b]``) are gathered, positioned by the prompt
    builder with the items that remain (images, videos, audio tracks are
    consumed in batch order), and scattered back into ``out[:, b]``; padding
    is left as the caller filled it. ``deltas[b]`` is max + 1 - kept tokens;
    ``starts[b]`` the first image, video and audio item of row b
    (``starts[B]`` the totals consumed). Returns (row, code, a, b, c, d):
    row == B when every row was positioned, else the row that failed."""
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
        n = 0
        for j in range(width):
            if keep[b, j]:
                row_ids[n] = ids[b, j]
                n += 1
        if n == 0:
            return b, _ERR_EMPTY_ROW, 0, 0, 0, 0
        row_out = buf[: 3 * n].reshape((3, n))
        code, a, bb, c, d, delta = _fill_prompt(
            state, row_out, row_ids[:n], params, image_grid[p_image:], video_grid[p_video:], video_sp[p_video:],
            audio_tokens[p_audio:], use_av,
        )  # fmt: skip
        # Items left over are the next rows' items, not an error here.
        if code != C.OK and code != C.ERR_MISSING_ITEMS:
            return b, code, a, bb, c, d
        p_image += state[S_COUNT + C.MOD_IMAGE]
        p_video += state[S_COUNT + C.MOD_VIDEO]
        p_audio += state[S_COUNT + C.MOD_AUDIO]
        deltas[b] = delta
        k = 0
        for j in range(width):
            if keep[b, j]:
                out[0, b, j] = row_out[0, k]
                out[1, b, j] = row_out[1, k]
                out[2, b, j] = row_out[2, k]
                k += 1
    starts[num_rows, 0] = p_image
    starts[num_rows, 1] = p_video
    starts[num_rows, 2] = p_audio
    return num_rows, 0, 0, 0, 0, 0


# --------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------


def _describe(value) -> str:
    if isinstance(value, (np.ndarray, torch.Tensor)):
        return f"{type(value).__name__} of dtype {value.dtype} and shape {tuple(value.shape)}"
    return f"{type(value).__name__} {value!r}"[:200]


def _numpy(value, name: str) -> np.ndarray:
    if isinstance(value, torch.Tensor):
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
        keep = np.ones(ids.shape, np.bool_)
    elif v5 and not omni:
        keep = mask != 0
    else:
        keep = mask == 1
    if mm_token_type_ids is not None and not omni:
        _check_types(cfg, ids, keep, mm_token_type_ids)
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
    out = np.full((3, num_rows, width), fill, np.int64)
    deltas = np.empty(num_rows, np.int64)
    starts = np.zeros((num_rows + 1, 3), np.int64)
    row, code, a, b, c, d = _batch_kernel(
        out, deltas, starts, ids, keep, run_cfg.kernel_params, images, videos, sp, audio, bool(use_audio_in_video)
    )
    if row < num_rows:
        _row_error(run_cfg, row, code, ids, keep, images, videos, sp, lengths, starts, bool(use_audio_in_video))
    _check_all_used(starts[num_rows], images, videos, audio)
    kept = keep.sum(axis=1)
    if not omni and not v5:
        deltas += kept - width  # D10: transformers 4.x VL models take the padded length
    if family == "qwen3_omni":
        return _qwen3_omni_floats(
            cfg, out, deltas, ids, keep, kept, images, videos, sp, lengths, starts, bool(use_audio_in_video), device
        )
    positions = torch.from_numpy(out)
    if dtype != torch.int64:
        positions = positions.to(dtype)
    return positions.to(device), torch.from_numpy(deltas).unsqueeze(1).to(device)


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
    for name, n, total in (
        ("image_grid_thw", used[0], images.shape[0]),
        ("video_grid_thw", used[1], videos.shape[0]),
        ("audio_feature_lengths", used[2], audio.shape[0]),
    ):
        if n != total:
            raise ValueError(f"{name}: expected one entry per item in input_ids ({int(n)}), got {int(total)}")


def _fractional_videos(cfg: MRopeConfig, videos: np.ndarray, sp: np.ndarray) -> np.ndarray:
    """Per video, whether some frame's float32 time f * sp * r is not an integer
    (transformers keeps Qwen3-Omni's times as float32, unrounded)."""
    r = np.float32(cfg.tokens_per_second)
    out = np.zeros(videos.shape[0], np.bool_)
    for k in range(videos.shape[0]):
        times = (np.arange(videos[k, 0], dtype=np.float32) * sp[k]).astype(np.float32) * r
        out[k] = bool(np.any(times != np.floor(times)))
    return out


def _qwen3_omni_floats(cfg, out, deltas, ids, keep, kept, images, videos, sp, lengths, starts, use_av, device):
    """Qwen3-Omni as transformers returns it: float32 positions and deltas.
    Rows whose videos all sit at integral times are the integer positions;
    under a transformers preset the others come from the torch reference's
    float mode (the other presets truncate the times, D8)."""
    from . import reference

    positions = out.astype(np.float32)
    float_deltas = deltas.astype(np.float32)
    # transformers keeps the fractions; the other presets truncate them (integer positions as float32)
    keeps_fractions = cfg.semantics in ("transformers-4.57", "transformers-5")
    fractional = _fractional_videos(cfg, videos, sp) if videos.shape[0] and keeps_fractions else None
    for row in range(ids.shape[0]):
        lo, hi = starts[row, 1], starts[row + 1, 1]
        if fractional is None or not fractional[lo:hi].any():
            continue
        items = _row_items(starts, row, images, videos, sp, lengths, end=True)
        pos, _ = reference.prompt_positions(
            cfg, ids[row][keep[row]], use_audio_in_video=use_av, float_positions=True, **items
        )
        pos = pos.numpy()
        positions[:, row, keep[row]] = pos
        # transformers: max() + 1 - n on float32 tensors
        float_deltas[row] = np.float32(np.float32(pos.max()) + np.float32(1)) - np.float32(kept[row])
    return (
        torch.from_numpy(positions).to(device),
        torch.from_numpy(float_deltas).unsqueeze(1).to(device),
    )


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
