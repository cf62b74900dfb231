"""The store's tables as another engine reads them: a glob of Parquet files per table, the declared columns
and the derived columns of older runs (what ``Store``'s DuckDB views give, in Spark SQL).

The files of table T are ``STORE/data/run_id=*/T/*.parquet``: one folder per run, a Hive partition that gives
``run_id`` (Spark infers it from the paths below ``STORE/data``, ``base``), and
``data/run_id=.schema/T/empty.parquet``, no rows and every declared column but the run id, so the glob always
matches. Files written before a column was added lack it; read with the declared schema, it is NULL there, as
DuckDB's ``union_by_name`` gives it; files of older runs whose layers, heads and positions are narrower integers
(TINYINT, SMALLINT) are read widened to the declared types (Spark's Parquet readers, vectorised or not, widen a
narrower integer to a wider one), as DuckDB's views read them.
"""

from __future__ import annotations

import pyarrow as pa

from atlas.errors import AtlasError
from atlas.spark.sql import expression_sql
from atlas.store import OLDER_RUNS, PARTITION, table_schemas


def _spark_type(kind: pa.DataType) -> str:
    if pa.types.is_dictionary(kind):
        return _spark_type(kind.value_type)
    if pa.types.is_list(kind):
        return f"ARRAY<{_spark_type(kind.value_type)}>"
    if pa.types.is_timestamp(kind):  # written without a time zone: Spark's timestamp without one
        return "TIMESTAMP" if kind.tz else "TIMESTAMP_NTZ"
    names = {
        pa.int8(): "TINYINT",
        pa.int16(): "SMALLINT",
        pa.int32(): "INT",
        pa.int64(): "BIGINT",
        pa.float32(): "FLOAT",
        pa.float64(): "DOUBLE",
        pa.string(): "STRING",
        pa.bool_(): "BOOLEAN",
    }
    if kind not in names:
        raise AtlasError(f"column type {kind}: not a type of the store's Parquet files")
    return names[kind]


def schema_ddl(table: str) -> str:
    """The table's declared columns as a Spark DDL schema ('run_id STRING, example_id INT, ...'): the files' columns
    and the partition's."""
    return ", ".join(f"`{field.name}` {_spark_type(field.type)}" for field in table_schemas()[table])


def base(store: str) -> str:
    """The folder whose subfolders are the runs' partitions (Spark's ``basePath``)."""
    return f"{store.rstrip('/')}/data"


def files(store: str, table: str) -> str:
    """The glob of the table's Parquet files under a store (a local folder or a URI Spark reads)."""
    return f"{base(store)}/{PARTITION}=*/{table}/*.parquet"


def columns(table: str) -> list[str]:
    """The view's columns as Spark SQL expressions: each declared column, derived where older runs lack it."""
    return [
        expression_sql(OLDER_RUNS[(table, name)]) if (table, name) in OLDER_RUNS else f"`{name}`"
        for name in table_schemas()[table].names
    ]
