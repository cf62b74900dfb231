"""The 'attention sink' entry (Xiao et al. 2023; Gu et al. 2024's sink rate) from the store against a plain
loop over transformers' eager attention of the same inputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
from tokenizers_helpers import gpt2_bpe, llama3_bpe, save
from transformers import AutoConfig, AutoModel, AutoTokenizer, PreTrainedTokenizerFast

from atlas.catalogue import resolve, run_entry
from atlas.model.load import load_model
from atlas.plot import figure
from atlas.store import Store
from tests.conftest import EWT_SAMPLE, cut_conllu, make_store
from tests.reference import dense_inputs, read_sentences

DEFAULT_THRESHOLD = 0.3  # Gu et al.'s epsilon (sail-sg/Attention-Sink, eval_sink_open_source.py)
TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64}
DECODERS = {  # GPT-2 adds no special token (its first token is a word's piece); Llama 3 puts its BOS first
    "gpt2": ("gpt2", gpt2_bpe, {"n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 128}),
    "llama": ("llama", llama3_bpe, {**TINY, "num_key_value_heads": 2}),
}


def sink_reference(inputs: list[tuple[np.ndarray, list[str]]], special_starts: set[str], threshold: float) -> dict:
    """Per input and head, the mean over the input's rows of the attention to position 0; then per head the
    mean over inputs (all, and those not starting with a [CLS]/BOS), the share of inputs above threshold,
    and per layer and overall the mean over heads and the share of heads whose mean is above threshold."""
    n_layers, n_heads = inputs[0][0].shape[:2]
    per_input = []
    plain = []
    for attns, pieces in inputs:
        n = attns.shape[-1]
        means = np.zeros((n_layers, n_heads))
        for layer in range(n_layers):
            for head in range(n_heads):
                means[layer, head] = sum(attns[layer, head, row, 0] for row in range(n)) / n
        per_input.append(means)
        plain.append(pieces[0] not in special_starts)
    stacked = np.stack(per_input)
    first = stacked.mean(axis=0)
    above = first > threshold
    return {
        "first": first,
        "first_plain": stacked[np.array(plain)].mean(axis=0) if any(plain) else None,
        "n_plain": sum(plain),
        "sink_rate": (stacked > threshold).mean(axis=0),
        "layer_first": first.mean(axis=1),
        "layer_sink_heads": above.mean(axis=1),
        "model_first": first.mean(),
        "model_sink_heads": above.mean(),
        "model_sink_rate": (stacked > threshold).mean(),
    }


@pytest.fixture(scope="module")
def inputs(dense_store, ewt_small, model):
    """The sample's sentences, one per input as the dense store runs them, through the eager model."""
    tok = AutoTokenizer.from_pretrained(model.source)
    specials = {t for t in (tok.cls_token, tok.bos_token) if t is not None}
    return dense_inputs(model.source, [[s] for s in read_sentences(ewt_small)]), specials


def answer(store_and_run, **params: str) -> pl.DataFrame:
    store, run_id = store_and_run
    entry = resolve("attention sink")
    return run_entry(store.connect(), entry, entry.bind({"run": run_id, **params}))


def grid(df: pl.DataFrame, column: str) -> np.ndarray:
    heads = df.filter(pl.col("head").is_not_null()).sort(["layer", "head"])
    return heads[column].to_numpy().reshape(heads["layer"].max(), heads["head"].max())


def layers(df: pl.DataFrame, column: str) -> np.ndarray:
    return df.filter(pl.col("head").is_null() & pl.col("layer").is_not_null()).sort("layer")[column].to_numpy()


def model_row(df: pl.DataFrame) -> dict:
    rows = df.filter(pl.col("layer").is_null())
    assert len(rows) == 1 and rows["head"][0] is None
    return rows.row(0, named=True)


def test_dense_store_equals_reference(dense_store, inputs):
    maps, specials = inputs
    ref = sink_reference(maps, specials, DEFAULT_THRESHOLD)
    df = answer(dense_store)
    n_layers, n_heads = ref["first"].shape
    assert len(df) == n_layers * n_heads + n_layers + 1
    np.testing.assert_allclose(grid(df, "first"), ref["first"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(layers(df, "first"), ref["layer_first"], rtol=1e-5, atol=1e-6)
    assert model_row(df)["first"] == pytest.approx(ref["model_first"], rel=1e-5)
    assert set(df["n_inputs"]) == {len(maps)}
    # every input of a BERT-style encoder starts with [CLS]: no input without it, said so, not a number
    assert ref["n_plain"] == 0 and set(df["n_plain"]) == {0} and df["first_plain"].null_count() == len(df)


def test_first_token_is_cls_for_an_encoder(dense_store):
    """For a BERT-style encoder the first token is [CLS]: the entry's numbers are 'special tokens' cls."""
    store, run_id = dense_store
    cls = resolve("special tokens")
    expected = run_entry(store.connect(), cls, cls.bind({"run": run_id}))
    got = answer(dense_store).filter(pl.col("layer").is_not_null())
    np.testing.assert_allclose(got["first"].to_numpy(), expected["cls"].to_numpy(), rtol=1e-6)


@pytest.mark.parametrize("quantile", [None, 0.25, 0.5, 0.9])
def test_sink_shares_follow_the_threshold(dense_store, inputs, quantile):
    """Shares of heads (of their means) and of (input, head) pairs above the threshold, at the default and at
    thresholds cut between the heads' own means, so that the shares are neither all 0 nor all 1."""
    maps, specials = inputs
    first = sink_reference(maps, specials, DEFAULT_THRESHOLD)["first"]
    threshold = DEFAULT_THRESHOLD if quantile is None else float(np.quantile(first, quantile))
    ref = sink_reference(maps, specials, threshold)
    df = answer(dense_store) if quantile is None else answer(dense_store, threshold=str(threshold))
    np.testing.assert_array_equal(grid(df, "sink_heads"), (ref["first"] > threshold).astype(float))
    np.testing.assert_allclose(grid(df, "sink_rate"), ref["sink_rate"], rtol=1e-9)
    np.testing.assert_allclose(layers(df, "sink_heads"), ref["layer_sink_heads"], rtol=1e-9)
    row = model_row(df)
    assert row["sink_heads"] == pytest.approx(ref["model_sink_heads"])
    assert row["sink_rate"] == pytest.approx(ref["model_sink_rate"])
    if quantile is not None:
        assert 0 < row["sink_heads"] < 1 and 0 < row["sink_rate"] < 1
        assert row["sink_heads"] == pytest.approx(1 - quantile, abs=1 / first.size)


def test_inputs_weigh_the_same_not_rows(dense_store, inputs):
    """Pooling every row (long inputs weighing more) gives other numbers: the test above can tell them apart."""
    maps, specials = inputs
    ref = sink_reference(maps, specials, DEFAULT_THRESHOLD)
    store, run_id = dense_store
    sql = "SELECT avg(to_first) AS f FROM attn_rows WHERE run_id = ? GROUP BY layer, head ORDER BY layer, head"
    pooled = store.connect().execute(sql, [run_id]).fetchnumpy()["f"].reshape(ref["first"].shape)
    assert np.abs(pooled - ref["first"]).max() > 1e-3


def test_figure_is_the_heads_heatmap(dense_store):
    df = answer(dense_store)
    fig = figure(resolve("attention sink"), df)
    images = [image for ax in fig.axes for image in ax.get_images()]
    assert len(images) == 2  # layer x head heat maps: the mean attention to the first token, the sink rate
    np.testing.assert_allclose(np.asarray(images[0].get_array()), grid(df, "first"))
    np.testing.assert_allclose(np.asarray(images[1].get_array()), grid(df, "sink_rate"))


def tiny_decoder(model_type: str, tok: PreTrainedTokenizerFast, config: dict, folder: Path) -> Path:
    """A random decoder of 2 layers x 4 heads (peaked attention: initializer range 0.4) with its tokenizer."""
    ids = {"vocab_size": len(tok), "bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id}
    torch.manual_seed(0)
    AutoModel.from_config(AutoConfig.for_model(model_type, initializer_range=0.4, **ids, **config)).save_pretrained(
        folder
    )
    return save(tok, folder)


def store_inputs(store: Store, run_id: str, folder: Path) -> list[tuple[np.ndarray, list[str]]]:
    """Each input of the run as the store recorded its token ids, through transformers' eager attention."""
    model = AutoModel.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    sql = "SELECT list(piece_id ORDER BY tok_idx) FROM tokens WHERE run_id = ? GROUP BY example_id ORDER BY example_id"
    out = []
    for (ids,) in store.connect().execute(sql, [run_id]).fetchall():
        with torch.inference_mode():
            att = model(input_ids=torch.tensor([ids]), output_attentions=True).attentions
        out.append((torch.stack([a[0] for a in att]).numpy().astype(np.float64), tok.convert_ids_to_tokens(ids)))
    return out


@pytest.fixture(scope="module")
def decoder_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("decoders")
    corpus = cut_conllu(EWT_SAMPLE, 12, root / "ewt12.conllu")
    runs = {}
    for name, (model_type, tokenizer, config) in DECODERS.items():
        tok = tokenizer()
        folder = tiny_decoder(model_type, tok, config, root / name)
        store, run_id = make_store(root / f"{name}-store", corpus, load_model(str(folder)), kept_mass=None)
        runs[name] = (store, run_id), store_inputs(store, run_id, folder), {tok.bos_token, tok.cls_token} - {None}
    return runs


@pytest.mark.parametrize("name", list(DECODERS))
def test_decoders_with_and_without_bos(decoder_runs, name):
    """GPT-2 runs without BOS: every input starts with a word's piece, so first_plain is first over every
    input; Llama 3 puts <|begin_of_text|> first: no input without it, first_plain NULL and n_plain 0."""
    store_and_run, maps, specials = decoder_runs[name]
    assert all(np.triu(a, k=1).max() == 0 for a, _ in maps)  # causal: the first token's own row is 1
    ref = sink_reference(maps, specials, DEFAULT_THRESHOLD)
    df = answer(store_and_run)
    np.testing.assert_allclose(grid(df, "first"), ref["first"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grid(df, "sink_rate"), ref["sink_rate"], rtol=1e-9)
    np.testing.assert_array_equal(grid(df, "sink_heads"), (ref["first"] > DEFAULT_THRESHOLD).astype(float))
    assert set(df["n_inputs"]) == {len(maps)}
    if name == "gpt2":
        assert ref["n_plain"] == len(maps) and set(df["n_plain"]) == {len(maps)}
        np.testing.assert_allclose(grid(df, "first_plain"), ref["first_plain"], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(grid(df, "first_plain"), grid(df, "first"), rtol=1e-12)
    else:
        assert ref["n_plain"] == 0 and set(df["n_plain"]) == {0} and df["first_plain"].null_count() == len(df)
