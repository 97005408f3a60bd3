"""`StagedWrites`: admissions' int32 writes, moved to the device in one copy per apply.

Each write is (destination offset in one flat int32 device tensor, values).
The values go into a pinned host buffer (a plain one on the CPU) as they are
staged; `apply` appends one header per write, (destination, length, source
offset), copies the buffer's used prefix to a device buffer of the same size
in one non-blocking copy, and launches one scatter kernel, one program per
write. Writes to the same destination within one apply are merged (the last
one wins), since the scatter's programs run in no set order.

Two pinned buffers take turns. Before a buffer is written again, the host
waits for the event recorded after its last copy: that copy is long over in
practice, and the wait keeps a queued copy from reading half-rewritten
values. A buffer that cannot take the next write is applied first; only a
write larger than a whole buffer is split, into pieces applied as each
buffer fills (a compaction's record table, a request of many thousand rows).
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["StagedWrites"]

_HEADER = 3  # (destination, length, source) per write
_SCATTER_BLOCK = 1024


class StagedWrites:
    def __init__(self, capacity: int, device: torch.device, scatter_kernel) -> None:
        self.capacity = capacity
        self.device = device
        on_cuda = device.type == "cuda"
        self._host = [torch.zeros(capacity, dtype=torch.int32, pin_memory=on_cuda) for _ in range(2)]
        self._host_np = [h.numpy() for h in self._host]
        self._events = [None, None]
        self._device_buffer = torch.zeros(capacity, dtype=torch.int32, device=device)
        self._scatter = scatter_kernel
        self._current = 0
        self._used = 0  # values staged in the current buffer
        self._headers: list[list[int]] = []
        self._by_destination: dict[int, int] = {}  # destination -> index in _headers

    @property
    def pending(self) -> bool:
        return bool(self._headers)

    def nbytes(self) -> dict[str, int]:
        return {
            "staging_pinned" if self.device.type == "cuda" else "staging_host": 2 * 4 * self.capacity,
            "staging_device": 4 * self.capacity,
        }

    def stage(self, destination: int, values: np.ndarray, target: torch.Tensor) -> None:
        """Stage `values` (1-D int32) for target_flat[destination:]; applies
        into `target` first if the current buffer has no room."""
        size = values.shape[0]
        merged = self._by_destination.get(destination)
        if merged is not None:
            if self._headers[merged][1] == size:
                src = self._headers[merged][2]
                self._host_np[self._current][src : src + size] = values
                return
            self.apply(target)  # a write of another size to the same place: keep the order
        if size <= self.capacity - 2 * _HEADER:
            # fits an empty buffer: never split, so that a later write to the same
            # place in the same apply finds it and replaces it (merged above)
            if self._room() < size:
                self.apply(target)
            src = self._used
            self._host_np[self._current][src : src + size] = values
            self._used += size
            self._by_destination[destination] = len(self._headers)
            self._headers.append([destination, size, src])
            return
        # larger than a buffer: in pieces, each buffer applied as it fills
        done = 0
        while done < size:
            room = self._room()
            if room <= 0:
                self.apply(target)
                continue
            piece = min(room, size - done)
            src = self._used
            self._host_np[self._current][src : src + piece] = values[done : done + piece]
            self._used += piece
            self._headers.append([destination + done, piece, src])
            done += piece

    def _room(self) -> int:
        """Values the current buffer still takes, with a header for one more write."""
        return self.capacity - self._used - _HEADER * (len(self._headers) + 1)

    def apply(self, target: torch.Tensor) -> None:
        """Every staged write into `target` (flat int32, on the device): one
        host-to-device copy and one scatter launch; nothing when none is staged."""
        if not self._headers:
            return
        buffer = self._host_np[self._current]
        headers = np.asarray(self._headers, np.int32).reshape(-1)
        end = self._used + headers.shape[0]
        buffer[self._used : end] = headers
        self._device_buffer[:end].copy_(self._host[self._current][:end], non_blocking=True)
        if self.device.type == "cuda":
            event = torch.cuda.Event()
            event.record()
            self._events[self._current] = event
        self._scatter[(len(self._headers),)](target, self._device_buffer, self._used, BLOCK_SIZE=_SCATTER_BLOCK)
        self._headers = []
        self._by_destination = {}
        self._used = 0
        self._current ^= 1
        event = self._events[self._current]
        if event is not None:
            event.synchronize()  # that buffer's copy was queued an apply ago; long done in practice
            self._events[self._current] = None
