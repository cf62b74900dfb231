"""The store: Parquet files per run and table, and a DuckDB file with one view per table over them.

Layout::

    STORE/atlas.duckdb                        views (and macros) over the Parquet files
    STORE/data/<run_id>/<table>/*.parquet     the source of truth, one folder per published run
    STORE/.staging/<run_id>/...               a run being written; invisible to the views

A run becomes visible in one atomic step: its staging folder is renamed into ``data/``. Every Parquet
file is written under a temporary name and renamed once complete.
"""

from __future__ import annotations

import hashlib
import os
import re
from datetime import datetime
from functools import cache
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from atlas.errors import AtlasError

SCHEMA_FILE = Path(__file__).resolve().parent.parent / "schema.sql"
DB_NAME = "atlas.duckdb"


@cache
def table_schemas() -> dict[str, pa.Schema]:
    """Arrow schema of every table declared in schema.sql, in declaration order."""
    text = SCHEMA_FILE.read_text()
    con = duckdb.connect()
    con.execute(text)
    names = re.findall(r"^CREATE TABLE (\w+)", text, flags=re.MULTILINE)
    return {name: con.execute(f"SELECT * FROM {name}").to_arrow_table().schema for name in names}


def write_parquet(table: pa.Table, path: Path) -> None:
    """Write a Parquet file atomically: a temporary name, fsync, then rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    # full-precision floats compress best byte-stream split; weights at float16 precision (at most
    # 65,536 distinct values) and everything else with a dictionary
    split = [f.name for f in table.schema if pa.types.is_floating(f.type) and not _float16_exact(table[f.name])]
    dictionary = [name for name in table.schema.names if name not in split]
    pq.write_table(table, tmp, compression="zstd", use_dictionary=dictionary, use_byte_stream_split=split or False)
    with tmp.open("rb") as handle:
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def _float16_exact(column: pa.ChunkedArray) -> bool:
    values = column.to_numpy()
    return bool(np.array_equal(values, values.astype(np.float16).astype(values.dtype), equal_nan=True))


def to_table(name: str, columns: dict[str, object], n_rows: int) -> pa.Table:
    """Build a table of the store, cast to the schema of schema.sql.

    A column is an array or list of ``n_rows`` values, or a scalar repeated on every row (a repeated
    string is dictionary-encoded, so a run id costs nothing per row); a column not given is all NULL.
    """
    schema = table_schemas()[name]
    unknown = set(columns) - set(schema.names)
    if unknown:
        raise ValueError(f"{name}: unknown columns {sorted(unknown)}")
    arrays = []
    for field in schema:
        value = columns.get(field.name)
        if isinstance(value, str):
            indices = pa.array(np.zeros(n_rows, dtype=np.int32))
            arrays.append(pa.DictionaryArray.from_arrays(indices, pa.array([value], field.type)))
        elif value is None or isinstance(value, int | float | bool | datetime):
            arrays.append(pa.repeat(pa.scalar(value, field.type), n_rows))
        else:
            arrays.append(pa.array(value).cast(field.type))
    return pa.Table.from_arrays(arrays, names=schema.names)


class Store:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.db = root / DB_NAME
        self.data = root / "data"
        self.staging = root / ".staging"

    def exists(self) -> bool:
        return self.db.is_file()

    def create(self) -> None:
        """Create an empty store (folder, data folder and the DuckDB file), atomically."""
        if self.exists():
            return
        if self.root.exists() and not self.root.is_dir():
            raise AtlasError(f"--store '{self.root}': exists and is not a directory")
        if any(ch in str(self.root.resolve()) for ch in "*?[]{}"):
            raise AtlasError(f"--store '{self.root}': the path must not contain * ? [ ] {{ }} (file patterns)")
        self.data.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".{DB_NAME}.tmp"
        tmp.unlink(missing_ok=True)
        con = duckdb.connect(str(tmp))
        try:
            self._write_views(con)
        finally:
            con.close()
        os.replace(tmp, self.db)

    def _view_state(self) -> str:
        """What the views depend on: the store's location, the schema, and which tables have files."""
        backed = [name for name in table_schemas() if any(self.data.glob(f"*/{name}/*.parquet"))]
        schema = hashlib.sha256(SCHEMA_FILE.read_bytes()).hexdigest()[:16]
        return f"{self.root.resolve()}|{schema}|{','.join(backed)}"

    def _write_views(self, con: duckdb.DuckDBPyConnection) -> None:
        con.execute("CREATE TABLE IF NOT EXISTS atlas_meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
        # the declared (empty) tables, so that a table no run has written yet still has its columns
        con.execute("DROP SCHEMA IF EXISTS declared CASCADE; CREATE SCHEMA declared; USE declared")
        con.execute(SCHEMA_FILE.read_text())
        con.execute("USE main")
        for name in table_schemas():
            if any(self.data.glob(f"*/{name}/*.parquet")):
                pattern = str(self.data.resolve() / "*" / name / "*.parquet").replace("'", "''")
                source = f"read_parquet('{pattern}', union_by_name = true, hive_partitioning = false)"
            else:
                source = f"declared.{name}"
            con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM {source}")
        con.execute("INSERT OR REPLACE INTO atlas_meta VALUES ('view_state', ?)", [self._view_state()])

    def _open(self, read_only: bool) -> duckdb.DuckDBPyConnection:
        try:
            con = duckdb.connect(str(self.db), read_only=read_only)
            con.execute("SET enable_progress_bar = false")  # atlas prints its own tables
            return con
        except duckdb.Error as exc:
            raise AtlasError(f"{self.db}: cannot open the store ({str(exc).splitlines()[0]})") from None

    def refresh_views(self) -> None:
        con = self._open(read_only=False)
        try:
            self._write_views(con)
        finally:
            con.close()

    def connect(self, sandboxed: bool = False) -> duckdb.DuckDBPyConnection:
        """A read-only connection; the views are re-pointed first if the store folder moved or a table
        got its first Parquet files since they were written. ``sandboxed``: for user SQL, no extension
        installs and no file access outside the store's data folder (for the rest of the process)."""
        if not self.exists():
            raise AtlasError(f"--store '{self.root}': no store here (run 'atlas ingest' first)")
        con = self._open(read_only=True)
        recorded = con.execute("SELECT value FROM atlas_meta WHERE key = 'view_state'").fetchone()
        if recorded is None or recorded[0] != self._view_state():
            con.close()
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
        """Write one results file of ``table`` for a run (atomically; replacing one of the same name)."""
        write_parquet(to_table(table, columns, n_rows), self.data / run_id / table / f"{name}.parquet")
        self.refresh_views()

    def remove_if_empty(self) -> None:
        """Undo ``create`` for a store that never received a run."""
        if self.run_ids() or self.unfinished_runs():
            return
        self.db.unlink(missing_ok=True)
        for folder in (self.data, self.staging, self.root):
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()

    def run_ids(self) -> list[str]:
        return sorted(p.name for p in self.data.iterdir() if p.is_dir()) if self.data.is_dir() else []

    def unfinished_runs(self) -> list[str]:
        """Runs whose ingest was interrupted (re-running the same ingest resumes them)."""
        return sorted(p.name for p in self.staging.iterdir()) if self.staging.is_dir() else []

    def latest_run(self, con: duckdb.DuckDBPyConnection) -> str:
        row = con.execute("SELECT run_id FROM runs ORDER BY created_at DESC, run_id LIMIT 1").fetchone()
        if row is None:
            raise AtlasError(f"--store '{self.root}': the store holds no run yet")
        return row[0]
