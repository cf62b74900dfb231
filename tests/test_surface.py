"""Clark et al. Section 3 entries (relative position, special tokens, sep to sep, entropy) from the store
against plain loops over transformers' eager attention."""

from __future__ import annotations

import numpy as np
import pytest

from atlas.catalogue import resolve, run_entry
from tests.conftest import GUM_SAMPLE, make_store
from tests.reference import dense_inputs, pairs, read_sentences, surface

COLUMNS = {
    "relative position": ("prev", "next", "self"),
    "special tokens": ("cls", "sep", "dot_comma"),
    "sep to sep": ("to_itself", "to_other_sep"),
    "entropy": ("entropy", "uniform_entropy", "cls_entropy", "cls_uniform_entropy"),
}


@pytest.fixture(scope="module")
def pair_runs(tmp_path_factory, model):
    """GUM sample as [CLS] a [SEP] b [SEP] pairs, dense and with the default sparsity, and the reference."""
    root = tmp_path_factory.mktemp("pairs")
    dense = make_store(root / "dense", GUM_SAMPLE, model, pack="pair", kept_mass=None)
    sparse = make_store(root / "sparse", GUM_SAMPLE, model, pack="pair")
    return dense, sparse, surface(dense_inputs(model.source, pairs(read_sentences(GUM_SAMPLE))))


def per_head(store_and_run, phrase: str) -> dict[str, np.ndarray]:
    store, run_id = store_and_run
    entry = resolve(phrase)
    df = run_entry(store.connect(), entry, entry.bind({"run": run_id}))
    heads = df.filter(df["head"].is_not_null()).sort(["layer", "head"])
    n_layers, n_heads = heads["layer"].max(), heads["head"].max()
    return {c: heads[c].to_numpy().reshape(n_layers, n_heads) for c in COLUMNS[phrase]}


@pytest.mark.parametrize("phrase", sorted(COLUMNS))
def test_dense_store_equals_loops(pair_runs, phrase):
    dense, _, ref = pair_runs
    for column, got in per_head(dense, phrase).items():
        np.testing.assert_allclose(got, ref[column], rtol=1e-5, atol=1e-6, err_msg=f"{phrase}: {column}")


@pytest.mark.parametrize("phrase", sorted(COLUMNS))
def test_default_sparsity_within_float16_precision(pair_runs, phrase):
    _, sparse, ref = pair_runs
    for column, got in per_head(sparse, phrase).items():
        if "entropy" in column:  # exact
            np.testing.assert_allclose(got, ref[column], rtol=1e-5, err_msg=f"{phrase}: {column}")
        else:  # masses (at most 1) are stored at float16 precision: absolute error at most 2**-11
            np.testing.assert_allclose(got, ref[column], rtol=0, atol=2**-11, err_msg=f"{phrase}: {column}")


def test_per_layer_rows_average_the_heads(pair_runs):
    dense, _, _ = pair_runs
    store, run_id = dense
    entry = resolve("special tokens")
    df = run_entry(store.connect(), entry, entry.bind({"run": run_id}))
    layers = df.filter(df["head"].is_null()).sort("layer")
    heads = per_head(dense, "special tokens")
    np.testing.assert_allclose(layers["sep"].to_numpy(), heads["sep"].mean(axis=1), rtol=1e-6)
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
