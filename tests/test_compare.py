"""One entry across runs: the comparison equals the single-run answers joined on the entry's keys, with the
differences to the first run; runs of another shape, entries without a run and bad run lists are refused."""

from __future__ import annotations

import json

import polars as pl
import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal, assert_series_equal

import atlas
from atlas.errors import AtlasError
from atlas.model.load import load_model
from cli import cli
from tests.conftest import EWT_SAMPLE, cut_conllu, make_store

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
    assert f"--compare {other}: its model has 2 layers x 2 heads" in result.output


def test_bad_comparisons_are_refused_in_one_line(runs):
    root, real, random, _ = runs
    with atlas.open(root) as st:
        with pytest.raises(AtlasError, match="takes no run"):
            st.query("glue baselines", runs=[real, random])
        with pytest.raises(AtlasError, match="two or more different runs"):
            st.query("entropy", runs=[real, real])
        with pytest.raises(AtlasError, match="--compare 'nope': no such run"):
            st.query("entropy", runs=[real, "nope"])
