"""The sparsity rule, the exact per-row statistics and word rows, on random attention rows; batches with padding
against the same inputs one by one."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import entropy

import atlas.ingestion.sparsify as sparsify_module
import atlas.ingestion.tensor_rows as tensor_rows
from atlas.errors import AtlasError
from atlas.ingestion.device import resolve_device
from atlas.ingestion.sparsify import MASS_STEP, WEIGHT_STEP, batch_rows, sparsify, word_rows


def random_attention(seed: int, n: int = 9, scale: float = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(2, 3, n, n)) * scale
    p = np.exp(logits)
    return (p / p.sum(-1, keepdims=True)).astype(np.float32)


def ranking(row: np.ndarray) -> list[int]:
    """The order edges are kept in: the argmax, then by stored weight, then the earlier token."""
    steps = np.round(row / WEIGHT_STEP)
    return [int(row.argmax())] + sorted(set(range(len(row))) - {row.argmax()}, key=lambda t: (-steps[t], t))


def row_edges(edges: dict[str, np.ndarray], layer: int, head: int, src: int) -> tuple[np.ndarray, np.ndarray]:
    sel = (edges["layer"] == layer) & (edges["head"] == head) & (edges["src_tok"] == src)
    return edges["dst_tok"][sel], edges["weight"][sel]


@pytest.mark.parametrize(("target", "cap"), [(0.5, 16), (0.9, 16), (0.99, 16), (0.9, 3)])
def test_kept_mass_rule_is_the_smallest_top_set_reaching_the_target(target, cap):
    attn = random_attention(1)
    edges, _ = sparsify(attn, target, max_edges=cap)
    for layer, head, src in np.ndindex(2, 3, 9):
        row = attn[layer, head, src]
        steps = np.round(row / WEIGHT_STEP)
        ranked = ranking(row)
        dst, weight = row_edges(edges, layer, head, src)
        assert list(dst) == sorted(dst) and row.argmax() in dst  # in token order, the argmax always
        np.testing.assert_array_equal(weight, steps[dst] * WEIGHT_STEP)  # multiples of 1/256
        assert set(dst) == set(ranked[: len(dst)]) and (weight > 0).all()
        assert len(dst) <= cap and (weight.sum() >= target or len(dst) == cap or steps[ranked[len(dst)]] == 0)
        assert weight.sum() - weight.min() < target  # one fewer edge would not reach it


def test_cap_keeps_the_largest_weights_of_broad_rows():
    attn = random_attention(2, n=40, scale=0.3)  # near-uniform rows: 0.9 of the mass needs most of a row
    edges, _ = sparsify(attn, 0.9, max_edges=5)
    for layer, head, src in np.ndindex(2, 3, 40):
        dst, _ = row_edges(edges, layer, head, src)
        assert set(dst) == set(ranking(attn[layer, head, src])[:5])


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
    assert "max_weight" not in rows  # the argmax edge's weight
    _, dense = sparsify(attn, None)  # float32 as computed; the sparse setting keeps 17 significant bits of it
    assert not (rows["entropy"].view(np.int32) % 128).any()
    assert np.abs(rows["entropy"] / dense["entropy"] - 1).max() <= 2**-17


@pytest.mark.parametrize("cls", [0, None], ids=["cls-first", "no-cls"])
def test_row_masses_in_fixed_point_within_half_a_step(cls):
    attn = random_attention(3, n=12)
    targets = {"cls": np.arange(12) == cls, "sep": np.arange(12) >= 10, "dot_comma": np.arange(12) % 4 == 1}
    _, exact = sparsify(attn, None, targets)
    _, stored = sparsify(attn, 0.9, targets)
    a = attn.astype(np.float64)
    if cls == 0:  # the first token is the only [CLS]: to_first is to_cls, stored once (NULL in to_first)
        assert stored["to_first"].mask.all() and exact["to_first"].mask.all()
        exact["to_first"], stored["to_first"] = exact["to_cls"], stored["to_cls"]
    else:
        assert not np.ma.is_masked(stored["to_first"]) and not stored["to_cls"].any()
    expected = {
        "to_self": np.diagonal(a, axis1=2, axis2=3),
        "to_prev": np.pad(np.diagonal(a, -1, axis1=2, axis2=3), ((0, 0), (0, 0), (1, 0))),
        "to_next": np.pad(np.diagonal(a, 1, axis1=2, axis2=3), ((0, 0), (0, 0), (0, 1))),
        "to_first": a[..., 0],
        **{f"to_{name}": a[..., mask].sum(-1) for name, mask in targets.items()},
    }
    for name, value in expected.items():
        np.testing.assert_allclose(exact[name], value.reshape(-1), rtol=1e-6, atol=1e-7, err_msg=name)
        assert (stored[name] / MASS_STEP == np.round(stored[name] / MASS_STEP)).all(), name
        assert np.abs(stored[name] - value.reshape(-1)).max() <= MASS_STEP / 2 + 1e-7, name


def test_dense_setting_keeps_every_weight():
    attn = random_attention(3)
    edges, _ = sparsify(attn, None)
    assert len(edges["weight"]) == attn.size
    got = np.zeros_like(attn)
    got[edges["layer"], edges["head"], edges["src_tok"], edges["dst_tok"]] = edges["weight"]
    np.testing.assert_array_equal(got, attn)


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


def padded_batch(inputs: list[np.ndarray]) -> list[torch.Tensor]:
    """One tensor [batch, heads, n, n] per layer, padded as a forward batch is: rows past an input's length hold
    noise (a padding token's attention), columns past it exact zeros."""
    longest = max(a.shape[-1] for a in inputs)
    n_layers, n_heads = inputs[0].shape[:2]
    maps = [torch.rand(len(inputs), n_heads, longest, longest) for _ in range(n_layers)]
    for b, a in enumerate(inputs):
        n = a.shape[-1]
        for layer in range(n_layers):
            maps[layer][b, :, :, n:] = 0
            maps[layer][b, :, :n, :n] = torch.from_numpy(a[layer])
    return maps


@pytest.mark.parametrize("kept_mass", [None, 0.9])
def test_a_padded_batch_gives_each_input_its_own_rows(kept_mass):
    inputs = [random_attention(10 + i, n=n) for i, n in enumerate((7, 12, 5, 12))]
    token_words = [[None, *range(n - 2), None] for n in (7, 12, 5, 12)]
    token_words[1] = [None, 0, 0, 1, 2, 2, 2, 3, 4, 5, 6, None]  # split words
    targets = [{"cls": np.arange(n) == 0, "sep": np.arange(n) == n - 1, "dot_comma": np.arange(n) == 2} for n in
               (7, 12, 5, 12)]  # fmt: skip
    batch = batch_rows(padded_batch(inputs), [7, 12, 5, 12], token_words, targets, kept_mass, 4)
    for attn, words, target, (edges, rows, word) in zip(inputs, token_words, targets, batch, strict=True):
        one_edges, one_rows, one_word = batch_rows(padded_batch([attn]), [attn.shape[-1]], [words], [target],
                                                   kept_mass, 4)[0]  # fmt: skip
        for got, alone in ((edges, one_edges), (rows, one_rows), (word, one_word)):
            assert got.keys() == alone.keys()
            for name in got:
                np.testing.assert_allclose(got[name], alone[name], rtol=1e-6, atol=1e-7, err_msg=name)


def causal_attention(seed: int, n: int) -> np.ndarray:
    """A decoder's rows: no weight to a later token."""
    rng = np.random.default_rng(seed)
    p = np.exp(rng.normal(size=(2, 3, n, n)) * 3) * np.tril(np.ones((n, n)))
    return (p / p.sum(-1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize(
    ("kept_mass", "cap", "causal"),
    [(None, None, False), (None, None, True), (0.9, 4, False), (0.5, None, False), (0.99, 8, True), (0.9, 1, False)],
)
def test_the_compiled_pass_gives_the_rows_of_the_tensor_operations(monkeypatch, kept_mass, cap, causal):
    """On a CPU one compiled pass, on an accelerator tensor operations: the same edges, argmaxes and word rows;
    entropy, masses and received attention (summed in another order) within float32 rounding: in the sparse setting
    at most one stored step apart."""
    lengths = (7, 12, 5, 33, 12, 2, 1, 3)
    make = causal_attention if causal else random_attention
    inputs = [make(30 + i, n=n) for i, n in enumerate(lengths)]
    inputs[2] = np.round(inputs[2] * 8) / 8  # ties
    token_words = [[None, *range(n - 2), None] for n in lengths]
    token_words[6], token_words[7] = [None], [None, 0, None]  # no word, one word: no word rows
    token_words[1] = [None, 0, 0, 1, 2, 2, 2, 3, 4, 5, 6, None]  # split words
    token_words[4] = [0, 1, 1, None, 2, 3, 3, 3, None, 4, 4, None]
    targets = [{"cls": np.arange(n) == 0, "sep": np.arange(n) == n - 1, "dot_comma": np.arange(n) % 5 == 2}
               for n in lengths]  # fmt: skip
    args = (list(lengths), token_words, targets, kept_mass, cap, causal)
    compiled = batch_rows(padded_batch(inputs), *args)
    monkeypatch.setattr(sparsify_module, "CpuRows", sparsify_module.TensorRows)
    tensors = batch_rows(padded_batch(inputs), *args)
    sparse = kept_mass is not None
    for (edges, rows, words), (edges_t, rows_t, words_t) in zip(compiled, tensors, strict=True):
        for got, want in ((edges, edges_t), (words, words_t)):
            assert got.keys() == want.keys()
            for name in got:
                np.testing.assert_array_equal(got[name], want[name], err_msg=name)
        assert rows.keys() == rows_t.keys()
        for name in rows:
            got, want = np.ma.filled(rows[name], -1), np.ma.filled(rows_t[name], -1)
            if not np.issubdtype(got.dtype, np.floating):
                np.testing.assert_array_equal(got, want, err_msg=name)
            elif name == "entropy":
                np.testing.assert_allclose(got, want, rtol=2**-16 if sparse else 1e-5, atol=1e-8, err_msg=name)
            elif name == "received":
                np.testing.assert_allclose(got, want, rtol=2**-11 if sparse else 1e-6, err_msg=name)
            else:
                np.testing.assert_allclose(got, want, rtol=0, atol=MASS_STEP if sparse else 1e-6, err_msg=name)


def test_a_word_is_summed_from_its_pieces_in_their_order():
    """The pieces after a word's first come by rank (second pieces, third pieces, ...), a word at most once in a rank:
    so a word's sum adds its pieces in their order on every device (on CUDA, additions to one place in one
    ``scatter_add_`` come in no fixed order); padding goes to the spare unit."""
    token_words = [[None, 0, 0, 1, 2, 2, 2, 2, None], [0, 1, 1, 1, None], [None, 0, None]]
    _, _, ranks = tensor_rows.word_pieces(token_words, 3)
    assert len(ranks) == 3  # word 2 of the first input has three pieces after its first
    added: list[list[tuple[int, int]]] = [[] for _ in token_words]
    for tok, word in ranks:
        assert tok.shape == word.shape and tok.shape[0] == len(token_words)
        for b in range(len(token_words)):
            real = word[b] < 3
            assert len(set(word[b][real].tolist())) == real.sum(), "a word at most once in a rank"
            assert (word[b][~real] == 3).all() and (tok[b][~real] == 0).all(), "padding: the spare unit"
            added[b].extend(zip(tok[b][real].tolist(), word[b][real].tolist(), strict=True))
    for b, tw in enumerate(token_words):
        later = [(t, w) for t, w in enumerate(tw) if w is not None and tw.index(w) != t]
        assert sorted(added[b]) == later, "every piece after a word's first, once"
        for w in {v for v in tw if v is not None}:
            assert [t for t, v in added[b] if v == w] == [t for t, v in later if v == w], "in the pieces' order"


def test_long_inputs_rank_by_integer_keys_alike(monkeypatch):
    """With tensor operations, inputs longer than float32 keys can hold rank by int64 keys: the same edges."""
    inputs = [random_attention(22, n=33, scale=2)]
    args = ([33], [[None] * 33], None, 0.9, 6)
    monkeypatch.setattr(sparsify_module, "CpuRows", sparsify_module.TensorRows)
    as_float = batch_rows(padded_batch(inputs), *args)[0][0]
    monkeypatch.setattr(tensor_rows, "FLOAT_KEY_BITS", 0)
    as_int = batch_rows(padded_batch(inputs), *args)[0][0]
    for name in as_float:
        np.testing.assert_array_equal(as_float[name], as_int[name])


def test_device_names():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type in ("cpu", "cuda", "mps")
    with pytest.raises(AtlasError, match="device='tpu': expected one of auto, cpu, cuda, mps"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(AtlasError, match="device='cuda': torch sees no CUDA device"):
            resolve_device("cuda")
