"""One entry across runs: the comparison equals the single-run answers joined on the entry's keys, with the
differences to the first run; runs of another shape, entries without a run and bad run lists are refused. Its
figure holds each run's panel on one colour scale and the difference (heat maps), or the runs overlaid and the
difference below (per layer curves). The comparison macros in the DuckDB CLI answer as ``atlas query --compare``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from PIL import Image
from polars.testing import assert_frame_equal, assert_series_equal

import atlas
from atlas.catalogue import resolve
from atlas.cli import cli
from atlas.compare import compare as aligned
from atlas.compare import lettered
from atlas.errors import AtlasError
from atlas.macros import compare_macro_name
from atlas.model.load import load_model
from atlas.plot import save
from tests.conftest import EWT_SAMPLE, cut_conllu, make_store
from tests.test_macros import DIFFERENCES, assert_same, macro_columns, same_numbers, shell

pytestmark = pytest.mark.filterwarnings("ignore::atlas.api.AtlasNote")


@pytest.fixture(scope="module")
def runs(tmp_path_factory, model) -> tuple[str, str, str, str]:
    """Store, pre-trained run, its random-init baseline (same shape) and a random 2-layer x 2-head model's run."""
    root = tmp_path_factory.mktemp("compare") / "store"
    corpus = cut_conllu(EWT_SAMPLE, 12, tmp_path_factory.mktemp("corpus") / "ewt12.conllu")
    _, real = make_store(root, corpus, model, kept_mass=None)
    _, random = make_store(root, corpus, load_model(None, random_init=True), kept_mass=None)
    small = load_model(
        None, random_init=True, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32
    )
    _, other = make_store(root, corpus, small, kept_mass=None)
    return str(root), real, random, other


@pytest.mark.parametrize(
    ("name", "params", "keys"),
    [
        ("best head per dependency relation", {"min_count": 3}, ["relation"]),  # per relation
        ("entropy", {}, ["layer", "head"]),  # per head
        ("special tokens", {}, ["layer", "head"]),  # per layer (head NULL) and per head
    ],
)
def test_comparison_is_the_single_run_answers_joined(runs, name, params, keys):
    root, real, random, _ = runs
    with atlas.open(root) as st:
        a, b = st.query(name, run=real, **params), st.query(name, run=random, **params)
        got = st.query(name, runs=[real, random], **params)
    values = [c for c in a.columns if c not in keys]
    joined = a.join(b, on=keys, how="full", coalesce=True, nulls_equal=True, suffix="@b")
    assert len(got) == len(joined) >= len(a) > 0
    if name == "special tokens":
        assert got.filter(pl.col("head").is_null()).height == a.filter(pl.col("head").is_null()).height == 6
    # every row of each run's answer is in the comparison, under the run's columns
    for run, frame in ((real, a), (random, b)):
        side = got.select(*keys, *[pl.col(f"{c}@{run}").alias(c) for c in values]).drop_nulls(values[0])
        assert_frame_equal(side.sort(keys, nulls_last=True), frame.sort(keys, nulls_last=True), check_dtypes=False)
    both = got.join(joined, on=keys, how="inner", nulls_equal=True)
    assert len(both) == len(joined)
    for c in values:
        assert_series_equal(both[f"{c}@{real}"], both[c], check_names=False)
        assert_series_equal(both[f"{c}@{random}"], both[f"{c}@b"], check_names=False)
        if a.schema[c].is_numeric():
            diff = both[f"{c}@b"] - both[c]
            assert_series_equal(both[f"{c}_diff@{random}"], diff, check_names=False, check_dtypes=False)
    assert got.columns[: len(keys)] == keys
    if name == "entropy":  # the real model's heads are not the random ones': the differences are not all 0
        assert got[f"entropy_diff@{random}"].abs().max() > 0.01


def test_cli_compare_prints_the_api_comparison(runs):
    root, real, random, _ = runs
    result = CliRunner().invoke(
        cli, ["query", "entropy", "--run", real, "--compare", random, "--store", root, "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    with atlas.open(root) as st:
        frame = st.query("entropy", runs=[real, random])
    assert list(rows[0]) == frame.columns and len(rows) == len(frame)
    assert rows[3][f"entropy_diff@{random}"] == pytest.approx(frame[f"entropy_diff@{random}"][3], rel=1e-9)
    assert f"compared with {random}" in result.stderr


def test_runs_of_another_shape_are_refused(runs):
    root, real, _, other = runs
    with atlas.open(root) as st, pytest.raises(AtlasError, match="2 layers x 2 heads.*6 x 12.*shapes match"):
        st.query("entropy", runs=[real, other])
    with atlas.open(root) as st:  # an entry per relation aligns whatever the shapes
        assert len(st.query("best head per dependency relation", runs=[real, other], min_count=3)) > 2
    result = CliRunner().invoke(cli, ["query", "entropy", "--run", real, "--compare", other, "--store", root])
    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1, result.output
    assert f"--compare '{other}': its model has 2 layers x 2 heads" in result.output


def test_the_latest_run_left_out_as_the_first_may_be_named_among_the_others(runs):
    """``--compare A --compare B`` without --run, B the latest: B against A, as with ``--run B --compare A``."""
    root, real, _, small = runs
    with atlas.open(root) as st:
        assert st.latest_run() == small
    args = ["query", "best head per dependency relation", "--param", "min_count=3", "--store", root, "--format", "json"]
    want = CliRunner().invoke(cli, [*args, "--run", small, "--compare", real])
    assert want.exit_code == 0, want.output
    for compare in ([real, small], [small, real]):
        result = CliRunner().invoke(cli, [*args, *(a for run in compare for a in ("--compare", run))])
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout) == json.loads(want.stdout)
        assert f"accuracy_diff@{real}" in json.loads(result.stdout)[0]
    with atlas.open(root) as st:
        for alone in ([None, small], [None, real, real]):  # the latest run alone; another given twice
            with pytest.raises(AtlasError, match="two or more different runs"):
                st.query("entropy", runs=alone)


def test_bad_comparisons_are_refused_in_one_line(runs):
    root, real, random, _ = runs
    with atlas.open(root) as st:
        with pytest.raises(AtlasError, match="takes no run"):
            st.query("glue baselines", runs=[real, random])
        with pytest.raises(AtlasError, match="two or more different runs"):
            st.query("entropy", runs=[real, real])
        with pytest.raises(AtlasError, match="runs='nope': no such run"):
            st.query("entropy", runs=[real, "nope"])


def _single_grid(frame: pl.DataFrame, column: str) -> np.ndarray:
    """An entry's per-head answer as a layer x head array (1-based layer and head), built without atlas.plot."""
    heads = frame.filter(pl.col("head").is_not_null()).sort("layer", "head")
    return heads[column].to_numpy().reshape(heads["layer"].n_unique(), heads["head"].n_unique())


def _panel(fig: Figure, title: str) -> Axes:
    found = [ax for ax in fig.axes if ax.get_title() == title]
    assert len(found) == 1, (title, [ax.get_title() for ax in fig.axes])
    return found[0]


def test_comparison_heatmaps_hold_each_run_and_the_difference_on_shared_scales(runs):
    root, real, random, _ = runs
    with atlas.open(root) as st:
        fig = st.plot("relative position", runs=[real, random])
        a, b = st.query("relative position", run=real), st.query("relative position", run=random)
    columns = ["prev", "next", "self"]
    for column in columns:  # (DuckDB's parallel averages differ between two runs of a query in the last bit)
        want_a, want_b = _single_grid(a, column), _single_grid(b, column)
        panel_a = _panel(fig, f"{column}: A\n{real}").get_images()[0]
        panel_b = _panel(fig, f"{column}: B\n{random}").get_images()[0]
        panel_d = _panel(fig, f"{column}: B - A\n{random}\nminus {real}").get_images()[0]
        np.testing.assert_allclose(np.asarray(panel_a.get_array()), want_a, rtol=1e-12, atol=0)
        np.testing.assert_allclose(np.asarray(panel_b.get_array()), want_b, rtol=1e-12, atol=0)
        np.testing.assert_allclose(np.asarray(panel_d.get_array()), want_b - want_a, rtol=0, atol=1e-12)
        # one colour scale for both runs, spanning both; the difference on its own scale, symmetric about 0
        both = np.concatenate([want_a.ravel(), want_b.ravel()])
        assert panel_a.get_clim() == panel_b.get_clim() == pytest.approx((both.min(), both.max()), abs=1e-12)
        bound = np.abs(want_b - want_a).max()
        assert panel_d.get_clim() == pytest.approx((-bound, bound), abs=1e-12) and bound > 0.01
        assert panel_a.get_cmap().name == panel_b.get_cmap().name == "viridis"
        assert panel_d.get_cmap().name == "RdBu_r"
        # one colour bar for the two runs (of their shared scale), one for the difference
        bars = [im.colorbar for im in (panel_a, panel_b, panel_d) if im.colorbar is not None]
        assert [bar.mappable for bar in bars] == [panel_b, panel_d]
    assert sum(ax.get_label() == "<colorbar>" for ax in fig.axes) == 2 * len(columns)
    assert len([ax for ax in fig.axes if ax.get_images()]) == 3 * len(columns)
    caption = fig.get_supxlabel().replace("\n", " ")  # the runs, at the figure's foot
    assert f"run {real} (model " in caption and f"compared with {random} (model " in caption


def test_comparison_of_layer_curves_overlays_the_runs_and_draws_the_difference(runs):
    root, real, random, _ = runs
    with atlas.open(root) as st:
        fig = st.plot("entropy", runs=[real, random])
        a, b = st.query("entropy", run=real), st.query("entropy", run=random)
    for column in ("entropy", "cls_entropy"):
        want_a, want_b = _single_grid(a, column), _single_grid(b, column)
        lines = {line.get_label(): line for line in _panel(fig, column).get_lines()}
        np.testing.assert_allclose(lines["A: layer mean"].get_ydata(), want_a.mean(axis=1), rtol=1e-12)
        np.testing.assert_allclose(lines["B: layer mean"].get_ydata(), want_b.mean(axis=1), rtol=1e-12)
        assert lines["uniform attention"].get_ydata()[0] == pytest.approx(a["uniform_entropy"][0], rel=1e-9)
        # every head of both runs as a point: the panel's points are the two grids' values
        points = np.sort(np.concatenate([c.get_offsets()[:, 1] for c in _panel(fig, column).collections]))
        np.testing.assert_allclose(points, np.sort(np.concatenate([want_a.ravel(), want_b.ravel()])), rtol=1e-12)
        difference = {line.get_label(): line for line in _panel(fig, f"{column}: B - A").get_lines()}
        np.testing.assert_allclose(
            difference["B - A: layer mean"].get_ydata(), (want_b - want_a).mean(axis=1), rtol=1e-9
        )
    assert fig.get_supxlabel().startswith(f"A: {real}; B: {random}\n")  # the letters of the legends


def test_plots_of_runs_of_another_shape_are_refused(runs, tmp_path):
    root, real, _, other = runs
    with atlas.open(root) as st, pytest.raises(AtlasError, match="2 layers x 2 heads.*6 x 12.*shapes match"):
        st.plot("relative position", runs=[real, other])
    out = tmp_path / "f.png"
    args = ["plot", "entropy", "--run", real, "--compare", other, "--store", root, "--out", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1, result.output
    assert f"--compare '{other}': its model has 2 layers x 2 heads" in result.output and not out.exists()


def test_cli_plot_compare_writes_the_api_figure_by_suffix(runs, tmp_path):
    root, real, random, _ = runs
    for suffix, magic in ((".png", b"\x89PNG"), (".svg", b"<?xml")):
        out = tmp_path / f"cli{suffix}"
        args = ["plot", "relative position", "--run", real, "--compare", random, "--store", root, "--out", str(out)]
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 0, result.output
        assert out.read_bytes().startswith(magic) and f"compared with {random}" in result.stderr
    with atlas.open(root) as st:
        save(st.plot("relative position", runs=[real, random]), tmp_path / "api.png")
    api_png, cli_png = (np.asarray(Image.open(tmp_path / f"{w}.png")) for w in ("api", "cli"))
    # the same figure: a colour or a printed value may flip where DuckDB's parallel averages differ in the last bit
    assert api_png.shape == cli_png.shape and np.mean(api_png != cli_png) < 1e-3


@pytest.mark.parametrize(
    ("name", "params", "args"),
    [
        ("best head per dependency relation", {"min_count": 3}, ", min_count := 3"),  # per relation
        ("entropy", {}, ""),  # per head
        ("special tokens", {}, ""),  # per layer (head NULL) and per head
    ],
)
def test_comparison_macro_in_the_duckdb_cli_is_query_compare(runs, tmp_path, name, params, args):
    root, real, random, other = runs
    with atlas.open(root) as st:
        frame = st.query(name, runs=[real, random], **params)
    db = Path(root) / "atlas.duckdb"
    result = shell(db, f"FROM {compare_macro_name(resolve(name))}(a := '{real}', b := '{random}'{args})", tmp_path)
    assert result.returncode == 0, result.stderr
    assert_same(macro_columns(frame, real, random), result.stdout)
    assert any(c.endswith("_diff") for c in macro_columns(frame, real, random).columns)
    result = shell(db, f"FROM {compare_macro_name(resolve(name))}(a := '{real}', b := '{other}'{args})", tmp_path)
    if name == "best head per dependency relation":  # per relation: aligned whatever the shapes
        with atlas.open(root) as st:
            assert_same(macro_columns(st.query(name, runs=[real, other], **params), real, other), result.stdout)
    else:
        assert result.returncode != 0, result.stdout
        assert f"b := '{other}': its model has 2 layers x 2 heads, the model of a := '{real}' 6 x 12" in result.stderr


def test_the_terminal_names_the_runs_compared_by_letters(runs):
    """In a terminal's table each run's columns are named by its letter (col@A), a line on stderr saying which run
    each is; a file or another format keeps the run ids."""
    root, real, random, _ = runs
    args = ["query", "entropy", "--run", real, "--compare", random, "--store", root]
    result = CliRunner().invoke(cli, [*args, "--limit", "2"], env={"COLUMNS": "200"})  # the names on one line each
    assert result.exit_code == 0, result.output
    assert f"columns @A: {real}; @B: {random}" in result.stderr.splitlines()
    assert "entropy@A" in result.stdout and "entropy_diff@B" in result.stdout and real not in result.stdout
    csv = CliRunner().invoke(cli, [*args, "--format", "csv"])
    assert f"entropy@{real},entropy@{random},entropy_diff@{random}" in csv.stdout.splitlines()[0]


def test_a_difference_of_doubles_has_the_digits_of_its_values():
    """A file's CSV or JSON shows every digit of a difference: b - a of doubles is given to the digits of the larger
    value; float32 and whole numbers are as computed, NULL stays NULL."""
    a, b, want = (list(column) for column in zip(*DIFFERENCES, strict=True))
    keys = {"layer": list(range(len(a))), "head": [0] * len(a)}
    old = pl.DataFrame({**keys, "x": a, "n": [1] * len(a)}, schema_overrides={"x": pl.Float64})
    new = pl.DataFrame({**keys, "x": b, "n": [4] * len(a)}, schema_overrides={"x": pl.Float64})
    frame = aligned(resolve("entropy"), {"A": old, "B": new})
    assert same_numbers(frame["x_diff@B"].to_list(), want), frame["x_diff@B"].to_list()
    assert frame["n_diff@B"].to_list() == [3] * len(a)
    single = aligned(resolve("entropy"), {"A": old.cast({"x": pl.Float32}), "B": new.cast({"x": pl.Float32})})
    assert single["x_diff@B"].dtype == pl.Float32


def test_letters_go_to_the_run_a_column_is_of():
    """A run id that ends another after an '@' (from a corpus named a@b.conllu) takes only its own columns."""
    frame = pl.DataFrame({"layer": [1], "e@b__m__h": [0.1], "e@a@b__m__h": [0.2], "e_diff@a@b__m__h": [0.1]})
    assert lettered(frame, ["b__m__h", "a@b__m__h"]).columns == ["layer", "e@A", "e@B", "e_diff@B"]
