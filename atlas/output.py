"""Printing and writing results: a terminal table, CSV, JSON or Parquet, for any DuckDB type and any size.

Rows stream from DuckDB in batches, so memory stays bounded whatever the result's size. DuckDB turns
every value into text (lists, structs and maps as JSON text; BLOB, INTERVAL, HUGEINT, ... as DuckDB
writes them), so every type comes out in every format:

- table: the first ``limit`` rows in the terminal's width, nulls blank, and a line saying how many rows
  were left out (counted up to a million: a result may be endless). Nothing the reader needs is cut: long
  text wraps inside its column, a long column name is cut in its middle (the names stay distinct and are
  given in full below the table), and where the columns do not fit even so, each row is printed as a
  record, one ``column: value`` line each;
- csv: a header and one line per row (quoted only where needed, nulls empty);
- json: an array of row objects (NaN and infinities as null, which JSON cannot hold);
- parquet: the values as they are (a file only; INTERVAL and UNION as text).
"""

from __future__ import annotations

import re
import shutil
import sys
import textwrap
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import click
import duckdb
import polars as pl
import pyarrow.parquet as pq

from atlas.errors import AtlasError
from atlas.files import check_writable, replacing

FORMATS = ("table", "csv", "json", "parquet")
SUFFIXES = {".csv": "csv", ".json": "json", ".parquet": "parquet", ".txt": "table"}
TABLE_ROWS = 40  # rows a terminal table shows unless --limit says otherwise
FILE_TABLE_ROWS = 100_000  # rows a table written to a file holds unless --limit says otherwise (held to align them)
BATCH_ROWS = 16_384
_FIXED = re.compile(r"-?\d+\.\d{4}")  # a float cell in fixed point (``_cell``)
COUNTED_ROWS = 1_000_000  # rows a table counts beyond those it shows, to say how many it left out
_NESTED = {"list", "struct", "map", "array", "union"}
_FLOATS = {"float", "double"}
_AS_TEXT_IN_PARQUET = {"interval", "union"}
_NUMBERS = _FLOATS | {"tinyint", "smallint", "integer", "bigint", "utinyint", "usmallint", "uinteger", "ubigint"}
_TEXT_MIN = 16  # narrowest a text column is wrapped to (wider where a word of it is longer: words stay whole)
_NAME_MIN = 12  # shortest a column name is cut to, ...
_RUN_KEEP = 7  # ... and a name col@run to no less than col@ and this many characters of the run id
_SMALLEST = 20  # the narrowest width a table is laid out for
_HEADER_LINES = 3  # a column name wraps onto at most this many lines (after '_' and '@') before it is cut


def output_format(fmt: str | None, out: Path | None) -> str:
    """The format asked for, else the one the --out file's name says (x.csv, x.json, x.parquet, x.txt), else (no
    --out) a table; an --out file whose name says none is refused without --format (a text table of rounded numbers
    written to 'x.pq' or 'x.tsv' would pass for the data), but not a pipe or a device (/dev/stdout: a table)."""
    named = SUFFIXES.get(out.suffix.lower()) if out is not None else None
    stream = out is not None and out.exists() and (not out.is_file() or out.parts[:2] == ("/", "dev"))
    if fmt is None and out is not None and named is None and not stream:
        endings = ", ".join(SUFFIXES)
        raise AtlasError(f"--out '{out}': the name ends in none of {endings}; name one, or give --format")
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
    if kind in _FLOATS:  # one NaN, as the table prints it (DuckDB writes a negative NaN '-nan')
        text = f"CASE WHEN isnan({column}) THEN 'nan' ELSE {text} END"
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

    def table(self, limit: int, width: int, asked: bool = False) -> tuple[str, int]:
        """The first ``limit`` rows as a table at most ``width`` characters wide, what was left out, and the
        number of rows shown (``asked``: the limit is the user's, so the note does not suggest one)."""
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
            if left_out > COUNTED_ROWS:  # not read to its end to count it: the result may be endless
                break
        for i, kind in enumerate(self.kinds):
            if kind in _FLOATS:
                _fewer_decimals(shown, i)
        numeric = [k in _NUMBERS or k in {"hugeint", "uhugeint", "decimal"} for k in self.kinds]
        text = render_table(self.names, shown, numeric, width)
        if left_out:
            rows = "row" if left_out == 1 else "rows"
            many = f"over {COUNTED_ROWS:,}" if left_out > COUNTED_ROWS else f"{left_out:,}"
            more = "without --limit, " if asked else "--limit N shows more; "  # a file holds the --limit given too
            note = f"{many} more {rows} not shown ({more}--format csv writes them all)"
            text += "\n" + "\n".join(_wrap(note, max(width, _SMALLEST)))
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
    return " ".join(str(value).splitlines()).replace("\t", " ")  # one line: a table wraps it itself


def _fewer_decimals(rows: list[list[str]], column: int) -> None:
    """Drop the trailing zeros every fixed-point cell of a float column has (38.3300 and 7.4300 as 38.33 and
    7.43), keeping one decimal, so that a column's numbers stay aligned and the table narrower."""
    cells = [row[column] for row in rows if _FIXED.fullmatch(row[column])]
    if cells:
        zeros = min(min(len(c) - len(c.rstrip("0")) for c in cells), 3)
        if zeros:
            for row in rows:
                if _FIXED.fullmatch(row[column]):
                    row[column] = row[column][:-zeros]


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
    """A box table of text cells, numbers right-aligned, at most ``width`` characters wide (``names``: the column
    names; ``rows``: each row's cells as text; ``numeric``: per column, whether it holds numbers).

    Columns wider than their share of ``width`` give up characters, the widest first: long text wraps onto more
    lines (at spaces; a word is never split), a long column name of short parts wraps onto up to three lines
    after its '_' and before its '@' (``cls_entropy_`` over ``diff@B``), and any other is cut in its middle,
    keeping its start and its end (``entropy@en…c2b1d0``) and as much more as it takes to tell it from every
    other name; the names cut are given in full below the table. Where the columns do not fit even so, those that
    hold one value in every row shown (of two or more) are said once above the table of the others, where that
    fits (``n_inputs@A: 3``); else the rows are printed as records (see ``render_records``): no column is left
    out and no value cut."""
    names = _unique(names)
    fitted = _fitted(names, rows, numeric, width)
    if fitted is not None:
        return fitted
    same = [i for i in range(len(names)) if len(rows) > 1 and len({r[i] for r in rows}) == 1]
    rest = [i for i in range(len(names)) if i not in same]
    if same and rest:
        kept = [[r[i] for i in rest] for r in rows]
        fitted = _fitted([names[i] for i in rest], kept, [numeric[i] for i in rest], width)
        if fitted is not None:
            said = "in every row shown: " + ", ".join(f"{names[i]}: {rows[0][i]}" for i in same)
            return "\n".join([*_wrap(said, max(width, _SMALLEST)), fitted])
    return render_records(names, rows, width)


def _fitted(names: list[str], rows: list[list[str]], numeric: list[bool], width: int) -> str | None:
    """``render_table``'s table of these columns, None where they do not fit ``width``."""
    natural = [max([len(name), *(len(r[i]) for r in rows)]) for i, name in enumerate(names)]
    room = width - 3 * len(names) - 1  # the columns' own width: the rest is borders and padding
    if sum(natural) <= room:
        return _boxed(names, rows, numeric, natural)
    floors = [_floor(name, [r[i] for r in rows], numeric[i]) for i, name in enumerate(names)]
    while True:
        widths = _fill(natural, floors, room)
        if widths is None:
            return None
        shown = [name if _name_lines(name, w) else _short(name, w) for name, w in zip(names, widths, strict=True)]
        seen = Counter(shown)
        clashes = [i for i, short in enumerate(shown) if seen[short] > 1 and short != names[i]]
        if not clashes:
            break
        for i in clashes:  # a cut name that reads like another: it keeps one more character
            floors[i] = widths[i] + 1
    text = _boxed(shown, rows, numeric, widths)
    cut = [(short, name) for short, name in zip(shown, names, strict=True) if short != name]
    if cut:
        text += "\n" + "\n".join(_legend(cut, max(width, _SMALLEST)))
    return text


def render_records(names: list[str], rows: list[list[str]], width: int) -> str:
    """The rows as records, as for a table too wide for ``width``: one ``column: value`` line per column (a long
    value wraps onto more lines, indented under its start), the records parted by a blank line."""
    width = max(width, _SMALLEST)
    names = _unique(names)
    if not rows:
        return "\n".join(_wrap(f"no rows; the columns: {', '.join(names)}", width))
    label = max(len(name) for name in names) + 2  # "name: " with the values aligned after the longest
    records = []
    for row in rows:
        lines: list[str] = []
        for name, value in zip(names, row, strict=True):
            if label <= width // 2 and _longest_word(value) <= width - label:
                values = _wrap(value, width - label)
                lines += [f"{name}:".ljust(label) + values[0], *(" " * label + v for v in values[1:])]
            elif len(name) + 2 + len(value) <= width:
                lines.append(f"{name}: {value}")
            else:  # a name too long to align the value after, or a word too long: the value on lines of its own
                lines += _wrap(f"{name}:", width)
                lines += ["  " + v for v in _wrap(value, width - 2)] if value else []
        records.append("\n".join(line.rstrip() for line in lines))
    return "\n\n".join(records)


def _wrap(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` characters, broken at spaces; a word longer than a line is split."""
    if len(text) <= width:
        return [text]
    return textwrap.wrap(text, width, break_on_hyphens=False) or [""]


def _longest_word(text: str) -> int:
    return max((len(word) for word in text.split()), default=0)


def _short(name: str, width: int) -> str:
    """``name`` in at most ``width`` characters: cut in its middle (…), keeping its start and its end; a name
    ``col@run`` (a run's column in a comparison) keeps ``col@``, a third of what is left for the run id from
    its start and the rest from its end, where runs of one corpus and model differ (``entropy@en…c2b1d0``)."""
    if len(name) <= width:
        return name
    keep = width - 1
    at = name.rfind("@")
    rest = keep - (at + 1)
    head = at + 1 + rest // 3 if at >= 0 and rest >= 4 else (keep + 1) // 2
    tail = keep - head
    return name[:head] + "…" + (name[-tail:] if tail else "")


def _name_lines(name: str, width: int) -> list[str] | None:
    """``name`` on lines of at most ``width`` characters, broken after its '_' and before its '@'; None where it
    takes more than ``_HEADER_LINES`` lines, or has a part longer than ``_NAME_MIN`` (a run id: cut instead,
    ``_short``)."""
    if len(name) <= width:
        return [name]
    parts = re.findall(r"@?[^_@]+_*|[_@]+", name)  # cls_, entropy_, diff, @B
    if max(len(part) for part in parts) > min(width, _NAME_MIN):
        return None
    lines = [""]
    for part in parts:
        if len(lines[-1]) + len(part) > width:
            lines.append("")
        lines[-1] += part
    return lines if len(lines) <= _HEADER_LINES else None


def _floor(name: str, cells: list[str], numeric: bool) -> int:
    """The narrowest a column may be: its numbers whole, its words whole (text wraps to no fewer than
    ``_TEXT_MIN`` characters), its name wrapped (``_name_lines``) or cut to no fewer than ``_NAME_MIN``
    characters or, in a name col@run, ``col@`` and ``_RUN_KEEP`` characters of the run id."""
    widest = max((len(c) for c in cells), default=0)
    if numeric:
        content = widest
    else:
        content = min(widest, max(_TEXT_MIN, max((_longest_word(c) for c in cells), default=0)))
    at = name.rfind("@")
    run = at >= 0 and len(name) - at - 1 > _RUN_KEEP  # col@run, a run id longer than it keeps (not col@A)
    cut = min(len(name), max(_NAME_MIN, at + 1 + _RUN_KEEP if run else 0))
    wrapped = next((w for w in range(1, cut) if _name_lines(name, w)), cut)
    return max(content, wrapped)


def _fill(natural: list[int], floors: list[int], room: int) -> list[int] | None:
    """Column widths that fill ``room`` characters: each column its ``natural`` width, but no wider than a cap
    that the widest give up characters to (none below its floor); None when even the floors do not fit."""
    if sum(floors) > room:
        return None

    def used(cap: int) -> int:
        return sum(max(f, min(n, cap)) for n, f in zip(natural, floors, strict=True))

    low, high = 0, max(natural)  # used(low) <= room < used(high): the highest cap that fits is in [low, high)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if used(middle) <= room else (low, middle)
    widths = [max(f, min(n, low)) for n, f in zip(natural, floors, strict=True)]
    spare = room - sum(widths)
    for i in sorted(range(len(widths)), key=lambda i: widths[i] - natural[i]):  # the most cut first
        if spare and widths[i] < natural[i]:
            widths[i] += 1
            spare -= 1
    return widths


def _boxed(names: list[str], rows: list[list[str]], numeric: list[bool], widths: list[int]) -> str:
    """The box table of ``rows`` in columns of ``widths``, headed by ``names`` (no wider than their columns); a
    cell wider than its column wraps onto more lines, and rows of more than one line are parted by a rule."""

    def fit(text: str, i: int) -> str:
        return text.rjust(widths[i]) if numeric[i] else text.ljust(widths[i])

    def rule(left: str, mid: str, right: str, dash: str = "─") -> str:
        return left + mid.join(dash * (w + 2) for w in widths) + right

    out = [rule("┌", "┬", "┐")]
    header = [_name_lines(name, widths[i]) or [name] for i, name in enumerate(names)]
    for line in range(max((len(lines) for lines in header), default=1)):
        parts = (fit(lines[line] if line < len(lines) else "", i) for i, lines in enumerate(header))
        out.append("│ " + " │ ".join(parts) + " │")
    out.append(rule("╞", "╪", "╡", "═"))
    wrapped = [[_wrap(cell, widths[i]) for i, cell in enumerate(row)] for row in rows]
    tall = any(len(cell) > 1 for row in wrapped for cell in row)
    for k, row in enumerate(wrapped):
        if tall and k:
            out.append(rule("├", "┼", "┤"))
        for line in range(max((len(cell) for cell in row), default=1)):
            parts = (fit(cell[line] if line < len(cell) else "", i) for i, cell in enumerate(row))
            out.append("│ " + " │ ".join(parts) + " │")
    out.append(rule("└", "┴", "┘"))
    return "\n".join(out)


def _legend(cut: list[tuple[str, str]], width: int) -> list[str]:
    """Lines giving each cut column name (short, full) in full, each line at most ``width`` characters."""
    lines = _wrap("column names cut above, in full:", width)
    column = max(len(short) for short, _ in cut)  # the full names aligned after the longest cut one
    for short, name in cut:
        line = f"  {short.ljust(column)}  {name}"
        if len(line) <= width:
            lines.append(line)
        else:  # the full name on a line of its own, indented less where it needs the room
            indent = " " * max(0, min(4, width - len(name)))
            lines += [f"  {short}", *(indent + part for part in _wrap(name, width - len(indent)))]
    return lines


def terminal_width() -> int:
    return shutil.get_terminal_size((120, 24)).columns


def check_output(fmt: str | None, out: Path | None) -> str:
    """The format a result will be given in (``output_format``), refused before any work where it cannot be:
    Parquet without a file, a file that cannot be written."""
    fmt = output_format(fmt, out)
    if fmt == "parquet" and out is None:
        raise AtlasError("--format parquet needs --out FILE")
    if out is not None:
        check_writable(out, f"--out '{out}'")
    return fmt


def emit(
    result: duckdb.DuckDBPyRelation | pl.DataFrame, fmt: str | None, out: Path | None, limit: int | None = None
) -> None:
    """Print a result (or write it to ``out``, atomically) in the format asked for or named by ``out``."""
    fmt = check_output(fmt, out)
    if isinstance(result, pl.DataFrame):
        result = duckdb.connect().from_arrow(result.to_arrow())
    res = Result(result if limit is None or fmt == "table" else result.limit(limit))
    if out is None:
        sink = sys.stdout
        if fmt == "table":
            click.echo(res.table(limit or TABLE_ROWS, terminal_width(), asked=limit is not None)[0])
        else:
            getattr(res, fmt)(sink)
            sink.flush()
        return
    with replacing(out, f"--out '{out}'") as tmp:
        if fmt == "parquet":
            n = res.parquet(tmp)
        elif fmt == "table":
            text, n = res.table(limit or FILE_TABLE_ROWS, 10**6, asked=limit is not None)
            tmp.write_text(text + "\n")
        else:
            with tmp.open("w", encoding="utf-8", newline="") as sink:
                n = getattr(res, fmt)(sink)
    click.echo(f"wrote {n:,} rows to {out}", err=True)
