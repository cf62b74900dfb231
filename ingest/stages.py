"""Where an ingest's time goes: seconds per stage, kept only while ``timing()`` is active (the bench's ``## stages``
table). A stage given a device waits for its queued work as it starts and as it ends, so that an accelerator's work
is counted in the stage that launched it; a stage inside another is counted in its own row only. Outside ``timing()``
a stage costs a check of one variable."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import torch

T = TypeVar("T")
_clock: dict[str, float] | None = None  # while timing: seconds per stage
_local = threading.local()  # each thread's open stages: [seconds of the stages inside, ...]
_lock = threading.Lock()
_last: dict[str, float] = {}  # while timing: when the last stage of each name that counts its gaps ended
WAITING = "waiting for the host"  # the gaps between the model's stages: the device idle, this ingest's host at work


def _wait(device: torch.device | None) -> None:
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device is not None and device.type == "mps":
        torch.mps.synchronize()


@contextmanager
def stage(name: str, device: torch.device | None = None, gaps: bool = False) -> Iterator[None]:
    """Count the block's seconds as stage ``name`` (less those of stages inside it); ``device``: wait for its work;
    ``gaps``: count the time from the end of one such stage to the start of the next as ``WAITING``."""
    if _clock is None:
        yield
        return
    inner = _local.__dict__.setdefault("open", [])
    _wait(device)  # what was queued before counts where it was queued
    inner.append(0.0)
    start = time.perf_counter()
    if gaps and name in _last:
        with _lock:
            _clock[WAITING] += start - _last[name]
    try:
        yield
        _wait(device)
    finally:
        end = time.perf_counter()
        nested = inner.pop()
        if inner:
            inner[-1] += end - start
        with _lock:
            if _clock is not None:
                _clock[name] += end - start - nested
                if gaps:
                    _last[name] = end


def staged(name: str, items: Iterable[T]) -> Iterator[T]:
    """``items``, the time taken to make each counted as stage ``name``."""
    iterator = iter(items)
    while True:
        with stage(name):
            try:
                item = next(iterator)
            except StopIteration:
                return
        yield item


@contextmanager
def timing() -> Iterator[dict[str, float]]:
    """Keep the seconds of every stage while active, in the dict yielded."""
    global _clock
    _clock = defaultdict(float)
    _last.clear()
    try:
        yield _clock
    finally:
        _clock = None
