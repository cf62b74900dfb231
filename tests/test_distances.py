"""'head distances': JS divergence between heads against head_distances.py's procedure over eager attention;
MDS and clusters stored."""

from __future__ import annotations

import numpy as np
import pytest

from atlas.catalogue import resolve, run_entry
from atlas.distances import compute
from atlas.errors import AtlasError
from atlas.plot import plot
from tests.conftest import EWT_SAMPLE, cut_conllu, make_store
from tests.reference import dense_attention, head_distance_sums, read_sentences


def test_head_distances_equal_the_released_sums_per_row(tmp_path, model):
    corpus = cut_conllu(EWT_SAMPLE, 6, tmp_path / "c.conllu")
    store, run_id = make_store(tmp_path / "s", corpus, model)
    compute(store, run_id, n_examples=4, n_clusters=5, progress=False)

    dense = [a for a, _ in dense_attention(model.source, read_sentences(corpus)[:4])]
    released = head_distance_sums(dense)
    k = released.shape[0]
    n_rows = sum(a.shape[-1] for a in dense)

    con = store.connect()
    pairs = con.execute(
        "SELECT js, n_rows FROM head_pairs WHERE run_id = ? ORDER BY layer_a, head_a, layer_b, head_b", [run_id]
    ).fetchnumpy()
    assert set(pairs["n_rows"]) == {n_rows}
    got = pairs["js"].reshape(k, k)
    np.testing.assert_allclose(got * n_rows, released, rtol=1e-6, atol=1e-9)  # the released number: the sum
    expected = released / n_rows

    entry = resolve("head distances")
    df = run_entry(con, entry, entry.bind({"run": run_id}))
    assert len(df) == k and set(df["cluster"]) == set(range(1, 6))
    # MDS keeps the far pairs far: the correlation of 2-D distances with the divergences is high
    xy = df.sort(["layer", "head"])[["mds_x", "mds_y"]].to_numpy()
    flat = np.linalg.norm(xy[:, None] - xy[None], axis=-1)[np.triu_indices(k, 1)]
    assert np.corrcoef(flat, expected[np.triu_indices(k, 1)])[0, 1] > 0.8
    closest = df.filter((df["layer"] == 1) & (df["head"] == 1))["closest_head"][0]
    others = expected[0].copy()
    others[0] = np.inf
    assert closest == f"{others.argmin() // 12 + 1}-{others.argmin() % 12 + 1}"
    plot(entry, df, tmp_path / "mds.png")  # the MDS scatter coloured by cluster
    assert (tmp_path / "mds.png").read_bytes()[:4] == b"\x89PNG"


def test_distances_refuse_a_different_model(tmp_path, model, monkeypatch):
    corpus = cut_conllu(EWT_SAMPLE, 2, tmp_path / "c.conllu")
    store, run_id = make_store(tmp_path / "s", corpus, model)
    import atlas.recompute as recompute

    real = recompute.load_model

    def other_weights(*args, **kwargs):
        lm = real(*args, **kwargs)
        lm.model_hash = "something else"
        return lm

    monkeypatch.setattr(recompute, "load_model", other_weights)
    with pytest.raises(AtlasError, match="is not the one the run was made with"):
        compute(store, run_id, n_examples=2, n_clusters=3, progress=False)
