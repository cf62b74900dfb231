"""Clark et al. Section 3 entries (relative position, special tokens, sep to sep, entropy) from the store
against General_Analysis.ipynb's procedure (cells 5 and 7) over transformers' eager attention."""

from __future__ import annotations

import numpy as np
import pytest

from atlas.catalogue import resolve, run_entry
from tests.conftest import GUM_SAMPLE, cut_conllu, make_store
from tests.reference import dense_inputs, pairs, read_sentences, surface

COLUMNS = {
    "relative position": ("prev", "next", "self"),
    "special tokens": ("cls", "sep", "dot_comma"),
    "sep to sep": ("sep_sep", "rest_sep", "to_itself", "to_other_sep"),
    "entropy": ("entropy", "cls_entropy", "uniform_entropy"),
}
FLOAT16 = 2**-11  # relative rounding error of a mass stored at float16 precision


@pytest.fixture(scope="module")
def pair_runs(tmp_path_factory, model):
    """The first 27 GUM sentences as [CLS] a [SEP] b [SEP] pairs (13 pairs and, the document's odd last
    sentence, one input with a single [SEP]), dense and with the default sparsity, and the reference."""
    root = tmp_path_factory.mktemp("pairs")
    corpus = cut_conllu(GUM_SAMPLE, 27, root / "gum27.conllu")
    dense = make_store(root / "dense", corpus, model, pack="pair", kept_mass=None)
    sparse = make_store(root / "sparse", corpus, model, pack="pair")
    return dense, sparse, surface(dense_inputs(model.source, pairs(read_sentences(corpus))))


def answer(store_and_run, phrase: str):
    store, run_id = store_and_run
    entry = resolve(phrase)
    return run_entry(store.connect(), entry, entry.bind({"run": run_id}))


def per_head(store_and_run, phrase: str) -> dict[str, np.ndarray]:
    df = answer(store_and_run, phrase)
    heads = df.filter(df["head"].is_not_null()).sort(["layer", "head"])
    n_layers, n_heads = heads["layer"].max(), heads["head"].max()
    return {c: heads[c].to_numpy().reshape(n_layers, n_heads) for c in COLUMNS[phrase]}


@pytest.mark.parametrize("phrase", sorted(COLUMNS))
def test_dense_store_equals_released_procedure(pair_runs, phrase):
    dense, _, ref = pair_runs
    for column, got in per_head(dense, phrase).items():
        np.testing.assert_allclose(got, ref[column], rtol=1e-5, atol=1e-6, err_msg=f"{phrase}: {column}")


@pytest.mark.parametrize("phrase", sorted(COLUMNS))
def test_default_sparsity_within_float16_precision(pair_runs, phrase):
    _, sparse, ref = pair_runs
    for column, got in per_head(sparse, phrase).items():
        if "entropy" in column:  # exact
            np.testing.assert_allclose(got, ref[column], rtol=1e-5, err_msg=f"{phrase}: {column}")
        else:  # averages of masses (at most 1) stored at float16 precision; to_other_sep is a difference of two
            atol = 2 * FLOAT16 if column == "to_other_sep" else FLOAT16
            np.testing.assert_allclose(got, ref[column], rtol=0, atol=atol, err_msg=f"{phrase}: {column}")


def test_inputs_weigh_the_same_not_rows(pair_runs):
    """Pooling every row (long inputs weighing more) gives other numbers: the test above can tell them apart."""
    dense, _, ref = pair_runs
    store, run_id = dense
    sql = "SELECT avg(to_sep) AS sep FROM attn_rows WHERE run_id = ? GROUP BY layer, head ORDER BY layer, head"
    pooled = store.connect().execute(sql, [run_id]).fetchnumpy()["sep"].reshape(ref["sep"].shape)
    assert np.abs(pooled - ref["sep"]).max() > 1e-3


def test_sep_to_sep_counts_the_inputs(pair_runs):
    """One input has a single [SEP]: its own counts (1 and n - 1, not the released 2 and n - 2) are checked
    by the equality with the reference above."""
    dense, _, _ = pair_runs
    df = answer(dense, "sep to sep")
    assert set(df["n_inputs"]) == {14} and set(df["one_sep_inputs"]) == {1}
    heads = per_head(dense, "sep to sep")
    np.testing.assert_allclose(heads["to_itself"] + heads["to_other_sep"], heads["sep_sep"], rtol=1e-6)


@pytest.mark.parametrize(
    ("phrase", "columns"), [("special tokens", ("cls", "sep", "dot_comma")), ("sep to sep", ("sep_sep", "rest_sep"))]
)
def test_per_layer_rows_average_the_heads(pair_runs, phrase, columns):
    dense, _, _ = pair_runs
    df = answer(dense, phrase)
    layers = df.filter(df["head"].is_null()).sort("layer")
    heads = per_head(dense, phrase)
    for column in columns:
        np.testing.assert_allclose(layers[column].to_numpy(), heads[column].mean(axis=1), rtol=1e-6)
    if phrase == "special tokens":
        assert np.allclose(layers[["cls", "sep", "dot_comma", "other"]].sum_horizontal().to_numpy(), 1, atol=1e-5)


def test_threshold_names_specialised_heads(pair_runs):
    dense, _, ref = pair_runs
    store, run_id = dense
    entry = resolve("relative position")
    df = run_entry(store.connect(), entry, entry.bind({"run": run_id, "threshold": "0.3"}))
    named = {(r["layer"], r["head"]) for r in df.iter_rows(named=True) if r["specialised"] == "next"}
    expected = {(layer + 1, head + 1) for layer, head in zip(*np.nonzero(ref["next"] > 0.3), strict=True)}
    assert named == expected - {
        (layer + 1, head + 1) for layer, head in zip(*np.nonzero(ref["prev"] > 0.3), strict=True)
    }
