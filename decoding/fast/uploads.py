"""Host-to-device uploads that never block the host: pinned staging buffers + non_blocking copies.

Why: a copy from ordinary (pageable) host memory to a GPU waits for the stream to drain first, so every
small upload of a step (token ids, positions, the tree mask, the commit's kept rows) was a host
synchronisation. A copy from pinned memory is queued like a kernel. A pinned
buffer is reused only after the copy that read it has finished (a CUDA event per ring slot; in practice
already passed, since every step reads its argmax). On CPU an upload is the host tensor itself.
"""
from __future__ import annotations

import torch

RING = 8  # staging slots per dtype: more uploads than this in flight wait for the oldest


class Uploads:
    def __init__(self, device: torch.device):
        self.device = torch.device(device)
        self.pinned = self.device.type == "cuda"
        self._slots: dict[tuple, tuple[torch.Tensor, torch.cuda.Event | None]] = {}
        self._next = 0

    def upload(self, host: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """`host` (a CPU tensor) on the device, in `out` when given; the host may reuse `host` at once."""
        if not self.pinned:
            return host if out is None else out.copy_(host)
        self._next = (self._next + 1) % RING
        key = (host.dtype, self._next)
        buf, done = self._slots.get(key, (None, None))
        if done is not None:
            done.synchronize()  # the copy that last read this slot (an event wait, not a stream drain)
        if buf is None or buf.numel() < host.numel():
            buf = torch.empty(max(host.numel(), 1 << 14), dtype=host.dtype, pin_memory=True)
        stage = buf[:host.numel()].view(host.shape)
        stage.copy_(host)
        if out is None:
            out = torch.empty(host.shape, dtype=host.dtype, device=self.device)
        out.copy_(stage, non_blocking=True)
        done = torch.cuda.Event()
        done.record(torch.cuda.current_stream(self.device))
        self._slots[key] = (buf, done)
        return out

    def longs(self, values) -> torch.Tensor:
        """A list of ints as a long tensor on the device."""
        return self.upload(torch.tensor(values, dtype=torch.long))
