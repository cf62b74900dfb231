"""The analysis catalogue: one ``queries/*.sql`` file per analysis, with a header of metadata.

Header format (SQL comments at the top of the file)::

    -- name: best head per dependency relation
    -- aliases: dependency heads, syntax heads
    -- paper: Clark et al. 2019, Section 4.2, Table 1
    -- description: what the numbers mean (may continue on indented comment lines)
    -- parameters:
    --   run: run id (default: the latest run)
    --   min_count: ... (default: 100)
    -- plot: heatmap prev next self      (optional: the figure 'atlas plot' draws, and its columns)

Parameters are bound by DuckDB (``$name`` in the SQL), never pasted into the SQL text.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable

import duckdb
import polars as pl

from atlas.errors import AtlasError

QUERIES = resources.files("atlas") / "queries"  # the repository's queries/, installed as atlas/queries
_DEFAULT = re.compile(r"\(default: ([^)]*)\)\s*$")
_STOP = {"the", "a", "an", "of", "per", "by", "for", "to", "and", "in", "on", "what", "which"}


@dataclass(frozen=True)
class Parameter:
    name: str
    description: str
    default: str | None  # None: required; 'the latest run' for run


@dataclass(frozen=True)
class Entry:
    name: str
    aliases: tuple[str, ...]
    paper: str
    description: str
    parameters: tuple[Parameter, ...]
    plot: tuple[str, ...]  # figure kind ('heatmap' or 'layers') and the columns it shows; empty: none
    sql: str
    path: Traversable = field(compare=False)

    def bind(self, values: dict[str, str]) -> dict[str, object]:
        """Parameter values for DuckDB: given ones converted to the default's type, else defaults."""
        known = {p.name for p in self.parameters}
        for key in values:
            if key not in known:
                takes = ", ".join(sorted(known)) or "no parameters"
                raise AtlasError(f"--param {key}: '{self.name}' takes {takes}")
        bound: dict[str, object] = {}
        for p in self.parameters:
            raw = values.get(p.name, p.default)
            if raw is None:
                raise AtlasError(f"--param {p.name}: required by '{self.name}'")
            bound[p.name] = _convert(p, raw)
        return bound


def _convert(p: Parameter, raw: str) -> object:
    default = p.default or ""
    try:
        if re.fullmatch(r"-?\d+", default):
            return int(raw)
        if re.fullmatch(r"-?\d*\.\d+", default):
            return float(raw)
    except ValueError:
        raise AtlasError(f"--param {p.name}={raw}: expected a number") from None
    return raw


def parse_entry(path: Traversable) -> Entry:
    meta: dict[str, str] = {}
    params: list[Parameter] = []
    key = None
    for line in path.read_text().splitlines():
        if not line.startswith("--"):
            break
        text = line[2:]
        match = re.match(r" (\w+):\s*(.*)$", text)
        if match and match.group(1) in {"name", "aliases", "paper", "description", "parameters", "plot"}:
            key = match.group(1)
            meta[key] = match.group(2).strip()
        elif key == "parameters" and (pm := re.match(r"\s{2,}(\w+):\s*(.*)$", text)):
            desc = pm.group(2).strip()
            default = _DEFAULT.search(desc)
            params.append(Parameter(pm.group(1), desc, default.group(1).strip() if default else None))
        elif key == "description":
            meta[key] += " " + text.strip()
    for required in ("name", "paper", "description"):
        if not meta.get(required):
            raise AtlasError(f"{path}: the header has no '{required}:' line")
    aliases = tuple(a.strip() for a in meta.get("aliases", "").split(",") if a.strip())
    plot = tuple(meta.get("plot", "").split())
    return Entry(meta["name"], aliases, meta["paper"], meta["description"], tuple(params), plot, path.read_text(), path)


@cache
def entries() -> tuple[Entry, ...]:
    return tuple(parse_entry(p) for p in sorted(QUERIES.iterdir(), key=lambda p: p.name) if p.name.endswith(".sql"))


def _norm(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def _score(phrase: str, label: str) -> float:
    a, b = _norm(phrase), _norm(label)
    ratio = difflib.SequenceMatcher(None, a, b).ratio()
    words = set(a.split()) - _STOP
    label_words = set(b.split()) - _STOP
    overlap = len(words & label_words) / len(words) if words else 0.0
    return max(ratio, overlap)


def resolve(phrase: str) -> Entry:
    """The entry named by a phrase: its name, an alias, or close words."""
    wanted = _norm(phrase)
    for entry in entries():
        if wanted in {_norm(label) for label in (entry.name, *entry.aliases)}:
            return entry
    ranked = sorted(
        ((max(_score(phrase, label) for label in (e.name, *e.aliases)), e.name, e) for e in entries()),
        key=lambda item: (-item[0], item[1]),
    )
    if ranked and ranked[0][0] >= 0.6 and (len(ranked) == 1 or ranked[0][0] > ranked[1][0]):
        return ranked[0][2]
    nearest = "; ".join(f"'{name}'" for _, name, _ in ranked[:3])
    raise AtlasError(f"no catalogue entry matches '{phrase}'; nearest: {nearest} (see 'atlas queries')")


def run_entry(con: duckdb.DuckDBPyConnection, entry: Entry, params: dict[str, object]) -> pl.DataFrame:
    try:
        return con.execute(entry.sql, params).pl()
    except duckdb.Error as exc:
        raise AtlasError(f"{entry.path.name}: {str(exc).splitlines()[0]}") from None
