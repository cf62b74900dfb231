"""The kept-mass rule and the exact per-row statistics, on random attention rows."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import entropy

from ingest.sparsify import sparsify, word_rows


def random_attention(seed: int, n: int = 9) -> np.ndarray:
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(2, 3, n, n)) * 3
    p = np.exp(logits)
    return (p / p.sum(-1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("target", [0.5, 0.9, 0.99])
def test_kept_mass_rule_is_the_smallest_top_set_reaching_the_target(target):
    attn = random_attention(1)
    edges, rows = sparsify(attn, target)
    for layer in range(2):
        for head in range(3):
            for src in range(9):
                row = attn[layer, head, src]
                sel = (edges["layer"] == layer) & (edges["head"] == head) & (edges["src_tok"] == src)
                kept = np.sort(row[edges["dst_tok"][sel]])[::-1]  # exact weights of the kept edges
                assert row.argmax() in edges["dst_tok"][sel]
                assert kept.sum() >= target - 1e-6
                assert kept[:-1].sum() < target  # one fewer edge would not reach it
                np.testing.assert_array_equal(kept, np.sort(row)[::-1][: len(kept)])
                # stored weights are the kept weights at float16 precision
                np.testing.assert_allclose(edges["weight"][sel], row[edges["dst_tok"][sel]], rtol=2**-11, atol=1e-7)


def test_row_statistics_are_exact():
    attn = random_attention(2)
    _, rows = sparsify(attn, 0.9)
    flat = attn.reshape(-1, attn.shape[-1]).astype(np.float64)
    n = flat.shape[1]
    # Clark et al., General_Analysis.ipynb: attns = 0.9999 * attns + (0.0001 / attns.shape[-1])
    smoothed = 0.9999 * flat + 0.0001 / n
    np.testing.assert_allclose(rows["entropy"], -(smoothed * np.log(smoothed)).sum(axis=1), rtol=1e-5)
    assert np.abs(rows["entropy"] - entropy(flat, axis=1)).max() < 0.002
    np.testing.assert_array_equal(rows["argmax_tok"], flat.argmax(axis=1))
    np.testing.assert_allclose(rows["max_weight"], flat.max(axis=1), rtol=2**-11)  # float16 precision
    assert (rows["kept_mass"] >= 0.9 * (1 - 2**-11)).all()
    _, exact = sparsify(attn, None)
    np.testing.assert_array_equal(exact["max_weight"], flat.max(axis=1).astype(np.float32))


def test_dense_setting_keeps_every_weight():
    attn = random_attention(3)
    edges, rows = sparsify(attn, None)
    assert len(edges["weight"]) == attn.size
    assert (rows["n_kept"] == attn.shape[-1]).all()


def test_word_rows_sum_to_split_words_and_average_from_them():
    # tokens: [CLS] w0 w1a w1b w2 [SEP]
    attn = random_attention(4, n=6)
    words = word_rows(attn, [None, 0, 1, 1, 2, None], None)
    a = attn[0, 0].astype(np.float64)
    from_w1 = (a[2] + a[3]) / 2  # FROM a split word: mean over its pieces
    to_w0, to_w2 = from_w1[1], from_w1[4]  # TO a word: sum over its pieces ([CLS]/[SEP] never predicted)
    sel = (words["layer"] == 0) & (words["head"] == 0) & (words["src_word"] == 1)
    assert words["dst_word"][sel][0] == (0 if to_w0 >= to_w2 else 2)
    assert words["weight"][sel][0] == pytest.approx(max(to_w0, to_w2))
    sel0 = (words["layer"] == 0) & (words["head"] == 0) & (words["src_word"] == 0)
    to_w1_from_w0 = a[1, 2] + a[1, 3]
    assert words["weight"][sel0][0] == pytest.approx(max(to_w1_from_w0, a[1, 4]))


def test_word_rows_transposed_predictor():
    """Clark et al.'s attn_head_predictor(mode="transpose"): per word, the word attending to it most."""
    attn = random_attention(5, n=7)
    token_word = [None, 0, 1, 1, 2, 3, None]
    words = word_rows(attn, token_word, None)
    for layer in range(2):
        for head in range(3):
            a = attn[layer, head].astype(np.float64)
            # the released get_word_word_attention: sum the columns of a split word, mean its rows
            cols = np.stack([a[:, [t for t, w in enumerate(token_word) if w == i]].sum(1) for i in range(4)], 1)
            wmap = np.stack([cols[[t for t, w in enumerate(token_word) if w == i]].mean(0) for i in range(4)])
            wmap = wmap.T.copy()  # mode="transpose"
            np.fill_diagonal(wmap, 0)
            pred = wmap.argmax(axis=-1)
            sel = (words["layer"] == layer) & (words["head"] == head)
            np.testing.assert_array_equal(words["from_word"][sel], pred)
            np.testing.assert_allclose(words["from_weight"][sel], wmap.max(axis=-1), rtol=1e-6)


def test_received_attention_is_the_column_sum():
    attn = random_attention(6)
    _, rows = sparsify(attn, None)
    np.testing.assert_allclose(rows["received"], attn.astype(np.float64).sum(axis=2).reshape(-1), rtol=1e-6)
