"""The drop-ins' lean path for SGLang's own call: one prompt, CPU tensors.

SGLang's processors call ``get_rope_index`` once per request with a (1, L)
int64 ``input_ids``, (n, 3) int64 grids and float32 ``second_per_grid_ts``.
On a prompt of a few thousand tokens the positions cost a few microseconds,
so the per-call Python around them is what the caller waits for. A
`RopePlan` (one per argument set, kept by rope_index.py) holds what such a
call needs of its config, read once: the packed params, whether it scales
video times and its default, which kernel positions it. `RopePlan.call`
then reads the tensors in place (``Tensor.numpy()``, no copy), runs one
kernel into the output array and wraps it with ``torch.from_numpy``.

Anything else (batches, masks, other forms or devices, bad input, the
kernels' refusals) returns None, and the caller takes the checked route
(rope_index.py, rope_args.py), which gives the same result or names what is
wrong: a refused call here has changed nothing.
"""

from __future__ import annotations

import numpy as np
import torch

from ..core.config import MRopeConfig
from ..core.inputs import (
    EMPTY_FLOAT,
    EMPTY_GRID,
    EMPTY_INT,
    NO_ROWS,
    NO_SCALES,
    READY_FLAGS,
    normalize_items,
)
from ..kernels.layout_build import FAILED, SCRATCH, build_from_tokens
from ..kernels.sglang_omni import omni_checked_positions

__all__ = ["RopePlan"]

_TENSOR = torch.Tensor
_NDARRAY = np.ndarray
_INT64 = np.dtype(np.int64)
_FLOAT32 = np.dtype(np.float32)
_empty = np.empty
_from_numpy = torch.from_numpy
# a delta's (1, 1) array, copied per call (a copy costs less than building one)
_DELTA = np.zeros((1, 1), np.int64)
_FLOAT_DELTA = np.zeros((1, 1), np.float32)


def _ids(value) -> np.ndarray | None:
    """A CPU (1, L) int64 C-contiguous tensor, L > 0, as a numpy view; else None."""
    if type(value) is not _TENSOR:
        return None
    try:
        ids = value.numpy()  # (raises for other devices, and for a tensor that needs its grad or a conversion)
    except (TypeError, RuntimeError):
        return None
    if ids.dtype is not _INT64 or ids.ndim != 2 or ids.shape[0] != 1 or not ids.shape[1]:
        return None
    return ids if ids.flags.c_contiguous else None


def _usual_grid(grid) -> bool:
    """Whether `grid` is an (n, 3) int64 C-contiguous writable numpy array (read from a tensor in place)."""
    return (
        type(grid) is _NDARRAY
        and grid.dtype is _INT64
        and grid.ndim == 2
        and grid.shape[1] == 3
        and grid.flags.num & READY_FLAGS == READY_FLAGS
    )


class RopePlan:
    """What a drop-in call needs of one config, read once (rope_index.py keeps one per argument set)."""

    __slots__ = ("config", "params", "scaled", "default_sp", "kernel", "call")

    def __init__(self, config: MRopeConfig, omni_function: bool):
        """`omni_function`: the plan of ``get_rope_index_qwen3_omni`` (float32 results), else of ``get_rope_index``."""
        self.config = config
        self.params = config.kernel_params
        self.kernel = build_from_tokens
        spec = config.spec
        # times as normalize_items takes them as they come: scaled, not truncated to integers first
        self.scaled = spec.scaled_time
        self.default_sp = np.float32(spec.default_second_per_grid_ts)
        usual = (
            config.num_dims == 3
            and not config.canvas
            and config.image_token_id is not None
            and config.video_token_id is not None
            and "int_sp" not in config.switches
            and omni_function == config.float_carry  # (Qwen3-Omni under another preset: the checked route)
        )
        if not usual:
            self.call = _none
        elif omni_function:
            self.call = self._omni_call
        else:
            self.call = self._integer_call

    def _arrays(self, input_ids, image_grid_thw, video_grid_thw, second_per_grid_ts):
        """(ids (1, L), image grids, video grids, times) in the kernels' form (times as normalize_items makes
        them), read in place; None where any is not in SGLang's usual form. (Written out in one function: a
        Python call costs a good part of each read.)"""
        tensor = _TENSOR
        try:  # (numpy() raises for other devices, and for a tensor that needs its grad or a conversion)
            ids = input_ids.numpy() if type(input_ids) is tensor else None
            images = image_grid_thw
            if images is None:
                images = EMPTY_GRID
            elif type(images) is tensor:
                images = images.numpy()
            videos = video_grid_thw
            if videos is None:
                videos = EMPTY_GRID
            elif type(videos) is tensor:
                videos = videos.numpy()
            times = second_per_grid_ts
            if type(times) is tensor:
                times = times.numpy()
        except (TypeError, RuntimeError):
            return None
        if (
            type(ids) is not _NDARRAY
            or ids.dtype is not _INT64
            or ids.ndim != 2
            or len(ids) != 1
            or not ids.size
            or ids.flags.num & READY_FLAGS != READY_FLAGS
            or not _usual_grid(images)
            or not _usual_grid(videos)
        ):
            return None
        count = len(videos)
        if not self.scaled:  # SGLang reads no time scale for these families
            times = EMPTY_FLOAT
        elif times is None:
            times = np.full(count, self.default_sp, np.float32) if count else EMPTY_FLOAT
        elif (
            not count
            or type(times) is not _NDARRAY
            or times.dtype is not _FLOAT32
            or times.ndim != 1
            or len(times) != count
            or times.flags.num & READY_FLAGS != READY_FLAGS
        ):
            return None
        return ids, images, videos, times

    def _integer_call(self, input_ids, image_grid_thw, video_grid_thw, second_per_grid_ts, kwargs):
        """(positions (3, 1, L) int64, delta (1, 1) int64) by the prompt kernel, or None."""
        if image_grid_thw is None and video_grid_thw is None:
            return _index_call(input_ids)
        arrays = self._arrays(input_ids, image_grid_thw, video_grid_thw, second_per_grid_ts)
        if arrays is None:
            return None
        ids, images, videos, times = arrays
        out = _empty((3, 1, ids.shape[1]), _INT64)
        delta = self.kernel(
            NO_ROWS, NO_SCALES, SCRATCH, out[:, 0], ids[0], self.params, images, videos, times, EMPTY_INT, False
        )
        if delta == FAILED:
            return None
        deltas = _DELTA.copy()
        deltas[0, 0] = delta
        return _from_numpy(out), _from_numpy(deltas)

    def _omni_call(self, input_ids, image_grid_thw, video_grid_thw, second_per_grid_ts, kwargs):
        """(positions (3, 1, L) float32, delta (1, 1) float32) by the one-pass kernel, or None."""
        use_av = kwargs.get("use_audio_in_video", False)
        if not (use_av is False or use_av is True):
            return None
        if image_grid_thw is None and video_grid_thw is None:
            return _index_call(input_ids)
        arrays = self._arrays(input_ids, image_grid_thw, video_grid_thw, second_per_grid_ts)
        if arrays is None:
            return None
        ids, images, videos, times = arrays
        audio = kwargs.get("audio_seqlens")
        if audio is None:  # (normalize_items' result, without its call)
            items = (images, videos, times, EMPTY_INT, use_av)
        else:
            audio = _counts(audio)
            if audio is None:
                return None
            try:  # the audio lengths' own checks (ValueError) are the checked route's to report
                items, _ = normalize_items(self.config, images, videos, times, audio, use_av)
            except (TypeError, ValueError):
                return None
        length = ids.shape[1]
        out = _empty((3, 1, length), _FLOAT32)
        top = omni_checked_positions(out[:, 0], ids[0], self.params, *items)
        if top < 0:
            return None
        deltas = _FLOAT_DELTA.copy()
        deltas[0, 0] = top + 1 - length
        return _from_numpy(out), _from_numpy(deltas)


def _counts(value) -> np.ndarray | None:
    """audio_seqlens: a CPU 1-D int64 tensor as a numpy view; else None."""
    if type(value) is not _TENSOR:
        return None
    try:
        counts = value.numpy()
    except (TypeError, RuntimeError):
        return None
    return counts if counts.dtype is _INT64 and counts.ndim == 1 else None


def _none(*args):
    return None


def _index_call(input_ids):
    """No grids: the index positions of a usual (1, L) CPU int64 ``input_ids``; else None."""
    ids = _ids(input_ids)
    return None if ids is None else _index(ids.shape[1])


def _index(length: int):
    """Index positions (3, 1, L) int64 and a (1, 1) int64 zero delta, what SGLang returns without grids
    (for Qwen3-Omni too: its function returns them before its float32 rule)."""
    positions = _empty((3, 1, length), _INT64)
    positions[:] = np.arange(length)
    return _from_numpy(positions), _from_numpy(_DELTA.copy())
