"""What a catalogue entry needs in the store before it can answer, and the line that says so.

An entry whose results come from another command (``atlas distances``, ``atlas probe``, ...) or from a
kind of corpus (coreference mentions, FrameNet frames) would otherwise answer with an empty table.
``check`` refuses it with one line naming what to run first (exit status 1); a ``note`` is printed on
stderr beside an answer that is computed but differs from the paper's setting, or that leaves columns
empty because the run's inputs lack a kind of special token (a decoder has no separator).

The needs are the entry's own (``Entry.needs``), read from its SQL file's header; the needs several entries
share are defined once in ``atlas.needs``.
"""

from __future__ import annotations

from collections.abc import Callable

import duckdb

from atlas.catalogue import Entry, named_parameters, resolve
from atlas.errors import AtlasError, Note, literal
from atlas.needs import ROLES_STORED, SHARED, Need

__all__ = ["ROLES_STORED", "SHARED", "Need", "check", "check_with"]


def check(con: duckdb.DuckDBPyConnection, entry: Entry | str, params: dict[str, object]) -> list[str]:
    """Raise when the entry cannot answer yet; return the notes to print beside its answer. ``entry``: the
    catalogue entry (or its name); ``params``: its parameters, bound."""
    if isinstance(entry, str):
        entry = resolve(entry)

    def count(need: Need) -> int:
        used = {k: v for k, v in params.items() if f"${k}" in need.sql}
        return con.execute(need.sql, used).fetchone()[0]

    return check_with(entry, params, count)


def check_with(entry: Entry, params: dict[str, object], count: Callable[[Need], int | None]) -> list[str]:
    """``check`` on any engine: ``count`` runs a need's count over the store (0 or None: not met)."""
    notes = []
    for need in entry.needs:
        if (count(need) or 0) > 0:
            continue
        values = {name: literal("" if value is None else value) for name, value in params.items()}  # held whole
        message = named_parameters(need.message.format(**values), params)
        if need.fatal:
            raise AtlasError(message)
        notes.append(Note(f"note: {message}"))
    return notes
