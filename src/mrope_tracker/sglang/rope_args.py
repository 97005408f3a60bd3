"""The arguments of SGLang's ``get_rope_index*`` calls, brought to the
kernels' form once: shared by the four drop-ins (rope_index.py) and the
layouts the installed hooks build (hooks.py).

SGLang's processors pass CPU tensors: ``input_ids`` (1, L) int64, grids
(n, 3) int64, ``second_per_grid_ts`` (n,) float32, ``audio_seqlens`` (n,)
int64. Those are read in place through ``Tensor.numpy()`` (a view, no copy;
nothing here writes to them), tested by type and dtype identity before any
call, since on a short prompt a call costs a part of the positions' time.
Any other form is converted once, torch to numpy, and the rules' own checks
(core/inputs.py) name what is wrong with it.

`one_prompt` positions one row: `prompt_positions` (one jitted scan), or for
SGLang's Qwen3-Omni rule one jitted pass that checks the prompt and writes
the float32 rule's positions truncated (kernels/sglang_omni.py), in place of
the layout rows `prompt_positions` builds for that rule in Python; what that
pass refuses takes the integer scan (which checks the prompt) and the float
rule on its own. SGLang's usual call does not come here: rope_fast.py
serves it, and hands anything else to these helpers.
"""

from __future__ import annotations

import numpy as np
import torch

from ..core.config import MRopeConfig
from ..core.inputs import NO_ROWS, NO_SCALES, as_flag, check_fits_int64, normalize_items, tensor_values
from ..core.positions import prompt_positions
from ..kernels.layout_build import FAILED, SCRATCH, build_from_tokens
from ..kernels.sglang_omni import omni_checked_positions, omni_truncated_positions

__all__ = [
    "input_ids_arg", "grid_arg", "floats_arg", "check_time_dtype", "counts_arg", "flag_arg", "one_prompt", "as_result",
]  # fmt: skip

_TENSOR = torch.Tensor
_LONG = torch.int64
_FLOAT = torch.float32


def input_ids_arg(input_ids) -> np.ndarray:
    """``input_ids`` as a (batch, length) int64 numpy array (a view of a CPU int64 tensor)."""
    if (
        type(input_ids) is _TENSOR
        and input_ids.dtype is _LONG
        and input_ids.ndim == 2
        and input_ids.is_cpu
        and input_ids.is_contiguous()
    ):
        return input_ids.numpy()
    if not isinstance(input_ids, torch.Tensor):
        raise TypeError(f"input_ids: expected a (batch, length) integer tensor, got {type(input_ids).__name__}")
    dtype = input_ids.dtype
    if input_ids.ndim != 2 or dtype.is_floating_point or dtype.is_complex or dtype == torch.bool:
        raise TypeError(
            f"input_ids: expected a (batch, length) integer tensor, got {input_ids.dtype} of shape "
            f"{tuple(input_ids.shape)}"
        )
    ids = tensor_values(input_ids, "input_ids")
    check_fits_int64(ids, "input_ids", "token ids")
    return np.ascontiguousarray(ids, dtype=np.int64)


def grid_arg(value, name: str) -> np.ndarray | None:
    """(n, 3) int64 grids, or None."""
    if value is None:
        return None
    if (
        type(value) is _TENSOR
        and value.dtype is _LONG
        and value.ndim == 2
        and value.shape[1] == 3
        and value.is_cpu
        and value.is_contiguous()
    ):
        return value.numpy()
    if isinstance(value, torch.Tensor):
        value = tensor_values(value, name, widen_bfloat16=True)  # (a float grid is refused below, named)
    try:
        raw = np.asarray(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise TypeError(f"{name}: expected (n, 3) integer grids (t, h, w), got {type(value).__name__}") from exc
    if raw.ndim != 2 or raw.shape[1] != 3:
        raise ValueError(f"{name}: expected (n, 3) grids (t, h, w), got shape {raw.shape}")
    if raw.size and raw.dtype.kind not in "iu":  # (floats would be truncated, bools read as 0 and 1)
        raise TypeError(f"{name}: expected integer grids (t, h, w), got {raw.dtype}")
    check_fits_int64(raw, name, "grid sizes")
    return np.ascontiguousarray(raw, dtype=np.int64)


def floats_arg(value) -> np.ndarray | None:
    """One float32 value per video (``second_per_grid_ts``), or None."""
    if value is None:
        return None
    if type(value) is _TENSOR and value.dtype is _FLOAT and value.ndim == 1 and value.is_cpu:
        try:
            return value.numpy()
        except (RuntimeError, TypeError):  # (a tensor that needs its grad, a sparse one: read below, named)
            pass
    if isinstance(value, torch.Tensor):
        value = tensor_values(value, "second_per_grid_ts", widen_bfloat16=True)
    # float32, as the rules hold them (docs/semantics.md): the kernels take that form without a conversion
    try:
        return np.ascontiguousarray(value, dtype=np.float32).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"second_per_grid_ts: expected one number per video, got {value!r}") from exc


def check_time_dtype(config: MRopeConfig, value, videos: np.ndarray | None) -> None:
    """SGLang multiplies frame indices by a video's ``second_per_grid_ts[k]`` in that tensor's own dtype (a 0-d
    float64 tensor makes the product float64), while this preset's kernels compute in float32, as SGLang does
    for the float32 tensors its processors make. For a tensor of another float dtype, the frame times of both
    are compared here, and a video whose times would differ is refused (ValueError), never positioned
    differently from SGLang."""
    if not isinstance(value, torch.Tensor) or value.dtype in (_FLOAT, torch.bool) or not value.is_floating_point():
        return
    if not config.spec.scaled_time or config.float_carry or videos is None or value.device.type == "meta":
        return  # (SGLang's Qwen3-Omni function casts each value to float32 itself)
    times = value.detach().cpu().reshape(-1)
    scale = config.tokens_per_second
    for k in range(min(len(videos), times.shape[0])):
        frames = torch.arange(int(videos[k, 0])).view(-1, 1)
        if not torch.equal((frames * times[k] * scale).long(), (frames * times[k].float() * scale).long()):
            raise ValueError(
                f"second_per_grid_ts[{k}]: SGLang computes this video's frame times in {value.dtype}, where they "
                f"differ from float32's, the dtype this preset computes in; pass second_per_grid_ts as float32"
            )


def counts_arg(value):
    """``audio_seqlens`` (mel frames per track) as numpy, or as given (the rules' checks name it)."""
    if isinstance(value, torch.Tensor):
        return tensor_values(value, "audio_seqlens")  # (a meta tensor, a conjugate bit, bfloat16: named)
    return value


def flag_arg(value) -> bool:
    """``use_audio_in_video``: a bool, or a one-value bool tensor (a processor's output); anything else, whose truth
    SGLang would take, is a TypeError naming it."""
    if isinstance(value, torch.Tensor) and value.dtype is torch.bool and value.numel() == 1:
        return bool(tensor_values(value, "use_audio_in_video").reshape(-1)[0])
    return as_flag(value, "use_audio_in_video")


def one_prompt(
    config: MRopeConfig, ids: np.ndarray, images, videos, times, audio=None, use_av: bool = False
) -> tuple[np.ndarray, int]:
    """((3, L) positions, delta) of one prompt row, as `prompt_positions` gives
    them under `config` (bad input raises as it does): int64, or float32 under
    SGLang's Qwen3-Omni rule (the dtype SGLang returns there)."""
    if config.float_carry:
        return _float_carry_prompt(config, ids, images, videos, times, audio, use_av)
    return prompt_positions(
        config, ids, image_grid_thw=images, video_grid_thw=videos, second_per_grid_ts=times,
        audio_feature_lengths=audio, use_audio_in_video=use_av,
    )  # fmt: skip


def _float_carry_prompt(config, ids, images, videos, times, audio, use_av) -> tuple[np.ndarray, int]:
    """One jitted pass checks the prompt and writes it; where it refuses,
    the integer scan checks the prompt (items, counts, brackets of the
    integer rule) and the float32 rule's own pass writes it."""
    items, _ = normalize_items(config, images, videos, times, audio, use_av)
    length = ids.shape[0]
    if length:
        out = np.empty((3, length), np.float32)
        top = omni_checked_positions(out, ids, config.kernel_params, *items)  # check, rule and floor: one pass
        if top >= 0:
            return out, int(top) + 1 - length
    # what the one pass refuses: the integer scan's check, then the float rule on its own
    checked = (
        length
        and build_from_tokens(NO_ROWS, NO_SCALES, SCRATCH, _scan_out(length), ids, config.kernel_params, *items)
        != FAILED
    )
    if checked:
        top = omni_truncated_positions(out, ids, config.kernel_params, *items)
        if top >= 0:
            return out, int(top) + 1 - length
    # the checked route: it names what is wrong, or positions what the float pass cannot follow
    positions, delta = prompt_positions(
        config, ids, image_grid_thw=images, video_grid_thw=videos, second_per_grid_ts=times,
        audio_feature_lengths=audio, use_audio_in_video=use_av,
    )  # fmt: skip
    return positions.astype(np.float32), delta


_SCAN_OUT = [np.empty(0, np.int64)]


def _scan_out(length: int) -> np.ndarray:
    """Room for the checking scan's integer positions, which nobody reads: one
    buffer kept and grown (the scan keeps the GIL, as the scratch above), its
    front (3, L) C-contiguous, the form the kernel is compiled for."""
    if _SCAN_OUT[0].shape[0] < 3 * length:
        _SCAN_OUT[0] = np.empty(max(3 * length, 2 * _SCAN_OUT[0].shape[0]), np.int64)
    return _SCAN_OUT[0][: 3 * length].reshape(3, length)


# torch dtypes SGLang's functions return, as numpy makes them (a dtype change in numpy costs
# less than a torch op, each of which pays the dispatcher's few microseconds)
_NUMPY_DTYPES = {
    torch.int64: np.int64, torch.int32: np.int32, torch.int16: np.int16, torch.int8: np.int8,
    torch.uint8: np.uint8, torch.float32: np.float32,
}  # fmt: skip


def as_result(positions: np.ndarray, deltas: np.ndarray, input_ids: torch.Tensor, dtype, delta_dtype=_LONG):
    """(positions (3, B, L), deltas (B, 1)) as tensors in SGLang's dtypes on
    `input_ids`' device: made with ``torch.from_numpy`` from the numpy results
    (no copy where the dtype is already the one asked)."""
    deltas = deltas.reshape(-1, 1)
    if positions.dtype != _NUMPY_DTYPES.get(dtype, positions.dtype):
        positions = positions.astype(_NUMPY_DTYPES[dtype])
    if deltas.dtype != _NUMPY_DTYPES.get(delta_dtype, deltas.dtype):
        deltas = deltas.astype(_NUMPY_DTYPES[delta_dtype])
    out, delta = torch.from_numpy(positions), torch.from_numpy(deltas)
    if out.dtype is not dtype:  # (a dtype numpy does not have)
        out = out.to(dtype)
    if delta.dtype is not delta_dtype:
        delta = delta.to(delta_dtype)
    if not input_ids.is_cpu:
        out, delta = out.to(input_ids.device), delta.to(input_ids.device)
    return out, delta
