"""Results in every format: every DuckDB type comes out (text for tables and CSV, JSON values in JSON,
the values themselves in Parquet); tables fit the width and say what they leave out; memory stays
bounded for a result of any size."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from atlas.cli import cli
from atlas.errors import AtlasError
from atlas.output import Result, output_format, render_table

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
    rows = [["a" * 50, "", "1.0000"], ["b", "x", "22.0000"]]
    text = render_table(["long", "maybe", "num"], rows, [False, False, True], 40)
    assert all(len(line) <= 40 for line in text.splitlines())
    assert "…" in text and "null" not in text and "│       │" in text.replace("│ x     │", "")
    narrow = render_table([f"c{i}" for i in range(30)], [["value"] * 30], [False] * 30, 50)
    assert all(len(line) <= 50 for line in narrow.splitlines()) and "more columns not shown" in narrow


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
