"""The atlas command line: bad input gives one line and leaves the store as it was; the store opens
in the DuckDB CLI; SQL is read-only; export; the catalogue resolves phrases."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from cli import cli
from tests.conftest import EWT_SAMPLE, cut_conllu


def atlas(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def snapshot(root: Path) -> dict[str, str]:
    if not root.exists():
        return {}
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(root.rglob("*"))
    }


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cli") / "store"
    corpus = cut_conllu(EWT_SAMPLE, 12, root.parent / "tiny.conllu")
    result = atlas("ingest", "--corpus", str(corpus), "--store", str(root), "--quiet")
    assert result.exit_code == 0, result.output
    return root


BAD = {
    "columns": ("# sent_id = a\n1\tI\tI\tPRON\tPRP\t_\t0\troot\t_\n\n", "c.conllu:2: expected 10 tab-separated"),
    "head": ("# sent_id = a\n1\tI\tI\tPRON\tPRP\t_\tone\troot\t_\t_\n\n", "c.conllu:2: HEAD 'one' is not an integer"),
    "range": (
        "1\tI\tI\tPRON\tPRP\t_\t0\troot\t_\t_\n2\tgo\tgo\tVERB\tVB\t_\t5\txcomp\t_\t_\n\n",
        "c.conllu:2: HEAD 5 is out of range",
    ),
    "entity": ("1\tI\tI\tPRON\tPRP\t_\t0\troot\t_\tEntity=(e1\n\n", "c.conllu:1: Entity bracket '(e1' is never"),
    "empty": ("# just a comment\n\n", "c.conllu: the corpus holds no sentence"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_corpus_one_line_error_store_unchanged(store_dir, tmp_path, case):
    text, message = BAD[case]
    corpus = tmp_path / "c.conllu"
    corpus.write_text(text)
    before = snapshot(store_dir)
    result = atlas("ingest", "--corpus", str(corpus), "--store", str(store_dir))
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.output
    assert "Traceback" not in result.output
    assert snapshot(store_dir) == before


def test_missing_file_and_unknown_model(store_dir, tmp_path):
    before = snapshot(store_dir)
    result = atlas("ingest", "--corpus", str(tmp_path / "nope.conllu"), "--store", str(store_dir))
    assert result.exit_code == 1 and "nope.conllu: no such file" in result.output
    corpus = cut_conllu(EWT_SAMPLE, 2, tmp_path / "two.conllu")
    for model in ("no-such-org/no-such-model", str(tmp_path / "missing-dir")):
        result = atlas("ingest", "--corpus", str(corpus), "--model", model, "--store", str(store_dir))
        assert result.exit_code == 1, result.output
        assert f"--model '{model}'" in result.output and len(result.output.strip().splitlines()) == 1
    assert snapshot(store_dir) == before


def test_bad_input_creates_no_store(tmp_path):
    corpus = tmp_path / "c.conllu"
    corpus.write_text(BAD["head"][0])
    result = atlas("ingest", "--corpus", str(corpus), "--store", str(tmp_path / "new"))
    assert result.exit_code == 1 and not (tmp_path / "new").exists()


def test_reingest_is_a_no_op(store_dir):
    before = snapshot(store_dir)
    corpus = store_dir.parent / "tiny.conllu"
    result = atlas("ingest", "--corpus", str(corpus), "--store", str(store_dir), "--quiet")
    assert result.exit_code == 0 and "already in" in result.output
    assert snapshot(store_dir) == before


def test_duckdb_cli_reads_the_store(store_dir):
    duckdb_cli = shutil.which("duckdb", path=str(Path(sys.executable).parent)) or shutil.which("duckdb")
    assert duckdb_cli, "the DuckDB CLI (PyPI duckdb-cli) is a dev dependency"
    out = subprocess.run(
        [
            duckdb_cli,
            str(store_dir / "atlas.duckdb"),
            "-csv",
            "-noheader",
            "-c",
            "SELECT count(*) FROM attn_edges",
            "-c",
            "SELECT sum(n_edges) FROM runs",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out[0] == out[1] and int(out[0]) > 0


@pytest.mark.parametrize(
    "statement",
    [
        "DELETE FROM runs",
        "CREATE TABLE x AS SELECT 1",
        "COPY runs TO '/tmp/x.csv'",
        "DROP VIEW runs",
        "INSERT INTO atlas_meta VALUES ('a', 'b')",
        "SELECT 1; DELETE FROM runs",
    ],
)
def test_sql_refuses_statements_that_write(store_dir, statement):
    before = snapshot(store_dir)
    result = atlas("sql", statement, "--store", str(store_dir))
    assert result.exit_code == 1 and result.output.startswith("Error: sql: ")
    assert snapshot(store_dir) == before


def test_sql_select_and_formats(store_dir, tmp_path):
    result = atlas(
        "sql",
        "SELECT layer, count(*) AS n FROM attn_rows GROUP BY layer ORDER BY layer",
        "--store",
        str(store_dir),
        "--format",
        "csv",
    )
    lines = result.output.strip().splitlines()
    assert lines[0] == "layer,n" and len(lines) == 7
    out = tmp_path / "r.parquet"
    result = atlas("sql", "SELECT * FROM runs", "--store", str(store_dir), "--format", "parquet", "--out", str(out))
    assert result.exit_code == 0 and pq.read_table(out).num_rows == 1


def test_export_writes_every_table(store_dir, tmp_path):
    result = atlas("export", "--format", "parquet", "--out", str(tmp_path / "x"), "--store", str(store_dir))
    assert result.exit_code == 0, result.output
    names = {p.stem for p in (tmp_path / "x").glob("*.parquet")}
    assert {"runs", "examples", "tokens", "words", "mentions", "attn_edges", "attn_rows", "word_rows"} <= names
    assert pq.read_table(tmp_path / "x" / "examples.parquet").num_rows == 12


def test_moved_store_still_opens(store_dir, tmp_path):
    moved = tmp_path / "moved"
    shutil.copytree(store_dir, moved)
    result = atlas("sql", "SELECT count(*) AS n FROM examples", "--store", str(moved), "--format", "csv")
    assert result.exit_code == 0 and result.output.split()[-1] == "12"


def test_query_resolution(store_dir):
    for phrase in (
        "best head per dependency relation",
        "syntax heads",
        "Best head per dependency-relation",
        "dependency relation heads",
    ):
        result = atlas("query", phrase, "--store", str(store_dir), "--param", "min_count=1", "--format", "csv")
        assert result.exit_code == 0, (phrase, result.output)
        assert "relation,n,best_head,direction" in result.output
    result = atlas("query", "frobnicate the widgets", "--store", str(store_dir))
    assert result.exit_code == 1 and "no catalogue entry matches 'frobnicate the widgets'; nearest: '" in result.output


def test_query_parameters_are_bound_not_pasted(store_dir):
    result = atlas("query", "syntax heads", "--store", str(store_dir), "--param", "min_count=1; DROP VIEW runs")
    assert result.exit_code == 1 and "expected a number" in result.output
    result = atlas("query", "syntax heads", "--store", str(store_dir), "--run", "x' OR '1'='1")
    assert result.exit_code == 1 and "no such run" in result.output
    few = atlas("query", "syntax heads", "--store", str(store_dir), "--param", "min_count=1000", "--format", "csv")
    assert few.exit_code == 0 and len(few.stdout.strip().splitlines()) == 1  # header only


def test_queries_lists_the_catalogue():
    result = atlas("queries", "--format", "csv")
    assert result.exit_code == 0 and "best head per dependency relation" in result.output


def test_plot_writes_a_png_for_each_figure_kind(store_dir, tmp_path):
    for phrase in ("relative position", "special tokens"):  # heat map, per-layer scatter
        out = tmp_path / "f.png"
        result = atlas("plot", phrase, "--store", str(store_dir), "--out", str(out))
        assert result.exit_code == 0, result.output
        assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    result = atlas("plot", "best head per dependency relation", "--store", str(store_dir), "--out", str(out))
    assert result.exit_code == 1 and "has no figure" in result.output
