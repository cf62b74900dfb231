"""Which catalogue entries a store answers now: per entry, whether it answers on the store's latest run (an entry that
takes no run: on the store), or the line it is refused with, saying what to run first.

Each entry is checked as the answer path checks it before its SQL runs (``atlas.engine.prepare``: its parameters
bound with their defaults, its runs found, its ``needs:`` counted: a dense run where it reads single weights too);
its SQL is not run, so a refusal written in the SQL itself (a parameter's value) comes only when it is asked.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import polars as pl

from atlas.catalogue import Entry, entries
from atlas.engine import Engine, prepare
from atlas.errors import AtlasError


@dataclass(frozen=True)
class Ready:
    """Whether a catalogue entry answers on a store now."""

    entry: Entry
    refusal: AtlasError | None  # the line its answer is refused with (what to run first); None: it answers


def readiness(engine: Engine) -> tuple[Ready, ...]:
    """Every catalogue entry, checked on ``engine``'s store for its latest run."""
    found = []
    for entry in entries():
        try:
            prepare(engine, entry, None, {})
        except AtlasError as refusal:
            found.append(Ready(entry, refusal))
        else:
            found.append(Ready(entry, None))
    return tuple(found)


def table(found: tuple[Ready, ...], said: Callable[[AtlasError], str] = str) -> pl.DataFrame:
    """Columns name, answers (true or false) and first (what to run first, as ``said`` says a refusal: the API's
    words by default; empty where it answers)."""
    return pl.DataFrame(
        {
            "name": [r.entry.name for r in found],
            "answers": [r.refusal is None for r in found],
            "first": [None if r.refusal is None else said(r.refusal) for r in found],
        },
        schema={"name": pl.Utf8, "answers": pl.Boolean, "first": pl.Utf8},
    )
