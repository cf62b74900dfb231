"""Ingest: captured attention, resume after an interruption, packing, skipping, coreference mentions."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import atlas.ingestion.pipeline as pipeline
from atlas.cli import cli
from atlas.errors import AtlasError
from atlas.ingestion.corpus import check_corpus
from atlas.ingestion.run_id import MAX_EDGES
from atlas.ingestion.write import ChunkRows
from atlas.model.load import load_model
from atlas.store import Store, table_schemas
from tests.conftest import EWT_SAMPLE, GUM_SAMPLE, cut_conllu, interrupt_at_chunk, make_store
from tests.reference import dense_attention, read_sentences

TABLES = ("runs", "examples", "tokens", "words", "mentions", "attn_edges", "attn_rows", "word_rows")


def table(store: Store, name: str, run_id: str):
    order = {"runs": "run_id", "examples": "example_id"}.get(name, "ALL")
    sql = f"SELECT * EXCLUDE (run_id) FROM {name} WHERE run_id = ? ORDER BY {order}"
    if name == "runs":
        sql = "SELECT * EXCLUDE (created_at) FROM runs WHERE run_id = ?"
    return store.connect().execute(sql, [run_id]).pl()


def test_dense_edges_equal_transformers_eager_attention(dense_store, ewt_small, model):
    store, run_id = dense_store
    sentences = read_sentences(ewt_small)[:20]
    con = store.connect()
    for example_id, (attn, _) in enumerate(dense_attention(model.source, sentences)):
        rows = con.execute(
            "SELECT layer, head, src_tok, dst_tok, weight FROM attn_edges WHERE run_id = ? AND example_id = ?",
            [run_id, example_id],
        ).fetchnumpy()
        got = np.zeros_like(attn)
        got[rows["layer"], rows["head"], rows["src_tok"], rows["dst_tok"]] = rows["weight"]
        # float32 maps of a padded batch against one sentence at a time: sums in another order (2.2e-6 apart at most
        # on a CPU with AVX-512 kernels, under 2e-6 on an older one)
        np.testing.assert_allclose(got, attn, atol=1e-5)
        stats = con.execute(
            "SELECT entropy, argmax_tok FROM attn_rows WHERE run_id = ? AND example_id = ? "
            "ORDER BY layer, head, src_tok",
            [run_id, example_id],
        ).fetchnumpy()
        flat = attn.reshape(-1, attn.shape[-1]).astype(np.float64)
        smoothed = 0.9999 * flat + 0.0001 / flat.shape[-1]  # Clark et al.'s smoothing
        np.testing.assert_allclose(stats["entropy"], -(smoothed * np.log(smoothed)).sum(axis=1), atol=1e-4)
        top = flat.max(axis=1, keepdims=True)
        assert (flat[np.arange(len(flat)), stats["argmax_tok"]] >= top[:, 0] - 2e-6).all()  # the largest weight


def test_every_attention_row_is_complete_in_the_sparse_store(sparse_store):
    """Each row keeps its largest weights until their stored mass reaches 0.9, at most MAX_EDGES of them (the
    default), its argmax always; kept mass and edge count are the sum and count of its edges."""
    store, run_id = sparse_store
    con = store.connect()
    per_row = (
        "SELECT sum(e.weight) AS mass, count(*) AS n, min(e.weight) AS smallest, bool_or(e.dst_tok = r.argmax_tok) "
        "AS has_argmax FROM attn_rows r JOIN attn_edges e USING (run_id, example_id, layer, head, src_tok) "
        "WHERE r.run_id = $run GROUP BY r.example_id, r.layer, r.head, r.src_tok"
    )
    rows, most, reached, minimal, argmax, capped = con.execute(
        f"SELECT count(*), max(n), bool_and(mass >= 0.9 - 1e-6 OR n = {MAX_EDGES}), bool_and(mass - smallest < 0.9), "
        f"bool_and(has_argmax), count(*) FILTER (WHERE n = {MAX_EDGES} AND mass < 0.9) FROM ({per_row})",
        {"run": run_id},
    ).fetchone()
    assert rows == con.execute("SELECT count(*) FROM attn_rows WHERE run_id = ?", [run_id]).fetchone()[0]
    assert most == MAX_EDGES and reached and minimal and argmax and capped > 0  # the cap binds on some rows here
    steps = con.execute("SELECT DISTINCT weight * 256 AS s FROM attn_edges WHERE run_id = ?", [run_id]).fetchnumpy()
    steps = steps["s"]
    assert (steps == np.round(steps)).all() and steps.min() >= 1  # weights in steps of 1/256


def test_interrupted_ingest_resumes_to_the_same_rows(tmp_path, model, monkeypatch):
    corpus = cut_conllu(EWT_SAMPLE, 30, tmp_path / "c.conllu")
    whole, run_id = make_store(tmp_path / "whole", corpus, model, chunk_examples=8)
    real = pipeline.write_table
    interrupt_at_chunk(monkeypatch, 2)
    store = Store(tmp_path / "resumed")
    thresholds = gc.get_threshold()
    with pytest.raises(KeyboardInterrupt):
        pipeline.ingest(check_corpus(corpus), store, model, pipeline.Settings(chunk_examples=8), progress=False)
    assert store.connect().execute("SELECT count(*) FROM runs").fetchone()[0] == 0  # nothing visible yet
    assert gc.get_freeze_count() == 0  # the objects kept out of full collections during the ingest are back
    assert gc.get_threshold() == thresholds  # and the collector's thresholds as they were
    done_before = sorted(p.name for p in (store.staging / run_id / "done").iterdir())
    assert done_before == ["00000.json", "00001.json"]

    seen = set()
    monkeypatch.setattr(pipeline, "write_table", lambda d, chunk, *rest: (seen.add(chunk), real(d, chunk, *rest)))
    result = pipeline.ingest(check_corpus(corpus), store, model, pipeline.Settings(chunk_examples=8), progress=False)
    assert result.run_id == run_id and seen == {2, 3}  # only the unfinished chunks were computed again
    assert gc.get_freeze_count() == 0
    for name in TABLES:
        assert table(store, name, run_id).equals(table(whole, name, run_id)), name
    assert not (store.staging / run_id).exists()


def test_objects_the_caller_froze_stay_frozen(tmp_path, model):
    corpus = cut_conllu(EWT_SAMPLE, 4, tmp_path / "c.conllu")
    mine = [[]]
    gc.freeze()
    try:
        make_store(tmp_path / "s", corpus, model)
        assert gc.get_freeze_count() > 0 and not any(o is mine for o in gc.get_objects())  # frozen: not listed
    finally:
        gc.unfreeze()
    assert any(o is mine for o in gc.get_objects())


def test_pair_packing_and_long_sentences_are_skipped_and_recorded(tmp_path, model):
    corpus = cut_conllu(EWT_SAMPLE, 20, tmp_path / "c.conllu")
    lengths = [len(s.forms) for s in read_sentences(corpus)]
    store, run_id = make_store(tmp_path / "s", corpus, model, pack="pair", max_length=40)
    con = store.connect()
    ex = con.execute("SELECT n_sentences, n_tokens, skipped FROM examples ORDER BY example_id").fetchall()
    assert all(n <= 40 for _, n, skipped in ex if not skipped)
    skipped = sum(1 for _, _, s in ex if s)
    assert skipped >= 1 and con.execute("SELECT n_skipped FROM runs").fetchone()[0] == skipped
    assert sum(n for n, _, _ in ex) == len(lengths)
    pair = con.execute(
        "SELECT example_id FROM examples WHERE n_sentences = 2 AND NOT skipped ORDER BY example_id LIMIT 1"
    ).fetchone()[0]
    toks = con.execute("SELECT special, segment FROM tokens WHERE example_id = ? ORDER BY tok_idx", [pair]).fetchall()
    specials = [(i, s) for i, (s, _) in enumerate(toks) if s]
    assert specials[0] == (0, "[CLS]") and [s for _, s in specials] == ["[CLS]", "[SEP]", "[SEP]"]
    first_sep = specials[1][0]
    assert {seg for _, seg in toks[: first_sep + 1]} == {0} and {seg for _, seg in toks[first_sep + 1 :]} == {1}
    # words of the second sentence point to heads in the second sentence
    bad = con.execute(
        "SELECT count(*) FROM words w JOIN words h ON h.example_id = w.example_id AND h.word_idx = w.head_word_idx "
        "WHERE w.sent_id <> h.sent_id"
    ).fetchone()[0]
    assert bad == 0


def test_window_packing_keeps_mentions_inside_inputs(tmp_path, model):
    store, run_id = make_store(tmp_path / "s", GUM_SAMPLE, model, pack="window", max_length=128)
    con = store.connect()
    n_examples, n_mentions = con.execute("SELECT count(*), (SELECT count(*) FROM mentions) FROM examples").fetchone()
    assert n_examples < 52 and n_mentions > 300
    assert con.execute("SELECT max(n_tokens) FROM examples WHERE NOT skipped").fetchone()[0] <= 128
    # the single-word mention 'Introduction' (entity 1) and a hand-checked span with its head word
    first = con.execute(
        "SELECT m.entity_id, w.form, m.mention_type FROM mentions m JOIN words w "
        "ON w.example_id = m.example_id AND w.word_idx = m.head_word WHERE m.example_id = 0 AND m.mention_id = 0"
    ).fetchone()
    assert first == ("1", "Introduction", "nominal")
    assert (
        con.execute(
            "SELECT count(*) FROM mentions m JOIN words w ON w.example_id = m.example_id AND w.word_idx = m.head_word "
            "WHERE (w.upos = 'PRON') <> (m.mention_type = 'pronoun')"
        ).fetchone()[0]
        == 0
    )


def test_random_init_is_seeded_and_differs(tmp_path, model):
    corpus = cut_conllu(EWT_SAMPLE, 2, tmp_path / "c.conllu")
    a = load_model(None, random_init=True, seed=7)
    b = load_model(None, random_init=True, seed=7)
    c = load_model(None, random_init=True, seed=8)
    assert a.model_hash == b.model_hash != c.model_hash != model.model_hash
    sa, ra = make_store(tmp_path / "a", corpus, a, kept_mass=None)
    sb, rb = make_store(tmp_path / "b", corpus, b, kept_mass=None)
    assert ra == rb and "random7" in ra
    assert table(sa, "attn_edges", ra).equals(table(sb, "attn_edges", rb))


def test_model_whose_attention_is_not_captured_is_refused(tmp_path):
    lm = load_model(None)
    lm.model.config._attn_implementation = "sdpa"  # attention no longer routes through the capture function
    corpus = cut_conllu(EWT_SAMPLE, 2, tmp_path / "c.conllu")
    with pytest.raises(AtlasError, match="captured for 0 of 6 layers"):
        make_store(tmp_path / "s", corpus, lm)
    assert not (tmp_path / "s").exists()  # the failed ingest left nothing behind


def test_ingest_on_an_explicit_cpu_is_the_same_run(tmp_path, model):
    """--device cpu runs the one code path (model, maps and the work per weight on the device) into the store the
    API gives on the CPU; the device is not part of the run."""
    corpus = cut_conllu(EWT_SAMPLE, 6, tmp_path / "c.conllu")
    api_store, run_id = make_store(tmp_path / "api", corpus, model, device="cpu")
    result = CliRunner().invoke(
        cli, ["ingest", "--corpus", str(corpus), "--device", "cpu", "--store", str(tmp_path / "cli"), "--quiet"]
    )
    assert result.exit_code == 0, result.output
    cli_store = Store(tmp_path / "cli")
    assert cli_store.run_ids() == [run_id]
    for name in TABLES:
        assert table(cli_store, name, run_id).equals(table(api_store, name, run_id)), name
    if not torch.cuda.is_available():
        result = CliRunner().invoke(
            cli, ["ingest", "--corpus", str(corpus), "--device", "cuda", "--store", str(tmp_path / "x")]
        )
        assert result.exit_code == 1 and "--device 'cuda': torch sees no CUDA device" in result.output
        assert not (tmp_path / "x").exists()


def test_max_edges_caps_every_row_and_is_part_of_the_run(tmp_path, model):
    corpus = cut_conllu(EWT_SAMPLE, 6, tmp_path / "c.conllu")
    store, capped = make_store(tmp_path / "s", corpus, model, max_edges=3)
    _, default = make_store(tmp_path / "s", corpus, model)
    _, dense = make_store(tmp_path / "s", corpus, model, kept_mass=None, max_edges=3)  # no cap on a dense run
    assert len({capped, default, dense}) == 3
    con = store.connect()
    most = con.execute(
        "SELECT max(n) FROM (SELECT count(*) AS n FROM attn_edges WHERE run_id = ? "
        "GROUP BY example_id, layer, head, src_tok)",
        [capped],
    )
    assert most.fetchone()[0] == 3
    runs = "SELECT max_edges, weight_precision FROM runs WHERE run_id = ?"
    assert con.execute(runs, [capped]).fetchone() == (3, "1/256")
    assert con.execute(runs, [dense]).fetchone() == (None, "float32")
    result = CliRunner().invoke(cli, ["ingest", "--corpus", str(corpus), "--dense", "--max-edges", "3"])
    assert result.exit_code == 1 and "--max-edges: --dense keeps every weight" in result.output


def test_a_chunk_puts_its_batches_rows_in_example_order():
    """Forward batches come by length, not in example order: each input's rows, masked entries too, are moved
    to the place of its example id when the chunk's table is built."""

    def columns(table: str, **given: np.ndarray) -> dict[str, np.ndarray]:  # the columns not given: zeros
        n = len(next(iter(given.values())))
        fields = [f for f in table_schemas()[table] if f.name not in ("run_id", "example_id")]
        return {f.name: given.get(f.name, np.zeros(n, f.type.to_pandas_dtype())) for f in fields}

    rows = ChunkRows(dense=False)
    first = columns("attn_rows", layer=np.arange(5), to_first=np.ma.array(np.arange(5.0), mask=[1, 1, 0, 0, 0]))
    edges = columns("attn_edges", weight=np.array([0.5, 0.25, 1.0]))
    rows.add_attention([3, 0], {"attn_rows": (first, np.array([2, 3])), "attn_edges": (edges, np.array([1, 2]))})
    second = columns("attn_rows", layer=np.arange(5, 9), to_first=np.arange(5.0, 9.0))
    edges = columns("attn_edges", weight=np.array([0.75]))
    rows.add_attention([2, 1], {"attn_rows": (second, np.array([1, 3])), "attn_edges": (edges, np.array([0, 1]))})
    table = rows.table("attn_rows")
    assert table["example_id"].to_pylist() == [0, 0, 0, 1, 1, 1, 2, 3, 3]
    assert table["layer"].to_pylist() == [2, 3, 4, 6, 7, 8, 5, 0, 1]
    assert table["to_first"].to_pylist() == [2.0, 3.0, 4.0, 6.0, 7.0, 8.0, 5.0, None, None]
    assert rows.table("attn_edges")["weight"].to_pylist() == [0.25, 1.0, 0.75, 0.5] and rows.n_edges == 4
