"""Work made ready ahead of its consumer, in a thread of its own, a bounded number of items ahead (the ingest's
reading and aligning on an accelerator, while the model runs)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")
_END = object()


def read_ahead(items: Iterable[T], depth: int = 1) -> Iterator[T]:
    """``items``, made in a thread of their own at most ``depth`` ahead of the caller; an exception raised making
    them is raised here, where the caller takes the item; the thread stops when the caller stops taking them."""
    slots: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def hand(item: object, error: BaseException | None = None) -> bool:
        while not stop.is_set():
            try:
                slots.put((item, error), timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def make() -> None:
        try:
            for item in items:
                if not hand(item):
                    return
            hand(_END)
        except BaseException as error:  # noqa: BLE001 - handed to the caller, who raises it
            hand(_END, error)

    thread = threading.Thread(target=make, name="read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            item, error = slots.get()
            if error is not None:
                raise error
            if item is _END:
                return
            yield item
    finally:
        stop.set()
        thread.join()
