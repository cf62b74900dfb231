"""Norm-based attention (Kobayashi et al. 2020) and attention rollout (Abnar & Zuidema 2020), checked against
references written from the authors' released code (``norm_reference``: ``BertNormOutput``, ``re-examine.py``,
``relation_between_alpha_fx.py``, ``compute_joint_attention``), run on transformers' own eager maps of the same
inputs, never on the store's values: the embedded encoder and a random Llama-shaped decoder with grouped-query
attention. Every family's value norms and rollout are checked in ``test_families``, an input read by rows in
``test_long_inputs``."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner
from conftest import EWT_SAMPLE, answer_or_refusal, cut_conllu, make_store, rewrite_as_before
from norm_reference import (
    attention_maps,
    layer_average,
    pool_layers,
    reexamine,
    reexamine_corpus,
    rollout,
    spearman,
    spearman_pairs,
    token_classes,
    value_norms,
)
from polars.testing import assert_frame_equal
from test_families import CASES, build
from transformers import AutoModel

import atlas
from atlas.errors import AtlasError
from atlas.ingestion import budget, pipeline
from atlas.model.identity import default_model_path
from atlas.model.load import load_model
from cli import cli

KINDS = ("cls", "sep", "dot_comma", "other")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return cut_conllu(EWT_SAMPLE, 8, tmp_path_factory.mktemp("ewt") / "ewt-8.conllu")


@pytest.fixture(scope="module")
def dense(tmp_path_factory, corpus, model):
    root = tmp_path_factory.mktemp("dense")
    make_store(root, corpus, model, kept_mass=None, norms=True, rollout="cls")
    return root


@pytest.fixture(scope="module")
def eager():
    return AutoModel.from_pretrained(default_model_path(), attn_implementation="eager").eval()


def _inputs(root) -> list[tuple[list[int], list[str]]]:
    """Each input's piece ids and pieces, as stored."""
    sql = atlas.open(root).connection.sql
    rows = sql("SELECT example_id, list(piece_id ORDER BY tok_idx), list(piece ORDER BY tok_idx) FROM tokens "
               "GROUP BY example_id ORDER BY example_id").fetchall()  # fmt: skip
    return [(ids, pieces) for _, ids, pieces in rows]


@pytest.fixture(scope="module")
def reference(dense, eager):
    """Per input: the eager maps [L, H, n, n], the released value norms [L, H, n] and the token classes."""
    out = []
    for ids, pieces in _inputs(dense):
        ids_t = torch.tensor([ids])
        out.append((attention_maps(eager, ids_t), value_norms(eager, ids_t), token_classes(pieces)))
    return out


def test_value_norms_are_the_released_ones(dense, reference):
    sql = atlas.open(dense).connection.sql
    for ex, (_, norms, _) in enumerate(reference):
        rows = sql(f"SELECT layer, head, src_tok, value_norm FROM attn_rows WHERE example_id = {ex}").fetchnumpy()
        got = np.zeros_like(norms)
        got[rows["layer"], rows["head"], rows["src_tok"]] = rows["value_norm"]
        np.testing.assert_allclose(got, norms, rtol=1e-5)


def _answer(root, name: str, **params):
    return atlas.open(root).query(name, **params)


def test_norm_based_attention_is_re_examine(dense, reference):
    _same_norm_based_attention(dense, reference)


def _same_norm_based_attention(root, reference) -> None:
    """weight and norm as re-examine.py averages them (per input the mean over its rows, then over inputs, then over
    a layer's heads), share (the project's own) as a share of each row's whole, the same way."""
    per_input = [reexamine(maps, norms, classes) for maps, norms, classes in reference]
    heads = reexamine_corpus(per_input)
    layers = layer_average(heads)
    shares = []
    for maps, norms, classes in reference:
        drawn = maps * norms[:, :, None, :]  # alpha_ij ||f(x_j)||
        whole = drawn.sum(axis=-1)
        shares.append({c: (drawn[..., m].sum(axis=-1) / whole).mean(axis=-1) for c, m in classes.items()})
    share = {c: np.mean([s[c] for s in shares], axis=0) for c in KINDS}
    answer = _answer(root, "norm-based attention")
    n_layers, n_heads = heads["cls"]["weight"].shape
    assert answer.height == n_layers * (n_heads + 1) * len(KINDS)
    for row in answer.iter_rows(named=True):
        layer, kind = row["layer"] - 1, row["kind"]
        if row["head"] is None:
            want = {k: layers[kind][k][layer] for k in ("weight", "norm")}
            want["share"] = share[kind][layer].mean()
        else:
            h = row["head"] - 1
            want = {k: heads[kind][k][layer, h] for k in ("weight", "norm")} | {"share": share[kind][layer, h]}
        for column, value in want.items():
            assert row[column] == pytest.approx(value, rel=1e-6, abs=1e-7), (row, column)


def test_weight_norm_correlation_is_the_released_spearman(dense, reference):
    _same_correlation(dense, reference)


def _same_correlation(root, reference, causal: bool = False) -> None:
    """Spearman per layer and pooled over layers, as relation_between_alpha_fx.py pools the pairs (a decoder's: the
    key at or before the query); mean ||f(x)|| per kind as re-examine.py, an input without the kind left out."""
    maps, norms, classes = zip(*reference, strict=True)
    pairs = spearman_pairs(list(maps), list(norms), causal=causal)
    per_input = [reexamine(m, f, c) for m, f, c in reference]
    fnorm = {k: np.nanmean(np.stack([r[k]["fnorm"] for r in per_input]), axis=0) for k in KINDS}  # [L, H]
    answer = _answer(root, "weight-norm correlation")
    assert answer["layer"].to_list() == [*range(1, len(pairs) + 1), None]
    for row in answer.iter_rows(named=True):
        if row["layer"] is None:
            x, y = pool_layers(pairs)
            want = {f"f_{k}": fnorm[k].mean() for k in KINDS}
        else:
            x, y = pairs[row["layer"] - 1]
            want = {f"f_{k}": fnorm[k][row["layer"] - 1].mean() for k in KINDS}
        assert row["pairs"] == len(x)
        assert row["spearman"] == pytest.approx(spearman(x, y), abs=1e-6)
        for column, value in want.items():
            if np.isnan(value):  # no input has a token of the kind (a decoder's [SEP])
                assert row[column] is None, (row["layer"], column)
            else:
                assert row[column] == pytest.approx(value, rel=1e-6), (row["layer"], column)


def test_rollout_rows_are_compute_joint_attention(dense, reference):
    joint = [rollout(maps) for maps, _, _ in reference]
    st = atlas.open(dense)
    for ex, rows in enumerate(joint):
        got = st.query("rollout attributions", example=ex).sort("layer", "tok_idx")
        assert set(got["src_tok"]) == {0}  # the input's [CLS]
        n = rows.shape[-1]
        np.testing.assert_allclose(got["weight"].to_numpy(), rows[:, 0, :].ravel(), atol=1e-6)
        assert got.height == rows.shape[0] * n
    summary = st.query("attention rollout")
    for row in summary.iter_rows(named=True):
        layer = row["layer"] - 1
        firsts = [j[layer, 0] for j in joint]
        assert row["self"] == pytest.approx(np.mean([f[0] for f in firsts]), abs=1e-6)
        assert row["sep"] == pytest.approx(np.mean([f[-1] for f in firsts]), abs=1e-6)  # each input's one [SEP]
        assert row["words"] == pytest.approx(np.mean([f[1:-1].sum() for f in firsts]), abs=1e-6)
        assert row["cls"] == 0  # the row's own [CLS] counts as itself


def test_a_grouped_query_decoder_keeps_its_last_tokens_rollout_and_value_norms(tmp_path, corpus):
    folder = build(CASES["llama"], tmp_path / "llama")
    lm = load_model(str(folder))
    assert lm.model.config.num_key_value_heads < lm.n_heads
    with pytest.raises(AtlasError, match=r"^rollout='cls': .* is a decoder, whose first token attends only to itself"):
        atlas.ingest(str(corpus), model=str(folder), store=str(tmp_path / "refused"), rollout="cls", progress=False)
    assert not (tmp_path / "refused").exists()
    make_store(tmp_path / "store", corpus, lm, kept_mass=None, norms=True, rollout="last")
    model = AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    st = atlas.open(tmp_path / "store")
    sql = st.connection.sql
    lasts, reference = [], []
    for ex, (ids, pieces) in enumerate(_inputs(tmp_path / "store")):
        maps = attention_maps(model, torch.tensor([ids]))
        classes = token_classes(pieces, cls=lm.tokenizer.bos_token, sep=lm.tokenizer.eos_token)  # BOS: cls
        reference.append((maps, value_norms(model, torch.tensor([ids])), classes))
        rows = sql(f"SELECT layer, head, src_tok, value_norm FROM attn_rows WHERE example_id = {ex}").fetchnumpy()
        got = np.zeros(maps.shape[:3])
        got[rows["layer"], rows["head"], rows["src_tok"]] = rows["value_norm"]
        np.testing.assert_allclose(got, value_norms(model, torch.tensor([ids])), rtol=1e-5)
        joint = rollout(maps)
        stored = st.query("rollout attributions", example=ex).sort("layer", "tok_idx")
        assert set(stored["src_tok"]) == {len(ids) - 1}
        np.testing.assert_allclose(stored["weight"].to_numpy(), joint[:, -1, :].ravel(), atol=1e-6)
        lasts.append(joint[:, -1, :])
    summary = st.query("attention rollout")  # the run's own rows: the last token's
    np.testing.assert_allclose(summary["self"].to_numpy(), np.mean([r[:, -1] for r in lasts], axis=0), atol=1e-6)
    _same_norm_based_attention(tmp_path / "store", reference)
    _same_correlation(tmp_path / "store", reference, causal=True)


def test_a_sparse_run_keeps_the_norms_at_their_stated_precision(tmp_path, corpus, model, dense):
    make_store(tmp_path, corpus, model, norms=True, rollout="all")
    sparse, whole = atlas.open(tmp_path).connection.sql, atlas.open(dense).connection.sql
    query = "SELECT value_norm FROM attn_rows ORDER BY example_id, layer, head, src_tok"
    got, want = sparse(query).fetchnumpy()["value_norm"], whole(query).fetchnumpy()["value_norm"]
    np.testing.assert_allclose(got, want, rtol=2**-11)
    assert not np.array_equal(got, want)  # rounded
    query = "SELECT * EXCLUDE (run_id) FROM head_norms ORDER BY example_id, layer, head"
    for column, values in sparse(query).fetchnumpy().items():
        np.testing.assert_allclose(values, whole(query).fetchnumpy()[column], rtol=1e-6, err_msg=column)
    a, b = (_answer(root, "norm-based attention") for root in (tmp_path, dense))
    np.testing.assert_allclose(a["weight"].to_numpy(), b["weight"].to_numpy(), atol=2**-12)
    np.testing.assert_allclose(a.select("norm", "share").to_numpy(), b.select("norm", "share").to_numpy(), rtol=1e-5)
    # --rollout all keeps each row as the edges are: the argmax and the largest weights up to 0.9, at most 6
    rows = sparse("SELECT example_id, layer, src_tok, count(*) AS k, sum(weight) AS kept, max(weight) AS top "
                  "FROM rollout GROUP BY ALL").fetchnumpy()  # fmt: skip
    assert (rows["k"] <= 6).all() and ((rows["kept"] >= 0.9 - 6 * 2**-9) | (rows["k"] == 6)).all()
    cls_rows = sparse("SELECT layer, dst_tok, weight FROM rollout WHERE example_id = 0 AND src_tok = 0").fetchnumpy()
    want = whole("SELECT layer, dst_tok, weight FROM rollout WHERE example_id = 0").fetchnumpy()
    dense_rows = {(la, d): w for la, d, w in zip(want["layer"], want["dst_tok"], want["weight"], strict=True)}
    for la, d, w in zip(cls_rows["layer"], cls_rows["dst_tok"], cls_rows["weight"], strict=True):
        assert abs(w - dense_rows[la, d]) <= 2**-9


def test_norms_and_rollout_change_no_other_column(tmp_path, corpus, model):
    plain, _ = make_store(tmp_path / "plain", corpus, model)
    normed, _ = make_store(tmp_path / "normed", corpus, model, norms=True, rollout="cls")
    for table, keys in (("attn_rows", "example_id, layer, head, src_tok"),
                        ("attn_edges", "example_id, layer, head, src_tok, dst_tok"),
                        ("word_rows", "example_id, layer, head, src_word")):  # fmt: skip
        left_out = "run_id, value_norm" if table == "attn_rows" else "run_id"
        query = f"SELECT * EXCLUDE ({left_out}) FROM {table} ORDER BY {keys}"
        a, b = (atlas.open(s.root).connection.sql(query).fetchnumpy() for s in (plain, normed))
        for column in a:
            np.testing.assert_array_equal(a[column], b[column], err_msg=f"{table}.{column}")
    a, b = (atlas.open(s.root).query("special tokens") for s in (plain, normed))
    assert_frame_equal(a, b, check_exact=False, rel_tol=1e-12, abs_tol=1e-12)


def test_runs_without_them_are_told_how_to_get_them(sparse_store, dense):
    root = sparse_store[0].root
    for name, words in (("norm-based attention", "ingest again with --norms"),
                        ("weight-norm correlation", "ingest again with --norms"),
                        ("attention rollout", "ingest again with --rollout cls"),
                        ("rollout attributions", "ingest again with --rollout cls")):  # fmt: skip
        refused = answer_or_refusal(root, name, {})
        assert isinstance(refused, AtlasError) and words in str(refused), (name, refused)
        assert "\n" not in str(refused)
    refused = answer_or_refusal(dense, "attention rollout", {"token": "last"})
    assert "keeps other rollout rows than those token=last asks for: ingest again with --rollout all" in str(refused)
    refused = answer_or_refusal(dense, "attention rollout", {"token": "first"})
    assert "expected cls, last, a position" in str(refused)
    with pytest.raises(AtlasError, match=r"^rollout='each': expected one of none, cls, last, all$"):
        atlas.ingest(str(EWT_SAMPLE), store=str(dense), rollout="each", progress=False)
    result = CliRunner().invoke(cli, ["ingest", "--corpus", str(EWT_SAMPLE), "--rollout", "each"])
    assert result.exit_code == 1
    assert result.output.strip() == "Error: --rollout each: expected one of none, cls, last, all"


@pytest.mark.parametrize("longest", [0, 20])
def test_an_input_read_by_rows_has_no_rollout_and_the_ingest_says_so(tmp_path, corpus, monkeypatch, longest):
    """With room for the whole maps of inputs of ``longest`` pieces (0: none), the longer ones are read by rows."""
    room = budget.Budget(6 * 12 * longest**2, 4_000_000)  # the embedded model: 6 layers of 12 heads
    monkeypatch.setattr(pipeline, "budget_for", lambda _device: room)
    result = CliRunner().invoke(
        cli, ["ingest", "--corpus", str(corpus), "--store", str(tmp_path), "--rollout", "cls", "--norms", "--quiet"]
    )
    assert result.exit_code == 0, result.output
    sql = atlas.open(tmp_path).connection.sql
    lengths = [n for (n,) in sql("SELECT n_tokens FROM examples WHERE NOT skipped").fetchall()]
    by_rows = sum(n > longest for n in lengths)
    kept = max((n for n in lengths if n <= longest), default=None)
    assert 0 < by_rows and (longest == 0 or kept is not None)
    has = "no input has one" if kept is None else f"the longest with one: {kept} pieces"
    assert f"{by_rows} inputs were too long for whole maps on this device: read in blocks of rows, without a " \
           f"rollout ({has})" in result.output  # fmt: skip
    with_rollout = sql("SELECT count(DISTINCT example_id) FROM rollout").fetchone()[0]
    assert with_rollout == len(lengths) - by_rows
    assert sql("SELECT count(*) FROM attn_rows WHERE value_norm IS NULL").fetchone() == (0,)


def _before_norms(root, run_id: str) -> None:
    """Rewrite a run as the atlas wrote it before value norms and rollout: no value_norm, tokens.dot_comma,
    runs.value_norms or runs.rollout columns, no head_norms or rollout tables, views of another schema."""
    dropped = {"attn_rows": ["value_norm"], "tokens": ["dot_comma"], "runs": ["value_norms", "rollout"]}
    rewrite_as_before(root, run_id, ("head_norms", "rollout"), dropped)


def test_a_store_written_before_them_answers_exports_and_compares(tmp_path, corpus, model):
    root = tmp_path / "store"
    _, old = make_store(root, corpus, model)
    before = {name: atlas.open(root).query(name) for name in ("special tokens", "entropy", "attention sink")}
    _before_norms(root, old)
    st = atlas.open(root)
    for name, answer in before.items():  # DuckDB's parallel sums may differ in the last bits
        assert_frame_equal(st.query(name), answer, check_exact=False, rel_tol=1e-12, abs_tol=1e-12)
    for name in ("norm-based attention", "attention rollout"):
        with pytest.raises(AtlasError, match=f"^run {old} keeps no attention rollout|^run {old} holds no value norms"):
            st.query(name, run=old)
    _, new = make_store(root, corpus, model, norms=True, rollout="cls")
    st = atlas.open(root)
    assert st.query("norm-based attention", run=new).height > 0
    compared = st.query("special tokens", runs=[old, new])
    assert compared.height == before["special tokens"].height
    np.testing.assert_array_equal(compared[f"cls@{old}"].to_numpy(), compared[f"cls@{new}"].to_numpy())
    _, dense = make_store(root, corpus, model, kept_mass=None, norms=True)
    st = atlas.open(root)
    compared = st.query("norm-based attention", runs=[new, dense])  # aligned on layer, head and kind
    alone = st.query("norm-based attention", run=dense)
    assert compared.height == alone.height
    np.testing.assert_allclose(compared[f"share@{dense}"].to_numpy(), alone["share"].to_numpy(), rtol=1e-12)
    out = tmp_path / "export"
    counts = st.export(out, run=old, progress=False)
    assert counts["rollout"] == counts["head_norms"] == 0 and counts["attn_rows"] > 0
    rows = pq.read_table(out / "attn_rows.parquet")
    assert rows.column("value_norm").null_count == rows.num_rows
