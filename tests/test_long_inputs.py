"""Inputs read in blocks of rows (``atlas.ingestion.block_rows``): an input whose maps exceed the attention budget is
run with its attention computed a block of rows at a time, never a layer's whole map. Here the budget is made tiny, so
that every input of a small corpus goes that way (a block of one word's rows), and the stored rows, edges and word rows
are compared with those of the whole maps: for every family whose attention goes through transformers' interface,
sparse and dense, with a decoder's causal mask and sliding windows, and with the embedded model; each both ways the
rows are computed, by the CPU's compiled pass (``atlas.ingestion.cpu_rows.CpuBlockRows``) and by the tensor operations
an accelerator runs (``atlas.ingestion.block_rows.BlockRows``, here on the CPU)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import GUM_SAMPLE, cut_conllu, make_store
from test_families import CASES, build

import atlas
from atlas.ingestion import block_rows, cpu_rows, pipeline
from atlas.ingestion import sparsify as sparsify_module
from atlas.ingestion.budget import BATCH_BYTES, BATCH_SHARE, BLOCK_BYTES, BLOCK_SHARE, Budget, budget_for
from atlas.ingestion.row_batch import RowBatch, cuts, row_blocks
from atlas.ingestion.sparsify import ENTROPY_SMOOTHING, WEIGHT_STEP
from atlas.model.forward import stream_rows
from atlas.model.load import load_model

TABLES = {
    "attn_edges": "example_id, layer, head, src_tok, dst_tok",
    "attn_rows": "example_id, layer, head, src_tok",
    "word_rows": "example_id, layer, head, src_word",
    "head_norms": "example_id, layer, head",
}
# head_norms, an input read by rows against its whole maps: relative differences measured up to 1.6e-5 (float32
# differences of the maps carried through the layers); 2**-13 is 1,024 float32 steps, where a row left out or a key of
# another kind moves a sum by about one row's share of it (a 64-piece window: 1/64)
HEAD_NORMS_RTOL = 2**-13
EXACT = {"example_id", "layer", "head", "src_tok", "dst_tok", "argmax_tok", "src_word", "dst_word", "from_word"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return cut_conllu(GUM_SAMPLE, 12, tmp_path_factory.mktemp("gum") / "gum-12.conllu")


def _tables(root) -> dict[str, dict[str, np.ndarray]]:
    sql = atlas.open(root).connection.sql
    return {name: sql(f"SELECT * EXCLUDE (run_id) FROM {name} ORDER BY {keys}").fetchnumpy()
            for name, keys in TABLES.items()}  # fmt: skip


ENGINES = {"compiled": cpu_rows.CpuBlockRows, "tensors": block_rows.BlockRows}


def _by_rows(monkeypatch, block_weights: int = 1, engine: str = "compiled") -> list[int]:
    """Make every input go by rows (blocks of ``block_weights`` weights: 1 is a word's rows), their rows computed by
    ``engine`` (one of ``ENGINES``); count the blocks."""
    blocks = []
    monkeypatch.setattr(pipeline, "budget_for", lambda _device: Budget(1, block_weights))
    rows_of = ENGINES[engine]
    monkeypatch.setattr(sparsify_module, "CpuBlockRows", rows_of)
    original = rows_of.rows

    def counted(self, layer, start, probs):
        blocks.append(probs.shape[-2])
        return original(self, layer, start, probs)

    monkeypatch.setattr(rows_of, "rows", counted)
    return blocks


def _same(whole, rows, sparse: bool) -> None:
    """Positions and argmaxes equal (a sparse run's edges: but at the kept mass's boundary, ``_same_edges``); values
    within float32 arithmetic (dense), or within one step of the stored
    precision where the sparse setting rounds (the model computes a block's maps in another order than the whole
    maps'; with tensor operations the whole maps' rows are summed in float64 on a CPU, the blocks' in float32, as on
    an accelerator: a value next to a rounding boundary may round the other way)."""
    for name, columns in whole.items():
        got = rows[name]
        assert got.keys() == columns.keys()
        if sparse and name == "attn_edges":
            _same_edges(columns, got)
            continue
        for column, want in columns.items():
            where = f"{name}.{column}"
            if column in EXACT:
                np.testing.assert_array_equal(got[column], want, err_msg=where)
            elif name == "head_norms":  # sums of float32 products over maps computed in another order, dense or not
                np.testing.assert_allclose(got[column], want, rtol=HEAD_NORMS_RTOL, atol=1e-6, err_msg=where)
            elif not sparse:
                np.testing.assert_allclose(got[column], want, atol=2e-6, rtol=1e-5, err_msg=where)
            elif column == "entropy":
                np.testing.assert_allclose(got[column], want, rtol=2**-16, atol=1e-6, err_msg=where)
            elif column in ("received", "value_norm"):  # float16's precision
                np.testing.assert_allclose(got[column], want, rtol=2**-10, atol=1e-6, err_msg=where)
            else:  # masses in steps of 1/2048, weights of 1/256
                step = 2**-8 if "weight" in column else 2**-11
                np.testing.assert_allclose(got[column], want, atol=step * 1.001, rtol=0, err_msg=where)


def _same_edges(whole: dict[str, np.ndarray], rows: dict[str, np.ndarray]) -> None:
    """The same kept edges but where a weight lies at the kept mass's boundary (maps computed in another order can
    move it across: at most one edge in a thousand, and 2), the shared ones' weights within one stored step."""
    keys = ("example_id", "layer", "head", "src_tok", "dst_tok")
    want, got = ({tuple(e): w for *e, w in zip(*(t[k] for k in keys), t["weight"], strict=True)} for t in (whole, rows))
    moved = want.keys() ^ got.keys()
    assert len(moved) <= max(2, len(want) // 1000), f"{len(moved)} of {len(want):,} edges differ"
    shared = sorted(want.keys() & got.keys())
    np.testing.assert_allclose([got[e] for e in shared], [want[e] for e in shared], atol=2**-8 * 1.001, rtol=0)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", [n for n in CASES if n != "deberta-v2"])
def test_every_family_reads_rows_as_its_whole_maps(tmp_path, corpus, monkeypatch, name, engine):
    folder = build(CASES[name], tmp_path / "model")
    lm = load_model(str(folder))
    for kept_mass in (0.9, None):
        settings = {"kept_mass": kept_mass, "pack": "window", "max_length": 64, "norms": True}
        make_store(tmp_path / f"whole-{kept_mass}", corpus, lm, **settings)
        with monkeypatch.context() as patch:
            blocks = _by_rows(patch, engine=engine)
            make_store(tmp_path / f"rows-{kept_mass}", corpus, lm, **settings)
        assert blocks and np.median(blocks) <= 3  # a word's pieces at a time
        whole, rows = _tables(tmp_path / f"whole-{kept_mass}"), _tables(tmp_path / f"rows-{kept_mass}")
        _same(whole, rows, kept_mass is not None)


@pytest.mark.parametrize("engine", ENGINES)
def test_the_embedded_model_reads_rows_as_its_whole_maps(tmp_path, corpus, model, monkeypatch, engine):
    settings = {"pack": "window", "max_length": 128, "text": "written", "norms": True}
    make_store(tmp_path / "whole", corpus, model, **settings)
    blocks = _by_rows(monkeypatch, block_weights=12 * 128 * 16, engine=engine)  # about 16 rows a block
    make_store(tmp_path / "rows", corpus, model, **settings)
    assert 8 <= np.median(blocks) <= 24
    _same(_tables(tmp_path / "whole"), _tables(tmp_path / "rows"), sparse=True)


def test_deberta_keeps_its_whole_maps(tmp_path, corpus, monkeypatch):
    """DeBERTa-v2 computes its attention in its own module: its inputs are never read by rows."""
    lm = load_model(str(build(CASES["deberta-v2"], tmp_path / "model")))
    blocks = _by_rows(monkeypatch)
    make_store(tmp_path / "store", corpus, lm, pack="window", max_length=64)
    assert not blocks


def test_blocks_end_where_words_do():
    token_word = [None, 0, 0, 1, 2, 2, 2, None, 3, None]
    assert cuts(token_word).tolist() == [1, 3, 4, 7, 8, 9, 10]
    assert row_blocks(token_word, 2) == [(0, 1), (1, 3), (3, 4), (4, 7), (7, 9), (9, 10)]
    assert row_blocks(token_word, 4) == [(0, 4), (4, 8), (8, 10)]


def test_rows_come_in_the_blocks_asked_for(tmp_path):
    """A decoder's 1,200-token input by rows of 100: every layer's attention comes as 12 blocks of [heads, 100, n]."""
    folder = build(CASES["llama"], tmp_path / "model")
    lm = load_model(str(folder))
    ids = [lm.tokenizer.bos_token_id or 0] + [5 + i % 50 for i in range(1199)]
    n = len(ids)
    largest = []

    def bounds(length):
        return [(start, min(start + 100, length)) for start in range(0, length, 100)]

    def seen(_layer, _start, probs):
        largest.append(probs.numel())

    with torch.inference_mode():
        stream_rows(lm, [(ids, [0] * n)], torch.device("cpu"), bounds, seen)
    assert len(largest) == lm.n_layers * 12 and max(largest) == lm.n_heads * 100 * n


@pytest.mark.parametrize("first_piece", [False, True])
@pytest.mark.parametrize(("kept_mass", "max_edges", "causal"), [(0.9, 6, False), (0.9, None, True), (None, None, True)])
def test_the_compiled_pass_gives_blocks_of_rows_what_it_gives_whole_maps(kept_mass, max_edges, causal, first_piece):
    """The same maps, whole and a block of rows at a time (blocks of 1 to 4 words, one of them with no pieces): the
    same rows, word rows and edges, value for value, in the same order."""
    rng = np.random.default_rng(7)
    n_layers, n_heads = 2, 3
    token_words = [None, 0, 0, 1, 3, 3, 3, 4, 5, 5, 6, None, 7, 8, 8, None]  # word 2 has no pieces
    n = len(token_words)
    maps = rng.dirichlet(np.full(n, 0.3), size=(n_layers, 1, n_heads, n)).astype(np.float32)
    if causal:
        maps = np.tril(maps)
        maps /= maps.sum(-1, keepdims=True)
    masks = np.stack([np.arange(n) == 0, np.arange(n) == n - 1], axis=-1)[None]
    batch = RowBatch(n_layers, n_heads, n, [n], [token_words], [9], masks, kept_mass, max_edges, causal,
                     ENTROPY_SMOOTHING, WEIGHT_STEP, first_piece)  # fmt: skip
    whole = cpu_rows.CpuRows(batch)
    for layer in range(n_layers):
        whole.layer(layer, torch.from_numpy(maps[layer]))
    by_rows = cpu_rows.CpuBlockRows(batch, n_heads * n * 4)  # about 4 rows a block
    assert len(by_rows.bounds(n)) > 3
    for layer in range(n_layers):
        for start, stop in by_rows.bounds(n):
            by_rows.rows(layer, start, torch.from_numpy(np.ascontiguousarray(maps[layer][:, :, start:stop])))
    for want, got in zip(whole.result(), by_rows.result(), strict=True):
        if isinstance(want, dict):
            assert got.keys() == want.keys()
            for name in want:
                np.testing.assert_array_equal(got[name], want[name], err_msg=name)
        else:
            np.testing.assert_array_equal(got, want)


def test_a_cuda_budget_counts_the_memory_torch_holds_unused(monkeypatch):
    """An earlier ingest's memory, kept by torch's allocator, is the next one's to use: the device reports it taken."""
    gib = 2**30
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda _device: (1 * gib, 80 * gib))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda _device: 40 * gib)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda _device: 4 * gib)
    budget = budget_for(torch.device("cuda"))
    free = (1 + 40 - 4) * gib
    assert budget == Budget(int(free * BATCH_SHARE // BATCH_BYTES), int(free * BLOCK_SHARE // BLOCK_BYTES))
