"""Results in every format: every DuckDB type comes out (text for tables and CSV, JSON values in JSON,
the values themselves in Parquet); tables fit the width and say what they leave out; memory stays
bounded for a result of any size."""

from __future__ import annotations

import csv
import io
import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import duckdb
import polars as pl
import pytest
from click.testing import CliRunner

from atlas.cli import cli
from atlas.errors import AtlasError
from atlas.output import Result, emit, output_format, render_table

ROOT = Path(__file__).resolve().parent.parent

EVERY_TYPE = """
SELECT i, [i, 2] AS list, {'a': i, 'b': 'x'} AS struct, MAP {'k': i} AS map, '\\xAA\\x00'::BLOB AS blob,
       INTERVAL 3 DAY + INTERVAL 2 HOUR AS interval, 170141183460469231731687303715884105727::HUGEINT AS huge,
       3::UHUGEINT AS uhuge, 'nan'::DOUBLE AS nan, 'inf'::FLOAT AS inf, NULL::INTEGER AS nothing,
       TIME '12:00' AS time, TIMESTAMPTZ '2020-01-01 00:00:00+00' AS tz, DATE '2020-01-01' AS date,
       1.5::DECIMAL(10, 2) AS dec, 'x'::ENUM('x', 'y') AS enum, [1, 2]::INTEGER[2] AS array,
       union_value(k := 1) AS "union", '00000000-0000-0000-0000-000000000001'::UUID AS uuid,
       'a,"b' || chr(10) || 'c' AS text, true AS bool, '101'::BIT AS bit, {'x': [1.5, NULL]} AS nested,
       0.1::FLOAT AS f32, 1 AS dup, 2 AS dup
FROM range(3) t(i)
"""


@pytest.fixture
def result() -> Result:
    return Result(duckdb.connect().sql(EVERY_TYPE))


def test_every_type_as_csv(result):
    sink = io.StringIO()
    assert result.csv(sink) == 3
    rows = list(csv.reader(io.StringIO(sink.getvalue())))
    header, first = rows[0], dict(zip(rows[0][:-2], rows[1][:-2], strict=True))
    assert header[-2:] == ["dup", "dup"] and len(rows) == 4
    assert json.loads(first["list"]) == [0, 2] and json.loads(first["struct"]) == {"a": 0, "b": "x"}
    assert json.loads(first["map"]) == {"k": 0} and json.loads(first["nested"]) == {"x": [1.5, None]}
    assert first["huge"] == "170141183460469231731687303715884105727" and first["interval"] == "3 days 02:00:00"
    assert first["nothing"] == "" and first["text"] == 'a,"b\nc' and first["f32"] == "0.1"
    assert first["blob"] == "\\xAA\\x00" and first["uuid"].endswith("0001") and first["bool"] == "true"
    assert first["nan"] == "nan" and first["inf"] == "inf"


def test_a_negative_nan_is_written_as_every_nan_is():
    """0/0 and -NaN: DuckDB's text is '-nan'; the CSV says 'nan', as the table does."""
    sink = io.StringIO()
    Result(duckdb.connect().sql("SELECT -('nan'::DOUBLE) AS x, -('nan'::FLOAT) AS y")).csv(sink)
    assert sink.getvalue() == "x,y\nnan,nan\n"


def test_every_type_as_json(result):
    sink = io.StringIO()
    assert result.json(sink) == 3
    rows = json.loads(sink.getvalue())
    assert len(rows) == 3 and rows[2]["i"] == 2
    first = rows[0]
    assert first["list"] == [0, 2] and first["map"] == {"k": 0} and first["array"] == [1, 2]
    assert first["huge"] == 170141183460469231731687303715884105727 and first["dec"] == 1.5
    assert first["nan"] is None and first["inf"] is None and first["nothing"] is None  # JSON has no NaN
    assert first["f32"] == 0.1 and first["dup"] == 1 and first["dup_2"] == 2


def test_every_type_as_parquet(result, tmp_path):
    out = tmp_path / "r.parquet"
    assert result.parquet(out) == 3
    con = duckdb.connect()
    types = dict(con.execute(f"SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM '{out}')").fetchall())
    assert types["list"] == "BIGINT[]" and types["map"].startswith("MAP") and types["huge"] == "DECIMAL(38,0)"
    assert types["struct"].startswith("STRUCT") and types["tz"] == "TIMESTAMP WITH TIME ZONE"
    row = con.execute(f"SELECT list, \"interval\", huge, nested FROM '{out}' WHERE i = 1").fetchone()
    assert row == ([1, 2], "3 days 02:00:00", 170141183460469231731687303715884105727, {"x": [1.5, None]})


def test_every_type_as_a_table(result):
    text, shown = result.table(2, 10_000)
    lines = text.splitlines()
    assert shown == 2 and lines[-1].startswith("1 more row not shown")
    assert "[0,2]" in lines[3] and "170141183460469231731687303715884105727" in lines[3]
    assert "│ nan" in lines[3] or "nan │" in lines[3]


def test_table_fits_the_width_and_null_cells_are_blank():
    rows = [["a " * 25, "", "1.0000"], ["b", "x", "22.0000"]]
    text = render_table(["long", "maybe", "num"], rows, [False, False, True], 40)
    lines = text.splitlines()
    assert all(len(line) <= 40 for line in lines) and len(lines[0]) == 40  # the whole width, no more
    assert "null" not in text and "│       │" in text.replace("│ x     │", "")
    assert text.split().count("a") == 25 and "…" not in text  # the long text wraps onto more lines, whole
    assert "│  1.0000 │" in text and "│ 22.0000 │" in text and "│     num │" in text  # numbers to the right


def test_format_from_the_file_name(tmp_path):
    assert output_format(None, tmp_path / "x.parquet") == "parquet"
    assert output_format(None, tmp_path / "x.CSV") == "csv"
    assert output_format(None, None) == "table" and output_format("json", tmp_path / "x.dat") == "json"
    with pytest.raises(AtlasError, match="the name says parquet but --format is csv"):
        output_format("csv", tmp_path / "x.parquet")


def _peak_rss_mb(*args: str) -> float:
    code = (
        "import resource, sys; from atlas.cli import cli; sys.argv = ['atlas', *sys.argv[1:]]\n"
        "try:\n    cli(prog_name='atlas')\nexcept SystemExit:\n    pass\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, check=True)
    return float(done.stderr.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def store_with_a_run(tmp_path_factory) -> Path:
    """An empty store is enough for SQL over range(): the sandbox allows table functions without files."""
    from atlas.store import Store

    store = Store(tmp_path_factory.mktemp("output") / "store")
    store.create()
    return store.root


def test_memory_stays_bounded_for_a_large_result(store_with_a_run, tmp_path):
    small = _peak_rss_mb(
        "sql",
        "SELECT range AS i, range * 0.5 AS x FROM range(10)",
        "--store",
        str(store_with_a_run),
        "--format",
        "csv",
        "--out",
        str(tmp_path / "small.csv"),
    )
    big_sql = "SELECT range AS i, range * 0.5 AS x, 'row ' || range AS t FROM range(2000000)"
    big = _peak_rss_mb("sql", big_sql, "--store", str(store_with_a_run), "--out", str(tmp_path / "big.csv"))
    table = _peak_rss_mb("sql", big_sql, "--store", str(store_with_a_run))
    parquet = _peak_rss_mb("sql", big_sql, "--store", str(store_with_a_run), "--out", str(tmp_path / "big.parquet"))
    # the result is ~60 MB of CSV (and more held as rows); batches keep the process within a few tens of MB
    assert (tmp_path / "big.csv").stat().st_size > 50_000_000
    assert max(big, table, parquet) - small < 50, (small, big, table, parquet)


def test_table_says_how_many_rows_were_left_out(store_with_a_run):
    result = CliRunner().invoke(cli, ["sql", "SELECT * FROM range(1000)", "--store", str(store_with_a_run)])
    assert result.exit_code == 0 and "960 more rows not shown" in result.output
    assert len([line for line in result.stdout.splitlines() if line.startswith("│")]) == 41  # header + 40
    result = CliRunner().invoke(
        cli, ["sql", "SELECT * FROM range(1000)", "--store", str(store_with_a_run), "--limit", "5", "--format", "csv"]
    )
    assert result.stdout.split() == ["range", "0", "1", "2", "3", "4"]
    result = CliRunner().invoke(
        cli, ["sql", "SELECT * FROM range(1000)", "--store", str(store_with_a_run), "--limit", "5"]
    )
    # with --limit a file holds the limit too: the note says how to write them all
    assert result.exit_code == 0 and "995 more rows not shown (without --limit, --format csv writes them all)" in (
        result.output
    )


def test_a_table_stops_counting_what_it_leaves_out():
    """It read every row to count them: a --limit 2 over an endless result never ended."""
    text, shown = Result(duckdb.connect().sql("SELECT range FROM range(100000000000)")).table(2, 80, asked=True)
    note = "over 1,000,000 more rows not shown (without --limit, --format csv writes them all)"
    assert shown == 2 and " ".join(text.split()).endswith(note)  # wrapped at 80 characters


def test_a_table_written_to_a_file_holds_every_row(store_with_a_run, tmp_path):
    """--out x.txt writes the table whole, not the terminal's first 40 rows; --limit still cuts it."""
    out = tmp_path / "t.txt"
    result = CliRunner().invoke(
        cli, ["sql", "SELECT * FROM range(1000)", "--store", str(store_with_a_run), "--out", str(out)]
    )
    lines = out.read_text().splitlines()
    assert result.exit_code == 0 and "wrote 1,000 rows" in result.output
    assert len([line for line in lines if line.startswith("│")]) == 1001 and "not shown" not in out.read_text()
    CliRunner().invoke(
        cli, ["sql", "SELECT * FROM range(1000)", "--store", str(store_with_a_run), "--out", str(out), "--limit", "3"]
    )
    assert len([line for line in out.read_text().splitlines() if line.startswith("│")]) == 4


RUN_P = "en_ewt-ud-dev__bert-base-uncased__a3f9c2b1d0"  # two runs of one corpus and model: only the hash differs
RUN_R = "en_ewt-ud-dev__bert-base-uncased__77e1f0a2b3"


def _table(frame: pl.DataFrame, width: int, limit: int = 40) -> str:
    """``frame`` as ``atlas`` prints it on a terminal ``width`` characters wide."""
    return Result(duckdb.connect().from_arrow(frame.to_arrow())).table(limit, width)[0]


def _headers(text: str) -> list[str]:
    """The column names a box table shows (its second line)."""
    return [cell.strip() for cell in text.splitlines()[1].strip("│").split("│")]


def _comparison() -> pl.DataFrame:
    """Like ``atlas query entropy --run P --compare R``: per value column one column per run and the difference."""
    n = 12
    return pl.DataFrame(
        {
            "layer": [1 + i // 4 for i in range(n)],
            "head": [1 + i % 4 for i in range(n)],
            f"entropy@{RUN_P}": [2.5 + i / 7 for i in range(n)],
            f"entropy@{RUN_R}": [2.4 + i / 9 for i in range(n)],
            f"entropy_diff@{RUN_R}": [-0.1 - i / 63 for i in range(n)],
        }
    )


@pytest.mark.parametrize("width", [60, 80, 100, 120, 250])
def test_comparison_columns_stay_distinct_and_name_their_runs_in_full(width):
    frame = _comparison()
    text = _table(frame, width)
    assert all(len(line) <= width for line in text.splitlines()), width
    assert RUN_P in text and RUN_R in text  # every run id whole, in a header or below the table
    if text.startswith("┌"):
        headers = _headers(text)
        assert len(headers) == len(frame.columns) == len(set(headers)), headers
        for header, name in zip(headers, frame.columns, strict=True):
            assert header == name or ("…" in header and f"\n  {header}" in text), (header, name)  # and in full
            if "@" in name:  # the run's column keeps its own name and the run id's last characters
                assert header.startswith(name.split("@")[0] + "@") and header[-4:] == name[-4:], header
        assert "2.5000" in text and "-0.1000" in text  # the numbers whole
    else:
        assert f"entropy_diff@{RUN_R}:" in text


def test_a_comparison_on_a_common_terminal_is_a_table():
    text = _table(_comparison(), 80)
    assert text.startswith("┌") and len(text.splitlines()[0]) == 80  # the whole width
    assert _headers(text)[2:] == ["entropy@en…c2b1d0", "entropy@en…f0a2b3", "entropy_diff@en…0a2b3"]
    legend = text.split("column names cut above, in full:\n")[1]
    assert legend.startswith(f"  entropy@en…c2b1d0      entropy@{RUN_P}\n  entropy@en…f0a2b3      entropy@{RUN_R}\n")
    assert legend.endswith(f"\n  entropy_diff@en…0a2b3\n    entropy_diff@{RUN_R}")  # too long for one line: two


def test_headers_cut_alike_keep_characters_until_they_differ():
    names = [f"score@{'x' * 30}{k}{'y' * 12}" for k in "abc"]  # differ in the middle only
    text = render_table(names, [["1", "2", "3"]], [True] * 3, 100)
    headers = _headers(text)
    assert len(set(headers)) == 3 and all(len(line) <= 100 for line in text.splitlines()), headers
    assert all("…" in header for header in headers) and all(name in text for name in names)
    narrow = render_table(names, [["1", "2", "3"]], [True] * 3, 70)  # too narrow to tell them apart: records
    assert narrow.splitlines() == [f"{name}: {k}" for name, k in zip(names, "123", strict=True)]
    twins = render_table(["x", "x"], [["1", "2"]], [True, True], 40)
    assert len(set(_headers(twins))) == 2


def test_columns_of_one_value_are_said_once_where_the_table_would_not_fit_else():
    """A comparison of a decoder entry at 100 columns: its constant counts above a table of the rest, not records."""
    names = ["layer", "head", "score@A", "score@B", "score_diff@B", "ceiling@A", "ceiling@B", "ceiling_diff@B",
             "n_inputs@A", "n_inputs@B", "n_inputs_diff@B"]  # fmt: skip
    rows = [[str(i // 4 + 1), str(i % 4 + 1), f"0.47{i}8", f"0.009{i}", f"-0.46{i}4", "0.5307", "0.5307", "0.0",
             "10", "10", "0"] for i in range(8)]  # fmt: skip
    numeric = [True] * len(names)
    text = render_table(names, rows, numeric, 100)
    lines = text.splitlines()
    said = "in every row shown: ceiling@A: 0.5307, ceiling@B: 0.5307, ceiling_diff@B: 0.0, n_inputs@A: 10,"
    assert lines[0] == said and lines[1] == "n_inputs@B: 10, n_inputs_diff@B: 0" and lines[2].startswith("┌")
    assert _headers("\n".join(lines[2:])) == names[:5] and all(len(line) <= 100 for line in lines)
    assert len(lines) == 2 + 4 + len(rows)  # the two lines, the table's borders and header, a line per row
    assert render_table(names, rows[:1], numeric, 100).startswith("layer:")  # one row: every column is constant
    wide = render_table(names, rows, numeric, 150)
    assert wide.startswith("┌") and _headers(wide) == names  # it fits whole: nothing taken out


def _catalogue() -> pl.DataFrame:
    """Like ``atlas queries``: short names, long texts."""
    words = "attention heads over dependency relations coreference sinks entropy patterns".split()
    rows = []
    for i in range(6):
        rows.append(
            {
                "name": f"entry number {i}",
                "aliases": ", ".join(f"{words[(i + k) % len(words)]} {k}" for k in range(12)),
                "paper": f'Author{i} et al. 2019, "What Does BERT Look At? An Analysis of Attention", Section {i}',
                "parameters": ", ".join(f"param_{k}=value_{i}_{k}" for k in range(6)),
                "macro": f"FROM entry_number_{i}(" + ", ".join(f"param_{k} := 'value_{i}_{k}'" for k in range(6)) + ")",
            }
        )
    return pl.DataFrame(rows)


@pytest.mark.parametrize("width", [250, 120, 80])
def test_long_text_wraps_and_nothing_is_cut(width):
    frame = _catalogue()
    text = _table(frame, width)
    assert all(len(line) <= width for line in text.splitlines()), width
    assert "…" not in text  # no cell and no column name cut
    shown = text.split()
    for row in frame.iter_rows():
        for cell in row:
            for word in cell.split():  # every word of every cell whole
                assert any(word in piece for piece in shown), (width, word)
    if width == 250:  # the columns fit when their text wraps: a table using the whole width
        assert text.startswith("┌") and len(text.splitlines()[0]) == 250
        assert _headers(text) == frame.columns


def _pattern_shares() -> pl.DataFrame:
    """Like ``atlas query "pattern shares"``: run ids, corpus, model and label beside many numbers."""
    rows = []
    for run in (RUN_P, RUN_R):
        for layer in range(3):
            rows.append(
                {
                    "run_id": run,
                    "method": "rule",
                    "corpus": "en_ewt-ud-dev",
                    "model": "google-bert/bert-base-uncased",
                    "label": "en_ewt-ud-dev bert-base-uncased rule",
                    "layer": layer + 1,
                    **{p: 12.5 * (layer + 1) for p in ("vertical", "diagonal", "vertical_diagonal", "block")},
                    "heterogeneous": 50.0,
                    "n_maps": 1200,
                }
            )
    return pl.DataFrame(rows)


@pytest.mark.parametrize("width", [60, 120, 250])
def test_run_ids_corpora_models_and_labels_are_shown_whole(width):
    text = _table(_pattern_shares(), width)
    assert all(len(line) <= width for line in text.splitlines()), width
    for value in (RUN_P, RUN_R, "en_ewt-ud-dev", "google-bert/bert-base-uncased", "heterogeneous", "vertical_diagonal"):
        assert value in text, (width, value)
    assert "bert-base-uncased rule" in text or "bert-base-uncased\n" in text  # the label whole or wrapped at a space


def test_columns_too_many_for_the_width_come_as_records():
    names = [f"c{i}" for i in range(30)]
    text = render_table(names, [[f"value{r}"] * 30 for r in range(2)], [False] * 30, 50)
    assert all(len(line) <= 50 for line in text.splitlines())
    first, second = text.split("\n\n")  # one record per row, parted by a blank line
    assert first.splitlines() == [f"{name}:".ljust(5) + "value0" for name in names]
    assert second.splitlines()[-1] == "c29: value1"
    long_names = render_table([f"entropy_diff@{RUN_R}", "x"], [["-0.1234", "a" * 40]], [True, False], 60)
    assert long_names.splitlines() == [f"entropy_diff@{RUN_R}:", "  -0.1234", "x: " + "a" * 40]


def test_the_rows_left_out_note_fits_the_width():
    text, shown = Result(duckdb.connect().sql("SELECT * FROM range(100)")).table(5, 40)
    assert shown == 5 and all(len(line) <= 40 for line in text.splitlines()) and "95 more rows not shown" in text


def test_the_table_takes_the_width_from_columns(store_with_a_run):
    sql = f'SELECT 1 AS "entropy@{RUN_P}", 2 AS "entropy@{RUN_R}", repeat(\'word \', 40) AS text'
    for columns in ("90", "200"):
        result = CliRunner().invoke(cli, ["sql", sql, "--store", str(store_with_a_run)], env={"COLUMNS": columns})
        lines = result.stdout.splitlines()
        assert result.exit_code == 0 and len(lines[0]) == int(columns), result.output
        assert all(len(line) <= int(columns) for line in lines) and RUN_P in result.stdout


def test_no_rows_in_columns_wider_than_the_terminal():
    text = render_table(["a" * 40, "b" * 40, "c" * 40], [], [False, False, True], 30)
    assert text.startswith("no rows; the columns: ") and all(len(line) <= 30 for line in text.splitlines())


def test_out_through_a_symlink_replaces_the_file_it_names(tmp_path):
    target = tmp_path / "real.csv"
    target.write_text("old\n")
    link = tmp_path / "link.csv"
    link.symlink_to(target)
    emit(pl.DataFrame({"x": [42]}), None, link)
    assert link.is_symlink() and target.read_text() == "x\n42\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.csv", "real.csv"]


def test_out_a_pipe_is_written_not_replaced(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    emit(pl.DataFrame({"x": [1, 2]}), "csv", fifo)
    reader.join(timeout=30)
    assert got == [b"x\n1\n2\n"] and stat.S_ISFIFO(fifo.stat().st_mode)


def test_a_float_column_drops_the_zeros_all_its_numbers_end_in():
    """38.33 not 38.3300 (the entries round their percentages to 2 places); aligned, at least one decimal."""
    sql = "SELECT * FROM (VALUES (38.33::DOUBLE, 1.0::DOUBLE, 0.12345::DOUBLE), (7.4, 2.0, 1.0)) t(a, b, c)"
    text, _ = Result(duckdb.connect().sql(sql)).table(10, 80)
    assert "│ 38.33 │ 1.0 │ 0.1235 │" in text and "│  7.40 │ 2.0 │ 1.0000 │" in text


def test_column_names_of_short_parts_wrap_rather_than_the_rows_turning_to_records():
    """A comparison's columns as the terminal names them (col@A) wrap after '_' and before '@' onto up to three
    header lines, where cut or whole they would not fit: the answer stays a table, every name whole."""
    names = ["layer", "head"] + [f"{c}{s}" for c in ("entropy", "cls_entropy", "uniform_entropy")
                                 for s in ("@A", "@B", "_diff@B")]  # fmt: skip
    rows = [["1", "1", *(["2.2473", "2.2473", "-1.378e-06"] * 3)], ["12", "12", *(["0.0072", "0.0072", "0.0"] * 3)]]
    text = render_table(names, rows, [True] * len(names), 120)
    lines = text.splitlines()
    assert lines[0].startswith("┌") and all(len(line) <= 120 for line in lines), text
    body = lines.index(next(line for line in lines if line.startswith("╞")))
    header = [[cell.strip() for cell in line.strip("│").split("│")] for line in lines[1:body]]
    assert 2 <= len(header) <= 3 and "…" not in text and "column names cut" not in text
    assert ["".join(parts) for parts in zip(*header, strict=True)] == names  # each name whole, read down its column
    assert render_table(names, rows, [True] * len(names), 100).startswith("layer:")  # narrower still: records
