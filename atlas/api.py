"""The atlas as a library: every operation of the command line, returning Polars frames.

::

    import atlas
    st = atlas.open("atlas-store")                       # the store the CLI writes
    st.runs()                                            # polars.DataFrame
    st.query("best head per dependency relation", min_count=50)
    st.query("entropy", runs=[pretrained, random_init])  # side by side, with the differences to the first
    st.sql("SELECT layer, head, avg(entropy) FROM attn_rows GROUP BY ALL")
    st.table("attn_edges")                               # polars.LazyFrame over the Parquet files
    weights, tokens = st.attention(example=12, layer=3, head=9)
    st.plot("special tokens")                            # matplotlib Figure
    atlas.ingest("corpus.conllu", store="atlas-store")

``cli.py`` parses arguments, calls these and prints; there is one implementation of each operation.
User errors are raised as one-line ``AtlasError``s (the CLI prints the line and exits 1). Layers and
heads are 1-based wherever a catalogue answer shows them (``query``, ``plot``, ``attention``) and
0-based in the store's tables (``sql``, ``table``), as in the CLI.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import duckdb
import numpy as np
import polars as pl
import pyarrow.parquet as pq
from tqdm import tqdm

from atlas import checks
from atlas.catalogue import RUN_PARAMS, Entry, choose, entries, run_entry
from atlas.compare import check_shapes, compare, key_columns, letter, lettered
from atlas.errors import AtlasError, AtlasNote, api_text, arg, caller_level, warn_notes
from atlas.files import check_folders_above, writing_to
from atlas.ingestion.corpus_info import check_file, dropped_text
from atlas.ingestion.run_id import DEVICES as DEVICES  # the --device choices, for the CLI
from atlas.ingestion.run_id import DTYPES as DTYPES  # the --dtype choices, for the CLI
from atlas.ingestion.run_id import number_text
from atlas.macros import macro_call
from atlas.maps import read_maps
from atlas.prerequisites import check as check_prerequisites
from atlas.store import Store, is_uri, store_named, table_schemas

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from atlas.report import Report

FORMATS = ("conllu", "glue", "framenet", "text", "repeated")  # the corpora --format reads (repeated: drawn, no file)


# store.OLDER_RUNS as Polars expressions, for the scans of Atlas.table
POLARS_DERIVED = {
    ("tokens", "role"): pl.coalesce("role", pl.col("special").replace_strict(
        {"[CLS]": "cls", "[SEP]": "sep"}, default=None, return_dtype=pl.String
    )),
    ("attn_rows", "to_first"): pl.coalesce("to_first", "to_cls"),
    ("runs", "text"): pl.coalesce("text", pl.lit("words")),
    ("runs", "word_rows"): pl.coalesce("word_rows", pl.lit("mean")),
    ("runs", "dtype"): pl.coalesce("dtype", pl.lit("float32")),
}  # fmt: skip


@checks.typed
def store_at(path: str | os.PathLike[str] | None = None) -> Store:
    """The store at ``path``, else $ATLAS_STORE, else ./atlas-store (as the CLI's --store), named in errors as given:
    ``store=...`` (``--store``), or $ATLAS_STORE."""
    checks.named("store", path, "empty; name the store folder, or leave it out")
    env = os.environ.get("ATLAS_STORE")
    given = os.fspath(path) if path is not None else env
    if given and is_uri(given):
        named = store_named(given, from_env=path is None)
        raise AtlasError(f"{named}: a URI; only the catalogue on Spark reads a store there (docs/cluster.md)")
    return Store(Path(path or env or "atlas-store"), from_env=path is None and bool(env))


@checks.typed
def open(path: str | os.PathLike[str] | None = None, *, must_exist: bool = True) -> Atlas:
    """Open a store (``path``, else $ATLAS_STORE, else ./atlas-store); fails when there is none unless
    ``must_exist`` is False (a store that holds only interrupted ingests, or none: see ``Atlas.runs``)."""
    st = Atlas(store_at(path))
    if must_exist:
        st.connection  # noqa: B018 (opening checks the store and updates views written by another version)
    return st


def queries() -> pl.DataFrame:
    """The analysis catalogue: name, aliases, paper, parameters (with defaults) and DuckDB table macro call of every
    entry."""
    return pl.DataFrame(
        {
            "name": [e.name for e in entries()],
            "aliases": [", ".join(e.aliases) for e in entries()],
            "paper": [e.paper for e in entries()],
            "parameters": [
                ", ".join(f"{p.name}={'REQUIRED' if p.default is None else p.default}" for p in e.parameters)
                for e in entries()
            ],
            "macro": [macro_call(e) for e in entries()],  # the same in the DuckDB shell: duckdb STORE/atlas.duckdb
        }
    )


@checks.typed
def describe(name: str) -> str:
    """A catalogue entry's SQL file, as ``queries/`` holds it: its header (name, aliases, paper, description,
    parameters, what it needs first, notes, keys, figure) and its SQL (``name``: a name, an alias or close
    words, which choose the entry they fit with an ``AtlasNote`` saying which)."""
    return _chosen(name).sql.rstrip("\n")


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


class AttentionMap(NamedTuple):
    weights: np.ndarray  # float32 (n, n): weights[src, dst], the attention token src pays to token dst
    tokens: list[str]  # the n word pieces, [CLS] and [SEP] included


def _parameter_text(value: object) -> str:
    """A Python value as the CLI's --param NAME=VALUE would give it (True -> 'true', None -> '')."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


class Atlas:
    """A store opened for reading (see ``open``)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._con: duckdb.DuckDBPyConnection | None = None
        self._sandbox: duckdb.DuckDBPyConnection | None = None

    def __repr__(self) -> str:
        return f"atlas.open({str(self.store.root)!r})"

    def __enter__(self) -> Atlas:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for con in (self._con, self._sandbox):
            if con is not None:
                con.close()
        self._con = self._sandbox = None

    @property
    def connection(self) -> duckdb.DuckDBPyConnection:
        """A read-only DuckDB connection to the store's views."""
        if self._con is None:
            self._con = self.store.connect()
        return self._con

    # runs

    @checks.typed
    def runs(self, unfinished: bool = False) -> pl.DataFrame:
        """The runs, with what tells them apart (weights: pretrained, or random with their seed and config
        overrides; shape: layers x heads; max length, kept mass with its cap of edges per row, pack, ...);
        ``unfinished``: the interrupted ingests instead (re-run the same ingest to resume one)."""
        if unfinished:
            if not self.store.exists() and not self.store.staging.is_dir():
                raise AtlasError(f"{self.store.named}: no store here (run 'atlas ingest' first)")
            return pl.DataFrame({"unfinished_run": self.store.unfinished_runs()}, schema={"unfinished_run": pl.Utf8})
        from atlas.model.identity import overrides_text

        def weights(random_init: bool, seed: int, config: str | None) -> str:
            overrides = f"; {overrides_text(json.loads(config))}" if config else ""
            return f"random (seed {seed}{overrides})" if random_init else "pretrained"

        runs = self.connection.sql(
            "SELECT run_id, model, random_init, seed, config, n_layers || ' x ' || n_heads AS shape, corpus, text, "
            "word_rows, dtype, pack, max_length, coalesce(kept_mass || coalesce(' (max ' || max_edges || ')', ''), "
            "'dense') AS kept_mass, n_examples, n_skipped, n_edges, created_at FROM runs ORDER BY created_at"
        ).pl()
        shown = [weights(*row) for row in runs.select("random_init", "seed", "config").rows()]
        return runs.drop("random_init", "seed", "config").insert_column(2, pl.Series("weights", shown, pl.Utf8))

    def latest_run(self) -> str:
        return self.store.latest_run(self.connection)

    @checks.typed
    def run_id(self, run: str | None = None, param: str = "run", kind: str = "runs", *, query: bool = False) -> str:
        """``run`` if the store holds it (kind 'runs': an ingested run; 'any': also a task model's results),
        else the latest ingested run when ``run`` is None; an unknown one is refused naming ``param``, the
        parameter it was given as (``query``: a catalogue entry's parameter)."""
        if run is None:
            return self.latest_run()
        if kind == "runs":
            known = self.connection.execute("SELECT count(*) FROM runs WHERE run_id = ?", [run]).fetchone()[0] > 0
        else:
            known = run in self.store.run_ids()
        if not known:
            raise AtlasError(
                f"{arg(param, repr(str(run)), query=query)}: no such run in {self.store.root} (see 'atlas runs')"
            )
        return run

    def _run_line(self, run_id: str) -> str:
        con = self.connection
        row = con.execute("SELECT model, corpus FROM runs WHERE run_id = ?", [run_id]).fetchone()
        if row is not None:
            return f"{run_id} (model {row[0]}, corpus {row[1]})"
        row = con.execute("SELECT any_value(task), any_value(model) FROM task_models WHERE run_id = ?", [run_id])
        task = row.fetchone()
        return f"{run_id} ({task[0]} model from {task[1]})" if task and task[0] else run_id

    # the catalogue

    def queries(self) -> pl.DataFrame:
        """The analysis catalogue (as ``atlas.queries()``)."""
        return queries()

    @checks.typed
    def answer(
        self,
        name: str,
        /,
        run: str | None = None,
        runs: Sequence[str | None] | None = None,
        figure: str | os.PathLike[str] | None = None,
        **params: object,
    ) -> Answer:
        """Run the catalogue entry named by ``name`` (a name, an alias or close words, which choose the entry they
        fit with an ``AtlasNote`` saying which, at once) with its title and notes. ``run``: the run it answers
        for (default: the latest run), for entries that take one; ``runs``: instead of ``run``, two or more runs
        compared (see ``atlas.compare``; None: the latest run); ``figure``: also
        save the entry's paper-style figure to this file (PNG, PDF or SVG, by its suffix); ``params``: the
        entry's other parameters (see ``queries()``)."""
        if figure is not None:
            checks.named("figure", figure)
            from atlas.plot import check_out, save
            from atlas.plot import figure as draw

            check_out(Path(figure))
            answer = self.answer(name, run, runs, **params)
            save(draw(answer.entry, answer.frame, answer.title, answer.runs), Path(figure))
            return answer
        entry = _chosen(name)  # said at once, before anything refuses
        _not_empty(run)
        if runs is not None:
            return self._compare(entry, run, list(runs), params)
        values = {key: _parameter_text(value) for key, value in params.items()}
        takes = {p.name for p in entry.parameters}
        if entry.takes_run(run):
            values["run"] = run or values.get("run") or self.latest_run()
        for key, value in values.items():
            if key in RUN_PARAMS and key in takes and value:
                self.run_id(value, key, RUN_PARAMS[key], query=key != "run")
        bound = entry.bind(values)
        notes = check_prerequisites(self.connection, entry, bound)
        used = [f"{key} {self._run_line(str(bound[key]))}" for key in RUN_PARAMS if bound.get(key)]
        title = f"{entry.name} ({entry.paper})" + (f"; {'; '.join(used)}" if used else "; every run in the store")
        return Answer(entry, run_entry(self.connection, entry, bound), title, tuple(notes))

    def _compare(self, entry: Entry, run: str | None, given: list[str | None], params: dict[str, object]) -> Answer:
        if run is not None:
            raise AtlasError(f"{arg('run')}: name the runs to compare in {arg('runs', '[...]')} only")
        if "run" not in {p.name for p in entry.parameters}:
            raise AtlasError(f"{arg('runs')}: '{entry.name}' takes no run; there is nothing to compare")
        runs = [self.latest_run() if r is None else r for r in given]
        if given and given[0] is None:  # the latest run, left out, named again among the others: it is the first
            runs = [runs[0], *(r for r in runs[1:] if r != runs[0])]
        if len(runs) < 2 or len(set(runs)) < len(runs):
            said = ", ".join(runs) or "none"
            latest = f"; {arg('runs[0]')} left out is the latest run" if None in given else ""
            raise AtlasError(f"{arg('runs')}: name two or more different runs (given: {said}{latest})")
        answers = {  # the first run is the CLI's --run, the others its --compare
            r: self.answer(entry.name, self.run_id(r, "runs" if i else "runs[0]"), **params) for i, r in enumerate(runs)
        }
        frames = {r: a.frame for r, a in answers.items()}
        keys = key_columns(entry, frames[runs[0]])
        check_shapes(self.connection, entry, keys, runs)
        lines = "; ".join(f"{'run' if i == 0 else 'compared with'} {self._run_line(r)}" for i, r in enumerate(runs))
        title = f"{entry.name} ({entry.paper}); {lines}; aligned on {', '.join(keys)}, differences to {runs[0]}"
        notes = tuple(dict.fromkeys(n for a in answers.values() for n in a.notes))
        return Answer(entry, compare(entry, frames), title, notes, tuple(runs))

    @checks.typed
    def query(
        self, name: str, /, run: str | None = None, runs: Sequence[str | None] | None = None, **params: object
    ) -> pl.DataFrame:
        """A catalogue entry's answer (see ``answer``; ``runs``: two or more runs side by side, with the differences
        to the first); its notes are issued as ``AtlasNote`` warnings."""
        answer = self.answer(name, run, runs, **params)
        warn_notes(answer.notes)
        return answer.frame

    @checks.typed
    def plot(
        self, name: str, /, run: str | None = None, runs: Sequence[str | None] | None = None, **params: object
    ) -> Figure:
        """The entry's paper-style figure, titled with the entry and the runs that answered (``atlas plot``
        saves this figure); ``runs``: two or more runs compared, panels side by side on one colour scale and
        the differences to the first (see ``atlas.plot``)."""
        from atlas.plot import figure

        answer = self.answer(name, run, runs, **params)
        warn_notes(answer.notes)
        return figure(answer.entry, answer.frame, answer.title, answer.runs)

    # analyses written into the store: each holds the store's writer lock (refused at once while another
    # process writes) and publishes its results in one transaction

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        self.close()  # the writer's own connections, not this reader's, open the store while it writes
        with self.store.writing(), self.store.transaction():
            yield

    @checks.typed
    def distances(
        self,
        run: str | None = None,
        examples: int = 500,
        clusters: int = 6,
        progress: bool = True,
        model: str | os.PathLike[str] | None = None,
    ) -> str:
        """Compute head distances (Jensen-Shannon divergence between heads, averaged over ``run``'s first
        ``examples`` inputs; MDS and ``clusters`` clusters) and add them to the store; returns the run id.
        ``model``: the run's model where it has moved since the ingest (its weights are checked against the
        run's). Then: ``query("head distances")``."""
        from atlas.distances import compute

        checks.at_least("examples", examples, 1)
        checks.at_least("clusters", clusters, 1)
        run_id = self.run_id(run)
        with self._writing():
            compute(self.store, run_id, examples, clusters, progress=progress, model=model)
        return run_id

    @checks.typed
    def probe(
        self,
        train_run: str,
        eval_run: str,
        *,
        epochs: int = 1,
        learning_rate: float = 0.002,
        seed: int = 0,
        train_limit: int | None = None,
        eval_limit: int | None = None,
        glove_shift: bool = False,
        progress: bool = True,
        model: str | os.PathLike[str] | None = None,
    ) -> pl.DataFrame:
        """Train Clark et al.'s attention probes (Section 5) on ``train_run``'s sentences and score their UAS
        on ``eval_run``'s (same model); the probes and their weights are stored together. ``glove_shift``:
        only the GloVe probes, with the released code's vectors (for comparison); ``model``: as for
        ``distances``. Then: ``query("probe
        results")``, ``query("probe weights")``."""
        from atlas.probe import Settings, run

        checks.at_least("epochs", epochs, 1)
        checks.step_size("learning_rate", learning_rate)
        checks.seed("seed", seed)
        checks.at_least("train_limit", train_limit, 1)
        checks.at_least("eval_limit", eval_limit, 1)
        settings = Settings(
            epochs=epochs,
            seed=seed,
            learning_rate=learning_rate,
            glove_shift=glove_shift,
            train_limit=train_limit,
            eval_limit=eval_limit,
        )
        with self._writing():
            return pl.DataFrame(run(self.store, train_run, eval_run, settings, progress=progress, model=model))

    @checks.typed
    def patterns(
        self,
        run: str | None = None,
        labels: str | os.PathLike[str] | None = None,
        model: str | os.PathLike[str] | None = None,
        progress: bool = True,
    ) -> Classed:
        """Class every (input, head) map of ``run`` into Kovaleva et al.'s five patterns, by the rule in
        ``atlas.patterns`` or, given ``labels`` (a CSV of hand labels: example_id, layer, head, pattern), by
        the paper's CNN trained on them (``model``: as for ``distances``). Then: ``query("pattern shares")``."""
        from atlas.patterns import THRESHOLDS, classify

        if model is not None and labels is None:
            why = f"only the CNN of {arg('labels')} runs the model; the rule reads the stored maps"
            raise AtlasError(f"{arg('model')}: {why}")
        run_id = self.run_id(run)
        if labels is not None:
            checks.named("labels", labels)
            from atlas.pattern_cnn import train_and_classify

            with self._writing():
                f1, n = train_and_classify(self.store, run_id, Path(labels), progress=progress, model=model)
            return Classed(run_id, n, f1, None)
        with self._writing():
            n = classify(self.store, run_id)
        return Classed(run_id, n, None, dict(THRESHOLDS))

    @checks.typed
    def remove(self, *run_ids: str) -> dict[str, str]:
        """Remove runs and every result stored with them, or discard interrupted ingests, each in one atomic step,
        once every one is found (else nothing is removed); returns which each was ('run' or 'unfinished
        ingest'), by run id."""
        if not run_ids:
            raise AtlasError(f"{arg('run_ids')}: none given; name the runs to remove (see 'atlas runs')")
        if not self.store.exists():
            raise AtlasError(f"{self.store.named}: no store here")
        self.close()
        return self.store.remove(*run_ids)

    # SQL and tables

    @checks.typed
    def relation(self, text: str) -> duckdb.DuckDBPyRelation:
        """One read-only SELECT statement over the store's tables, as a DuckDB relation (not yet run)."""
        if self._sandbox is None:
            self._sandbox = self.store.connect(sandboxed=True)
        con = self._sandbox
        try:
            parsed = con.extract_statements(text)
        except duckdb.Error as exc:
            raise AtlasError(f"sql: {str(exc).splitlines()[0]}") from None
        if len(parsed) != 1:
            raise AtlasError(f"sql: expected one statement, found {len(parsed)}")
        if parsed[0].type != duckdb.StatementType.SELECT:
            raise AtlasError(f"sql: only read-only SELECT statements are accepted, not {_kind(parsed[0])}")
        if parsed[0].named_parameters:  # an entry's SQL as --describe prints it binds $run, ...
            given = sorted(parsed[0].named_parameters, key=lambda n: (n.isdigit(), n.zfill(9)))  # $run, then $1, $2
            names = ", ".join(f"${n}" for n in given)
            raise AtlasError(
                f"sql: the statement has parameters ({names}), none of them bound here: write their values in it, "
                "run the entry ('atlas query NAME'), or call its macro in the DuckDB shell (FROM entropy(run := '...'))"
            )
        try:
            return con.sql(text)
        except duckdb.Error as exc:
            raise AtlasError(f"sql: {str(exc).splitlines()[0]}") from None

    @checks.typed
    def sql(self, text: str) -> pl.DataFrame:
        """Run one read-only SELECT statement over the store's tables (see schema.sql; 0-based layers and heads)."""
        try:
            return self.relation(text).pl()
        except duckdb.Error as exc:
            raise AtlasError(f"sql: {str(exc).splitlines()[0]}") from None

    @checks.typed
    def table(self, name: str) -> pl.LazyFrame:
        """A table of the store as a Polars LazyFrame over its Parquet files (nothing is read until collected);
        the runs published after this call are not in it."""
        schemas = table_schemas()
        if name not in schemas:
            raise AtlasError(f"table '{name}': no such table (tables: {', '.join(schemas)})")
        files = sorted(self.store.data.glob(f"*/{name}/*.parquet"))  # the .schema file gives every column
        scan = pl.scan_parquet(
            files,
            schema=pl.from_arrow(schemas[name].empty_table()).schema,
            missing_columns="insert",  # files written before a column was added to schema.sql
            extra_columns="ignore",
            # run ids are dictionary-encoded; older runs' layers, heads and positions are narrower integers
            cast_options=pl.ScanCastOptions(categorical_to_string="allow", integer_cast="upcast"),
        )
        derived = [expr.alias(column) for (table, column), expr in POLARS_DERIVED.items() if table == name]
        return scan.with_columns(derived) if derived else scan

    @checks.typed
    def attention(self, *, example: int, layer: int, head: int, run: str | None = None) -> AttentionMap:
        """An input's attention map in one head (``layer`` and ``head`` 1-based, as the catalogue shows them;
        ``example`` is ``examples.example_id``) and its tokens.

        The map is built from the run's stored edges: exact on a dense run (``dense=True``); on a sparse run each
        row holds its largest weights up to the run's kept mass and cap (in steps of 1/256) and zeros where edges
        were dropped.
        """
        run_id = self.run_id(run)
        con = self.connection
        n_layers, n_heads = con.execute("SELECT n_layers, n_heads FROM runs WHERE run_id = ?", [run_id]).fetchone()
        if not 1 <= layer <= n_layers:
            raise AtlasError(f"{arg('layer', layer)}: run {run_id} has layers 1 to {n_layers}")
        if not 1 <= head <= n_heads:
            raise AtlasError(f"{arg('head', head)}: run {run_id} has heads 1 to {n_heads}")
        maps = read_maps(con, run_id, [example])
        if example not in maps:
            sql = "SELECT skipped FROM examples WHERE run_id = ? AND example_id = ?"
            if con.execute(sql, [run_id, example]).fetchone() is None:
                last = con.execute("SELECT max(example_id) FROM examples WHERE run_id = ?", [run_id]).fetchone()[0]
                raise AtlasError(f"{arg('example', example)}: run {run_id} has examples 0 to {last}")
            raise AtlasError(f"example {example} of run {run_id} was skipped (longer than the run's max length)")
        found = maps[example]
        return AttentionMap(found.weights[layer - 1, head - 1], found.tokens)

    @checks.typed
    def report(
        self,
        out: str | os.PathLike[str],
        run: str | None = None,
        examples: int = 20,
        compare: str | None = None,
        progress: bool = True,
    ) -> Report:
        """Write the self-contained HTML report of ``run`` (default: the latest run) to ``out``: the run's
        metadata, every catalogue entry with an answer for it (table and figure), and an attention explorer
        over its first ``examples`` inputs; ``compare``: a second run shown side by side; ``progress``: a
        progress bar over the entries."""
        from atlas.report import write_report

        return write_report(self, out, run, examples, compare, progress)

    @checks.typed
    def export(self, out: str | os.PathLike[str], run: str | None = None, progress: bool = True) -> dict[str, int]:
        """Write every table (or only ``run``'s rows) as ``out/<table>.parquet``; returns the rows per table. The
        files appear together, when all are written: an export that fails or is stopped leaves ``out`` as it was.
        ``progress``: a progress bar over the rows."""
        checks.named("out", out, "name the folder to write the tables into")
        out = Path(out)
        where, args = ("", [])
        if run is not None:
            where, args = "WHERE run_id = ?", [self.run_id(run, kind="any")]
        given = arg("out", repr(str(out)))
        if out.exists() and not out.is_dir():
            raise AtlasError(f"{given}: is a file; name a folder to write the tables into")
        if any(out.resolve().is_relative_to(inside.resolve()) for inside in (self.store.data, self.store.staging)):
            raise AtlasError(
                f"{given}: inside the store's runs ({self.store.data}; the store would read the files as a run's); "
                "name a folder outside them"
            )
        check_folders_above(out, given)
        for name in table_schemas():
            if (out / f"{name}.parquet").is_dir():
                raise AtlasError(f"{given}: '{out / name}.parquet' is a folder; the export would write a file there")
        tmps = {name: out / f".{name}.parquet.tmp" for name in table_schemas()}
        rows = sum(self.connection.execute(f"SELECT count(*) FROM {name} {where}", args).fetchone()[0] for name in tmps)
        made = not out.exists()
        with writing_to(given):
            out.mkdir(parents=True, exist_ok=True)
        written: dict[str, int] = {}
        bar = tqdm(total=rows, desc="export", unit="row", unit_scale=True, disable=not progress, leave=False)
        try:
            with writing_to(given):
                for name, tmp in tmps.items():
                    reader = self.connection.execute(f"SELECT * FROM {name} {where}", args).to_arrow_reader()
                    with pq.ParquetWriter(tmp, reader.schema, compression="zstd") as writer:
                        written[name] = 0
                        for batch in reader:
                            writer.write_batch(batch)
                            written[name] += batch.num_rows
                            bar.update(batch.num_rows)
                for name, tmp in tmps.items():
                    tmp.replace(out / f"{name}.parquet")
        finally:
            bar.close()
            for tmp in tmps.values():
                tmp.unlink(missing_ok=True)
            if made and out.is_dir() and not any(out.iterdir()):
                out.rmdir()
        return written


@dataclass(frozen=True)
class Classed:
    """What ``Atlas.patterns`` did: the maps classed, and the CNN's cross-validated macro F1 on the labels or
    the rule's thresholds."""

    run_id: str
    n_maps: int
    f1: float | None  # the CNN's (labels given)
    thresholds: dict[str, float] | None  # the rule's (no labels)


@checks.typed
def answer_on_spark(
    name: str,
    /,
    store: str | os.PathLike[str] | None = None,
    run: str | None = None,
    *,
    master: str = "local[2]",
    **params: object,
) -> Answer:
    """``Atlas.answer`` computed by Apache Spark from the same SQL (see ``atlas.spark``): ``store`` is a folder
    or any URI Spark reads (s3a://, hdfs://; default as ``open``: $ATLAS_STORE, which may be a URI too), read on
    this process's SparkSession, else on a new one on ``master``. Needs pyspark (pip install
    'attention-atlas[spark]')."""
    from atlas.spark import EnvURI, answer, require_pyspark, session

    require_pyspark()
    entry = _chosen(name)
    _not_empty(run)
    env = os.environ.get("ATLAS_STORE") or ""
    where = store if store is not None else EnvURI(env) if is_uri(env) else store_at()
    # what needs no Spark is checked before its Java starts (seconds): the parameters, a store on this machine
    values = {key: _parameter_text(value) for key, value in params.items()}
    entry.bind(values | ({"run": run or "latest"} if entry.takes_run(run) else {}))
    local = where if isinstance(where, Store) else None if is_uri(os.fspath(where)) else store_at(where)
    if local is not None:
        local.check_path()
        if not any(local.data.glob("*/runs/*.parquet")):
            raise AtlasError(f"{local.named}: no store here (no data/*/runs/*.parquet)")
    found = answer(session(master), where, entry.name, run, **params)
    return Answer(entry, found.collect(), found.title, found.notes)


def _kind(statement: duckdb.Statement) -> str:
    """What a statement is, in its own first word (INSTALL, CHECKPOINT, USE: DuckDB types them LOAD, CALL and
    SET), or DuckDB's type where that word is WITH (WITH ... DELETE)."""
    text = re.sub(r"^(\s|--[^\n]*|/\*.*?\*/)*", "", statement.query, flags=re.DOTALL)
    word = re.match(r"[A-Za-z_]*", text).group(0).upper()  # type: ignore[union-attr]  (* matches always)
    return statement.type.name if word in ("", "WITH") else word


def _not_empty(run: str | None) -> None:
    """Refuse a run id given empty (left out, the latest run is taken)."""
    checks.named("run", run, "empty; name a run (see 'atlas runs'); left out, it is the latest")


def _chosen(name: str) -> Entry:
    """The entry ``name`` names; where close words chose it, an ``AtlasNote`` says which."""
    entry, said = choose(name)
    if said is not None:
        warnings.warn(api_text(said), AtlasNote, stacklevel=caller_level())
    return entry


@dataclass(frozen=True)
class Ingested:
    """What ``ingest`` did."""

    run_id: str
    store: Path
    already_present: bool  # the same corpus, model and settings were in the store: nothing was done
    n_examples: int  # inputs run through the model
    n_skipped: int  # sentences longer than max_length, left out
    n_edges: int  # attention edges written
    n_cut: int | None = None  # text: pairs cut to max_length (the kept words in examples.sent_ids)
    n_left_out: int | None = None  # text: pairs left out (a paragraph would lose every word)
    n_text_unmatched: int | None = None  # conllu, text='written': sentences whose '# text' does not hold their words
    # framenet: the exemplar sentences Kovaleva et al.'s filters dropped, (reason, count) in the filters' order
    dropped: tuple[tuple[str, int], ...] | None = None
    n_tokens: int = 0  # pieces stored, special tokens included
    # of them, the words' pieces that are the tokenizer's unknown token (text it has no piece for); None: for a run
    # already present, and for a tokenizer without an unknown token of its own
    n_unknown: int | None = None

    @property
    def dropped_text(self) -> str | None:
        """``dropped`` as the command line says it ('80 dropped: 58 more than 12 tokens, ...')."""
        return None if self.dropped is None else dropped_text(self.dropped)


@checks.typed
def ingest(
    corpus: str | os.PathLike[str] | None = None,
    model: str | os.PathLike[str] | None = None,
    store: str | os.PathLike[str] | None = None,
    *,
    format: str = "conllu",  # the CLI's --format
    task: str | None = None,
    random_init: bool = False,
    seed: int | None = None,
    sample: int | None = None,
    sample_seed: int | None = None,
    length: int | None = None,
    count: int | None = None,
    kept_mass: float | None = None,
    max_edges: int | None = None,
    dense: bool = False,
    max_length: int | None = None,
    pack: str | None = None,
    text: str = "written",
    word_rows: str = "mean",
    progress: bool = True,
    device: str = "auto",
    dtype: str = "auto",
    config: Mapping[str, object] | Sequence[str] | str | None = None,
    engine: str = "local",
    ray_address: str | None = None,
    workers: int | None = None,
    gpus_per_worker: float | None = None,
) -> Ingested:
    """Run ``model`` (default: the embedded all-MiniLM-L6-v2) over ``corpus`` into ``store`` (``atlas ingest``,
    with the same checks and defaults): ``seed`` only with ``random_init``; ``kept_mass`` (default 0.9) and
    ``max_edges`` (default 6) or ``dense``; ``device``: auto, cpu, cuda or mps; ``task`` for ``format='glue'``;
    ``sample``/``sample_seed`` for ``format='text'``; ``format='repeated'`` takes no ``corpus``: ``count``
    (default 10) sequences of ``length`` (default 50) token ids drawn from the model's vocabulary with
    ``sample_seed``, repeated once (see ``ingest.repeated``); ``text``: 'written' (each sentence as written) or
    'words' (its words joined by single spaces, Clark et al.'s input; see ``ingest.align``); ``word_rows``: 'mean'
    (a word's row of the word-level map is the mean of its pieces' rows) or 'first' (its first piece's row, the
    released code's default); ``dtype``: the weights' dtype, 'auto' (bfloat16 on CUDA, float32 on the CPU and
    MPS), 'float32', 'bfloat16' or 'float16' (the attention softmax and every statistic stay float32; the dtype
    is part of the run id and recorded in ``runs.dtype``); ``config``: with ``random_init``, overrides of the
    model's config, a mapping or ``KEY=VALUE`` texts (the value as JSON, else a string), e.g.
    ``["num_hidden_layers=4"]``. A run already in the store is found without loading the
    model; the whole corpus is checked before the model is loaded;
    an interrupted ingest resumes when run again (with either engine). ``engine='ray'``: the chunks are staged
    by ``workers`` (default 2) Ray Data actors with ``gpus_per_worker`` GPUs each, on the Ray cluster at
    ``ray_address`` (default: a local instance); the store is the same (see ``ingest.ray_engine``)."""
    from atlas.ingestion.device import resolve_dtype
    from atlas.ingestion.run_id import Settings, check_settings, ingested_run
    from atlas.model.identity import config_overrides, override_text

    checks.seed("seed", seed)
    if format not in FORMATS:  # first: the other options' checks read it
        raise AtlasError(f"{arg('format', repr(format))}: expected one of {', '.join(FORMATS)}")
    if sample_seed is not None:
        checks.seed("sample_seed", sample_seed)
        if format not in ("text", "repeated"):
            raise AtlasError(
                f"{arg('sample_seed')}: seeds the draw of {arg('format', repr('text'))} and "
                f"{arg('format', repr('repeated'))}; a {format} corpus is read whole, in order: leave "
                f"{arg('sample_seed')} out"
            )
    sample_seed = sample_seed or 0
    checks.named("corpus", corpus)
    corpus = _corpus_path(corpus, format, length, count, sample_seed)
    pack = _check_ingest_options(corpus, format, task, random_init, seed, kept_mass, dense, pack)
    _check_engine_options(engine, ray_address, workers, gpus_per_worker, device)
    overrides = config_overrides(config)
    if overrides and not random_init:
        given = arg("config", override_text(*next(iter(overrides.items()))))
        raise AtlasError(
            f"{given}: the pretrained weights would not match a changed config; add {arg('random_init')} or leave "
            f"{arg('config')} out"
        )
    dtype = resolve_dtype(dtype, device, (gpus_per_worker or 0) if engine == "ray" else None)
    if max_edges is not None and dense:
        raise AtlasError(
            f"{arg('max_edges')}: {arg('dense')} keeps every weight; give one of {arg('dense')} and {arg('max_edges')}"
        )
    kept = None if dense else (Settings().kept_mass if kept_mass is None else kept_mass)
    edges = Settings().max_edges if max_edges is None else max_edges
    settings = Settings(
        kept, max_length, pack, max_edges=edges, device=device, text=text, word_rows=word_rows, dtype=dtype
    )
    check_settings(settings)
    if sample is not None and sample < 1:
        raise AtlasError(f"{arg('sample', sample)}: expected 1 or more")
    target = store_at(store)
    target.check_database()  # another program's database, before the model loads and anything is written
    known = ingested_run(
        target.data, corpus, format, task, sample, sample_seed, model, random_init, seed or 0, settings, overrides
    )
    if known is not None:
        return Ingested(known, target.root, True, 0, 0, 0)
    from atlas.ingestion.corpus import check_corpus
    from atlas.ingestion.device import resolve_device
    from atlas.ingestion.pipeline import ingest as run_ingest
    from atlas.model.identity import model_identity
    from atlas.model.load import load_model  # imports torch and the model code: seconds

    stage = _ray_engine(ray_address, workers, gpus_per_worker) if engine == "ray" else None
    if engine != "ray":  # Ray's workers find their own devices
        resolve_device(device)
    if overrides:  # a key the config has not is refused before the corpus is read
        model_identity(model, random_init, seed or 0, overrides)
    checked = check_corpus(corpus, format, task, sample, sample_seed)  # fail on bad input before loading anything
    lm = load_model(model, random_init=random_init, seed=seed or 0, dtype=dtype, **overrides)
    if random_init:  # caches its serialised config: a re-run then finds the run without importing torch
        model_identity(model, random_init, seed or 0, overrides)
    result = run_ingest(checked, target, lm, settings, progress=progress, stage=stage)
    done = Ingested(
        result.run_id, target.root, result.already_present, result.n_examples, result.n_skipped, result.n_edges
    )
    if result.already_present:
        return done
    if format == "conllu" and text == "written":
        from atlas.ingestion.conllu import unmatched_texts

        done = Ingested(**{**done.__dict__, "n_text_unmatched": len(unmatched_texts(corpus))})
    if format == "framenet":
        done = Ingested(**{**done.__dict__, "dropped": checked.dropped})
    with Atlas(target) as st:  # one connection for what the store tells of the run
        done = _with_unknown(done, st, lm.tokenizer)
        if format != "text":
            return done
        cut = "len(list_filter(sent_ids, s -> contains(s, ':'))) > 0"  # LINE:FIRST-LAST/N: words cut
        sql = f"SELECT count(*) FILTER (WHERE {cut}) FROM examples WHERE run_id = ?"
        n_cut = st.connection.execute(sql, [result.run_id]).fetchone()[0]
    return Ingested(**{**done.__dict__, "n_cut": n_cut, "n_left_out": checked.n_sentences // 2 - result.n_examples})


def _with_unknown(done: Ingested, st: Atlas, tokenizer: object) -> Ingested:
    """``done`` with the run's pieces counted, and those of its words that are the tokenizer's unknown token (not
    counted where the unknown token is also its bos, eos, cls or sep: GPT-2's <|endoftext|>)."""
    unknown = getattr(tokenizer, "unk_token_id", None)
    others = {getattr(tokenizer, f"{role}_token_id", None) for role in ("bos", "eos", "cls", "sep")}
    if unknown is None or unknown in others:
        counted = "NULL"
    else:
        counted = f"count(*) FILTER (WHERE special IS NULL AND piece_id = {int(unknown)})"
    sql = f"SELECT count(*), {counted} FROM tokens WHERE run_id = ?"
    n_tokens, n_unknown = st.connection.execute(sql, [done.run_id]).fetchone()
    return Ingested(**{**done.__dict__, "n_tokens": n_tokens, "n_unknown": n_unknown})


def _check_engine_options(
    engine: str, ray_address: str | None, workers: int | None, gpus_per_worker: float | None, device: str
) -> None:
    if engine not in ("local", "ray"):
        raise AtlasError(f"{arg('engine', repr(engine))}: expected one of local, ray")
    ray_options = {"ray_address": ray_address, "workers": workers, "gpus_per_worker": gpus_per_worker}
    given = [name for name, value in ray_options.items() if value is not None]
    if engine != "ray" and given:
        raise AtlasError(
            f"{arg(given[0])}: sets up the Ray workers; add {arg('engine', repr('ray'))} or leave {arg(given[0])} out"
        )
    if workers is not None and workers < 1:
        raise AtlasError(f"{arg('workers', workers)}: expected 1 or more")
    if gpus_per_worker is not None and not 0 <= gpus_per_worker < math.inf:  # nan fails too
        raise AtlasError(f"{arg('gpus_per_worker', number_text(gpus_per_worker))}: expected 0 or more")
    if engine == "ray" and device == "cuda" and not gpus_per_worker:
        raise AtlasError(
            f"{arg('device', repr('cuda'))}: a Ray worker sees only the GPUs it claims; add {arg('gpus_per_worker', 1)}"
        )
    if engine == "ray" and device == "cpu" and gpus_per_worker:
        claims = arg("gpus_per_worker", number_text(gpus_per_worker))
        raise AtlasError(f"{claims}: claims GPUs that {arg('device', repr('cpu'))} leaves idle")


def _ray_engine(ray_address: str | None, workers: int | None, gpus_per_worker: float | None) -> Callable:
    """The staging of ``engine='ray'``; Ray is imported here only."""
    try:
        from atlas.ingestion.ray_engine import RayEngine
    except ModuleNotFoundError as exc:
        if exc.name != "ray" and not (exc.name or "").startswith("ray."):
            raise
        raise AtlasError(
            f"{arg('engine', repr('ray'))}: Ray is not installed (pip install 'attention-atlas[ray]')"
        ) from None
    return RayEngine(ray_address, workers or 2, gpus_per_worker or 0)


def _corpus_path(
    corpus: str | os.PathLike[str] | None, fmt: str, length: int | None, count: int | None, sample_seed: int
) -> Path:
    """The corpus file; for ``format='repeated'``, which reads none, the name its settings give it."""
    repeated = arg("format", repr("repeated"))
    if fmt != "repeated":
        for name, value in (("length", length), ("count", count)):
            if value is not None:
                raise AtlasError(f"{arg(name)}: sets the sequences of {repeated}; add it or leave {arg(name)} out")
        if corpus is None:
            raise AtlasError(f"{arg('corpus')}: name the corpus file (only {repeated} reads none)")
        return Path(corpus)
    if corpus is not None:
        raise AtlasError(
            f"{arg('corpus')}: {repeated} draws its tokens from the model's vocabulary; leave {arg('corpus')} out"
        )
    from atlas.ingestion.repeated import COUNT, LENGTH, Repeated

    settings = Repeated(LENGTH if length is None else length, COUNT if count is None else count, sample_seed)
    settings.check()
    return Path(settings.name)


def _check_ingest_options(
    corpus: Path,
    fmt: str,
    task: str | None,
    random_init: bool,
    seed: int | None,
    kept_mass: float | None,
    dense: bool,
    pack: str | None,
) -> str:
    """One line for option combinations that would do something else than asked (or nothing); returns the
    packing the corpus is read with."""
    if seed is not None and not random_init:
        drawn = f" (the tokens of {arg('format', repr('repeated'))} are drawn with {arg('sample_seed')})"
        raise AtlasError(
            f"{arg('seed')}: seeds {arg('random_init')}'s weights; without {arg('random_init')} the model is the same"
            + (drawn if fmt == "repeated" else "")
        )
    if kept_mass is not None and dense:
        raise AtlasError(
            f"{arg('kept_mass')}: {arg('dense')} keeps every weight; give one of {arg('dense')} and {arg('kept_mass')}"
        )
    if task is not None and fmt != "glue":
        glue = arg("format", repr("glue"))
        raise AtlasError(f"{arg('task')}: names the GLUE task of a {glue} file; add {glue} or leave {arg('task')} out")
    if fmt != "repeated":
        check_file(corpus, fmt)
    if fmt == "glue":
        from atlas.ingestion.glue_tsv import task_spec

        if pack is not None:
            raise AtlasError(f"{arg('pack')}: a GLUE file is read one example per input; leave {arg('pack')} out")
        return "pair" if task and task_spec(task).text_b else "none"
    if fmt == "framenet" and pack not in (None, "none"):
        raise AtlasError(f"{arg('pack')}: FrameNet sentences are read one per input; leave {arg('pack')} out")
    if fmt == "text":
        if pack not in (None, "pair"):
            raise AtlasError(f"{arg('pack')}: a text file is read as paragraph pairs; leave {arg('pack')} out")
        return "pair"
    if fmt == "repeated" and pack not in (None, "none"):
        raise AtlasError(f"{arg('pack')}: each repeated-token sequence is one input; leave {arg('pack')} out")
    return pack or "none"
