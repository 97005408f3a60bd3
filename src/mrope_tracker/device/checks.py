"""`RopeState`'s argument checks: what a ValueError or TypeError names, kept off the class.

The step's index tensors are checked only in debug mode (a served step is one
kernel launch); admissions and EVS updates are checked always, before
anything changes.
"""

from __future__ import annotations

import attrs
import numpy as np
import torch

from ..core.config import MRopeConfig
from .rows import INT32_MAX

__all__ = ["as_slot", "check_index_tensor", "checked_override", "config_mismatch"]

_INDEX_DTYPES = (torch.int32, torch.int64)


def as_slot(req_idx, max_num_reqs: int) -> int:
    if isinstance(req_idx, (bool, np.bool_)) or not isinstance(req_idx, (int, np.integer)):
        raise TypeError(f"req_idx: expected an int slot, got {type(req_idx).__name__}")
    if not 0 <= req_idx < max_num_reqs:
        raise ValueError(f"req_idx: expected a slot in [0, {max_num_reqs}), got {req_idx}")
    return int(req_idx)


def check_index_tensor(value, name: str, minimum: int, maximum: int | None, device: torch.device) -> int:
    """The length of `value`, an int32 or int64 contiguous 1-D tensor on `device`
    with `minimum` to `maximum` elements; TypeError or ValueError naming it otherwise."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(value).__name__}")
    if value.dtype not in _INDEX_DTYPES:
        raise TypeError(f"{name}: expected an int32 or int64 tensor, got {value.dtype}")
    if value.device != device and not (value.device.type == device.type == "cuda" and device.index is None):
        raise ValueError(f"{name}: expected a tensor on {device}, got one on {value.device}")
    if value.ndim != 1 or (value.shape[0] > 1 and value.stride(0) != 1):
        raise ValueError(f"{name}: expected a contiguous 1-D tensor, got shape {tuple(value.shape)}")
    size = value.shape[0]
    if size < minimum or (maximum is not None and size > maximum):
        bounds = f"{minimum} to {maximum}" if maximum is not None else f"at least {minimum}"
        raise ValueError(f"{name}: expected {bounds} elements, got {size}")
    return size


# unsigned dtypes torch cannot reduce (min/max) on the CPU
_WIDE_UNSIGNED = tuple(getattr(torch, name) for name in ("uint16", "uint32", "uint64") if hasattr(torch, name))


def checked_override(positions, delta, num_dims: int, prompt_len: int, device) -> torch.Tensor:
    """`update_prefill_positions`' arguments checked: the positions as a new
    int32 [num_dims, n] tensor on `device`, n at most the slot's prompt."""
    if not isinstance(positions, torch.Tensor):
        raise TypeError(f"positions: expected a torch.Tensor, got {type(positions).__name__}")
    if positions.dtype.is_floating_point or positions.dtype.is_complex or positions.dtype == torch.bool:
        raise TypeError(f"positions: expected an integer tensor, got {positions.dtype}")
    if positions.dtype in _WIDE_UNSIGNED or positions.layout != torch.strided or positions.device.type == "meta":
        raise TypeError(
            f"positions: expected a dense integer tensor that holds values (int8 to int64, uint8), got "
            f"{positions.dtype} ({positions.layout}) on {positions.device}"
        )
    if positions.ndim != 2 or positions.shape[0] != num_dims or positions.shape[1] > prompt_len:
        raise ValueError(
            f"positions: expected shape ({num_dims}, n) with n at most the slot's {prompt_len} prefill "
            f"tokens, got {tuple(positions.shape)}"
        )
    if isinstance(delta, (bool, np.bool_)) or not isinstance(delta, (int, np.integer)):
        raise TypeError(f"delta: expected an int, got {type(delta).__name__}")
    if not -INT32_MAX <= delta <= INT32_MAX:
        raise ValueError(f"delta: expected an int32, got {delta}")
    if positions.numel():  # an EVS update, not a step: reading two numbers back is fine here
        low, high = int(positions.min()), int(positions.max())
        if low < 0 or high > INT32_MAX:
            raise ValueError(
                f"positions: expected values in [0, {INT32_MAX}] (the device keeps int32), got {low} to {high}"
            )
    return positions.to(device=device, dtype=torch.int32).contiguous().clone()


def config_mismatch(bound: MRopeConfig, config: MRopeConfig) -> ValueError | None:
    """The error for a model of `config` in a state built for `bound`, or None
    when both give the same positions: every field but the model_type label
    (a model's own config may name its sub-model, as Omni's thinker does)."""
    if bound == config or attrs.evolve(bound, model_type=None) == attrs.evolve(config, model_type=None):
        return None
    fields = [f.name for f in attrs.fields(MRopeConfig) if f.eq and f.init and f.name != "model_type"]
    differ = [
        f"{n} {getattr(bound, n)!r} != {getattr(config, n)!r}"
        for n in fields
        if getattr(bound, n) != getattr(config, n)
    ]
    return ValueError(
        f"model: expected a model of this state's config ({_describe(bound)}), got one of {_describe(config)}; "
        f"they differ in {', '.join(differ)} (a RopeState serves one model)"
    )


def _describe(config: MRopeConfig) -> str:
    return f"{config.family}, model_type {config.model_type!r}, semantics {config.semantics!r}"
