"""The atlas command line: bad input gives one line and leaves the store as it was; the store opens
in the DuckDB CLI; SQL is read-only; export; the catalogue resolves phrases."""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from atlas import api
from atlas.catalogue import entries
from atlas.cli import _packed, cli
from atlas.errors import AtlasError
from atlas.output import output_format
from atlas.store import Store
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


@pytest.mark.parametrize(
    ("statement", "word"),
    [("INSTALL httpfs", "INSTALL"), ("-- a note\nCHECKPOINT", "CHECKPOINT"), ("USE memory", "USE"),
     ("/* x */ DROP VIEW runs", "DROP"), ("WITH x AS (SELECT 1) DELETE FROM runs", "DELETE")],
)  # fmt: skip
def test_sql_names_the_statement_it_refuses(store_dir, statement, word):
    """By its own first word: DuckDB types INSTALL as LOAD, CHECKPOINT as CALL, USE as SET."""
    result = atlas("sql", statement, "--store", str(store_dir))
    assert result.output.strip() == f"Error: sql: only read-only SELECT statements are accepted, not {word}"


def test_sql_with_parameters_and_outputs_that_would_pass_for_the_data_are_refused(store_dir, tmp_path):
    """An entry's SQL as --describe prints it binds $run: said so, not DuckDB's 'Unexpected prepared parameter';
    an --out named x.pq or x.tsv would have been a text table of rounded numbers."""
    described = atlas("query", "entropy", "--describe").stdout
    result = atlas("sql", described, "--store", str(store_dir))
    assert result.exit_code == 1 and result.output.startswith("Error: sql: the statement has parameters ($run), none")
    result = atlas("sql", "SELECT $2, $1, $10", "--store", str(store_dir))
    assert result.output.startswith("Error: sql: the statement has parameters ($1, $2, $10), none")
    for stream in ("/dev/stdout", "/dev/null"):  # a device or a pipe (even one redirected to a file): a table
        assert output_format(None, Path(stream)) == "table"
    for name in ("x.pq", "x.tsv", "x"):
        out = tmp_path / name
        result = atlas("sql", "SELECT 1 AS a", "--store", str(store_dir), "--out", str(out))
        said = f"Error: --out '{out}': the name ends in none of .csv, .json, .parquet, .txt; name one, or give --format"
        assert result.output == said + "\n" and not out.exists()
    tsv = ["--out", str(tmp_path / "x.tsv"), "--format", "csv"]
    result = atlas("sql", "SELECT 1 AS a", "--store", str(store_dir), *tsv)
    assert result.exit_code == 0 and (tmp_path / "x.tsv").read_text().splitlines() == ["a", "1"]


def test_a_store_whose_path_duckdb_reads_as_a_pattern_is_refused(tmp_path):
    store = tmp_path / "runs[1]" / "store"
    for args in (["query", "entropy"], ["ingest", "--corpus", str(EWT_SAMPLE)], ["runs"]):
        result = atlas(*args, "--store", str(store))
        said = f"Error: --store '{store}': its path ({store}) holds one of * ? [ ] {{ }}, which DuckDB and Spark read"
        assert result.output == said + " as file patterns: rename or move the folder\n", result.output
    assert not (tmp_path / "runs[1]").exists()


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


def test_export_is_whole_or_nothing(store_dir, tmp_path, monkeypatch):
    result = atlas("export", "--out", "", "--store", str(store_dir))
    assert result.exit_code == 1, result.output
    assert result.output.strip() == "Error: --out '': name the folder to write the tables into"
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "runs.parquet").write_bytes(b"earlier")
    opened: list[Path] = []

    class Failing(pq.ParquetWriter):  # two tables are written, then the export fails
        def __init__(self, path: Path, *args: object, **kwargs: object) -> None:
            opened.append(path)
            if len(opened) % 3 == 0:
                raise OSError(28, "No space left on device")
            super().__init__(path, *args, **kwargs)

    monkeypatch.setattr("atlas.store.pq.ParquetWriter", Failing)  # the store writes an export
    for out in (tmp_path / "new", tmp_path / "kept"):
        result = atlas("export", "--out", str(out), "--store", str(store_dir))
        assert result.exit_code == 1 and "No space left on device" in result.output, result.output
    assert not (tmp_path / "new").exists()
    assert [p.name for p in (tmp_path / "kept").iterdir()] == ["runs.parquet"]
    assert (tmp_path / "kept" / "runs.parquet").read_bytes() == b"earlier"


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
    assert result.exit_code == 1 and "no catalogue entry matches 'frobnicate the widgets' (see" in result.output


def test_query_parameters_are_bound_not_pasted(store_dir):
    result = atlas("query", "syntax heads", "--store", str(store_dir), "--param", "min_count=1; DROP VIEW runs")
    assert result.exit_code == 1 and "expected a whole number" in result.output
    result = atlas("query", "syntax heads", "--store", str(store_dir), "--run", "x' OR '1'='1")
    assert result.exit_code == 1 and "no such run" in result.output
    few = atlas("query", "syntax heads", "--store", str(store_dir), "--param", "min_count=1000", "--format", "csv")
    assert few.exit_code == 0
    assert [line for line in few.stdout.strip().splitlines()[1:] if not line.startswith("all")] == []


def test_queries_lists_the_catalogue():
    result = atlas("queries", "--format", "csv")
    assert result.exit_code == 0 and "best head per dependency relation" in result.output


def test_queries_names_are_compact_and_fit_the_terminal():
    names = [e.name for e in entries()]
    result = atlas("queries", "--names")  # not a terminal: one a line
    assert result.exit_code == 0 and result.output.splitlines() == names
    assert atlas("queries", "--names", "--format", "csv").output.splitlines() == ["name", *names]
    longest = max(map(len, names))
    for width in (200, 120, 80, 10):
        lines = _packed(names, width).splitlines()
        assert all(len(line) <= max(width, longest) for line in lines), width
        assert sorted(name for line in lines for name in re.split(r"\s{2,}", line)) == sorted(names)
    lines = _packed(names, 120).splitlines()
    assert len(lines) <= -(-len(names) // 3) and [line.split("  ")[0] for line in lines] == names[: len(lines)]


def test_queries_say_what_answers_on_a_store(store_dir, tmp_path, monkeypatch):
    run_id = Store(store_dir).run_ids()[0]
    result = atlas("queries", "--store", str(store_dir), "--format", "csv")
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith(f"on run {run_id}, the store's latest")
    rows = {row[0]: row[1:] for row in csv.reader(io.StringIO(result.stdout))}
    assert rows.pop("name") == ["answers", "first"] and set(rows) == {e.name for e in entries()}
    assert rows["special tokens"] == ["true", ""] and rows["entropy"] == ["true", ""]
    said = f"'head distances' of run {run_id} are not computed yet: run 'atlas distances --run {run_id}' first"
    assert rows["head distances"] == ["false", said]  # as 'atlas query' refuses it
    assert rows["fine-tuning change"] == ["false", "--param base: required by 'fine-tuning change'"]
    sparse = f"run {run_id} is sparse: token to token reads single attention weights; ingest with --dense"
    assert rows["token to token"] == ["false", sparse]  # refused by its header's need, before its SQL runs
    monkeypatch.setenv("ATLAS_STORE", str(tmp_path / "none"))  # the catalogue needs no store to list it
    listed = atlas("queries", "--names")
    assert listed.exit_code == 0 and listed.output.splitlines() == [e.name for e in entries()]
    both = atlas("queries", "--names", "--store", str(store_dir))
    assert both.exit_code == 1
    assert both.output == "Error: --names: lists the catalogue alone; with --store, leave it out\n"
    refused = atlas("queries", "--store", str(tmp_path / "none"))
    assert refused.exit_code == 1 and refused.output.count("\n") == 1
    assert refused.output.startswith(f"Error: --store '{tmp_path / 'none'}': no store here")


def test_plot_writes_a_png_for_each_figure_kind(store_dir, tmp_path):
    for phrase in ("relative position", "special tokens"):  # heat map, per-layer scatter
        out = tmp_path / "f.png"
        result = atlas("plot", phrase, "--store", str(store_dir), "--out", str(out))
        assert result.exit_code == 0, result.output
        assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    result = atlas("plot", "best head per dependency relation", "--store", str(store_dir), "--out", str(out))
    assert result.exit_code == 0 and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", result.output  # Table 1 as bars


def test_sql_lists_and_every_format(store_dir, tmp_path):
    base = ("sql", "SELECT example_id, sent_ids, NULL AS nothing FROM examples ORDER BY 1", "--store", str(store_dir))
    csv_out = atlas(*base, "--format", "csv").stdout.splitlines()
    assert csv_out[0] == "example_id,sent_ids,nothing" and csv_out[1].startswith('0,"[""') and csv_out[1].endswith(",")
    rows = json.loads(atlas(*base, "--format", "json").stdout)
    assert len(rows) == 12 and isinstance(rows[0]["sent_ids"], list) and rows[0]["nothing"] is None
    table = atlas(*base).stdout
    assert '["' in table and "null" not in table and "None" not in table
    out = tmp_path / "x.parquet"  # the format from the file name
    assert atlas(*base, "--out", str(out)).exit_code == 0
    assert pq.read_table(out).column("sent_ids").type.value_type == "string"
    bad = atlas(*base, "--format", "csv", "--out", str(tmp_path / "y.parquet"))
    assert bad.exit_code == 1 and "the name says parquet but --format is csv" in bad.output
    missing = atlas(*base, "--out", str(tmp_path / "no" / "such" / "x.csv"))
    assert missing.exit_code == 1 and f"the folder '{tmp_path / 'no' / 'such'}' does not exist" in missing.output
    assert not list(tmp_path.glob(".*.tmp"))
    # a query's output refused before the entry runs: the one line, no title line of an answer before it
    for given, said in ((["--format", "parquet"], "--format parquet needs --out FILE"),
                        (["--out", str(tmp_path / "no" / "x.csv")], "does not exist")):  # fmt: skip
        refused = atlas("query", "special tokens", "--store", str(store_dir), *given)
        assert refused.exit_code == 1 and refused.output.count("\n") == 1 and said in refused.output, refused.output


def test_sql_from_a_file_from_stdin_and_beginning_with_a_comment(store_dir, tmp_path):
    text = "-- how many inputs\nSELECT count(*) AS n FROM examples"
    (tmp_path / "q.sql").write_text(text)
    for args, stdin in (((text,), None), (("-f", str(tmp_path / "q.sql")), None), (("-",), text)):
        result = CliRunner().invoke(cli, ["sql", *args, "--store", str(store_dir), "--format", "csv"], input=stdin)
        assert result.exit_code == 0 and result.stdout.split() == ["n", "12"], (args, result.output)
    result = atlas("sql", "--fromat", "--store", str(store_dir))
    assert result.exit_code == 1 and "no such option --fromat" in result.output


def test_runs_tell_runs_apart_and_refuse_parquet(store_dir):
    result = atlas("runs", "--store", str(store_dir), "--format", "csv")
    header, row = result.stdout.splitlines()[:2]
    assert "weights" in header and "max_length" in header and "kept_mass" in header and "pretrained" in row
    result = atlas("runs", "--store", str(store_dir), "--format", "parquet")
    assert result.exit_code == 1 and "Error: --format parquet: expected one of table, csv, json" in result.output


def test_unknown_run_ids_are_refused_everywhere(store_dir, tmp_path):
    runs = ("query", "coreference heads", "--store", str(store_dir))
    for args, option in (
        (("--param", "select_run=nope"), "--param select_run='nope'"),
        (("--run", "nope"), "--run 'nope'"),
    ):
        result = atlas(*runs, *args)
        assert result.exit_code == 1 and f"{option}: no such run" in result.output, result.output
    run_id = Store(store_dir).run_ids()[0]
    for params in (("base=nope", f"tuned={run_id}"), (f"base={run_id}", "tuned=nope")):
        result = atlas(
            "query", "fine-tuning change", "--store", str(store_dir), "--param", params[0], "--param", params[1]
        )
        assert result.exit_code == 1 and "'nope': no such run" in result.output, result.output
    result = atlas("export", "--out", str(tmp_path / "x"), "--run", "nope", "--store", str(store_dir))
    assert result.exit_code == 1 and "--run 'nope': no such run" in result.output and not (tmp_path / "x").exists()
    result = atlas("query", "special tokens", "--store", str(store_dir), "--run", run_id, "--run", run_id)
    assert result.exit_code == 1 and "Error: --run: given 2 times" in result.output


@pytest.mark.parametrize("option", ["--train", "--eval"])
def test_probe_refuses_a_run_given_twice(store_dir, option):
    run_id = Store(store_dir).run_ids()[0]
    runs = {"--train": [run_id], "--eval": [run_id]} | {option: [run_id, "other"]}
    before = snapshot(store_dir)
    args = [a for name, ids in runs.items() for run in ids for a in (name, run)]
    result = atlas("probe", *args, "--store", str(store_dir))
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert result.exit_code == 1 and len(errors) == 1, result.output
    assert f"{option}: given 2 times ({run_id}, other); name one run" in errors[0]
    assert snapshot(store_dir) == before


def test_entries_say_what_to_run_first(store_dir):
    run_id = Store(store_dir).run_ids()[0]
    for phrase, message in (
        ("head distances", f"run 'atlas distances --run {run_id}' first"),
        ("probe results", "run 'atlas probe --train RUN --eval RUN' first"),
        ("pattern shares", "run 'atlas patterns --run RUN' first"),
        ("coreference heads", "has no coreference mentions"),
        ("frame heads", "ingest FrameNet exemplars with --format framenet"),
        ("glue baselines", "run 'atlas finetune' first"),
    ):
        result = atlas("query", phrase, "--store", str(store_dir))
        assert result.exit_code == 1 and message in result.output and len(result.output.splitlines()) == 1, phrase
    result = atlas("query", "sep to sep", "--store", str(store_dir), "--format", "csv")
    assert result.exit_code == 0 and "note: run" in result.stderr and "has no two-segment inputs" in result.stderr


def test_the_title_names_the_run_model_and_corpus(store_dir, tmp_path):
    run_id = Store(store_dir).run_ids()[0]
    result = atlas("query", "special tokens", "--store", str(store_dir), "--format", "csv")
    title = result.stderr.splitlines()[0]
    assert title.startswith("special tokens (Clark et al.") and f"run {run_id} (model all-MiniLM-L6-v2" in title
    assert "corpus tiny.conllu" in title
    for suffix, magic in ((".svg", b"<?xml"), (".pdf", b"%PDF")):
        out = tmp_path / f"f{suffix}"
        result = atlas("plot", "special tokens", "--store", str(store_dir), "--out", str(out))
        assert result.exit_code == 0 and out.read_bytes().startswith(magic), result.output
    assert run_id.encode() in (tmp_path / "f.svg").read_bytes() or b"tiny.conllu" in (tmp_path / "f.svg").read_bytes()
    result = atlas("plot", "special tokens", "--store", str(store_dir), "--out", str(tmp_path / "f.gif"))
    assert result.exit_code == 1 and ".png, .pdf, .svg" in result.output


def test_a_figure_is_titled_by_its_entry_and_paper_or_by_title(store_dir, tmp_path):
    run_id = Store(store_dir).run_ids()[0]
    texts = {}
    for given in ((), ("--title", "Figure 2 & ours")):
        out = tmp_path / f"f{len(given)}.svg"
        result = atlas("plot", "special tokens", "--store", str(store_dir), "--out", str(out), *given)
        assert result.exit_code == 0, result.output
        texts[given] = out.read_text()  # each text of the figure in a comment beside its glyphs
    assert "<!-- special tokens (Clark et al. 2019) -->" in texts[()]  # one line: the entry and its paper
    assert "Figure 2 &amp; ours" in texts[("--title", "Figure 2 & ours")]
    assert "special tokens (Clark" not in texts[("--title", "Figure 2 & ours")]
    assert all(run_id in text for text in texts.values())  # in the caption at the foot


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--seed", "3"), "--seed: seeds --random-init's weights"),
        (("--dense", "--kept-mass", "0.5"), "--kept-mass: --dense keeps every weight"),
        (("--task", "SST-2"), "--task: names the GLUE task of a --format 'glue' file"),
    ],
)
def test_misused_ingest_options_are_refused(store_dir, args, message):
    before = snapshot(store_dir)
    corpus = store_dir.parent / "tiny.conllu"
    result = atlas("ingest", "--corpus", str(corpus), "--store", str(store_dir), "--quiet", *args)
    assert result.exit_code == 1 and message in result.output and len(result.output.splitlines()) == 1
    assert snapshot(store_dir) == before


def test_corpus_folder_and_compressed_corpus(store_dir, tmp_path):
    result = atlas("ingest", "--corpus", str(tmp_path), "--store", str(store_dir))
    assert result.exit_code == 1 and "is a folder; name the corpus file" in result.output
    packed = tmp_path / "c.conllu.gz"
    packed.write_bytes(gzip.compress((store_dir.parent / "tiny.conllu").read_bytes()))
    result = atlas("ingest", "--corpus", str(packed), "--store", str(store_dir))
    assert result.exit_code == 1 and "is gzip-compressed; decompress it first" in result.output


def test_rm_and_unfinished_runs(store_dir, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(store_dir, copy)
    run_id = Store(copy).run_ids()[0]
    (copy / ".staging" / "interrupted__x__123" / "done").mkdir(parents=True)
    listed = atlas("runs", "--unfinished", "--store", str(copy), "--format", "csv")
    assert listed.stdout.split() == ["unfinished_run", "interrupted__x__123"]
    assert atlas("rm", "interrupted__x__123", "--store", str(copy)).exit_code == 0
    assert atlas("runs", "--unfinished", "--store", str(copy), "--format", "csv").stdout.split() == ["unfinished_run"]
    result = atlas("rm", run_id, "--store", str(copy))
    assert result.exit_code == 0 and f"removed run {run_id}" in result.output
    assert atlas("sql", "SELECT count(*) FROM tokens", "--store", str(copy), "--format", "csv").stdout.split()[1] == "0"
    assert not Store(copy).run_folder(run_id).exists() and not list(copy.glob(".trash-*"))
    result = atlas("rm", run_id, "--store", str(copy))
    assert result.exit_code == 1 and f"'{run_id}': no such run" in result.output


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["nosuch"], "Error: No such command 'nosuch' (see 'atlas --help')"),
        (["--nosuch"], "Error: No such option '--nosuch' (see 'atlas --help')"),
        (["queries", "--nosuch"], "Error: No such option '--nosuch' (see 'atlas queries --help')"),
        (["query"], "Error: Missing argument 'PHRASE' (see 'atlas query --help')"),
        (["query", "entropy", "--limit"], "Error: Option '--limit' requires an argument (see 'atlas query --help')"),
    ],
)
def test_a_command_line_click_refuses_is_one_line(args, line):
    """Not click's usage and hint on three lines: one line and exit 1, as every other error."""
    result = CliRunner().invoke(cli, args, prog_name="atlas")
    assert result.exit_code == 1 and result.output.strip() == line


def test_a_store_named_by_atlas_store_is_named_so(tmp_path, monkeypatch):
    """A folder $ATLAS_STORE names (no --store given) is named as $ATLAS_STORE in errors, in the CLI and the API."""
    monkeypatch.setenv("ATLAS_STORE", str(tmp_path / "none"))
    result = CliRunner().invoke(cli, ["runs"], prog_name="atlas")
    assert result.exit_code == 1
    none = tmp_path / "none"
    assert result.output.strip() == f"Error: ATLAS_STORE '{none}': no store here (run 'atlas ingest' first)"
    with pytest.raises(AtlasError, match="^ATLAS_STORE '.*none': no store here"):
        api.open()
    result = CliRunner().invoke(cli, ["runs", "--store", str(tmp_path)], prog_name="atlas")
    assert result.output.strip().startswith(f"Error: --store '{tmp_path}': no store here")


def test_atlas_alone_prints_its_help():
    result = CliRunner().invoke(cli, [], prog_name="atlas")
    assert "Commands:" in result.output and "ingest" in result.output
