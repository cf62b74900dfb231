"""The rows' columns from an accelerator to the host. On CUDA through two page-locked buffers taken in turn: the
device copies a piece into one at the bus's speed while the host moves the piece before out of the other into the
column's array; a copy into pageable memory is staged by the driver, slower (beside an H200, a BERT-base-shaped
ingest of UD GUM dev in 128-piece windows took 2.56 and 2.76 s this way against 3.02 and 3.31 by turns:
bench/RESULTS.md, On a GPU). Elsewhere ``Tensor.cpu``."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import torch

STAGING_BYTES = 32 << 20  # each of the two page-locked buffers (kept for the process, per device)
_buffers: dict[torch.device, list[tuple[torch.Tensor, torch.cuda.Event]]] = {}
_locks: dict[torch.device, threading.Lock] = {}  # one copy at a time through a device's buffers
_making = threading.Lock()  # a device's buffers and lock made once


def to_host(columns: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """``columns`` (tensors on one device) as numpy arrays of the same shapes and dtypes, on the host."""
    if not columns:
        return {}
    device = next(iter(columns.values())).device
    if device.type != "cuda":
        return {name: t.cpu().numpy() for name, t in columns.items()}
    with _making:
        if device not in _buffers:
            with torch.inference_mode(False):  # plain tensors, written outside inference mode too
                pinned = [torch.empty(STAGING_BYTES, dtype=torch.uint8, pin_memory=True) for _ in range(2)]
            _buffers[device] = [(buffer, torch.cuda.Event()) for buffer in pinned]
            _locks[device] = threading.Lock()
    with _locks[device]:
        stream = torch.cuda.current_stream(device)
        marked = [(buffer, lambda e=event: e.record(stream), event.synchronize) for buffer, event in _buffers[device]]
        return through(columns, marked)


def through(
    columns: dict[str, torch.Tensor], buffers: list[tuple[torch.Tensor, Callable[[], None], Callable[[], None]]]
) -> dict[str, np.ndarray]:
    """``to_host``'s copies through ``buffers`` (``(buffer, mark, wait)``: a byte tensor on the host of 8 bytes or
    more, a call that marks the copies queued so far, one that waits for them), taken in turn: each column in pieces
    of a buffer's size, a piece's copy queued before the piece before is moved on the host."""
    out: dict[str, np.ndarray] = {}
    queued: tuple[np.ndarray, np.ndarray, Callable[[], None]] | None = None  # (piece, its destination, wait)
    turn = 0
    for name, tensor in columns.items():
        host = np.empty(tuple(tensor.shape), dtype=torch.empty(0, dtype=tensor.dtype).numpy().dtype)
        source, destination = tensor.reshape(-1), host.reshape(-1)
        size = tensor.element_size()
        step = buffers[0][0].numel() // size  # elements a buffer holds
        for start in range(0, source.numel(), step):
            buffer, mark, wait = buffers[turn % len(buffers)]
            stop = min(start + step, source.numel())
            piece = buffer[: (stop - start) * size].view(tensor.dtype)
            piece.copy_(source[start:stop], non_blocking=True)
            mark()
            if queued is not None:
                _move(*queued)
            queued = (piece.numpy(), destination[start:stop], wait)
            turn += 1
        out[name] = host
    if queued is not None:
        _move(*queued)
    return out


def _move(piece: np.ndarray, destination: np.ndarray, wait: Callable[[], None]) -> None:
    wait()
    np.copyto(destination, piece)
