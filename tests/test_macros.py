"""The catalogue as DuckDB table macros: every entry answers through its macro in the real DuckDB CLI with the
rows of ``atlas query``, defaults included, and every entry of a run compares two runs through its comparison
macro with the rows of ``atlas query --compare``; sparse runs are refused as in atlas; the macros hold no path,
so a copied store answers the same."""

from __future__ import annotations

import dataclasses
import io
import math
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

import atlas
from atlas.catalogue import entries
from atlas.compare import rounded_difference
from atlas.errors import AtlasError
from atlas.macros import _select_sql, compare_macro_name, macro_call, macro_name, macro_sql
from tests.conftest import EWT_SAMPLE, cut_conllu, make_store

DUCKDB = Path(sys.executable).parent / "duckdb"  # the duckdb-cli package: the library's version


@pytest.fixture(scope="module")
def store(tmp_path_factory, model) -> tuple[Path, str, str]:
    """A store with a sparse run, then a dense one (the latest) over the same 12 sentences."""
    root = tmp_path_factory.mktemp("macros") / "store"
    corpus = cut_conllu(EWT_SAMPLE, 12, tmp_path_factory.mktemp("corpus") / "ewt12.conllu")
    _, sparse = make_store(root, corpus, model)
    _, dense = make_store(root, corpus, model, kept_mass=None)
    return root, sparse, dense


def shell(db: Path, sql: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(DUCKDB), str(db), "-readonly", "-csv", "-c", sql], capture_output=True, text=True, cwd=cwd
    )


def assert_same(frame: pl.DataFrame, csv: str) -> None:
    """The shell's CSV holds the rows of the atlas answer (floats to 1e-12, NaN and NULL as DuckDB prints them)."""
    got = pl.read_csv(io.StringIO(csv), infer_schema=False) if csv.strip() else pl.DataFrame()
    assert got.columns == frame.columns
    assert len(got) == len(frame)
    for name in frame.columns:
        for want, text in zip(frame[name].to_list(), got[name].to_list(), strict=True):
            if want is None:
                assert text == "NULL", name
            elif isinstance(want, float):
                assert math.isnan(want) and text.lower() == "nan" or float(text) == pytest.approx(want, rel=1e-12), name
            elif isinstance(want, bool):
                assert text == str(want).lower(), name
            else:
                assert text == str(want), name


@pytest.mark.filterwarnings("ignore::atlas.api.AtlasNote")
def test_every_entry_answers_through_its_macro_in_the_duckdb_cli(store, tmp_path):
    root, sparse, dense = store
    answered = 0
    with atlas.open(root) as st:
        for entry in entries():
            takes = {p.name for p in entry.parameters}
            calls: list[tuple[dict[str, object], str]] = [({}, "")]  # the defaults: the latest run
            if "run" in takes:
                calls += [({"run": run}, f"run := '{run}'") for run in (sparse, dense)]
            if "min_count" in takes:
                calls.append(({"min_count": 3}, "min_count := 3"))
            if {"base", "tuned"} <= takes:
                calls = [({"base": dense, "tuned": dense}, f"base := '{dense}', tuned := '{dense}'")]
            for params, args in calls:
                result = shell(root / "atlas.duckdb", f"FROM {macro_name(entry)}({args})", tmp_path)
                try:
                    frame = st.query(entry.name, **params)
                except AtlasError as exc:  # refused in atlas (sparse run, a step not run yet): refused too (where
                    # the run lacks two things, either may be said first)
                    assert result.returncode != 0 and "Invalid Input Error" in result.stderr, (entry.name, str(exc))
                    continue
                assert result.returncode == 0, (entry.name, args, result.stderr)
                assert_same(frame, result.stdout)
                answered += len(frame) > 0
    assert answered >= 12  # the entries over a run's attention answer on this store


def macro_columns(frame: pl.DataFrame, a: str, b: str) -> pl.DataFrame:
    """``atlas query --compare``'s columns (col@A, col@B, col_diff@B) named as the comparison macro's (col_a, col_b,
    col_diff)."""
    names = {}
    for column in frame.columns:
        for suffix, short in ((f"_diff@{b}", "_diff"), (f"@{a}", "_a"), (f"@{b}", "_b")):
            if column.endswith(suffix):
                names[column] = column.removesuffix(suffix) + short
                break
    return frame.rename(names)


@pytest.mark.filterwarnings("ignore::atlas.api.AtlasNote")
def test_every_entry_of_a_run_compares_through_its_macro_as_in_atlas(store, tmp_path):
    root, sparse, dense = store
    compared = 0
    with atlas.open(root) as st:
        for entry in entries():
            takes = {p.name for p in entry.parameters}
            if "run" not in takes:
                continue
            params, args = ({"min_count": 3}, ", min_count := 3") if "min_count" in takes else ({}, "")
            sql = f"FROM {compare_macro_name(entry)}(a := '{sparse}', b := '{dense}'{args})"
            result = shell(root / "atlas.duckdb", sql, tmp_path)
            try:
                frame = st.query(entry.name, runs=[sparse, dense], **params)
            except AtlasError as exc:  # refused in atlas (sparse run, a step not run yet): refused or empty
                assert result.returncode != 0 or result.stdout.count("\n") <= 1, (entry.name, str(exc))
                continue
            assert result.returncode == 0, (entry.name, result.stderr)
            assert_same(macro_columns(frame, sparse, dense), result.stdout)
            compared += len(frame) > 0
        # a left out is the latest run, as --run
        latest = macro_columns(st.query("entropy", runs=[dense, sparse]), dense, sparse)
    assert_same(latest, shell(root / "atlas.duckdb", f"FROM compare_entropy(b := '{sparse}')", tmp_path).stdout)
    assert compared >= 7  # the entries over a run's attention that answer on a sparse run


def test_comparison_macros_refuse_what_atlas_refuses(store, tmp_path):
    root, sparse, dense = store
    for sql, message in (
        (f"FROM compare_entropy(a := '{dense}')", "compare_entropy: b := ... is required"),
        (f"FROM compare_entropy(a := '{dense}', b := 'nope')", "compare_entropy: b := 'nope': no such run"),
        (f"FROM compare_entropy(a := '{dense}', b := '{dense}')", "a and b are the same run"),
    ):
        result = shell(root / "atlas.duckdb", sql, tmp_path)
        assert result.returncode != 0 and message in result.stderr, (sql, result.stderr)


def test_macros_refuse_what_atlas_refuses_before_an_entry_answers(store, tmp_path):
    """A run not in the store, a need of the entry's header not met: refused in one line, not an empty answer."""
    root, sparse, dense = store
    for sql, message in (
        ("FROM entropy(run := 'nope')", "entropy: run := 'nope': no such run (see FROM runs)"),
        ("FROM head_distances()", f"head_distances: 'head distances' of run {dense} are not computed yet"),
        (
            "FROM best_head_per_dependency_relation(min_count := -1)",
            "best_head_per_dependency_relation: min_count := '-1': expected 0 or more",
        ),
        (  # the entry's own refusal, its parameter named as the macro's
            "FROM best_head_per_dependency_relation(direction := 'up')",
            "best_head_per_dependency_relation: direction := 'up': expected both, dependent -> head or head -> "
            "dependent\n",
        ),
        (
            f"FROM compare_best_head_per_dependency_relation(b := '{sparse}', direction := 'it''s')",
            "compare_best_head_per_dependency_relation: direction := 'it's': expected both, ",
        ),
    ):
        result = shell(root / "atlas.duckdb", sql, tmp_path)
        assert result.returncode != 0 and message in result.stderr, (sql, result.stderr)
    empty = tmp_path / "empty"
    atlas.open(empty, must_exist=False).store.create()
    result = shell(empty / "atlas.duckdb", "FROM entropy()", tmp_path)
    assert result.returncode != 0 and "run := NULL is the latest run, and the store has no run" in result.stderr


def test_sparse_runs_are_refused_through_the_macro_as_in_atlas(store, tmp_path):
    root, sparse, _ = store
    # entries whose SQL refuses a sparse run itself, as its header's need does: whichever DuckDB runs first refuses,
    # in the same words
    refusing = [entry for entry in entries() if "' is sparse: " in entry.sql and "run_id = $run" in entry.sql]
    assert {entry.name for entry in refusing} == {"cls attention by feature", "token to token", "frame heads"}
    for entry in refusing:
        need = next(n.message for n in entry.needs if n.fatal and "is sparse" in n.message)
        said = f"Invalid Input Error: {macro_name(entry)}: {need.format(run=sparse)}\n"
        result = shell(root / "atlas.duckdb", f"FROM {macro_name(entry)}(run := '{sparse}')", tmp_path)
        assert result.returncode != 0 and result.stderr == said, (entry.name, result.stderr)
    result = shell(root / "atlas.duckdb", "FROM fine_tuning_change()", tmp_path)
    assert result.returncode != 0 and ":= ... is required" in result.stderr


def test_macros_survive_copying_and_moving_the_store(store, tmp_path):
    root = store[0]
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    moved = tmp_path / "elsewhere" / "moved"
    moved.parent.mkdir()
    copy.rename(moved)
    text = shell(moved / "atlas.duckdb", "SELECT macro_definition FROM duckdb_functions() WHERE NOT internal", tmp_path)
    assert "entropy" in text.stdout and "/" + root.parent.name not in text.stdout
    sql = "FROM best_head_per_dependency_relation(min_count := 3) WHERE relation = 'all'"
    here, there = shell(root / "atlas.duckdb", sql, tmp_path), shell(moved / "atlas.duckdb", sql, moved)
    assert here.returncode == 0 and there.returncode == 0 and here.stdout.count("\n") == 2
    assert there.stdout == here.stdout
    assert "compare_entropy" in text.stdout  # the comparison macros too
    sql = f"FROM compare_entropy(a := '{store[1]}', b := '{store[2]}')"
    here, there = shell(root / "atlas.duckdb", sql, tmp_path), shell(moved / "atlas.duckdb", sql, moved)
    assert here.returncode == 0 and there.returncode == 0 and here.stdout.count("\n") == 6 * 12 + 1
    # (the same numbers to the last bits, which DuckDB's parallel averages leave open from one run to the next)
    moved_rows, rows = (pl.read_csv(io.StringIO(r.stdout)) for r in (there, here))
    assert_frame_equal(moved_rows, rows, rel_tol=1e-12, abs_tol=1e-12)


def test_atlas_queries_shows_each_macro_call():
    listed = atlas.queries()
    assert listed["macro"].to_list() == [macro_call(e) for e in entries()]
    calls = dict(zip(listed["name"].to_list(), listed["macro"].to_list(), strict=True))
    assert calls["best head per dependency relation"] == (
        "FROM best_head_per_dependency_relation(run := NULL, min_count := 100, poss_rule := 'true', "
        "direction := 'both')"
    )
    assert calls["fine-tuning change"].startswith("FROM fine_tuning_change(base := REQUIRED, tuned := REQUIRED")


def test_macros_are_rewritten_when_the_catalogue_changed(store, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(store[0], copy)
    with duckdb.connect(str(copy / "atlas.duckdb")) as con:  # as written from an older catalogue
        con.execute("DROP MACRO TABLE entropy; CREATE MACRO gone() AS TABLE SELECT 1 AS x")  # an entry removed
        con.execute("CREATE MACRO mine() AS TABLE SELECT 2 AS y")  # a user's own macro
        con.execute("UPDATE atlas_meta SET value = 'older' WHERE key = 'macros_state'")
        con.execute("UPDATE atlas_meta SET value = value || ',gone' WHERE key = 'macros'")
    assert shell(copy / "atlas.duckdb", "FROM entropy()", tmp_path).returncode != 0
    with atlas.open(copy) as st:
        assert st.connection.execute("SELECT value FROM atlas_meta WHERE key = 'macros_state'").fetchone()[0] != "older"
    functions = shell(
        copy / "atlas.duckdb", "SELECT function_name FROM duckdb_functions() WHERE NOT internal", tmp_path
    )
    assert "entropy" in functions.stdout and "gone" not in functions.stdout and "mine" in functions.stdout


def test_a_macro_of_sql_with_non_ascii_text(store, tmp_path):
    """The SQL may hold any text (DuckDB's tokenizer counts bytes): '$run' is still found and replaced."""
    entry = next(e for e in entries() if e.name == "entropy")
    odd = dataclasses.replace(entry, name="entropy odd", sql="-- pieces 'Ġa', '▁a', 'é'\n" + entry.sql)
    copy = tmp_path / "copy"
    shutil.copytree(store[0], copy)
    with duckdb.connect(str(copy / "atlas.duckdb")) as con:
        con.execute(macro_sql(odd))
        got, want = con.execute(f"FROM {macro_name(odd)}()").pl(), con.execute("FROM entropy()").pl()
    assert_frame_equal(got, want, check_exact=False, rel_tol=1e-12)  # DuckDB's parallel sums: last bits


def test_run_parameters_and_each_runs_needs_are_checked_as_in_atlas(store, tmp_path):
    """Every parameter naming a run (base, tuned, select_run; not an empty select_run, its default) is checked as run
    is; a comparison checks the entry's needs for each of its runs, as atlas answers each."""
    root, sparse, dense = store
    for sql, message in (
        (f"FROM fine_tuning_change(base := 'nope', tuned := '{dense}')", "base := 'nope': no such run (see FROM runs)"),
        (f"FROM fine_tuning_change(base := '{dense}', tuned := 'nope')", "tuned := 'nope': no such run"),
        ("FROM coreference_heads(select_run := 'nope')", "coreference_heads: select_run := 'nope': no such run"),
        ("FROM coreference_heads()", f"run {dense} has no coreference mentions"),  # select_run '': the run itself
    ):
        result = shell(root / "atlas.duckdb", sql, tmp_path)
        assert result.returncode != 0 and message in result.stderr, (sql, result.stderr)
    other = tmp_path / "store"
    parsed = atlas.ingest(cut_conllu(EWT_SAMPLE, 3, tmp_path / "three.conllu"), store=other, progress=False).run_id
    drawn = atlas.ingest(None, store=other, format="repeated", length=4, count=2, random_init=True, progress=False)
    with atlas.open(other) as st, pytest.raises(AtlasError) as raised:
        st.query("best head per dependency relation", runs=[parsed, drawn.run_id])
    assert f"run {drawn.run_id} has no dependency relations" in str(raised.value)
    sql = f"FROM compare_best_head_per_dependency_relation(a := '{parsed}', b := '{drawn.run_id}')"
    result = shell(other / "atlas.duckdb", sql, tmp_path)
    assert result.returncode != 0 and f"run {drawn.run_id} has no dependency relations" in result.stderr, result.stderr


# (a, b, b - a as a comparison gives it): the noise of the subtraction left out, to the digits of the larger value
DIFFERENCES = [
    (0.1, 0.3, 0.2),  # 0.19999999999999998
    (100.0, 100.1, 0.1),  # 0.09999999999999432
    (1e6, 1e6 + 0.1, 0.1),  # 0.09999999997671694
    (10.0, 45.69, 35.69),  # 35.690000000000005
    (2.3456789012345, 2.3456789012346, 1e-13),  # a small difference of large values: kept
    (1e20, 1.0000000000000002e20, 0.0),  # below the values' 15 digits
    (1.5, math.nan, math.nan),
    (math.inf, 1.0, -math.inf),
    (None, 1.0, None),
]


def same_numbers(got: list, want: list) -> bool:
    """The same numbers, NaN as NaN and None as None."""
    return all(
        (g is None and w is None) or g == w or (math.isnan(g) and math.isnan(w)) for g, w in zip(got, want, strict=True)
    )


def test_a_comparison_macro_gives_a_difference_of_doubles_as_atlas_does():
    """The shell's comparison gives b - a of doubles as atlas.compare gives it, on the cases of test_compare and on
    random pairs of values near and far apart; whole numbers as computed; NULL stays NULL."""
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, 4000) * 10.0 ** rng.integers(-300, 300, 4000)
    near = a * (1 + rng.uniform(-1e-3, 1e-3, 4000))
    far = rng.uniform(-1, 1, 4000) * 10.0 ** rng.integers(-300, 300, 4000)
    pairs = [(x, y) for x, y, _ in DIFFERENCES] + list(
        zip(a.tolist(), np.where(rng.random(4000) < 0.5, near, far).tolist(), strict=True)
    )
    con = duckdb.connect()
    con.execute("CREATE TABLE atlas_pairs (atlas_order INTEGER, x DOUBLE, y DOUBLE)")
    con.executemany("INSERT INTO atlas_pairs VALUES (?, ?, ?)", [(i, x, y) for i, (x, y) in enumerate(pairs)])
    con.execute("CREATE TABLE atlas_a AS SELECT atlas_order, x, 1 AS n FROM atlas_pairs")
    con.execute("CREATE TABLE atlas_b AS SELECT atlas_order, y AS x, 4 AS n FROM atlas_pairs")
    con.execute("CREATE TABLE atlas_check AS SELECT true AS ok")
    select = _select_sql(["atlas_order"], [("atlas_order", "INTEGER"), ("x", "DOUBLE"), ("n", "INTEGER")])
    rows = con.execute(select).fetchall()
    got = [x_diff for *_, x_diff, _, _, _ in rows]
    assert same_numbers(got[: len(DIFFERENCES)], [want for *_, want in DIFFERENCES])
    assert same_numbers(got, [rounded_difference(x, y) for x, y in pairs])
    assert {n_diff for *_, n_diff in rows} == {3}
