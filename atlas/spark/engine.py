"""The catalogue on a SparkSession: the store's tables as temporary views, an entry answered by the engines' one
answer path (``atlas.engine``: its parameters bound and checked, the latest run by default, run ids known, the
header's needs and notes) with ``SparkEngine`` running its Spark SQL with Spark's named parameter markers, its
refusals said in one line.

pyspark is imported only when one of these runs (``pip install 'attention-atlas[spark]'``).
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from atlas.catalogue import REFUSAL, Entry, refusal_line, resolve
from atlas.engine import prepare
from atlas.errors import AtlasError, arg, warn_notes
from atlas.spark.sql import entry_sql, translate
from atlas.spark.tables import base, columns, files, schema_ddl
from atlas.store import Store, is_uri, store_named, table_schemas

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

INSTALL = "pip install 'attention-atlas[spark]'"
RUNS_FILES = "data/run_id=*/runs/*.parquet"
# a store of URI written before the run partitions (data/<run id>/...), which atlas updates where it writes
OLDER_LAYOUT = "; a store written by an older atlas is read once it was opened with atlas where it can be written"

# Spark's message: '[ERROR_CLASS] text SQLSTATE: P0001', on the first line or, raised in a task, a later one
_SPARK_ERROR = re.compile(r"\[([A-Z][A-Z_]*(?:\.[A-Z_]+)*)\] (.*?)(?: SQLSTATE: \w+)?;?$", re.MULTILINE)


@dataclass(frozen=True)
class SparkAnswer:
    """An entry's answer on Spark (computed when collected), with the line naming the entry and its runs, and
    the notes said beside it."""

    entry: Entry
    frame: DataFrame
    title: str
    notes: tuple[str, ...]
    params: dict[str, object]  # the entry's parameters, bound

    def collect(self) -> pl.DataFrame:
        """The answer as a Polars frame (through Arrow); an error of the entry's SQL as one line."""
        return collect(self.entry, self.frame, self.params)


def require_pyspark() -> None:
    """Raise the one-line error saying how to install pyspark, where it is missing."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise AtlasError(f"{arg('engine', repr('spark'))}: pyspark is not installed ({INSTALL})") from None


class EnvURI(str):
    """A store's URI that $ATLAS_STORE gave (no store given): named so in errors, as ``Store.named`` names a path."""


def store_uri(store: str | os.PathLike[str]) -> str:
    """The store as Spark names it: a URI as given (s3a://, hdfs://, file:), a local path as an absolute file://
    URI (so that a cluster whose default file system is HDFS reads the local, or mounted, folder)."""
    text = os.fspath(store)
    return text.rstrip("/") if is_uri(text) else f"file://{Path(text).absolute()}"


MASTERS = "masters are local[N], spark://HOST:PORT, yarn, k8s://URL"
# the local masters Spark parses (SparkContext's LOCAL_N, LOCAL_N_FAILURES and LOCAL_CLUSTER patterns); other masters
# are a cluster manager's URL (spark://, k8s://, a plugin's scheme) or yarn
_LOCAL = re.compile(
    r"local|local\[([0-9]+|\*)(\s*,\s*[0-9]+)?\]|local-cluster\[\s*[0-9]+\s*,\s*[0-9]+\s*,\s*[0-9]+\s*\]"
)


def check_master(master: str) -> None:
    """Refuse here what Spark refuses with Java's stack trace on the terminal: a local master it cannot parse,
    or one that is neither yarn nor a URL."""
    local = master.startswith("local")
    if (local and not _LOCAL.fullmatch(master)) or (not local and master != "yarn" and "://" not in master):
        raise AtlasError(f"{arg('master', repr(master))}: not a Spark master ({MASTERS})")


@contextmanager
def _quiet_start() -> Iterator[None]:
    """Spark's driver started with atlas's logging (errors only: ``log4j2.properties``), through SPARK_SUBMIT_OPTS,
    which goes before the user's own Java options of spark-defaults.conf (their logging, if any, wins); quoted, as
    a path may hold a space."""
    uri = Path(str(resources.files("atlas.spark") / "log4j2.properties")).resolve().as_uri()
    before = os.environ.get("SPARK_SUBMIT_OPTS")
    os.environ["SPARK_SUBMIT_OPTS"] = f'{before or ""} "-Dlog4j2.configurationFile={uri}"'.strip()
    try:
        yield
    finally:
        if before is None:
            del os.environ["SPARK_SUBMIT_OPTS"]
        else:
            os.environ["SPARK_SUBMIT_OPTS"] = before


def session(master: str = "local[2]") -> SparkSession:
    """The SparkSession of this process, else a new one on ``master``, which logs nothing (an entry's refusal is
    said in one line, not logged with Spark's trace) and draws no progress bars."""
    require_pyspark()
    from pyspark.logger import PySparkLogger
    from pyspark.sql import SparkSession

    running = SparkSession.getActiveSession()
    if running is not None:
        return running
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    check_master(master)
    builder = SparkSession.builder.master(master).appName("attention-atlas")
    try:
        with warnings.catch_warnings(), _quiet_start():  # pyspark's word on the pandas version, never handed it
            warnings.simplefilter("ignore", FutureWarning)
            spark = builder.config("spark.ui.showConsoleProgress", "false").getOrCreate()
    except (PySparkException, Py4JError) as exc:  # a master Spark cannot start on, or reach
        raise AtlasError(f"{arg('master', repr(master))}: Spark did not start ({_cause(exc)}; {MASTERS})") from None
    spark.sparkContext.setLogLevel("OFF")
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL + 1)
    # stopped before the interpreter tears its modules down, as pyspark's own shell does: left to that teardown,
    # `atlas query --engine spark` was once seen to abort after its answer ("terminate called without an active
    # exception", exit status -6)
    atexit.register(spark.stop)
    return spark


def register(spark: SparkSession, store: str | os.PathLike[str]) -> list[str]:
    """Register every table of the store as a temporary view of ``spark``, as the store's DuckDB views give it:
    the declared columns (NULL in files written before a column existed), those of older runs derived. Returns
    the table names. The views list the files now: runs published later are seen by registering again."""
    require_pyspark()
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    root = store_uri(store)
    for name in table_schemas():
        try:
            frame = spark.read.schema(schema_ddl(name)).option("basePath", base(root)).parquet(files(root, name))
        except (PySparkException, Py4JJavaError) as exc:  # a file system Spark has not, a host it cannot reach
            if "PATH_NOT_FOUND" not in str(exc):
                raise AtlasError(f"{_named(store)}: Spark cannot read it ({_cause(exc)})") from None
            if name == "runs":
                raise AtlasError(f"{_named(store)}: no store here (no {RUNS_FILES}){OLDER_LAYOUT}") from None
            frame = spark.createDataFrame([], schema_ddl(name))  # a store written before its .schema files
        frame.selectExpr(*columns(name)).createOrReplaceTempView(name)
    return list(table_schemas())


class SparkEngine:
    """The catalogue's SQL on Apache Spark (``atlas.engine.Engine``), translated from DuckDB's (``atlas.spark.sql``),
    over the store's Parquet files registered as temporary views. Given no session, it takes this process's, else
    starts one on ``master``, when it first reads the store: what it checks before (pyspark installed, a store on this
    machine holding runs), and what the answer path checks before, are refused without starting Java (seconds)."""

    def __init__(
        self, store: str | os.PathLike[str], spark: SparkSession | None = None, master: str = "local[2]"
    ) -> None:
        require_pyspark()
        if isinstance(store, Store):  # a folder on this machine: read without Spark
            store.check_path()
            if not any(store.data.glob("*/runs/*.parquet")):  # its runs, in either layout
                raise AtlasError(f"{store.named}: no store here (no {RUNS_FILES})")
            if store.older_layout():  # written before the run partitions: brought over first, where it can be written
                with store.writing(wait=True):
                    pass
        self.store = store
        self.master = master
        self._spark = spark
        if spark is not None:
            register(spark, store)

    @property
    def spark(self) -> SparkSession:
        """The session, the store's tables registered in it."""
        if self._spark is None:
            self._spark = session(self.master)
            register(self._spark, self.store)
        return self._spark

    @property
    def named(self) -> str:
        return _named(self.store)

    @property
    def location(self) -> str:
        return os.fspath(self.store)

    def first(self, sql: str, params: Mapping[str, object]) -> tuple | None:
        statement = translate(sql)
        rows = self.spark.sql(statement.text, args=statement.args(params)).take(1)
        return tuple(rows[0]) if rows else None

    def run_ids(self, kind: str) -> list[str]:
        # an ingested run's rows of its inputs (tables with an example_id: 92 M edges) come with its row of runs
        schemas = table_schemas().items()
        tables = [t for t, schema in schemas if "example_id" not in schema.names] if kind == "any" else ["runs"]
        union = " UNION ".join(f"SELECT DISTINCT run_id FROM {table}" for table in tables)
        return sorted(row[0] for row in self.spark.sql(union).collect())

    def dataframe(self, entry: Entry, params: dict[str, object]) -> DataFrame:
        """The entry's answer as a Spark DataFrame, computed when collected (``params``: bound); an error Spark
        finds in its SQL as one line."""
        from pyspark.errors import PySparkException

        sql = entry_sql(entry)
        try:
            return self.spark.sql(sql.text, args=sql.args(params))
        except PySparkException as exc:
            raise AtlasError(_said(entry, _messages(exc), params)) from None

    def frame(self, entry: Entry, params: dict[str, object]) -> pl.DataFrame:
        return collect(entry, self.dataframe(entry, params), params)


def answer(
    spark: SparkSession, store: str | os.PathLike[str], name: str, /, run: str | None = None, **params: object
) -> SparkAnswer:
    """The catalogue entry named by ``name`` (a name, an alias or close words) on Spark over the store, its
    parameters bound and checked as on DuckDB (``run``: default the latest run) and its needs met; the frame is
    computed when collected."""
    entry = resolve(name)
    engine = SparkEngine(store, spark)
    ready = prepare(engine, entry, run, params)
    return SparkAnswer(entry, engine.dataframe(entry, ready.params), ready.title, ready.notes, ready.params)


def query(
    spark: SparkSession, store: str | os.PathLike[str], name: str, /, run: str | None = None, **params: object
) -> DataFrame:
    """The answer of a catalogue entry as a Spark DataFrame (see ``answer``); its notes are issued as ``AtlasNote``
    warnings, as ``Atlas.query`` issues them."""
    found = answer(spark, store, name, run, **params)
    warn_notes(found.notes)
    return found.frame


def collect(entry: Entry, frame: DataFrame, params: dict[str, object]) -> pl.DataFrame:
    """A Spark answer as a Polars frame; the entry's refusal (``raise_error('atlas: ...')``) or Spark's error as
    one line, as on DuckDB."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    try:
        with warnings.catch_warnings():  # as in session()
            warnings.simplefilter("ignore", FutureWarning)
            return pl.from_arrow(frame.toArrow())
    except (PySparkException, Py4JJavaError) as exc:
        raise AtlasError(_said(entry, _messages(exc), params)) from None


def _messages(exc: Exception) -> list[str]:
    """The error's message and those of the Java exceptions behind it (causes, and the failures Spark gathers
    as suppressed exceptions: a task's ``raise_error`` is one of them)."""
    found = [str(exc)]
    stack = [getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)]
    while stack and len(found) < 64:
        java = stack.pop(0)
        if java is None:
            continue
        found.append(str(java.getMessage() or ""))
        stack += [java.getCause(), *java.getSuppressed()]
    return found


def _cause(exc: Exception) -> str:
    """The first line of the Java exception at the root of ``exc`` (else of ``exc``): what went wrong, not where."""
    java = getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)
    while java is not None and java.getCause() is not None:
        java = java.getCause()
    lines = str(exc if java is None else java).strip().splitlines()
    return lines[0].rstrip(".") if lines else type(exc).__name__


def _named(store: str | os.PathLike[str]) -> str:
    if isinstance(store, Store):
        return store.named
    return store_named(os.fspath(store), from_env=isinstance(store, EnvURI))


def _said(entry: Entry, messages: list[str], params: dict[str, object]) -> str:
    """The line for an error of the entry's Spark SQL (``messages``: Spark's, outermost first): its own refusal,
    each ``$name`` in it the parameter and its value; or Spark's first message without its class, after the
    entry's name."""
    said = [found.group(2) for text in messages for found in _SPARK_ERROR.finditer(text)]
    refusals = [text for text in said if text.startswith(REFUSAL)]
    first = messages[0].strip().splitlines() or ["Spark failed"]
    return refusal_line(entry, (refusals or said or first)[0], params)
