"""The atlas as a library: every operation of the command line, returning Polars frames.

::

    import atlas
    st = atlas.open("atlas-store")                       # the store the CLI writes
    st.runs()                                            # polars.DataFrame
    st.query("best head per dependency relation", min_count=50)
    st.query("entropy", runs=[pretrained, random_init])  # side by side, with the differences to the first
    st.sql("SELECT layer, head, avg(entropy) FROM attn_rows GROUP BY ALL")
    st.table("attn_edges")                               # polars.LazyFrame over the Parquet files
    st.attention(example=12, layer=3, head=9)  # .weights, .tokens; in a notebook, a head view
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
import os
import re
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import numpy as np
import polars as pl

from atlas import checks
from atlas.catalogue import Entry, choose, entries
from atlas.engine import Answer, DuckDBEngine, Engine, answer_on, check_run, latest_run
from atlas.errors import AtlasError, AtlasNote, api_text, arg, caller_level, warn_notes
from atlas.ingestion.readers import DEFAULT as DEFAULT_FORMAT
from atlas.ingestion.readers import format_help
from atlas.ingestion.readers import names as formats
from atlas.ingestion.readers.corpus_info import dropped_text
from atlas.ingestion.run_id import DEVICES as DEVICES  # the --device choices, for the CLI
from atlas.ingestion.run_id import DTYPES as DTYPES  # the --dtype choices, for the CLI
from atlas.macros import macro_call
from atlas.maps import read_maps, token_labels
from atlas.store import OLDER_RUNS, PARTITION, Store, is_uri, store_named, table_schemas
from atlas.views import AttentionMap, Heads, kept_note

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from atlas.report import Report

FORMATS = formats()  # the corpora --format reads, one reader each (atlas.ingestion.readers)
FORMAT_HELP = format_help()  # what --format says of each


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
        """The run ingested last: the one an entry answers for where no run is named."""
        return latest_run(self._engine())

    @checks.typed
    def run_id(self, run: str | None = None, param: str = "run", kind: str = "runs", *, query: bool = False) -> str:
        """``run`` if the store holds it (kind 'runs': an ingested run; 'any': also a task model's results),
        else the latest ingested run when ``run`` is None; an unknown one is refused naming ``param``, the
        parameter it was given as (``query``: a catalogue entry's parameter)."""
        if run is None:
            return self.latest_run()
        return check_run(self._engine(), run, param, kind, query=query)

    def _engine(self) -> DuckDBEngine:
        """The catalogue's engine on this store: DuckDB, over the views of its read-only connection."""
        return DuckDBEngine(self.store, self.connection)

    # the catalogue

    def queries(self) -> pl.DataFrame:
        """The analysis catalogue (as ``atlas.queries()``)."""
        return queries()

    def ready(self, said: Callable[[AtlasError], str] = str) -> pl.DataFrame:
        """Per catalogue entry, whether it answers on the store's latest run now, or what to run first (``atlas
        queries --store``): columns name, answers and first (``said``: how a refusal is said, by default in the
        API's words; see ``atlas.ready``)."""
        from atlas.ready import readiness, table

        return table(readiness(self._engine()), said)

    @checks.typed
    def answer(
        self,
        name: str,
        /,
        run: str | None = None,
        runs: Sequence[str | None] | None = None,
        figure: str | os.PathLike[str] | None = None,
        *,
        title: str | None = None,
        **params: object,
    ) -> Answer:
        """Run the catalogue entry named by ``name`` (a name, an alias or close words, which choose the entry they
        fit with an ``AtlasNote`` saying which, at once) with its title and notes. ``run``: the run it answers
        for (default: the latest run), for entries that take one; ``runs``: instead of ``run``, two or more runs
        compared (see ``atlas.compare``; None: the latest run); ``figure``: also
        save the entry's paper-style figure to this file (PNG, PDF or SVG, by its suffix); ``params``: the
        entry's other parameters (see ``queries()``). On Apache Spark: ``atlas.api.answer(..., engine='spark')``."""
        return _answered(self._engine, name, run, runs, figure, params, title)

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
        self,
        name: str,
        /,
        run: str | None = None,
        runs: Sequence[str | None] | None = None,
        *,
        title: str | None = None,
        **params: object,
    ) -> Figure:
        """The entry's paper-style figure, titled with the entry and the runs that answered (``atlas plot``
        saves this figure); ``runs``: two or more runs compared, panels side by side on one colour scale and
        the differences to the first (see ``atlas.plot``)."""
        from atlas.plot import figure

        answer = self.answer(name, run, runs, **params)
        warn_notes(answer.notes)
        return figure(answer.entry, answer.frame, answer.title, answer.runs, title)

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

    def interrupt(self) -> None:
        """Stop the statement ``sql`` or ``relation`` is running, from another thread (it raises
        ``duckdb.InterruptException``); call it only while one runs: DuckDB keeps it for the next."""
        if self._sandbox is not None:
            self._sandbox.interrupt()

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
        # the .schema file gives every column; the run id is each run's folder's (its Hive partition)
        files = sorted(self.store.data.glob(f"{PARTITION}=*/{name}/*.parquet"))
        declared = pl.from_arrow(schemas[name].empty_table()).schema
        scan = pl.scan_parquet(
            files,
            schema=pl.Schema({key: kind for key, kind in declared.items() if key != PARTITION}),
            hive_partitioning=True,
            hive_schema={PARTITION: pl.String},
            missing_columns="insert",  # files written before a column was added to schema.sql
            extra_columns="ignore",
            # strings are dictionary-encoded; older runs' layers, heads and positions are narrower integers
            cast_options=pl.ScanCastOptions(categorical_to_string="allow", integer_cast="upcast"),
        )
        # the older runs' derived columns, as the views derive them (store.OLDER_RUNS: SQL that Polars reads too)
        derived = [pl.sql_expr(sql) for (table, _), sql in OLDER_RUNS.items() if table == name]
        scan = scan.select(list(declared))  # the partition in its declared place
        return scan.with_columns(derived) if derived else scan

    @checks.typed
    def attention(self, *, example: int, layer: int, head: int, run: str | None = None) -> AttentionMap:
        """An input's attention map in one head (``layer`` and ``head`` 1-based, as the catalogue shows them;
        ``example`` is ``examples.example_id``): ``.weights[src, dst]`` and ``.tokens``, shown in a notebook as a
        head view (see ``heads``)."""
        return self.heads(example=example, layers=[layer], heads=[head], run=run).head(layer, head)

    @checks.typed
    def heads(
        self,
        *,
        example: int,
        layers: Sequence[int] | None = None,
        heads: Sequence[int] | None = None,
        run: str | None = None,
    ) -> Heads:
        """An input's attention maps in ``layers`` and ``heads`` (1-based; default: all), ``.weights[l, h, src,
        dst]``; shown in a notebook as a model view, and ``.head(layer, head)`` as a head view, each token saying
        its word, POS, relation and special role on hover.

        The maps are built from the run's stored edges: exact on a dense run (``dense=True``); on a sparse run each
        row holds its largest weights up to the run's kept mass and cap (in steps of 1/256) and zeros where edges
        were dropped, which the views' note says with the mass the rows hold.
        """
        run_id = self.run_id(run)
        con = self.connection
        n_layers, n_heads, kept_mass, max_edges = con.execute(
            "SELECT n_layers, n_heads, kept_mass, max_edges FROM runs WHERE run_id = ?", [run_id]
        ).fetchone()
        chosen = []
        for name, given, last in (("layer", layers, n_layers), ("head", heads, n_heads)):
            picked = tuple(range(1, last + 1)) if given is None else tuple(given)
            for value in picked:
                if not 1 <= value <= last:
                    named = arg(name if len(picked) == 1 and given is not None else f"{name}s", value)
                    raise AtlasError(f"{named}: run {run_id} has {name}s 1 to {last}")
            chosen.append(picked)
        maps = read_maps(con, run_id, [example])
        if example not in maps:
            sql = "SELECT skipped FROM examples WHERE run_id = ? AND example_id = ?"
            if con.execute(sql, [run_id, example]).fetchone() is None:
                last = con.execute("SELECT max(example_id) FROM examples WHERE run_id = ?", [run_id]).fetchone()[0]
                raise AtlasError(f"{arg('example', example)}: run {run_id} has examples 0 to {last}")
            raise AtlasError(f"example {example} of run {run_id} was skipped (longer than the run's max length)")
        found = maps[example]
        layer_index, head_index = (np.asarray(c, dtype=np.intp) - 1 for c in chosen)
        weights = found.weights[np.ix_(layer_index, head_index)]
        source = f"run {run_id}, example {example}"
        if run is None and len(others := self._engine().run_ids("runs")) > 1:
            source += f" (the store's latest of its {len(others)} runs)"
        note = kept_note(weights, kept_mass, max_edges)
        labels = token_labels(con, run_id, example)
        return Heads(weights, found.tokens, chosen[0], chosen[1], labels, source, note, int(n_heads))

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
        run_id = None if run is None else self.run_id(run, kind="any")
        return self.store.export(self.connection, Path(out), run_id, progress)


@dataclass(frozen=True)
class Classed:
    """What ``Atlas.patterns`` did: the maps classed, and the CNN's cross-validated macro F1 on the labels or
    the rule's thresholds."""

    run_id: str
    n_maps: int
    f1: float | None  # the CNN's (labels given)
    thresholds: dict[str, float] | None  # the rule's (no labels)


@contextlib.contextmanager
def _duckdb_engine(store: str | os.PathLike[str] | None, master: str) -> Iterator[Callable[[], Engine]]:
    """DuckDB's engine on the store ``open`` takes (``master``: Spark's, not used)."""
    with open(store) as st:
        yield st._engine


@contextlib.contextmanager
def _spark_engine(store: str | os.PathLike[str] | None, master: str) -> Iterator[Callable[[], Engine]]:
    """Spark's engine on ``store``, made when the answer path first asks for it (its Java starts only for an answer
    it can give): a URI as given (or as $ATLAS_STORE gives it), else the folder ``open`` takes."""

    def made() -> Engine:
        from atlas.spark import EnvURI, SparkEngine

        env = os.environ.get("ATLAS_STORE") or ""
        if store is not None and is_uri(os.fspath(store)):
            return SparkEngine(os.fspath(store), master=master)
        if store is None and is_uri(env):
            return SparkEngine(EnvURI(env), master=master)
        return SparkEngine(store_at(store), master=master)

    yield made


# the CLI's --engine: where a catalogue entry's SQL runs, the default first -> the engine on a store and Spark's master
_OPENERS: dict[str, Callable[..., contextlib.AbstractContextManager[Callable[[], Engine]]]] = {
    "duckdb": _duckdb_engine,
    "spark": _spark_engine,
}
ENGINES = tuple(_OPENERS)


@checks.typed
def answer(
    name: str,
    /,
    store: str | os.PathLike[str] | None = None,
    run: str | None = None,
    runs: Sequence[str | None] | None = None,
    figure: str | os.PathLike[str] | None = None,
    *,
    engine: str = ENGINES[0],
    master: str = "local[2]",
    params: Mapping[str, object] | None = None,
    title: str | None = None,
) -> Answer:
    """``Atlas.answer`` on the store at ``store`` (default as ``open``), with the entry's ``params`` (``run``
    among them: the run, named as a parameter in errors), on ``engine``: 'duckdb', over the store's views; or
    'spark', Apache Spark from the same SQL over the store's Parquet files (see ``atlas.spark``), where ``store``
    may also be any URI Spark reads (s3a://, hdfs://; $ATLAS_STORE too), read on this process's SparkSession, else
    on a new one on ``master`` (needs pyspark: pip install 'attention-atlas[spark]'; runs are compared on DuckDB
    only). What needs no Spark (pyspark installed, the parameters, a store on this machine) is refused before its
    Java starts."""
    if engine not in ENGINES:
        raise AtlasError(f"{arg('engine', repr(engine))}: expected one of {', '.join(ENGINES)}")
    if runs is not None and engine != ENGINES[0]:
        raise AtlasError(f"{arg('runs')}: compares runs on the default engine; leave out {arg('engine', engine)}")
    with _OPENERS[engine](store, master) as opened:
        return _answered(opened, name, run, runs, figure, dict(params or {}), title)


def answer_on_spark(
    name: str,
    /,
    store: str | os.PathLike[str] | None = None,
    run: str | None = None,
    *,
    master: str = "local[2]",
    **params: object,
) -> Answer:
    """``answer(name, store, run, engine='spark', master=master, params=params)``, the call of earlier versions."""
    return answer(name, store, run, engine="spark", master=master, params=params)


def _answered(
    engine: Callable[[], Engine],
    name: str,
    run: str | None,
    runs: Sequence[str | None] | None,
    figure: str | os.PathLike[str] | None,
    params: dict[str, object],
    title: str | None = None,
) -> Answer:
    """The entry ``name`` chooses answered by the answer path (``atlas.engine.answer_on``) on the engine that
    ``engine`` gives once the entry is chosen; ``figure``: its file checked first, the answer drawn into it."""
    if figure is None:
        entry = _chosen(name)  # said at once, before anything refuses
        return answer_on(engine(), entry, run, runs, params)
    checks.named("figure", figure)
    from atlas.plot import check_out, save
    from atlas.plot import figure as draw

    check_out(Path(figure))
    entry = _chosen(name)
    found = answer_on(engine(), entry, run, runs, params)
    save(draw(found.entry, found.frame, found.title, found.runs, title), Path(figure))
    return found


def _kind(statement: duckdb.Statement) -> str:
    """What a statement is, in its own first word (INSTALL, CHECKPOINT, USE: DuckDB types them LOAD, CALL and
    SET), or DuckDB's type where that word is WITH (WITH ... DELETE)."""
    text = re.sub(r"^(\s|--[^\n]*|/\*.*?\*/)*", "", statement.query, flags=re.DOTALL)
    word = re.match(r"[A-Za-z_]*", text).group(0).upper()  # type: ignore[union-attr]  (* matches always)
    return statement.type.name if word in ("", "WITH") else word


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
    n_unpaired: int | None = None  # text: paragraphs left out without a partner (an article's odd last paragraph)
    n_text_unmatched: int | None = None  # conllu, text='written': sentences whose '# text' does not hold their words
    # framenet: the exemplar sentences Kovaleva et al.'s filters dropped, (reason, count) in the filters' order
    dropped: tuple[tuple[str, int], ...] | None = None
    n_tokens: int = 0  # pieces stored, special tokens included
    # of them, the words' pieces that are the tokenizer's unknown token (text it has no piece for); None: for a run
    # already present, and for a tokenizer without an unknown token of its own
    n_unknown: int | None = None
    # --rollout: the inputs too long for their whole maps on the device, read in blocks of rows, without a rollout;
    # None without --rollout, and for a run already present
    n_no_rollout: int | None = None
    longest_rollout: int | None = None  # with n_no_rollout: the longest input with a rollout (pieces; None: none)

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
    format: str = DEFAULT_FORMAT,  # the CLI's --format
    task: str | None = None,
    random_init: bool = False,
    seed: int | None = None,
    sample: int | None = None,
    sample_seed: int | None = None,
    length: int | None = None,
    count: int | None = None,
    haystack: str | os.PathLike[str] | None = None,
    lengths: Sequence[int] | None = None,
    depths: Sequence[int] | None = None,
    needle: str | None = None,
    question: str | None = None,
    kept_mass: float | None = None,
    max_edges: int | None = None,
    dense: bool = False,
    max_length: int | None = None,
    pack: str | None = None,
    text: str = "written",
    word_rows: str = "mean",
    norms: bool = False,
    rollout: str = "none",
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
    ``sample_seed``, repeated once (see ``atlas.ingestion.readers.repeated``); ``format='needle'`` takes no
    ``corpus`` either: a needle in ``haystack`` (a text file, default the shipped WikiText-103 sample, or 'random')
    at each of ``lengths`` and ``depths`` (percent), asked about with ``question`` (defaults: Wu et al.'s first
    needle), with a decoder's own greedy answer appended (see ``atlas.ingestion.readers.needle``); ``text``:
    'written' (each sentence as written) or 'words' (its words joined by single spaces, Clark et al.'s input; see
    ``atlas.ingestion.align``); ``word_rows``: 'mean' (a word's row of the word-level map is the mean of its pieces'
    rows) or 'first' (its first piece's row, the released code's default); ``norms``: the norm-based statistics too
    (Kobayashi et al. 2020:
    what each head passes on, in norm: attn_rows.value_norm and table head_norms); ``rollout``: 'none', 'cls',
    'last' or 'all', the rows of the attention rollout kept in table rollout (Abnar & Zuidema 2020; see
    ``atlas.ingestion.rollout``); ``dtype``: the weights' dtype, 'auto' (bfloat16 on CUDA, float32 on the
    CPU and MPS), 'float32', 'bfloat16' or 'float16' (the attention softmax and every statistic stay float32; the dtype
    is part of the run id and recorded in ``runs.dtype``); ``config``: with ``random_init``, overrides of the
    model's config, a mapping or ``KEY=VALUE`` texts (the value as JSON, else a string), e.g.
    ``["num_hidden_layers=4"]``. A run already in the store is found without loading the
    model; the whole corpus is checked before the model is loaded;
    an interrupted ingest resumes when run again (with either engine). ``engine='ray'``: the chunks are staged
    by ``workers`` (default 2) Ray Data actors with ``gpus_per_worker`` GPUs each, on the Ray cluster at
    ``ray_address`` (default: a local instance); the store is the same (see ``atlas.ingestion.ray_engine``)."""
    from atlas.ingestion.options import Asked, plan, stager
    from atlas.ingestion.readers.base import CorpusOptions
    from atlas.ingestion.run_id import ingested_run

    options = CorpusOptions(
        task, sample, sample_seed, length, count, None if haystack is None else str(haystack),
        None if lengths is None else tuple(lengths), None if depths is None else tuple(depths), needle, question,
    )  # fmt: skip
    request = Asked(
        corpus=corpus, format=format, options=options, random_init=random_init, seed=seed, kept_mass=kept_mass,
        max_edges=max_edges, dense=dense, max_length=max_length, pack=pack, text=text, word_rows=word_rows,
        norms=norms, rollout=rollout, device=device, dtype=dtype, config=config, engine=engine,
        ray_address=ray_address, workers=workers, gpus_per_worker=gpus_per_worker,
    )  # fmt: skip
    asked = plan(request)
    given, settings, overrides = asked.options, asked.settings, asked.overrides
    target = store_at(store)
    target.check_database()  # another program's database, before the model loads and anything is written
    known = ingested_run(
        target.data, asked.corpus, asked.reader.name, given.task, given.sample, given.sample_seed, model,
        random_init, seed or 0, settings, overrides,
    )  # fmt: skip
    if known is not None:
        return Ingested(known, target.root, True, 0, 0, 0)
    from atlas.ingestion.corpus import check_corpus
    from atlas.ingestion.device import resolve_device
    from atlas.ingestion.pipeline import ingest as run_ingest
    from atlas.ingestion.summary import summary
    from atlas.model.continuation import causal_lm, check_generates
    from atlas.model.identity import model_identity
    from atlas.model.load import load_model  # imports torch and the model code: seconds

    stage = stager(request)
    if stage is None:  # Ray's workers find their own devices
        resolve_device(device)
    if overrides:  # a key the config has not is refused before the corpus is read
        model_identity(model, random_init, seed or 0, overrides)
    # fail on bad input before loading anything
    checked = check_corpus(asked.corpus, asked.reader.name, options=given)
    lm = load_model(model, random_init=random_init, seed=seed or 0, dtype=settings.dtype, **overrides,
                    **({"auto_class": causal_lm()} if asked.reader.generates else {}))  # fmt: skip
    if asked.reader.generates:
        check_generates(lm, asked.reader.given)
    if settings.rollout == "cls" and lm.decoder:
        raise AtlasError(
            f"{arg('rollout', repr('cls'))}: {lm.name} is a decoder, whose first token attends only to itself (its "
            f"rollout row is the same at every layer); use {arg('rollout', repr('last'))} or 'all'"
        )
    if random_init:  # caches its serialised config: a re-run then finds the run without importing torch
        model_identity(model, random_init, seed or 0, overrides)
    result = run_ingest(checked, target, lm, settings, progress=progress, stage=stage)
    no_rollout = result.n_by_rows if settings.rollout != "none" and not result.already_present else None
    done = Ingested(
        result.run_id, target.root, result.already_present, result.n_examples, result.n_skipped, result.n_edges,
        n_no_rollout=no_rollout,
    )  # fmt: skip
    if result.already_present:
        return done
    said = summary(target, result.run_id, checked, result.n_examples, text, lm.tokenizer, bool(no_rollout))
    return Ingested(**{**done.__dict__, **said})
