"""What the web application holds over one store: the store opened read-only, the lock its API calls take turns
on, and the answers (with their figures) already given.

A DuckDB connection serves one thread at a time: the API's calls (``Atlas.answer``, ``heads``, ``relation``, ...)
share the store's connection under ``Served.lock``; the pages' own queries run on a cursor of their own
(``Served.cursor``), beside them.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Generic, TypeVar

import duckdb
import polars as pl

import atlas
from atlas.catalogue import Entry
from atlas.engine import Answer

K = TypeVar("K")
V = TypeVar("V")
KEPT_ANSWERS = 64  # answers kept for paging and the head pages, the least recently used dropped first


@dataclass(frozen=True)
class Shown:
    """The run a page shows, and the store's runs beside it."""

    run_id: str
    named: bool  # the request named it; else it is the store's latest
    run_ids: tuple[str, ...]  # every ingested run, oldest first
    n_layers: int
    n_heads: int


class Kept(Generic[K, V]):
    """At most ``size`` values by key, the least recently used dropped first; safe across threads."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._values: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K, make: Callable[[], V]) -> V:
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                return self._values[key]
        value = make()
        with self._lock:
            self._values[key] = value
            while len(self._values) > self.size:
                self._values.popitem(last=False)
        return value


class Served:
    """One store opened read-only (``atlas.open``), for the pages of ``atlas serve``."""

    def __init__(self, store_path: str | os.PathLike[str] | None) -> None:
        self.st = atlas.open(store_path)
        self.lock = threading.Lock()
        self.answers: Kept[tuple, Answer] = Kept(KEPT_ANSWERS)
        self.figures: Kept[tuple, bytes] = Kept(KEPT_ANSWERS)  # an answer's figure as PNG
        self.drawing = threading.Lock()  # matplotlib draws one figure at a time
        self.choices: Kept[str, dict[str, list[tuple[str, int]]]] = Kept(8)  # a run's UPOS and relations

    def runs(self) -> pl.DataFrame:
        with self.lock:
            return self.st.runs()

    def shown(self, run: str | None) -> Shown:
        """The run ``run`` names (a whole id, or a unique start of it or of its hash), else the latest; one that
        is not in the store is refused with ``AtlasError``."""
        with self.lock:
            run_id = self.st.run_id(run)
            con = self.st.connection
            ids = [r for (r,) in con.execute("SELECT run_id FROM runs ORDER BY created_at, run_id").fetchall()]
            n_layers, n_heads = con.execute("SELECT n_layers, n_heads FROM runs WHERE run_id = ?", [run_id]).fetchone()
        return Shown(run_id, run is not None, tuple(ids), int(n_layers), int(n_heads))

    def answer(self, entry: Entry, shown: Shown | None, params: dict[str, str]) -> Answer:
        """``entry``'s answer for the run shown (None: an entry that takes no run), kept for the next page."""
        run = shown.run_id if shown is not None and shown.named else None
        key = (entry.name, shown.run_id if shown else None, run, tuple(sorted(params.items())))

        def answered() -> Answer:
            with self.lock:
                return self.st.answer(entry.name, run=run, **params)

        return self.answers.get(key, answered)

    @contextmanager
    def cursor(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection of the page's own to the store's views (read-only), closed after it."""
        with self.lock:
            cur = self.st.connection.cursor()
        try:
            cur.execute("SET enable_progress_bar = false")
            yield cur
        finally:
            cur.close()
