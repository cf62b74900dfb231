"""The catalogue's one record per entry: its SQL header holds its needs, keys and figure (nothing elsewhere is
keyed by an entry's name), a malformed header is refused in one line, and docs/catalogue.md is the text
generated from the headers."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from atlas.catalogue import Entry, entries, parse_entry, resolve
from atlas.catalogue_doc import COMMAND, DOC, main, render
from atlas.compare import key_columns
from atlas.errors import AtlasError
from atlas.needs import ROLES_STORED, SHARED
from atlas.prerequisites import check
from atlas.store import SCHEMA_FILE

ROOT = Path(__file__).resolve().parent.parent


def test_the_catalogue_doc_is_generated_from_the_headers():
    assert DOC == ROOT / "docs" / "catalogue.md"
    assert DOC.read_text(encoding="utf-8") == render(), f"docs/catalogue.md differs from the headers: run '{COMMAND}'"


def test_the_doc_names_every_entry_with_its_needs_keys_figure_and_macro():
    text = render()
    for entry in entries():
        assert f"\n## {entry.name}\n" in text
    assert "aligned on `relation`" in text and "aligned on `predictor`, `layer`, `head`" in text
    assert "'head distances' of run {run} are not computed yet" in text
    assert "FROM relative_position(run := NULL, threshold := 0.5::DOUBLE)" in text
    assert "`heatmap`: a layer x head heat map of each of `prev`, `next`, `self`" in text


def test_the_doc_is_written_on_stdout(capsys):
    assert main([]) == 0 and capsys.readouterr().out == render()
    assert main(["--wrong"]) == 2 and "usage: python -m atlas.catalogue_doc [--write]" in capsys.readouterr().err


def _renamed(entry: Entry, tmp_path: Path, name: str = "renamed entry") -> Entry:
    path = tmp_path / "renamed.sql"
    path.write_text(entry.sql.replace(f"-- name: {entry.name}\n", f"-- name: {name}\n", 1))
    return parse_entry(path)


def test_each_entry_keeps_its_needs_keys_and_figure_when_renamed(tmp_path):
    """Nothing is keyed by an entry's name: a copy of its SQL under another name has the same record."""
    for entry in entries():
        copy = _renamed(entry, tmp_path)
        assert copy.name == "renamed entry"
        assert (copy.needs, copy.keys, copy.plot, copy.parameters) == (
            entry.needs,
            entry.keys,
            entry.plot,
            entry.parameters,
        ), entry.name


@pytest.fixture
def empty_store() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute(SCHEMA_FILE.read_text())
    return con


def test_a_renamed_entry_is_checked_and_compared_by_its_header(tmp_path, empty_store):
    distances = _renamed(resolve("head distances"), tmp_path)
    with pytest.raises(
        AtlasError, match=r"^'head distances' of run r1 are not computed yet: run Atlas.distances\(run='r1'\) first$"
    ) as raised:
        check(empty_store, distances, {"run": "r1"})
    assert raised.value.cli_text().endswith("not computed yet: run 'atlas distances --run r1' first")  # the CLI's words
    notes = check(empty_store, _renamed(resolve("sep to sep"), tmp_path), {"run": "r1"})
    assert notes == [
        "note: run r1's inputs hold no special token of role sep or eos (its tokenizer adds none, e.g. a "
        "decoder's): sep_sep, to_itself and to_other_sep are empty, rest_sep is 0",
        "note: run r1 has no two-segment inputs, so every input has one [SEP] (the paper's inputs are [CLS] a "
        "[SEP] b [SEP]: ingest with pack='pair')",
    ]
    assert notes[1].cli_text().endswith(": ingest with --pack pair)")  # the CLI's words
    best = _renamed(resolve("best head per dependency relation"), tmp_path)
    assert key_columns(best, ["relation", "best_head", "layer"]) == ("relation",)
    coreference = _renamed(resolve("coreference heads"), tmp_path)
    assert key_columns(coreference, ["predictor", "layer", "head", "all_types"]) == ("predictor", "layer", "head")


def test_needs_are_checked_by_the_entry_or_its_name(empty_store):
    assert check(empty_store, "entropy", {"run": "r1"}) == check(empty_store, resolve("entropy"), {"run": "r1"})
    assert check(empty_store, "relative position", {"run": "r1", "threshold": 0.5}) == []


def test_shared_needs_are_named_by_the_headers():
    entry = resolve("cls attention by feature")
    assert entry.needs[0] == ROLES_STORED
    assert [n.fatal for n in entry.needs] == [True, False, False, False, True]  # the last: a dense run
    assert entry.needs[3].sql == SHARED["no bos row"].sql
    assert entry.needs[3].message.endswith("not what the head does: cls is 1 and every other kind 0")
    assert entry.needs[1].sql == SHARED["cls or bos token"].sql
    tail = "(its tokenizer adds none, e.g. a decoder's): there is no [CLS] row, the answer is empty"
    assert entry.needs[1].message.endswith(tail)
    roles, parsed = resolve("feature attention").needs
    assert roles == ROLES_STORED and parsed.sql == SHARED["dependency relations"].sql and not parsed.fatal
    assert parsed.message.endswith("which spaCy parses): noun, verb, pronoun, subject and object score 0")
    parse, dense = resolve("token to token").needs
    assert parse == SHARED["dependency relations"] and "kept_mass IS NULL" in dense.sql and dense.fatal


HEADER = (
    "-- name: demo\n-- paper: Paper 2019\n-- description: a demo\n"
    "-- parameters:\n--   run [run]: run id (default: the latest run)\n"
)
MALFORMED = {
    "unknown shared need": ("-- needs: roles kept\n", 6, "unknown shared need 'roles kept' (shared needs: 'roles"),
    "sql without a message": ("-- needs: SELECT count(*) FROM probes\n", 6, "takes its message on an indented 'else:'"),
    "unknown field": ("-- need: roles stored\n", 6, "unknown header field 'need:'"),
    "unknown parameter in sql": (
        "-- needs: SELECT count(*) FROM runs WHERE run_id = $base\n--   else: no run\n",
        6,
        "binds $base, not a parameter of the entry",
    ),
    "unknown parameter in message": ("-- needs: roles stored\n--   else: see {task}\n", 6, "names {task}, not a param"),
    "two messages": ("-- notes: SELECT 1\n--   else: one\n--   else: two\n", 8, "a second 'else:' for one need"),
    "unbalanced brace": ("-- notes: SELECT 1\n--   else: {run\n", 6, "the need's message:"),
    "no indent": ("-- notes: SELECT 1\n--else: x\n", 7, "expected '-- field: value' or an indented comment line"),
    "empty keys": ("-- keys:\n", 6, "'keys:' names no column"),
    "empty need": ("-- notes:\n", 6, "'notes:' names no need"),
    "second plot": ("-- plot: heatmap a\n-- plot: layers b\n", 7, "a second 'plot:' line (the first is line 6)"),
    "parameter line": ("--   no colon here\n", 6, "a parameter is written '--   name: description"),
    "label of no column": ("-- plot: heatmap a\n-- labels:\n--   b: bee\n", 8, "'b' is labelled but not a column"),
    "label without words": ("-- plot: heatmap a\n-- labels:\n--   a:\n", 8, "a label is written '--   column: words'"),
    "labels on one line": ("-- plot: heatmap a\n-- labels: a: eh\n", 7, "labels are listed below 'labels:'"),
    "two labels": ("-- plot: heatmap a\n-- labels:\n--   a: eh\n--   a: ah\n", 9, "a second label of 'a'"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_header_is_refused_in_one_line_naming_file_and_line(tmp_path, case):
    lines, line, message = MALFORMED[case]
    path = tmp_path / "demo.sql"
    path.write_text(HEADER + lines + "SELECT 1\n")
    with pytest.raises(AtlasError) as error:
        parse_entry(path)
    assert str(error.value).startswith(f"{path}:{line}: ") and message in str(error.value), str(error.value)
    assert "\n" not in str(error.value)


def test_a_well_formed_header_reads_needs_notes_and_keys(tmp_path):
    path = tmp_path / "demo.sql"
    path.write_text(
        HEADER + "-- needs: SELECT count(*) FROM head_pairs\n--   WHERE run_id = $run\n--   else: run {run} lacks\n"
        "--   pairs\n-- notes: sep or eos token\n--   else: sep is empty\n-- keys: relation, layer\nSELECT 1\n"
    )
    entry = parse_entry(path)
    assert entry.needs[0].sql == "SELECT count(*) FROM head_pairs WHERE run_id = $run"
    assert entry.needs[0].message == "run {run} lacks pairs" and entry.needs[0].fatal
    assert entry.needs[1].message == SHARED["sep or eos token"].message + ": sep is empty"
    assert not entry.needs[1].fatal and entry.keys == ("relation", "layer")


def test_a_figure_names_its_columns_as_the_header_says(tmp_path):
    path = tmp_path / "demo.sql"
    plot = "-- plot: layers dot_comma sep_sep\n-- figure: per column, every head as a point over its layer\n"
    path.write_text(HEADER + plot + "-- labels:\n--   dot_comma: '.' or ','\nSELECT 1\n")
    entry = parse_entry(path)
    assert entry.labels == (("dot_comma", "'.' or ','"),)
    assert (entry.label("dot_comma"), entry.label("sep_sep"), entry.label("dot_comma@run")) == (
        "'.' or ','",
        "sep sep",
        "'.' or ','",
    )
    text = render()
    best = text[text.index("## best head per dependency relation") :]
    assert "**Figure:** `hbars`" in best.split("## ")[1] and "'best head (layer-head)'" in best.split("## ")[1]
