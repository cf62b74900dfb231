"""The four ways a batch's attention rows are computed agree on random inputs: whole maps and blocks of rows, each by
the CPU's compiled pass (``atlas.ingestion.cpu_rows``) and by the tensor operations an accelerator runs
(``atlas.ingestion.tensor_rows``,
``atlas.ingestion.block_rows``, here on the CPU).

The inputs are drawn: words of zero to three pieces, special tokens anywhere, word ids with gaps (words without pieces,
more words than tokens), one or two layers of one to three heads, encoder and causal maps (some with ties), dense,
sparse with a cap and sparse without one, FROM a word as the mean and as the first piece, zero to two target kinds, and
blocks of one to three rows' worth of weights per head. Whole and blocks: value for value. The compiled pass and the
tensor operations: the same edges, argmaxes and word rows' words; weights and sums within float32 rounding (they sum
in other orders). Word rows are compared where the ingest keeps them (words with pieces, two or more of them).
And an input's stored rows are the same in a padded batch of inputs of several lengths as alone.
Hypothesis runs derandomized: the same cases on every run.
"""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from atlas.ingestion import block_rows, cpu_rows, tensor_rows
from atlas.ingestion.row_batch import RowBatch
from atlas.ingestion.sparsify import ENTROPY_SMOOTHING, WEIGHT_STEP, batch_rows
from tests.test_sparsify import padded_batch

CASES = settings(max_examples=100, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
RULES = {"dense": (None, None), "sparse, capped": (0.9, 6), "sparse": (0.5, None)}


@st.composite
def words_of_tokens(draw: st.DrawFn) -> list[int | None]:
    """An input's word of each token (None: a special token)."""
    token_words: list[int | None] = [None] if draw(st.booleans()) else []
    word = 0
    for _ in range(draw(st.integers(0, 10))):
        word += draw(st.sampled_from([1, 1, 1, 1, 2, 25]))  # a gap: words without pieces
        token_words += [word] * draw(st.integers(0, 3))
        if draw(st.integers(0, 11)) == 0:
            token_words.append(None)  # a separator
    if draw(st.booleans()) or not token_words:
        token_words.append(None)
    return token_words


def n_words(token_words: list[int | None]) -> int:
    return 1 + max((w for w in token_words if w is not None), default=-1)


@st.composite
def attention(draw: st.DrawFn, n_layers: int, n_heads: int, n: int, causal: bool) -> np.ndarray:
    """Maps ``[layers, 1, heads, n, n]``: rows of a Dirichlet draw, some with ties, causal or not."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    maps = rng.dirichlet(np.full(n, draw(st.sampled_from([0.1, 0.5, 3.0]))), size=(n_layers, 1, n_heads, n))
    if draw(st.booleans()):
        maps = np.round(maps * 8) + 1e-3  # ties
    if causal:
        maps = np.tril(maps)
    return (maps / maps.sum(-1, keepdims=True)).astype(np.float32)


@st.composite
def inputs(draw: st.DrawFn) -> tuple[list[int | None], RowBatch, np.ndarray, int]:
    """An input's token words, its batch, its maps ``[layers, 1, heads, n, n]`` and the weights of a block."""
    token_words = draw(words_of_tokens())
    n = len(token_words)
    n_layers, n_heads = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    causal, first_piece = draw(st.booleans()), draw(st.booleans())
    kept_mass, max_edges = RULES[draw(st.sampled_from(sorted(RULES)))]
    maps = draw(attention(n_layers, n_heads, n, causal))
    masks = np.random.default_rng(n).random((1, n, draw(st.integers(0, 2)))) < 0.3
    batch = RowBatch(n_layers, n_heads, n, [n], [token_words], [n_words(token_words)], masks, kept_mass, max_edges,
                     causal, ENTROPY_SMOOTHING, WEIGHT_STEP, first_piece)  # fmt: skip
    return token_words, batch, maps, draw(st.integers(1, 3)) * n_heads * n


def _whole(rows, maps: np.ndarray):
    for layer, attn in enumerate(maps):
        rows.layer(layer, torch.from_numpy(attn))
    return rows.result()


def _blocks(rows, maps: np.ndarray):
    n = maps.shape[-1]
    for layer, attn in enumerate(maps):
        for start, stop in rows.bounds(n):
            rows.rows(layer, start, torch.from_numpy(np.ascontiguousarray(attn[:, :, start:stop])))
    return rows.result()


def _kept_words(token_words: list[int | None], batch: RowBatch) -> np.ndarray:
    """The word rows the ingest keeps, as a mask over the computed ones (layer, head, word)."""
    with_pieces = sorted({w for w in token_words if w is not None})
    if batch.word_rows[0] == 0 or len(with_pieces) < 2:
        return np.zeros(0, dtype=bool)
    kept = np.zeros(batch.n_words[0], dtype=bool)
    kept[with_pieces] = True
    return np.tile(kept, batch.n_layers * batch.n_heads)


def _same(got, want, kept: np.ndarray, exact: bool) -> None:
    (stats, words, edges, counts), (stats_w, words_w, edges_w, counts_w) = got, want
    np.testing.assert_array_equal(counts, counts_w)
    assert edges.keys() == edges_w.keys()
    for name in edges:
        np.testing.assert_array_equal(edges[name], edges_w[name], err_msg=name)
    for name in words_w if len(kept) else []:
        got_w, want_w = words[name][kept], words_w[name][kept]
        if exact or name.endswith("word"):
            np.testing.assert_array_equal(got_w, want_w, err_msg=name)
        else:
            np.testing.assert_allclose(got_w, want_w, rtol=1e-5, err_msg=name)
    for name in stats_w:
        if exact or name == "argmax_tok":
            np.testing.assert_array_equal(stats[name], stats_w[name], err_msg=name)
        else:
            np.testing.assert_allclose(stats[name], stats_w[name], rtol=1e-4, atol=1e-6, err_msg=name)


@CASES
@given(case=inputs())
def test_whole_maps_and_blocks_of_rows_by_either_engine_give_the_same_rows(case):
    token_words, batch, maps, block_weights = case
    kept = _kept_words(token_words, batch)
    compiled = _whole(cpu_rows.CpuRows(batch), maps)
    _same(_blocks(cpu_rows.CpuBlockRows(batch, block_weights), maps), compiled, kept, exact=True)
    tensors = _whole(tensor_rows.TensorRows(batch), maps)
    _same(_blocks(block_rows.BlockRows(batch, block_weights), maps), tensors, kept, exact=False)
    _same(tensors, compiled, kept, exact=False)


@CASES
@given(data=st.data())
def test_an_input_has_the_same_rows_in_a_batch_as_alone(data):
    """The compiled pass over a padded batch of inputs of several lengths (padding rows of noise, as a forward batch
    has them): each input's stored edges, rows and word rows are those of the input alone, value for value."""
    n_layers, n_heads = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 3))
    causal, first_piece = data.draw(st.booleans()), data.draw(st.booleans())
    kept_mass, max_edges = RULES[data.draw(st.sampled_from(sorted(RULES)))]
    token_words = data.draw(st.lists(words_of_tokens(), min_size=2, max_size=4))
    lengths = [len(tw) for tw in token_words]
    maps = [data.draw(attention(n_layers, n_heads, n, causal))[:, 0] for n in lengths]
    targets = [{"cls": np.arange(n) == 0, "sep": np.arange(n) == n - 1, "odd": np.arange(n) % 2 == 1} for n in lengths]
    rule = (kept_mass, max_edges, causal, first_piece)
    torch.manual_seed(len(lengths))
    together = batch_rows(padded_batch(maps), lengths, token_words, targets, *rule)
    for b, n in enumerate(lengths):
        alone = batch_rows(padded_batch([maps[b]]), [n], [token_words[b]], [targets[b]], *rule)[0]
        for got, want in zip(together[b], alone, strict=True):
            assert got.keys() == want.keys()
            for name in want:
                np.testing.assert_array_equal(np.ma.filled(got[name], -1), np.ma.filled(want[name], -1), err_msg=name)
