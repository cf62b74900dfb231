"""The store: Parquet files per run and table, and a DuckDB file with one view per table over them.

Layout::

    STORE/atlas.duckdb                                  views over the Parquet files (no absolute path in
                                                        them) and the catalogue's table macros (atlas/macros.py)
    STORE/data/run_id=<run_id>/<table>/*.parquet        the source of truth, one folder per published run: a
                                                        Hive partition, whose files hold every column but run_id
    STORE/data/run_id=.schema/<table>/empty.parquet     a file with no rows and the declared columns of each
                                                        table (but run_id)
    STORE/.staging/<run_id>/...                         a run being written; invisible to the views
    STORE/atlas.lock                                    held (flock) by the one process writing; holds its pid

A run's folder is a Hive partition (``run_id=<id>``), the layout DuckDB, Spark, Polars and pyarrow datasets read
natively: ``run_id`` is read from the path, not written in every row, and a query of one run reads only its files.
Stores written before (``data/<run_id>/``, ``run_id`` a column of every file) are brought to it by the first
process that writes to them (``_recover``): their files written again without the run id, their folders renamed.

What the store promises:

- Atomic runs: a run becomes visible in one step, the rename of its staging folder into ``data/``; every
  Parquet file is written under a temporary name and renamed once complete. Publishing writes nothing
  to ``atlas.duckdb``: its views read ``data/run_id=*/<table>/*.parquet``, so they see a new run at once (the
  ``.schema`` file keeps a view valid before any run wrote its table). The views change only when
  schema.sql or the layout does.
- Portable and read-only use: the views find ``data/`` beside the database file, wherever the store was
  copied or moved, whatever the working directory, in atlas and in the DuckDB CLI alike: the path is
  the directory of DuckDB's default ``temp_directory``, which is ``<database file>.tmp``. Reading writes
  nothing, so a read-only store answers every query.
- One writer: a process that writes holds ``atlas.lock``; another gets a one-line error naming the
  holder's pid. Readers never take the lock.
- Atomic results: the files an analysis writes (``put``) inside ``transaction()`` are written under
  pending names, then renamed into place together from a journal (``.journal-*.json``); a process
  killed before the journal leaves nothing visible (its pending files are removed by the next writer),
  one killed after it is completed by the next process that opens the store where it may write.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import datetime
from functools import cache
from importlib import resources
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from atlas.errors import AtlasError, arg
from atlas.files import check_folders_above, writing_to
from atlas.macros import macros_state, write_macros

# the repository's schema.sql, beside queries/ there and in the installed package (atlas/schema.sql)
SCHEMA_FILE = resources.files("atlas.catalogue_sql").parent / "schema.sql"
DB_NAME = "atlas.duckdb"
LOCK_NAME = "atlas.lock"
PENDING = ".pending"  # suffix of a results file written in a transaction, not yet renamed into place
SCHEMA_RUN = ".schema"  # the partition holding the declared columns of each table, as a file with no rows
PARTITION = "run_id"  # a run's folder under data/ is run_id=<run id>; its files hold every other column
OLDER_SCHEMA = ".schema"  # the schema files' folder under data/ in stores written before the partitions
# the layout of data/ the views read (part of what they depend on: see Store._view_state)
LAYOUT = "data/run_id=<run_id>/<table>/*.parquet, hive partitions, no run_id in the files"
# Columns added after runs were written, derived exactly for those runs where their files lack them. Until
# then every input was laid out as [CLS] a [SEP] (b [SEP]) with those literal strings in tokens.special, so
# the roles follow from them and position 0 was always [CLS].
# attn_rows.to_first is also NULL in newer files where position 0 is the input's only cls/bos token (it is
# to_cls there; see atlas.ingestion.sparsify). The same SQL derives them on Spark (atlas.spark.tables, through sqlglot)
# and in Atlas.table's Polars scans of the files (polars.sql_expr).
OLDER_RUNS = {
    ("tokens", "role"): "coalesce(role, CASE special WHEN '[CLS]' THEN 'cls' WHEN '[SEP]' THEN 'sep' END) AS role",
    ("attn_rows", "to_first"): "coalesce(to_first, to_cls) AS to_first",
    ("runs", "text"): "coalesce(text, 'words') AS text",  # before --text, every run read the words joined by spaces
    ("runs", "word_rows"): "coalesce(word_rows, 'mean') AS word_rows",  # and averaged a word's pieces' rows
    ("runs", "dtype"): "coalesce(dtype, 'float32') AS dtype",  # and loaded the weights in float32
    ("runs", "value_norms"): "coalesce(value_norms, false) AS value_norms",  # and kept no norms
    ("runs", "rollout"): "coalesce(rollout, 'none') AS rollout",  # and no rollout
}
# the store's folder as DuckDB sees it: the directory of the database's default temp_directory
# ('<database file>.tmp'); '' when DuckDB was started in the store's folder
ROOT_SQL = "left(current_setting('temp_directory'), -length(parse_filename(current_setting('temp_directory'))))"
_HELD: dict[Path, int] = {}  # writer locks this process holds: lock file -> open file descriptor
_PENDING: dict[Path, list[tuple[Path, Path]]] = {}  # open transactions: store root -> (pending, final) files


@cache
def table_schemas() -> dict[str, pa.Schema]:
    """Arrow schema of every table declared in schema.sql, in declaration order."""
    text = SCHEMA_FILE.read_text()
    con = duckdb.connect()
    con.execute(text)
    names = re.findall(r"^CREATE TABLE (\w+)", text, flags=re.MULTILINE)
    schemas = {}
    for name in names:
        info = con.execute(f"SELECT name FROM pragma_table_info('{name}') WHERE \"notnull\"").fetchall()
        required = {c for (c,) in info}
        schema = con.execute(f"SELECT * FROM {name}").to_arrow_table().schema
        schemas[name] = pa.schema([f.with_nullable(f.name not in required) for f in schema])
    return schemas


def write_parquet(table: pa.Table, path: Path, **encoding: object) -> None:
    """Write a Parquet file atomically: a temporary name, fsync, then rename; encoded as ``parquet_options`` says."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp, **parquet_options(table, **encoding))
    with tmp.open("rb") as handle:
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def parquet_options(
    table: pa.Table,
    split: list[str] | None = None,
    statistics: list[str] | None = None,
    delta: list[str] | None = None,
    plain: list[str] | None = None,
    levels: dict[str, int] | None = None,
    uncompressed: list[str] | None = None,
) -> dict:
    """``pq.write_table``'s encoding arguments for ``table``: every column zstd compressed (at ``levels``' level, else
    zstd's default, 1) but those ``uncompressed``.

    Full-precision floats compress best byte-stream split, weights at float16 precision or coarser (at most 65,536
    distinct values) and everything else with a dictionary: ``split`` names the former (None: every float column
    whose values are not all float16-exact, found by a pass over them). ``statistics``: the columns given min/max
    statistics (what DuckDB skips row groups by; None: all). ``delta``: integer columns in sorted runs, delta
    encoded (cheaper to write than a dictionary, as small); ``plain``: columns left to the compression alone (long
    runs of one value, or one sequence repeated: zstd packs them as small, at half the CPU time of delta encoding)."""
    if split is None:
        split = [f.name for f in table.schema if pa.types.is_floating(f.type) and not _float16_exact(table[f.name])]
    encoding = (
        {name: "BYTE_STREAM_SPLIT" for name in split}
        | {name: "DELTA_BINARY_PACKED" for name in delta or []}
        | {name: "PLAIN" for name in plain or []}
    )
    return {
        "compression": {name: "none" if name in (uncompressed or []) else "zstd" for name in table.schema.names},
        "compression_level": levels or None,
        "use_dictionary": [name for name in table.schema.names if name not in encoding],
        "column_encoding": encoding or None,
        "write_statistics": True if statistics is None else statistics,
    }


def write_file(path: Path, data: bytes) -> None:
    """Write bytes atomically: a temporary name, fsync, then rename."""
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def _float16_exact(column: pa.ChunkedArray) -> bool:
    values = column.to_numpy()
    return bool(np.array_equal(values, values.astype(np.float16).astype(values.dtype), equal_nan=True))


def run_folder_name(run_id: str) -> str:
    """The name of a run's folder under data/: its Hive partition."""
    return f"{PARTITION}={run_id}"


def run_ids_in(data: Path) -> list[str]:
    """The run ids with a folder in a store's data folder (``run_id=<id>``; a store not yet opened by a writer since
    the partitions: ``<id>``), sorted; not the schema files' folder."""
    if not data.is_dir():
        return []
    ids = (p.name.removeprefix(f"{PARTITION}=") for p in data.iterdir() if p.is_dir())
    return sorted(name for name in ids if name and not name.startswith(".") and "=" not in name)


def to_table(name: str, columns: dict[str, object], n_rows: int, partitioned: bool = False) -> pa.Table:
    """Build a table of the store, cast to the schema of schema.sql.

    A column is an array (NumPy's or Arrow's, chunked or not) or list of ``n_rows`` values, or a scalar repeated
    on every row (a repeated string is dictionary-encoded); a column not given is all NULL. ``partitioned``: the
    table of a run's file, without the run id (its folder's name gives it).
    """
    schema = table_schemas()[name]
    unknown = set(columns) - set(schema.names)
    if unknown:
        raise ValueError(f"{name}: unknown columns {sorted(unknown)}")
    if partitioned:
        schema = schema.remove(schema.get_field_index(PARTITION))
    arrays = []
    for field in schema:
        value = columns.get(field.name)
        if isinstance(value, str):
            indices = pa.array(np.zeros(n_rows, dtype=np.int32))
            arrays.append(pa.DictionaryArray.from_arrays(indices, pa.array([value], field.type)))
        elif value is None:
            arrays.append(pa.nulls(n_rows, field.type))
        elif isinstance(value, int | float | bool | datetime):
            arrays.append(pa.repeat(pa.scalar(value, field.type), n_rows))
        elif isinstance(value, pa.Array | pa.ChunkedArray):
            arrays.append(value if value.type == field.type else value.cast(field.type))
        else:
            arrays.append(pa.array(value).cast(field.type))
        if not field.nullable and arrays[-1].null_count:
            raise ValueError(f"{name}.{field.name}: NULL in a column declared NOT NULL")
    fields = [pa.field(f.name, a.type, f.nullable) for f, a in zip(schema, arrays, strict=True)]  # run_id: dictionary
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def store_named(text: str, from_env: bool) -> str:
    """A store (its path or URI) as an error names it: the parameter ``store`` and what was given (see
    ``atlas.errors``), or $ATLAS_STORE and its value where that named it (no store given)."""
    return f"ATLAS_STORE {text!r}" if from_env else arg("store", repr(text))


def is_uri(text: str) -> bool:
    """Whether a store is named by a URI (s3a://, hdfs://, file:), which Spark reads, not a local folder."""
    return "://" in text or text.startswith("file:")


class StoreBusy(AtlasError):
    """Another process is writing to the store."""


class StoreLocked(AtlasError):
    """Another process (a DuckDB shell) holds the store's DuckDB file as atlas cannot share it."""


def _open_error(db: Path, exc: duckdb.Error, read_only: bool) -> AtlasError:
    """Why DuckDB could not open the store's database, in one line."""
    why = str(exc).splitlines()[0]
    if "Conflicting lock" not in why:  # DuckDB's own words: another process holds the file
        return AtlasError(f"{db}: cannot open the store ({why})")
    if read_only:  # held read-write
        why += "; a DuckDB shell beside atlas opens the store with -readonly"
    else:  # held at all: atlas writes the file
        why += "; atlas writes the store now: close the other program (a DuckDB shell) first"
    return StoreLocked(f"{db}: cannot open the store ({why})")


class Store:
    def __init__(self, root: Path, from_env: bool = False) -> None:
        self.root = root
        self.from_env = from_env  # the folder $ATLAS_STORE names (no store given)
        self.db = root / DB_NAME
        self.data = root / "data"
        self.staging = root / ".staging"
        self.lock_file = root / LOCK_NAME

    def __fspath__(self) -> str:  # a store where a path is taken (a URI or path for the Spark engine)
        return str(self.root)

    @property
    def named(self) -> str:
        """The store as an error names it: the parameter ``store`` and its path (see ``atlas.errors``), or
        $ATLAS_STORE and its path where that named it."""
        return store_named(str(self.root), self.from_env)

    def exists(self) -> bool:
        return self.db.is_file()

    def run_folder(self, run_id: str) -> Path:
        """A published run's folder (its Hive partition)."""
        return self.data / run_folder_name(run_id)

    def create(self) -> None:
        """Create an empty store (folder, data folder and the DuckDB file), atomically."""
        if self.exists():
            self.check_database()
            return
        self.make_folders()
        self.write_database()

    def check_database(self) -> None:
        """Refuse a store whose DuckDB file is not a DuckDB database (an ingest would write its runs, and the store
        would not open), and a path no store can be at (``check_path``). The file holds only views and macros:
        removed, it is written again over data/ when the store is next opened (``connect``)."""
        self.check_path()
        if self.db.is_file():
            with self.db.open("rb") as handle:
                magic = handle.read(12)[8:]
            if magic != b"DUCK":
                raise AtlasError(
                    f"{self.named}: its {DB_NAME} is not a DuckDB database; remove it, and atlas writes it "
                    "again over the runs in data/"
                )
            try:
                con = duckdb.connect(str(self.db), read_only=True)
            except duckdb.Error:
                return  # held by a writer (atlas's own, between two runs' checks), or unreadable: connect says why
            try:
                self._check_meta(con)
            finally:
                con.close()

    def _check_meta(self, con: duckdb.DuckDBPyConnection) -> None:
        """Refuse another program's DuckDB file: every store's has the table atlas_meta."""
        if not con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'atlas_meta'").fetchone()[0]:
            raise AtlasError(
                f"{self.named}: its {DB_NAME} is another program's DuckDB database (no atlas_meta table); "
                "name another folder as the store"
            )

    def check_path(self) -> None:
        """Refuse a store's path that names a file, or a folder under a file, or holds file patterns."""
        if self.root.exists() and not self.root.is_dir():
            raise AtlasError(f"{self.named}: exists and is not a directory")
        check_folders_above(self.root, self.named)
        if any(ch in str(self.root.resolve()) for ch in "*?[]{}"):
            raise AtlasError(
                f"{self.named}: its path ({self.root.resolve()}) holds one of * ? [ ] {{ }}, which DuckDB and Spark "
                "read as file patterns: rename or move the folder"
            )
        if "=" in str(self.root.resolve()):
            raise AtlasError(
                f"{self.named}: its path ({self.root.resolve()}) holds '=', which DuckDB and Polars read as a Hive "
                "partition (name=value) of every file below: rename or move the folder"
            )

    def make_folders(self) -> None:
        """The store's folder and data folder, its path checked first (``create``'s first half)."""
        self.check_path()
        self.data.mkdir(parents=True, exist_ok=True)

    def write_database(self) -> None:
        """The DuckDB file with the views and macros, and each table's schema file, unless the store has them
        (``create``'s second half, after ``make_folders``; 0.2-0.3 s, spent by an ingest beside its first chunk)."""
        with self.writing():
            if self.exists():
                return
            self._write_schema_files()
            tmp = self.root / f".{DB_NAME}.tmp"
            tmp.unlink(missing_ok=True)
            con = duckdb.connect(str(tmp))
            try:
                self._write_views(con)
            finally:
                con.close()
            os.replace(tmp, self.db)

    @contextmanager
    def writing(self, wait: bool = False) -> Iterator[None]:
        """Hold the store's writer lock (re-entrant within a process). ``wait``: block until the holder is
        done (saying so on stderr) instead of failing with its pid."""
        key = self.lock_file.absolute()
        if key in _HELD:
            yield
            return
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.lock_file, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise AtlasError(f"{self.named}: cannot write to this store ({exc.strerror})") from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
                if not wait:
                    os.close(fd)
                    fd = -1
                    raise StoreBusy(
                        f"{self.named}: another atlas process is writing to this store (pid {holder}); "
                        "try again when it is done"
                    ) from None
                print(f"waiting for atlas process {holder} to finish writing to {self.root}", file=sys.stderr)
                fcntl.flock(fd, fcntl.LOCK_EX)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            _HELD[key] = fd
            self._recover()
            try:
                yield
            finally:
                del _HELD[key]
                os.ftruncate(fd, 0)
        finally:
            if fd >= 0:
                os.close(fd)  # releases the lock

    def _recover(self) -> None:
        """Finish what a killed writer left (holding the lock): complete journalled results, remove pending
        files no journal names and removals half done."""
        for journal in sorted(self.root.glob(".journal-*.json")):
            self._apply(journal)
        for pending in self.data.glob(f"*/*/.*{PENDING}"):
            pending.unlink()
        for trash in self.root.glob(".trash-*"):
            shutil.rmtree(trash, ignore_errors=True)
        self._partition()

    def older_layout(self) -> bool:
        """Whether the store holds folders written before the run partitions (``_partition`` brings them over)."""
        return self.data.is_dir() and any(p.is_dir() and "=" not in p.name for p in self.data.iterdir())

    def _partition(self) -> None:
        """A store written before the Hive partitions: each run's files written again without their run id column
        (each atomically: the same rows otherwise), then its folder renamed ``run_id=<id>``, and the schema files
        written at their place, and the views over them; once, by the first writer (where another process holds the
        DuckDB file, the views wait for the next ``connect``). A process killed midway leaves the rest to the next
        writer. The files lose the column because DuckDB 1.5 fails inside its optimizer on some queries over files of
        which some hold a column the others lack beside a partition (on the runs of a store that holds both)."""
        if not self.older_layout():
            return
        older = [p for p in self.data.iterdir() if p.is_dir() and "=" not in p.name and p.name != OLDER_SCHEMA]
        if older:
            print(f"{self.root}: written by an older atlas; its {len(older)} run(s) moved to the run partitions "
                  "(once)", file=sys.stderr)  # fmt: skip
        for folder in older:
            for part in sorted(folder.glob("*/*.parquet")):
                if PARTITION in pq.read_schema(part).names:
                    write_parquet(pq.read_table(part).drop_columns([PARTITION]), part)
            folder.rename(self.run_folder(folder.name))
        if (self.data / OLDER_SCHEMA).is_dir():
            self._write_schema_files()
            shutil.rmtree(self.data / OLDER_SCHEMA)
        if self.exists() and os.access(self.db, os.W_OK):  # the older views fail on the files now (binder error)
            with suppress(StoreLocked):
                self.refresh_views()

    def _apply(self, journal: Path) -> None:
        for pending, final in json.loads(journal.read_text()):
            if (self.root / pending).exists():
                os.replace(self.root / pending, self.root / final)
        journal.unlink()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Make every ``put`` inside visible together, or none of them (re-entrant: an inner one joins)."""
        key = self.root.absolute()
        if key in _PENDING:
            yield
            return
        with self.writing(wait=True):
            _PENDING[key] = moves = []
            try:
                yield
            except BaseException:
                for pending, _ in moves:
                    pending.unlink(missing_ok=True)
                raise
            finally:
                del _PENDING[key]
            if moves:
                journal = self.root / f".journal-{uuid.uuid4().hex[:12]}.json"
                text = json.dumps([[str(p.relative_to(self.root)), str(f.relative_to(self.root))] for p, f in moves])
                write_file(journal, text.encode())
                self._apply(journal)

    def _write_schema_files(self) -> None:
        for name in table_schemas():
            write_parquet(to_table(name, {}, 0, partitioned=True), self.run_folder(SCHEMA_RUN) / name / "empty.parquet")

    def _view_state(self) -> str:
        """What the views depend on: the schema, the older runs' derived columns and the layout (not the store's
        location, nor which runs it holds)."""
        older = repr(sorted(OLDER_RUNS.items())).encode()
        return hashlib.sha256(SCHEMA_FILE.read_bytes() + older + LAYOUT.encode()).hexdigest()[:16]

    def _write_views(self, con: duckdb.DuckDBPyConnection) -> None:
        con.execute("CREATE TABLE IF NOT EXISTS atlas_meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
        con.execute("DROP SCHEMA IF EXISTS declared CASCADE")  # stores written before the .schema files
        for name, schema in table_schemas().items():
            # union_by_name reads every file's columns in the widest type of any file, the .schema file's (the
            # declared) among them: older runs' TINYINT layers and SMALLINT positions come as SMALLINT and INTEGER;
            # the run id is the partition's, always text (the files of older runs hold it too, the same: not read)
            pattern = f"data/{PARTITION}=*/{name}/*.parquet"
            columns = ", ".join(OLDER_RUNS.get((name, c), f'"{c}"') for c in schema.names)
            con.execute(
                f"CREATE OR REPLACE VIEW {name} AS SELECT {columns} FROM read_parquet({ROOT_SQL} || '{pattern}', "
                f"union_by_name = true, hive_partitioning = true, hive_types = {{'{PARTITION}': 'VARCHAR'}})"
            )
        con.execute("INSERT OR REPLACE INTO atlas_meta VALUES ('view_state', ?)", [self._view_state()])
        write_macros(con)

    def _open(self, read_only: bool) -> duckdb.DuckDBPyConnection:
        try:
            con = duckdb.connect(str(self.db), read_only=read_only)
        except duckdb.Error as exc:
            raise _open_error(self.db, exc, read_only) from None
        try:
            con.execute("SET enable_progress_bar = false")  # atlas prints its own tables
        except duckdb.InvalidInputException:  # in Jupyter without ipywidgets, where DuckDB draws no bar either
            pass
        return con

    def refresh_views(self) -> None:
        """Rewrite the views and the .schema files (after schema.sql changed), holding the writer lock."""
        with self.writing():
            self._write_schema_files()
            con = self._open(read_only=False)
            try:
                self._write_views(con)
            finally:
                con.close()

    def _refresh_macros(self) -> None:
        """Rewrite the catalogue's macros where the store can be written now; else they wait for a writer."""
        if not os.access(self.db, os.W_OK):
            return
        try:
            with self.writing():
                con = self._open(read_only=False)
                try:
                    write_macros(con)
                finally:
                    con.close()
        except (StoreBusy, StoreLocked):  # another process writes, or holds the file (a -readonly shell): later
            pass

    def connect(self, sandboxed: bool = False) -> duckdb.DuckDBPyConnection:
        """A read-only connection. Writes nothing, unless the views predate the current schema.sql or the
        macros the current queries/*.sql (then they are rewritten first). ``sandboxed``: for user SQL, no
        extension installs and no file access outside the store's data folder (for the rest of the process)."""
        self.check_path()  # a path DuckDB would read as a pattern finds no file
        if not self.exists() and self.data.is_dir() and os.access(self.root, os.W_OK):
            self.write_database()  # removed (see check_database): written again over the runs in data/
        if not self.exists():
            raise AtlasError(f"{self.named}: no store here (run 'atlas ingest' first)")
        con = self._open(read_only=True)
        try:
            self._check_meta(con)
        except AtlasError:
            con.close()
            raise
        recorded = con.execute("SELECT value FROM atlas_meta WHERE key = 'view_state'").fetchone()
        if any(self.root.glob(".journal-*.json")) and os.access(self.root, os.W_OK):
            try:
                with self.writing():  # completes the results a killed writer journalled
                    pass
            except StoreBusy:
                pass  # the writer holding the lock completes them
        macros = con.execute("SELECT value FROM atlas_meta WHERE key = 'macros_state'").fetchone()
        if recorded is not None and recorded[0] == self._view_state() and macros != (macros_state(),):
            con.close()
            self._refresh_macros()  # the catalogue changed: atlas reads queries/*.sql itself, the shell the macros
            con = self._open(read_only=True)
        if recorded is None or recorded[0] != self._view_state():
            con.close()
            if not os.access(self.db, os.W_OK):
                raise AtlasError(
                    f"{self.named}: written by another version of atlas; open it once where it can be "
                    "written to update its views"
                )
            self.refresh_views()
            con = self._open(read_only=True)
        if sandboxed and con.execute("SELECT current_setting('enable_external_access')").fetchone()[0]:
            data = str(self.data.resolve()).replace("'", "''")
            con.execute(
                "SET autoinstall_known_extensions = false; SET autoload_known_extensions = false; "
                f"SET allowed_directories = ['{data}/']; SET enable_external_access = false"
            )
        return con

    def put(self, run_id: str, table: str, name: str, columns: dict[str, object], n_rows: int) -> None:
        """Write one results file of ``table`` for a run (replacing one of the same name): at once, or with the
        other files of the open ``transaction()``. ``columns``' run_id, where given, is ``run_id`` (the folder's)."""
        if columns.get(PARTITION, run_id) != run_id:
            raise ValueError(f"{table}: rows of run {columns[PARTITION]!r} in the folder of run {run_id!r}")
        columns = {key: value for key, value in columns.items() if key != PARTITION}
        final = self.run_folder(run_id) / table / f"{name}.parquet"
        with self.transaction():
            pending = final.with_name(f".{final.name}.{uuid.uuid4().hex[:12]}{PENDING}")
            _PENDING[self.root.absolute()].append((pending, final))
            write_parquet(to_table(table, columns, n_rows, partitioned=True), pending)

    def publish(self, run_id: str, run_row: dict[str, object], tables: tuple[str, ...]) -> None:
        """Make a staged run (``staging/<run_id>``, its chunks written) visible: its ``runs`` row written, an empty
        file for each of ``tables`` that has none (every table has a file), and the staging folder renamed into
        ``data/`` as the run's partition, one atomic step (the views read data/run_id=*/<table>/*.parquet: the run is
        visible from then on)."""
        staging = self.staging / run_id
        row = {key: value for key, value in run_row.items() if key != PARTITION}
        write_parquet(to_table("runs", row, 1, partitioned=True), staging / "runs" / "part-00000.parquet")
        for name in tables:
            if not any((staging / name).glob("*.parquet")):
                write_parquet(to_table(name, {}, 0, partitioned=True), staging / name / "part-00000.parquet")
        self.data.mkdir(parents=True, exist_ok=True)
        staging.rename(self.run_folder(run_id))

    def export(
        self, con: duckdb.DuckDBPyConnection, out: Path, run_id: str | None = None, progress: bool = True
    ) -> dict[str, int]:
        """Write every table read through ``con`` (or only ``run_id``'s rows) as ``out/<table>.parquet``; returns
        the rows per table. The files appear together, when all are written: an export that fails or is stopped
        leaves ``out`` as it was. ``progress``: a progress bar over the rows."""
        from tqdm import tqdm

        where, args = ("WHERE run_id = ?", [run_id]) if run_id is not None else ("", [])
        given = arg("out", repr(str(out)))
        if out.exists() and not out.is_dir():
            raise AtlasError(f"{given}: is a file; name a folder to write the tables into")
        if any(out.resolve().is_relative_to(inside.resolve()) for inside in (self.data, self.staging)):
            raise AtlasError(
                f"{given}: inside the store's runs ({self.data}; the store would read the files as a run's); "
                "name a folder outside them"
            )
        check_folders_above(out, given)
        for name in table_schemas():
            if (out / f"{name}.parquet").is_dir():
                raise AtlasError(f"{given}: '{out / name}.parquet' is a folder; the export would write a file there")
        tmps = {name: out / f".{name}.parquet.tmp" for name in table_schemas()}
        rows = sum(con.execute(f"SELECT count(*) FROM {name} {where}", args).fetchone()[0] for name in tmps)
        made = not out.exists()
        with writing_to(given):
            out.mkdir(parents=True, exist_ok=True)
        written: dict[str, int] = {}
        bar = tqdm(total=rows, desc="export", unit="row", unit_scale=True, disable=not progress, leave=False)
        try:
            with writing_to(given):
                for name, tmp in tmps.items():
                    reader = con.execute(f"SELECT * FROM {name} {where}", args).to_arrow_reader()
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

    def remove_if_empty(self) -> None:
        """Undo ``create`` for a store that never received a run."""
        if self.run_ids() or self.unfinished_runs():
            return
        with self.writing():
            self.db.unlink(missing_ok=True)
            shutil.rmtree(self.run_folder(SCHEMA_RUN), ignore_errors=True)
            for folder in (self.data, self.staging):
                if folder.is_dir() and not any(folder.iterdir()):
                    folder.rmdir()
        self.lock_file.unlink(missing_ok=True)
        if self.root.is_dir() and not any(self.root.iterdir()):
            self.root.rmdir()

    def run_ids(self) -> list[str]:
        """Every run id with a folder in data/ (ingested runs and the task models' results)."""
        return run_ids_in(self.data)

    def unfinished_runs(self) -> list[str]:
        """Runs whose ingest was interrupted (re-running the same ingest resumes them)."""
        if not self.staging.is_dir():
            return []
        return sorted(p.name for p in self.staging.iterdir() if not p.name.startswith("."))

    def remove(self, *run_ids: str) -> dict[str, str]:
        """Remove runs (published: from data/; interrupted: their staging folders), each in one atomic step, once
        every one is found (an id given twice counts once); returns which each was ('run' or 'unfinished
        ingest'), by run id."""
        with self.writing():
            found: dict[str, tuple[Path, str]] = {}
            for run_id in run_ids:
                for path, what in ((self.run_folder(run_id), "run"), (self.staging / run_id, "unfinished ingest")):
                    if run_id and not run_id.startswith(".") and "/" not in run_id and path.is_dir():
                        found[run_id] = (path, what)
                        break
                else:
                    where = "see 'atlas runs' and 'atlas runs --unfinished'; nothing was removed"
                    raise AtlasError(f"'{run_id}': no such run in {self.root} ({where})")
            for path, _ in found.values():
                trash = self.root / f".trash-{uuid.uuid4().hex[:8]}"
                path.rename(trash)  # invisible from here on
                shutil.rmtree(trash)
        return {run_id: what for run_id, (_, what) in found.items()}
