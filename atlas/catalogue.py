"""The analysis catalogue: one ``queries/*.sql`` file per analysis, whose header holds all that atlas knows of it.

Header format (SQL comments at the top of the file, one field a line; an indented comment line continues the
field above it)::

    -- name: coreference heads
    -- aliases: coreference, antecedent heads
    -- paper: Clark et al. 2019, Section 4.3
    -- description: what the numbers mean
    --   (continued on indented comment lines)
    -- parameters:
    --   run [run]: run id (default: the latest run)
    --   select_run [run]: run whose accuracies select the head; empty for the run itself (default: )
    -- needs: SELECT count(*) FROM mentions WHERE run_id = $run
    --   else: run {run} has no coreference mentions: ingest a corpus with CorefUD 'Entity=' annotations
    --   (e.g. UD English GUM) with --pack window
    -- needs: roles stored
    -- notes: sep or eos token
    --   else: sep is empty
    -- keys: predictor, layer, head
    -- plot: heatmap all_types pronoun proper nominal
    -- figure: a layer x head heat map of each of all_types, pronoun, proper, nominal
    -- labels:
    --   all_types: all mentions

- ``parameters:`` one a line, ``name: description (default: value)``; without a default it is required. A
  parameter holding a run id says so after its name: ``[run]``, an ingested run (refused where the store has no
  such run), or ``[any run]``, a run with results of any kind (a task model's). ``run [run]`` is the run the
  entry answers for (the CLI's ``--run``, beside which ``--compare`` names others; left out, the latest run).
- ``needs:`` what the store must hold before the entry answers, checked in the header's order: a count over
  the store (``SELECT ...``, continued on indented lines; the entry's parameters bound as ``$name``), 0 when
  the need is not met, and below it ``else:`` the one line atlas refuses the entry with (``{name}``: the
  parameter's value; ``$name``: the parameter and its value, in the CLI's or the API's words); or the name of
  a need several entries share (``atlas.needs.SHARED``), its ``else:`` text, if any, added to the shared
  message after ': '.
- ``notes:`` the same, but not fatal: the answer is given, with the message as a note.
- ``keys:`` the columns naming a row, on which ``atlas query --compare`` aligns runs; left out: layer and
  head, those of them the answer has.
- ``plot:`` the figure ``atlas plot`` draws, one of ``PLOT_KINDS`` (heatmap, layers, mds, bars, curve, stacked,
  hbars, shares, lines, tokens), and its columns; left out or empty: none.
- ``figure:`` what the figure draws, in words (docs/catalogue.md says it); required with ``plot:``.
- ``baseline:`` a column of the answer, the same in every row, that a layers figure draws as a dashed reference
  line (entropy's uniform attention).
- ``axis:`` what the figure's values measure, in words: its value axis (a heat map's colour bars, an MDS map's
  legend of colours); ``{column}`` in it stands for the column's value in the answer's first row (layer
  ablation's ``{metric}``). Left out: the value column's label (none for a stacked figure).
- ``percent:`` columns of the ``plot:`` line holding shares from 0 to 1, which the figure draws in percent.
- ``labels:`` how the figure names its columns, one a line below it, ``column: words``; a column not listed is
  named by its name, '_' read as a space.

An entry refuses what it cannot answer (a sparse run, a parameter's value it does not know) with DuckDB's
``error('atlas: ...')`` in its SQL: atlas says the text after ``atlas: `` as the one line it refuses with, each
``$name`` in it as the parameter and the value given (``--param name=value`` on the command line; in the shell's
macros, after the macro's name, ``name := 'value'``). Any other error of the engine is said after the entry's
name, the first line of DuckDB's message without its class.

Parameters are bound by DuckDB (``$name`` in the SQL), never pasted into the SQL text. A malformed header, or
one naming an unknown shared need, is refused in one line naming the file and the line.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import string
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from typing import NoReturn

import duckdb
import polars as pl

from atlas.errors import AtlasError, arg
from atlas.needs import SHARED, Need

QUERIES = resources.files("atlas.catalogue_sql")  # the repository's queries/
FIELDS = (
    "name", "aliases", "paper", "description", "parameters", "needs", "notes", "keys", "plot", "figure", "baseline",
    "axis", "percent", "labels",
)  # fmt: skip
# the figures atlas.plot draws
PLOT_KINDS = ("heatmap", "layers", "mds", "bars", "curve", "stacked", "hbars", "shares", "lines", "tokens")
_FIELD = re.compile(r"-- (\w+):\s*(.*)")  # '-- name: value': a field
_MORE = re.compile(r"--\s{2,}(.*)")  # an indented comment line: the field above continues
_PARAMETER = re.compile(r"(\w+)(?:\s+\[(run|any run)\])?:\s*(.*)")  # name [run]: description (default: ...)
_LABEL = re.compile(r"(\w+):\s*(.*)")
RUN_KINDS = {"run": "runs", "any run": "any"}  # a parameter's [kind] -> the runs its value is looked for in
_LISTS = {"parameters": "name: description", "labels": "column: words"}  # fields listed on the lines below
_ELSE = re.compile(r"else:\s*(.*)")
_SQL = re.compile(r"(SELECT|WITH)\b", re.IGNORECASE)
_DEFAULT = re.compile(r"\(default: ([^)]*)\)\s*$")
_STOP = {"the", "a", "an", "of", "per", "by", "for", "to", "and", "in", "on", "at", "from", "with", "vs"}
_STOP |= {"what", "which", "how", "does", "do", "is", "are", "it", "its", "much", "many"}
REFUSAL = "atlas: "  # an entry's own refusal: error('atlas: ...') in its SQL (raise_error on Spark)
_ENGINE_CLASS = re.compile(r"(?:[A-Za-z]+ )+Error: ")  # DuckDB's 'Binder Error: ', 'Invalid Input Error: ', ...


@dataclass(frozen=True)
class Parameter:
    """A ``$name`` the entry's SQL binds, as its header's parameter line describes it."""

    name: str
    description: str
    default: str | None  # None: required; 'the latest run' for run
    run: str | None = None  # a run id: 'runs', of an ingested run, or 'any', of a run with results of any kind


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
    labels: tuple[tuple[str, str], ...] = ()  # (column, words): how the figure names a column
    figure: str = ""  # what the figure draws, in words
    baseline: str | None = None  # the column a layers figure draws as a reference line
    axis: str = ""  # what the figure's values measure ({column}: its value in the first row); empty: the column's label
    percent: tuple[str, ...] = ()  # the figure's columns of shares from 0 to 1, drawn in percent

    @property
    def run_parameters(self) -> dict[str, str]:
        """The parameters holding a run id, in the header's order, and the runs each is looked for in ('runs': the
        ingested runs; 'any': every run with results)."""
        return {p.name: p.run for p in self.parameters if p.run is not None}

    @property
    def cited(self) -> str:
        """The paper as a figure's title cites it: the header's ``paper:`` up to its first comma or semicolon, its
        authors and year ('Clark et al. 2019')."""
        return re.split(r"[,;]", self.paper, maxsplit=1)[0].strip()

    def label(self, column: str) -> str:
        """How the figure names ``column`` (``col@run`` as ``col``): the header's words, else the name with
        '_' read as a space."""
        column = column.split("@")[0]
        return dict(self.labels).get(column, column.replace("_", " "))

    def takes_run(self, run: str | None) -> bool:
        """Whether the entry takes a run; a run given to one that takes none is refused."""
        takes = {p.name for p in self.parameters}
        if run is not None and "run" not in takes:
            listed = ", ".join(sorted(takes)) or "none"
            raise AtlasError(f"{arg('run')}: '{self.name}' takes no run (parameters: {listed})")
        return "run" in takes

    def bind(self, values: dict[str, str]) -> dict[str, object]:
        """Parameter values for DuckDB: given ones converted to the default's type, else defaults."""
        known = {p.name for p in self.parameters}
        for key in values:
            if key not in known:
                takes = ", ".join(sorted(known)) or "none"
                raise AtlasError(f"{arg(key, query=True)}: '{self.name}' has no such parameter (it takes: {takes})")
        bound: dict[str, object] = {}
        for p in self.parameters:
            raw = values.get(p.name, p.default)
            if raw is None:
                raise AtlasError(f"{arg(p.name, query=True)}: required by '{self.name}'")
            bound[p.name] = _convert(p, raw)
        return bound


def _convert(p: Parameter, raw: str) -> object:
    """A value as the parameter's default is written: a whole number, a number (finite), true or false, or text."""
    default = p.default or ""
    given = arg(p.name, raw or "''", query=True)  # the parameter and its value, in the API's or the CLI's words
    if re.fullmatch(r"-?\d+", default):
        if not re.fullmatch(r"\s*[-+]?\d+\s*", raw):
            raise AtlasError(f"{given}: expected a whole number")
        if len(raw.strip()) > 20 or not -(2**63) <= int(raw) < 2**63:  # DuckDB's BIGINT, Spark's LONG
            raise AtlasError(f"{given}: expected a whole number from {-(2**63):,} to {2**63 - 1:,}")
        return int(raw)
    if re.fullmatch(r"-?\d*\.\d+", default):
        try:
            value = float(raw)
        except ValueError:
            raise AtlasError(f"{given}: expected a number") from None
        if not math.isfinite(value):
            raise AtlasError(f"{given}: expected a finite number")
        return value
    if default in ("true", "false"):
        if raw.strip().lower() not in ("true", "false"):
            raise AtlasError(f"{given}: expected true or false")
        return raw.strip().lower() == "true"
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
        self.labels: dict[str, tuple[str, int]] = {}  # column -> (words, line)
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
        if name in _LISTS and value.strip():
            self.fail(number, f"{name} are listed below '{name}:', one a line: '--   {_LISTS[name]}'")
        self.values[name], self.lines[name] = value.strip(), number

    def _continue(self, number: int, text: str) -> None:
        if self.field == "parameters":
            if not (match := _PARAMETER.fullmatch(text)):
                self.fail(number, "a parameter is written '--   name: description (default: value)'")
            name, kind, description = match.group(1), match.group(2), match.group(3).strip()
            if name == "run" and kind != "run":
                self.fail(number, "'run' is the run the entry answers for: write it '--   run [run]: ...'")
            default = _DEFAULT.search(description)
            run = RUN_KINDS[kind] if kind else None
            self.parameters.append(Parameter(name, description, default.group(1).strip() if default else None, run))
        elif self.field == "labels":
            if not (match := _LABEL.fullmatch(text)) or not match.group(2).strip():
                self.fail(number, "a label is written '--   column: words'")
            if match.group(1) in self.labels:
                self.fail(number, f"a second label of '{match.group(1)}'")
            self.labels[match.group(1)] = (match.group(2).strip(), number)
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
        keys, percent = self._columns("keys"), self._columns("percent")
        v = self.values
        aliases = tuple(a.strip() for a in v.get("aliases", "").split(",") if a.strip())
        plot = tuple(v.get("plot", "").split())
        for column, (_, line) in self.labels.items():
            if column not in plot[1:]:
                self.fail(line, f"'{column}' is labelled but not a column of the 'plot:' line")
        if plot and plot[0] not in PLOT_KINDS:
            self.fail(self.lines["plot"], f"unknown figure kind '{plot[0]}' (kinds: {', '.join(PLOT_KINDS)})")
        if plot and not v.get("figure"):
            self.fail(self.lines["plot"], "a 'plot:' line takes a 'figure:' line saying what the figure draws")
        for name in ("figure", "baseline", "axis", "percent"):
            if name in v and not plot:
                self.fail(self.lines[name], f"'{name}:' without a 'plot:' line: there is no figure")
        if "baseline" in v and plot[0] != "layers":
            self.fail(self.lines["baseline"], f"'baseline:' is drawn by a layers figure only, not {plot[0]}")
        for column in percent:
            if column not in plot[1:]:
                self.fail(self.lines["percent"], f"'{column}' is drawn in percent but not a column of the 'plot:' line")
        self._check_axis()
        parameters = tuple(self.parameters)
        labels = tuple((column, words) for column, (words, _) in self.labels.items())
        return Entry(
            v["name"], aliases, v["paper"], v["description"], parameters, plot, sql, self.path, needs, keys, labels,
            v.get("figure", ""), v.get("baseline") or None, v.get("axis", ""), percent,
        )  # fmt: skip

    def _columns(self, name: str) -> tuple[str, ...]:
        """The columns a field lists, split at commas and spaces; a field that names none is refused."""
        columns = tuple(c for c in re.split(r"[,\s]+", self.values.get(name, "")) if c)
        if name in self.values and not columns:
            self.fail(self.lines[name], f"'{name}:' names no column")
        return columns

    def _check_axis(self) -> None:
        """An ``axis:`` line's ``{column}`` fields each name a column, and nothing else."""
        if "axis" not in self.values:
            return
        try:
            names = [name for _, name, _, _ in string.Formatter().parse(self.values["axis"]) if name is not None]
        except ValueError as exc:
            self.fail(self.lines["axis"], f"the axis: {exc}")
        for name in names:
            if not name.isidentifier():
                self.fail(self.lines["axis"], f"the axis: '{{{name}}}' is not a column's name (write '{{column}}')")

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


def _words(text: str) -> tuple[str, ...]:
    """The words that carry meaning, a plural read as its singular ('heads' as 'head')."""
    words = (w for w in _norm(text).split() if w not in _STOP)
    return tuple(w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is")) else w for w in words)


def _close(word: str, other: str) -> float:
    """1 for the same word, 0.8 for a close one (a typo, or one stem: 'attend' and 'attention'), else 0."""
    if word == other:
        return 1.0
    if min(len(word), len(other)) < 4:
        return 0.0
    stem = len(os.path.commonprefix([word, other])) >= max(4, min(len(word), len(other)) - 2)
    return 0.8 if stem or difflib.SequenceMatcher(None, word, other).ratio() >= 0.8 else 0.0


def _fit(words: tuple[str, ...], text: str) -> tuple[float, bool]:
    """How well ``text`` holds the phrase's ``words``: the mean of each word's best match, and whether it holds
    every one of them."""
    theirs = set(_words(text))
    found = [max((_close(w, other) for other in theirs), default=0.0) for w in words]
    return (sum(found) / len(found), all(found)) if found else (0.0, False)


@dataclass(frozen=True, order=True)
class _Rank:
    """How well a phrase fits an entry, the better the greater: a label holding all its words first, then the
    share of its words found, a name before an alias, then the description's fit."""

    whole: bool  # a label (name or alias) holds every word of the phrase
    score: float  # the best label's fit
    named: bool  # that label is the name
    described: float  # the description's fit


def _rank(words: tuple[str, ...], entry: Entry) -> _Rank:
    fits = [(*_fit(words, label), i == 0) for i, label in enumerate((entry.name, *entry.aliases))]
    score, whole, named = max(fits, key=lambda fit: (fit[1], fit[0], fit[2]))
    return _Rank(whole, score, named, _fit(words, entry.description)[0])


def choose(phrase: str) -> tuple[Entry, str | None]:
    """The entry a phrase names, and the line to say when close words chose it (None: its name or an alias).

    Close words choose the one entry whose name or an alias holds each of them (a plural, a close spelling or
    one stem counting: 'heads', 'entopy', 'attend'), the name before an alias; else the one entry whose
    description holds each of them. A phrase that several entries hold about equally is refused with their
    names, one that none holds with the nearest.
    """
    wanted = _norm(phrase)
    for entry in entries():
        if wanted in {_norm(label) for label in (entry.name, *entry.aliases)}:
            return entry, None
    words = _words(phrase)
    ranked = sorted(((_rank(words, e), e) for e in entries()), key=lambda item: item[0], reverse=True)
    best = ranked[0][0]
    if best.whole:
        equal = [e for r, e in ranked if (r.whole, r.score, r.named) == (best.whole, best.score, best.named)]
        if len(equal) > 1:
            names = "; ".join(f"'{e.name}'" for e in equal)
            raise AtlasError(f"'{phrase}' fits several entries about equally: {names}; name one (see 'atlas queries')")
        chosen = equal[0]
    else:
        described = [e for _, e in ranked if words and _fit(words, e.description)[1]]
        if len(described) != 1:
            near = [e.name for r, e in ranked[:3] if r.score > 0 or r.described > 0]  # words of theirs, at least
            nearest = "; nearest: " + "; ".join(f"'{name}'" for name in near) if near else ""
            raise AtlasError(f"no catalogue entry matches '{phrase}'{nearest} (see 'atlas queries')")
        chosen = described[0]
    return chosen, f"'{phrase}': taken as '{chosen.name}' (see 'atlas queries')"


def resolve(phrase: str) -> Entry:
    """The entry a phrase names (its name, an alias or close words; see ``choose``), without saying which."""
    return choose(phrase)[0]


def run_entry(con: duckdb.DuckDBPyConnection, entry: Entry, params: dict[str, object]) -> pl.DataFrame:
    """The entry's answer (``params``: its parameters, bound); its refusals and DuckDB's errors as one line."""
    try:
        return con.execute(entry.sql, params).pl()
    except duckdb.Error as exc:
        raise AtlasError(_said(entry, exc, params)) from None


def _said(entry: Entry, exc: duckdb.Error, params: dict[str, object]) -> str:
    """The line for an error of the entry's SQL: its own refusal (``error('atlas: ...')``), each ``$name`` in it
    the parameter and its value; or the engine's first line without its class, after the entry's name."""
    lines = str(exc).strip().splitlines() or [type(exc).__name__]
    engine = _ENGINE_CLASS.match(lines[0])
    return refusal_line(entry, lines[0][engine.end() :] if engine else lines[0], params)


def refusal_line(entry: Entry, text: str, params: dict[str, object]) -> str:
    """An engine's error text as one line: the entry's own refusal (``atlas: ...``), each ``$name`` in it the
    parameter and its value; or the engine's text after the entry's name."""
    if not text.startswith(REFUSAL):
        return f"'{entry.name}': {text}"
    return named_parameters(text.removeprefix(REFUSAL), params)


def named_parameters(text: str, params: dict[str, object]) -> str:
    """``text`` with each ``$name`` of a parameter in ``params`` written as the parameter and its value."""

    def parameter(match: re.Match[str]) -> str:
        name = match.group(1)
        return arg(name, params[name], query=True) if name in params else match.group(0)

    return re.sub(r"\$(\w+)", parameter, text)
