"""Printing and writing results: a terminal table, CSV, JSON or Parquet, for any DuckDB type and any size.

Rows stream from DuckDB in batches, so memory stays bounded whatever the result's size. DuckDB turns
every value into text (lists, structs and maps as JSON text; BLOB, INTERVAL, HUGEINT, ... as DuckDB
writes them), so every type comes out in every format:

- table: the first ``limit`` rows, cut to the terminal's width, nulls blank, and a line saying how many
  rows were left out;
- csv: a header and one line per row (quoted only where needed, nulls empty);
- json: an array of row objects (NaN and infinities as null, which JSON cannot hold);
- parquet: the values as they are (a file only; INTERVAL and UNION as text).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import click
import duckdb
import polars as pl
import pyarrow.parquet as pq

from atlas.errors import AtlasError

FORMATS = ("table", "csv", "json", "parquet")
SUFFIXES = {".csv": "csv", ".json": "json", ".parquet": "parquet", ".txt": "table"}
TABLE_ROWS = 40  # rows a terminal table shows unless --limit says otherwise
BATCH_ROWS = 16_384
_NESTED = {"list", "struct", "map", "array", "union"}
_FLOATS = {"float", "double"}
_AS_TEXT_IN_PARQUET = {"interval", "union"}
_NUMBERS = _FLOATS | {"tinyint", "smallint", "integer", "bigint", "utinyint", "usmallint", "uinteger", "ubigint"}
_MIN_WIDTH = 6  # narrowest a column is cut to before columns are left out


def output_format(fmt: str | None, out: Path | None) -> str:
    """The format asked for, else the one the --out file's name says (x.csv, x.json, x.parquet), else a table."""
    named = SUFFIXES.get(out.suffix.lower()) if out is not None else None
    if fmt is None:
        return named or "table"
    if named is not None and named != fmt:
        raise AtlasError(f"--out '{out}': the name says {named} but --format is {fmt}")
    return fmt


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _unique(names: list[str]) -> list[str]:
    """Column names made unique (``x``, ``x_2``, ...), as JSON objects and Parquet files need."""
    seen: set[str] = set()
    out = []
    for name in names:
        candidate, k = name, 1
        while candidate in seen:
            k += 1
            candidate = f"{name}_{k}"
        seen.add(candidate)
        out.append(candidate)
    return out


def _text(column: str, kind: str) -> str:
    """SQL for a column's value as text: JSON text for nested values, DuckDB's own text for the rest."""
    return f"to_json({column})::VARCHAR" if kind in _NESTED else f"{column}::VARCHAR"


def _csv_cell(column: str, kind: str) -> str:
    text = _text(column, kind)
    return (
        f"CASE WHEN {column} IS NULL THEN '' WHEN regexp_matches({text}, '[\",\\r\\n]|^\\s|\\s$') "
        f"THEN '\"' || replace({text}, '\"', '\"\"') || '\"' ELSE {text} END"
    )


def _json_value(column: str, kind: str) -> str:
    """A column as JSON takes it: no NaN or infinity (null); a FLOAT as its shortest decimal (0.1, not
    0.10000000149011612)."""
    value = f"{column}::VARCHAR::DOUBLE" if kind == "float" else column
    return f"CASE WHEN isfinite({column}) THEN {value} END" if kind in _FLOATS else column


class Result:
    """A query result as a DuckDB relation, with its columns renamed to be unique."""

    def __init__(self, relation: duckdb.DuckDBPyRelation) -> None:
        self.names = list(relation.columns)
        self.kinds = [t.id for t in relation.types]
        self.unique = _unique(self.names)
        self.relation = relation.project(", ".join(f"#{i + 1} AS {_quote(u)}" for i, u in enumerate(self.unique)))
        self.columns = [_quote(u) for u in self.unique]

    def lines(self, expression: str) -> Iterator[list[str]]:
        """The rows as one text each (``expression`` over the columns), a batch at a time."""
        reader = self.relation.project(f"{expression} AS line").to_arrow_reader(BATCH_ROWS)
        for batch in reader:
            yield batch.column(0).to_pylist()

    def csv(self, sink: TextIO) -> int:
        sink.write(",".join(_csv_header(n) for n in self.names) + "\n")
        cells = ", ".join(_csv_cell(c, k) for c, k in zip(self.columns, self.kinds, strict=True))
        return _write_lines(sink, self.lines(f"concat_ws(',', {cells})" if cells else "''"), "", "\n", "")

    def json(self, sink: TextIO) -> int:
        fields = ", ".join(
            f"{_quote(u)} := {_json_value(c, k)}" for u, c, k in zip(self.unique, self.columns, self.kinds, strict=True)
        )
        rows = self.lines(f"to_json(struct_pack({fields}))::VARCHAR" if fields else "'{}'")
        return _write_lines(sink, rows, "[", ",\n", "]\n")

    def parquet(self, path: Path) -> int:
        """Write the values as they are, in batches (INTERVAL and UNION values as text: Arrow's Parquet writer
        has no such types)."""
        columns = ", ".join(
            f"{c}::VARCHAR AS {c}" if k in _AS_TEXT_IN_PARQUET else c
            for c, k in zip(self.columns, self.kinds, strict=True)
        )
        reader = self.relation.project(columns).to_arrow_reader(BATCH_ROWS)
        n = 0
        with pq.ParquetWriter(path, reader.schema, compression="zstd") as writer:
            for batch in reader:
                writer.write_batch(batch)
                n += batch.num_rows
        return n

    def table(self, limit: int, width: int) -> tuple[str, int]:
        """The first ``limit`` rows as a table at most ``width`` characters wide, what was left out, and the
        number of rows shown."""
        shown: list[list[str]] = []
        left_out = 0
        cells = ", ".join(
            f"{c}::DOUBLE" if k in _FLOATS else _text(c, k) for c, k in zip(self.columns, self.kinds, strict=True)
        )
        reader = self.relation.project(cells).to_arrow_reader(BATCH_ROWS) if cells else iter(())
        for batch in reader:
            take = max(0, min(batch.num_rows, limit - len(shown)))
            if take:
                columns = [batch.column(i).slice(0, take).to_pylist() for i in range(batch.num_columns)]
                shown.extend([_cell(v) for v in row] for row in zip(*columns, strict=True))
            left_out += batch.num_rows - take
        numeric = [k in _NUMBERS or k in {"hugeint", "uhugeint", "decimal"} for k in self.kinds]
        text = render_table(self.names, shown, numeric, width)
        if left_out:
            rows = "row" if left_out == 1 else "rows"
            text += f"\n{left_out:,} more {rows} not shown (--limit N shows more; --format csv writes them all)"
        return text, len(shown)


def _csv_header(name: str) -> str:
    needs = any(ch in name for ch in ',"\r\n') or name != name.strip()
    return '"' + name.replace('"', '""') + '"' if needs else name


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return str(value)
        return f"{value:.4f}" if value == 0 or 1e-3 <= abs(value) < 1e12 else f"{value:.3e}"
    return str(value).replace("\n", " ")


def _write_lines(sink: TextIO, batches: Iterator[list[str]], start: str, sep: str, end: str) -> int:
    n = 0
    sink.write(start)
    for lines in batches:
        if lines:
            if n and sep != "\n":
                sink.write(sep)
            sink.write(sep.join(lines))
            if sep == "\n":
                sink.write("\n")
            n += len(lines)
    sink.write(end)
    return n


def render_table(names: list[str], rows: list[list[str]], numeric: list[bool], width: int) -> str:
    """A box table of text cells, numbers right-aligned, columns cut (with …) or left out to fit ``width``."""
    widths = [max([len(name), *(len(r[i]) for r in rows)]) for i, name in enumerate(names)]
    keep = len(names)

    def total(n: int) -> int:
        return sum(widths[:n]) + 3 * n + 1

    while total(keep) > width:
        widest = max(range(keep), key=lambda i: widths[i])
        if widths[widest] > _MIN_WIDTH:
            widths[widest] -= 1  # the widest column gives up a character, until every column is as narrow
        elif keep > 1:
            keep -= 1
        else:
            break

    def fit(text: str, i: int) -> str:
        text = text if len(text) <= widths[i] else text[: widths[i] - 1] + "…"
        return text.rjust(widths[i]) if numeric[i] else text.ljust(widths[i])

    def line(left: str, mid: str, right: str) -> str:
        return left + mid.join("─" * (widths[i] + 2) for i in range(keep)) + right

    out = [line("┌", "┬", "┐"), "│ " + " │ ".join(fit(names[i], i).ljust(widths[i]) for i in range(keep)) + " │"]
    out.append(line("╞", "╪", "╡").replace("─", "═"))
    out += ["│ " + " │ ".join(fit(r[i], i) for i in range(keep)) + " │" for r in rows]
    out.append(line("└", "┴", "┘"))
    if keep < len(names):
        note = f"{len(names) - keep} more columns not shown (--format csv shows them): {', '.join(names[keep:])}"
        out.append(note if len(note) <= width else note[: width - 1] + "…")
    return "\n".join(out)


def terminal_width() -> int:
    return shutil.get_terminal_size((120, 24)).columns


def emit(
    result: duckdb.DuckDBPyRelation | pl.DataFrame, fmt: str | None, out: Path | None, limit: int | None = None
) -> None:
    """Print a result (or write it to ``out``, atomically) in the format asked for or named by ``out``."""
    fmt = output_format(fmt, out)
    if isinstance(result, pl.DataFrame):
        result = duckdb.connect().from_arrow(result.to_arrow())
    res = Result(result if limit is None or fmt == "table" else result.limit(limit))
    if fmt == "parquet" and out is None:
        raise AtlasError("--format parquet needs --out FILE")
    if out is None:
        sink = sys.stdout
        if fmt == "table":
            click.echo(res.table(limit or TABLE_ROWS, terminal_width())[0])
        else:
            getattr(res, fmt)(sink)
            sink.flush()
        return
    if not out.parent.is_dir():
        raise AtlasError(f"--out '{out}': the folder '{out.parent}' does not exist")
    if out.is_dir():
        raise AtlasError(f"--out '{out}': is a folder; name a file")
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        if fmt == "parquet":
            n = res.parquet(tmp)
        elif fmt == "table":
            text, n = res.table(limit or TABLE_ROWS, 10**6)
            tmp.write_text(text + "\n")
        else:
            with tmp.open("w", encoding="utf-8", newline="") as sink:
                n = getattr(res, fmt)(sink)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    click.echo(f"wrote {n:,} rows to {out}", err=True)
