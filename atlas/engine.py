"""Answering a catalogue entry, once for every engine: binding its parameters, checking its runs and what it needs
first, the line naming it and its runs, its notes, and comparisons of runs.

An engine is where the entry's SQL runs (``Engine``): DuckDB over the store's views (``DuckDBEngine``, here), or
Apache Spark over its Parquet files (``atlas.spark.SparkEngine``). It runs one statement written for DuckDB (the
store's SQL about runs, ``atlas.run_sql``, and the entries' needs, with ``$name`` parameters) and an entry's
SQL; everything else is done here, the same on both. What needs no store is refused before the engine first
reads it: an engine that starts slowly (Spark's Java) starts only for an answer it can give.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import duckdb
import polars as pl

from atlas import checks
from atlas.catalogue import Entry, run_entry
from atlas.compare import check_shapes, compare, key_columns, letter, lettered
from atlas.errors import AtlasError, Note, arg, literal
from atlas.prerequisites import check_with
from atlas.run_sql import LATEST_RUN, RAN, RUN_IDS, SHAPE, TASK_MODEL
from atlas.store import Store


@runtime_checkable
class Engine(Protocol):
    """Where a catalogue entry's SQL runs, over one store."""

    @property
    def named(self) -> str:
        """The store as an error names it (``store='...'``, or $ATLAS_STORE where that named it)."""
        ...

    @property
    def location(self) -> str:
        """The store's folder or URI, as 'no such run in ...' says it."""
        ...

    def first(self, sql: str, params: Mapping[str, object]) -> tuple | None:
        """The first row of one DuckDB statement over the store's tables, binding the ``$name`` parameters it
        holds from ``params``; None where it has no row."""
        ...

    def run_ids(self, kind: str) -> list[str]:
        """The runs the store holds, sorted: kind 'runs', its ingested runs; 'any', also its task models'."""
        ...

    def frame(self, entry: Entry, params: dict[str, object]) -> pl.DataFrame:
        """The entry's answer (``params``: its parameters, bound); its refusal or the engine's error as one line."""
        ...


@dataclass(frozen=True)
class Answer:
    """A catalogue entry's answer, with the line naming the entry and the runs that answered."""

    entry: Entry
    frame: pl.DataFrame
    title: str
    notes: tuple[str, ...]  # 'note: ...' lines: computed, but not in the paper's setting
    runs: tuple[str, ...] = ()  # a comparison's runs, the first the reference (frame: col@run, col_diff@run)

    def lettered(self) -> tuple[pl.DataFrame, str]:
        """A comparison's frame with each run's columns named by its letter (``col@A``, ``col_diff@B``), as the
        terminal shows it, and the line saying which run each letter is."""
        said = "; ".join(f"@{letter(i)}: {run}" for i, run in enumerate(self.runs))
        return lettered(self.frame, self.runs), f"columns {said}"


@dataclass(frozen=True)
class Prepared:
    """An entry ready to run on an engine: its parameters bound and checked, its needs met."""

    params: dict[str, object]  # bound, the runs among them checked
    title: str  # the entry and the runs it answers for
    notes: tuple[str, ...]


class DuckDBEngine:
    """The entries' SQL on DuckDB, over the store's views (a read-only connection to its ``atlas.duckdb``)."""

    def __init__(self, store: Store, con: duckdb.DuckDBPyConnection) -> None:
        self.store = store
        self.con = con

    @property
    def named(self) -> str:
        return self.store.named

    @property
    def location(self) -> str:
        return str(self.store.root)

    def first(self, sql: str, params: Mapping[str, object]) -> tuple | None:
        used = self.con.extract_statements(sql)[0].named_parameters
        return self.con.execute(sql, {name: params[name] for name in used}).fetchone()

    def run_ids(self, kind: str) -> list[str]:
        if kind == "any":
            return self.store.run_ids()
        return sorted(r for (r,) in self.con.execute(RUN_IDS).fetchall())

    def frame(self, entry: Entry, params: dict[str, object]) -> pl.DataFrame:
        return run_entry(self.con, entry, params)


def parameter_text(value: object) -> str:
    """A Python value as the CLI's --param NAME=VALUE would give it (True -> 'true', None -> '')."""
    if value is None:
        return ""
    return str(value).lower() if isinstance(value, bool) else str(value)


def latest_run(engine: Engine) -> str:
    """The run a left-out run parameter stands for: the one ingested last."""
    row = engine.first(LATEST_RUN, {})
    if row is None:
        raise AtlasError(f"{engine.named}: the store holds no run yet")
    return row[0]


def check_run(engine: Engine, run: str, param: str = "run", kind: str = "runs", *, query: bool = False) -> str:
    """The run ``run`` names, if the store holds it (kind 'runs': an ingested run; 'any': also a task model's
    results): its whole id, a unique start of it, or a unique start of its hash (the id's last part); else refused
    naming ``param``, the parameter it was given as (``query``: a catalogue entry's parameter), and the runs it
    could be where it names several."""
    known = engine.run_ids(kind)
    if run in known:
        return run
    found = [r for r in known if r.startswith(run) or r.rpartition("__")[2].startswith(run)]
    if len(found) == 1:
        return found[0]
    named = arg(param, repr(str(run)), query=query)
    if found:
        raise AtlasError(f"{named}: the start of {len(found)} runs ({', '.join(found)}); give more of the one meant")
    raise AtlasError(f"{named}: no such run in {engine.location} (see 'atlas runs')")


def latest_note(engine: Engine, run: str, shown: Sequence[str] = ()) -> list[str]:
    """Where the latest run, ``run``, stands for a run left out and the store holds others (besides those
    ``shown`` beside it): the note saying so."""
    others = len(set(engine.run_ids("runs")) - {run, *shown})
    if others < 1:
        return []
    return [
        Note(
            f"note: run {literal(run)} answered, the store's latest; it holds {others} other "
            f"run{'s' if others > 1 else ''}: name one with {arg('run', 'RUN')} (see 'atlas runs')"
        )
    ]


def run_line(engine: Engine, run: str) -> str:
    """The run and what it ran (its model and corpus, or the task a model was trained for), as a title says it."""
    row = engine.first(RAN, {"run": run})
    if row is not None:
        return f"{run} (model {row[0]}, corpus {row[1]})"
    task = engine.first(TASK_MODEL, {"run": run})
    return f"{run} ({task[0]} model from {task[1]})" if task and task[0] else run


def prepare(
    engine: Engine, entry: Entry, run: str | None, params: Mapping[str, object], named: bool = False
) -> Prepared:
    """``entry`` bound for ``run`` (default: the latest run, for an entry that takes one) and ``params``, every run
    among them checked (``named``: ``run`` was given among the parameters, and is named so), and its needs met."""
    values = {key: parameter_text(value) for key, value in params.items()}
    takes_run = entry.takes_run(run)
    entry.bind(values | ({"run": run or ""} if takes_run else {}))  # refused before the engine reads the store
    latest: list[str] = []
    if takes_run:
        values["run"] = run or latest_run(engine)
        latest = latest_note(engine, values["run"]) if run is None else []
    runs = entry.run_parameters  # the parameters holding a run id, as the header declares them
    for key, value in list(values.items()):
        if key in runs and value:  # a run named by a start of its id or hash: its whole id
            values[key] = check_run(engine, value, key, runs[key], query=key != "run" or named)
    bound = entry.bind(values)
    notes = check_with(entry, bound, lambda need: (engine.first(need.sql, bound) or (None,))[0])
    used = [f"{key} {run_line(engine, str(bound[key]))}" for key in runs if bound.get(key)]
    title = f"{entry.name} ({entry.paper})" + (f"; {'; '.join(used)}" if used else "; every run in the store")
    return Prepared(bound, title, tuple(latest + notes))


def answer_on(
    engine: Engine,
    entry: Entry,
    run: str | None = None,
    runs: Sequence[str | None] | None = None,
    params: Mapping[str, object] | None = None,
) -> Answer:
    """``entry``'s answer on ``engine``: for ``run`` (default: the latest run, for an entry that takes one), or
    ``runs`` compared (two or more, the first the reference; None: the latest run). ``params``: the entry's other
    parameters; ``run`` among them (the CLI's --param run=R) is the run, or the first of ``runs``, named as
    given."""
    params = dict(params or {})
    named = "run" in params
    if named:
        if run is not None or (runs and runs[0] is not None):
            given = arg("runs[0]") if runs else arg("run")
            raise AtlasError(f"{arg('run', query=True)}: the run is given by {given}; give it once")
        value = parameter_text(params.pop("run"))
        if runs:
            runs = [value, *runs[1:]]
        else:
            run = value
    checks.named("run", run, "empty; name a run (see 'atlas runs'); left out, it is the latest")
    if runs is not None:
        return _compare(engine, entry, run, list(runs), params, named)
    ready = prepare(engine, entry, run, params, named)
    return Answer(entry, engine.frame(entry, ready.params), ready.title, ready.notes)


def _compare(
    engine: Engine, entry: Entry, run: str | None, given: list[str | None], params: dict[str, object], named: bool
) -> Answer:
    """``entry`` answered for each of the runs ``given`` and the answers aligned (see ``atlas.compare``)."""
    if run is not None:
        raise AtlasError(f"{arg('run')}: name the runs to compare in {arg('runs', '[...]')} only")
    if not entry.takes_run(None):
        raise AtlasError(f"{arg('runs')}: '{entry.name}' takes no run; there is nothing to compare")
    params_named = ["runs" if i else "run" if named else "runs[0]" for i in range(len(given))]
    runs = [
        latest_run(engine) if r is None else check_run(engine, r, p, query=p == "run")
        for r, p in zip(given, params_named, strict=True)
    ]
    if given and given[0] is None:  # the latest run, left out, named again among the others: it is the first
        runs = [runs[0], *(r for r in runs[1:] if r != runs[0])]
    if len(runs) < 2 or len(set(runs)) < len(runs):
        said = ", ".join(runs) or "none"
        latest = f"; {arg('runs[0]')} left out is the latest run" if None in given else ""
        raise AtlasError(f"{arg('runs')}: name two or more different runs (given: {said}{latest})")
    answers: dict[str, Answer] = {}
    for r in runs:  # the first is the CLI's --run (or --param run), the others its --compare
        answers[r] = answer_on(engine, entry, r, params=params)
    frames = {r: a.frame for r, a in answers.items()}
    keys = key_columns(entry, frames[runs[0]])
    check_shapes(entry, keys, runs, lambda r: engine.first(SHAPE, {"run": r}))
    lines = "; ".join(f"{'run' if i == 0 else 'compared with'} {run_line(engine, r)}" for i, r in enumerate(runs))
    title = f"{entry.name} ({entry.paper}); {lines}; aligned on {', '.join(keys)}, differences to {runs[0]}"
    latest = latest_note(engine, runs[0], runs) if given and given[0] is None else []
    notes = tuple(dict.fromkeys([*latest, *(n for a in answers.values() for n in a.notes)]))
    return Answer(entry, compare(entry, frames), title, notes, tuple(runs))
