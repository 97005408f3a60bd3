"""Where a step's positions go: the persistent device buffer and its host staging.

The model receives views of one persistent buffer, ``positions`` [num_dims,
max_num_tokens + 1] (num_dims: the family's axes, 3 for M-RoPE): its address never changes, as CUDA graphs need. The
extra column keeps ``[:, :n]`` non-contiguous so torch.compile does not
specialise on contiguity, as vLLM does.

- On the CPU (no staging), kernels write straight into that buffer.
- With staging (always on CUDA), kernels write into one of a ring of host
  buffers of the same shape (pinned on CUDA), and ``non_blocking`` copies
  move the step to the device. ``copy_mode`` says how:
  - ``"rows"`` (default): one copy per row, ``host[r, :n]`` to
    ``positions[r, :n]``: num_dims n elements, whatever
    max_num_tokens is, as vLLM's V1 runner does. A strided ``[:, :n]`` copy
    would instead go through a pageable temporary and block.
  - ``"span"``: one copy of the contiguous span from the buffer's first
    element to the end of the step's columns in the last row,
    ``(num_dims - 1) * (max_num_tokens + 1) + n`` elements: one call, but bytes that grow
    with max_num_tokens (131 KB a step at 8192 int64 tokens). Kept for
    comparison (bench/gpu_check.py --copy span).
  The views each copy needs are cached by n, since slicing a tensor costs
  far more than a dict lookup and steps repeat their sizes.
- A CUDA event per ring slot, recorded after its copies, is waited on before
  the slot is written again, so an in-flight copy is never overwritten
  however many steps are queued.
"""

from __future__ import annotations

import numpy as np
import torch


class PositionBuffers:
    """Device buffer, optional staging ring, and the views handed to kernels."""

    COPY_MODES = ("rows", "span")

    def __init__(
        self,
        max_num_tokens: int,
        device: torch.device,
        dtype: torch.dtype,
        staging: bool,
        num_staging: int,
        copy_mode: str = "rows",
        num_dims: int = 3,
    ):
        if copy_mode not in self.COPY_MODES:
            raise ValueError(f"copy_mode: expected one of {self.COPY_MODES}, got {copy_mode!r}")
        self.copy_mode = copy_mode
        width = max_num_tokens + 1
        self.width = width
        self.num_dims = num_dims
        self.device = device
        # [num_dims, max_num_tokens + 1] on the device; the model reads views of it
        self.positions = torch.zeros((num_dims, width), dtype=dtype, device=device)
        self.staged = staging
        if not staging:
            self._host = [self.positions]
            self._host_np = [self.positions.numpy()]
            self._events = None
        else:
            # ring of [num_dims, max_num_tokens + 1] host buffers (pinned on CUDA)
            pinned = device.type == "cuda"  # CPU staging (for tests) needs no pinning
            self._host = [torch.zeros((num_dims, width), dtype=dtype, pin_memory=pinned) for _ in range(num_staging)]
            self._host_np = [buf.numpy() for buf in self._host]
            self._events = [torch.cuda.Event() for _ in range(num_staging)] if device.type == "cuda" else None
        self._device_flat = self.positions.view(-1)
        self._host_flat = [buf.view(-1) for buf in self._host]
        self._next = 0
        self._current = 0
        # views positions[:, :n] by n: slicing a tensor costs far more than a
        # dict lookup, and steps repeat their sizes (decode batches)
        self._views: dict[int, torch.Tensor] = {}
        # per ring slot, by n: the (device row, host row) view pairs of a "rows" copy
        self._row_copies: list[dict[int, tuple]] = [{} for _ in self._host]

    def acquire(self) -> np.ndarray:
        """The host array the next step writes into (waits for its last copy)."""
        k = self._next
        if self._events is not None:
            self._events[k].synchronize()
        self._current = k
        return self._host_np[k]

    def publish(self, num_tokens: int) -> torch.Tensor:
        """Copy the written step to the device (when staged); return positions[:, :n]."""
        if self.staged:
            k = self._current
            if self.copy_mode == "rows":
                copies = self._row_copies[k].get(num_tokens)
                if copies is None:
                    copies = self._row_copy_views(k, num_tokens)
                for device_row, host_row in copies:
                    device_row.copy_(host_row, non_blocking=True)
            else:
                span = (self.num_dims - 1) * self.width + num_tokens
                self._device_flat[:span].copy_(self._host_flat[k][:span], non_blocking=True)
            if self._events is not None:
                # the copy runs on the current stream of the buffer's device,
                # which need not be the current device (positions.device always
                # carries an index; a bare "cuda" would resolve at call time)
                self._events[k].record(torch.cuda.current_stream(self.positions.device))
            self._next = (k + 1) % len(self._host)
        view = self._views.get(num_tokens)
        if view is None:
            if len(self._views) >= 256:
                self._views.clear()
            view = self._views[num_tokens] = self.positions[:, :num_tokens]
        return view

    def _row_copy_views(self, k: int, num_tokens: int) -> tuple:
        cache = self._row_copies[k]
        if len(cache) >= 256:
            cache.clear()
        host = self._host[k]
        copies = (
            ()
            if num_tokens == 0
            else tuple((self.positions[r, :num_tokens], host[r, :num_tokens]) for r in range(self.num_dims))
        )
        cache[num_tokens] = copies
        return copies

    def copy_nbytes(self, num_tokens: int) -> int:
        """Bytes one staged step of `num_tokens` tokens copies to the device (0 without staging)."""
        if not self.staged:
            return 0
        rows = self.num_dims
        elements = rows * num_tokens if self.copy_mode == "rows" else (rows - 1) * self.width + num_tokens
        return elements * self.positions.element_size()

    def host_buffers(self) -> list[torch.Tensor]:
        return list(self._host)

    def nbytes(self) -> dict[str, int]:
        device_bytes = self.positions.numel() * self.positions.element_size()
        host_bytes = sum(buf.numel() * buf.element_size() for buf in self._host) if self.staged else 0
        return {"device_positions": device_bytes, "host_staging": host_bytes}
