"""The analysis catalogue: one ``queries/*.sql`` file per analysis, whose header holds all that atlas knows of it.

Header format (SQL comments at the top of the file, one field a line; an indented comment line continues the
field above it)::

    -- name: coreference heads
    -- aliases: coreference, antecedent heads
    -- paper: Clark et al. 2019, Section 4.3
    -- description: what the numbers mean
    --   (continued on indented comment lines)
    -- parameters:
    --   run: run id (default: the latest run)
    --   select_run: run whose accuracies select the head; empty for the run itself (default: )
    -- needs: SELECT count(*) FROM mentions WHERE run_id = $run
    --   else: run {run} has no coreference mentions: ingest a corpus with CorefUD 'Entity=' annotations
    --   (e.g. UD English GUM) with --pack window
    -- needs: roles stored
    -- notes: sep or eos token
    --   else: sep is empty
    -- keys: predictor, layer, head
    -- plot: heatmap all_types pronoun proper nominal

- ``parameters:`` one a line, ``name: description (default: value)``; without a default it is required.
- ``needs:`` what the store must hold before the entry answers, checked in the header's order: a count over
  the store (``SELECT ...``, continued on indented lines; the entry's parameters bound as ``$name``), 0 when
  the need is not met, and below it ``else:`` the one line atlas refuses the entry with (``{name}``: the
  parameter's value); or the name of a need several entries share (``atlas.needs.SHARED``), its
  ``else:`` text, if any, added to the shared message after ': '.
- ``notes:`` the same, but not fatal: the answer is given, with the message as a note.
- ``keys:`` the columns naming a row, on which ``atlas query --compare`` aligns runs; left out: layer and
  head, those of them the answer has.
- ``plot:`` the figure ``atlas plot`` draws (heatmap, layers, mds, bars, curve, stacked) and its columns; left
  out or empty: none.

Parameters are bound by DuckDB (``$name`` in the SQL), never pasted into the SQL text. A malformed header, or
one naming an unknown shared need, is refused in one line naming the file and the line.
"""

from __future__ import annotations

import difflib
import re
import string
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from typing import NoReturn

import duckdb
import polars as pl

from atlas.errors import AtlasError
from atlas.needs import SHARED, Need

QUERIES = resources.files("atlas") / "queries"  # the repository's queries/, installed as atlas/queries
FIELDS = ("name", "aliases", "paper", "description", "parameters", "needs", "notes", "keys", "plot")
_FIELD = re.compile(r"-- (\w+):\s*(.*)")  # '-- name: value': a field
_MORE = re.compile(r"--\s{2,}(.*)")  # an indented comment line: the field above continues
_PARAMETER = re.compile(r"(\w+):\s*(.*)")
_ELSE = re.compile(r"else:\s*(.*)")
_SQL = re.compile(r"(SELECT|WITH)\b", re.IGNORECASE)
_DEFAULT = re.compile(r"\(default: ([^)]*)\)\s*$")
_STOP = {"the", "a", "an", "of", "per", "by", "for", "to", "and", "in", "on", "what", "which"}


@dataclass(frozen=True)
class Parameter:
    """A ``$name`` the entry's SQL binds, as its header's parameter line describes it."""

    name: str
    description: str
    default: str | None  # None: required; 'the latest run' for run


@dataclass(frozen=True)
class Entry:
    """One analysis: all that its SQL file's header says of it, and the SQL."""

    name: str
    aliases: tuple[str, ...]
    paper: str
    description: str
    parameters: tuple[Parameter, ...]
    plot: tuple[str, ...]  # figure kind ('heatmap', 'layers', ...) and the columns it shows; empty: none
    sql: str  # the whole file, header included
    path: Traversable = field(compare=False)
    needs: tuple[Need, ...] = ()  # what the store must hold first (fatal) and the notes, in the header's order
    keys: tuple[str, ...] = ()  # the columns naming a row, for comparisons of runs; empty: layer and head

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


@dataclass
class _WrittenNeed:
    """A ``needs:`` or ``notes:`` field as the header writes it: SQL or a shared need's name, and its ``else:``."""

    fatal: bool
    line: int
    head: list[str]
    message: list[str] | None = None


class _Header:
    """The fields of one SQL file's header, read line by line."""

    def __init__(self, path: Traversable) -> None:
        self.path = path
        self.values: dict[str, str] = {}
        self.lines: dict[str, int] = {}
        self.parameters: list[Parameter] = []
        self.needs: list[_WrittenNeed] = []
        self.field: str | None = None

    def fail(self, line: int, why: str) -> NoReturn:
        raise AtlasError(f"{self.path}:{line}: {why}")

    def read(self, number: int, line: str) -> None:
        if match := _FIELD.fullmatch(line):
            self._start(number, *match.groups())
        elif (match := _MORE.fullmatch(line)) and self.field is not None:
            self._continue(number, match.group(1).strip())
        else:
            self.fail(number, "expected '-- field: value' or an indented comment line continuing the field above")

    def _start(self, number: int, name: str, value: str) -> None:
        if name not in FIELDS:
            self.fail(number, f"unknown header field '{name}:' (fields: {', '.join(FIELDS)})")
        self.field = name
        if name in ("needs", "notes"):
            if not value.strip():
                self.fail(number, f"'{name}:' names no need (a SELECT count, or a shared need: {_shared()})")
            self.needs.append(_WrittenNeed(name == "needs", number, [value.strip()]))
            return
        if name in self.values:
            self.fail(number, f"a second '{name}:' line (the first is line {self.lines[name]})")
        if name == "parameters" and value.strip():
            self.fail(number, "parameters are listed below 'parameters:', one a line: '--   name: description'")
        self.values[name], self.lines[name] = value.strip(), number

    def _continue(self, number: int, text: str) -> None:
        if self.field == "parameters":
            if not (match := _PARAMETER.fullmatch(text)):
                self.fail(number, "a parameter is written '--   name: description (default: value)'")
            name, description = match.group(1), match.group(2).strip()
            default = _DEFAULT.search(description)
            self.parameters.append(Parameter(name, description, default.group(1).strip() if default else None))
        elif self.field in ("needs", "notes"):
            need = self.needs[-1]
            if match := _ELSE.fullmatch(text):
                if need.message is not None:
                    self.fail(number, "a second 'else:' for one need")
                need.message = [match.group(1).strip()]
            elif need.message is not None:
                need.message.append(text)
            else:
                need.head.append(text)
        else:
            self.values[self.field] = f"{self.values[self.field]} {text}".strip()

    def entry(self, sql: str) -> Entry:
        for required in ("name", "paper", "description"):
            if not self.values.get(required):
                raise AtlasError(f"{self.path}: the header has no '{required}:' line")
        known = {p.name for p in self.parameters}
        needs = tuple(self._need(written, known) for written in self.needs)
        keys = tuple(k for k in re.split(r"[,\s]+", self.values.get("keys", "")) if k)
        if "keys" in self.values and not keys:
            self.fail(self.lines["keys"], "'keys:' names no column")
        v = self.values
        aliases = tuple(a.strip() for a in v.get("aliases", "").split(",") if a.strip())
        plot = tuple(v.get("plot", "").split())
        parameters = tuple(self.parameters)
        return Entry(v["name"], aliases, v["paper"], v["description"], parameters, plot, sql, self.path, needs, keys)

    def _need(self, written: _WrittenNeed, known: set[str]) -> Need:
        """The need a header's lines write: SQL with its message, or a shared need (and its added text)."""
        head = " ".join(written.head)
        message = " ".join(written.message) if written.message is not None else None
        if _SQL.match(head):
            if not message:
                self.fail(written.line, "a need written as SQL takes its message on an indented 'else:' line below")
            need = Need(head, message, written.fatal)
        elif head in SHARED:
            shared = SHARED[head]
            need = Need(shared.sql, f"{shared.message}: {message}" if message else shared.message, written.fatal)
        else:
            self.fail(written.line, f"unknown shared need '{head}' (shared needs: {_shared()}; or a SELECT count)")
        for name in re.findall(r"\$(\w+)", need.sql):
            if name not in known:
                self.fail(written.line, f"the need's SQL binds ${name}, not a parameter of the entry")
        try:
            fields = {name for _, name, _, _ in string.Formatter().parse(need.message) if name is not None}
        except ValueError as exc:
            self.fail(written.line, f"the need's message: {exc}")
        for name in fields - known:
            self.fail(written.line, f"the need's message names {{{name}}}, not a parameter of the entry")
        return need


def _shared() -> str:
    return ", ".join(f"'{name}'" for name in SHARED)


def parse_entry(path: Traversable) -> Entry:
    """The entry of one SQL file, all of it from the file's header (see the module's docstring)."""
    text = path.read_text()
    header = _Header(path)
    for number, line in enumerate(text.splitlines(), 1):
        if not line.startswith("--"):
            break
        header.read(number, line)
    return header.entry(text)


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
