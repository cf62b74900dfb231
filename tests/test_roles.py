"""Special tokens by role through the catalogue: a RoBERTa-style encoder (<s> a </s></s> b </s>), GPT-2 (no special
token) and a Llama 3 style decoder (<|begin_of_text|> before each text), tiny and random, ingested dense over pairs
of UD sentences. The entries that speak of [CLS] and [SEP] answer for each, equal a plain loop over transformers'
eager attention with the roles the test expects, and say with a note what they leave empty.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
import torch
from tokenizers_helpers import gpt2_bpe, llama3_bpe, roberta_bpe, save
from transformers import AutoConfig, AutoModel

import atlas
from atlas.errors import AtlasError
from atlas.model.load import load_model
from tests.conftest import EWT_SAMPLE, cut_conllu, make_store

MODELS = {  # model type, tokenizer, config, the roles of its special tokens by string
    "roberta": (
        "roberta",
        roberta_bpe,
        {"max_position_embeddings": 130, "pad_token_id": 1},
        {"<s>": "cls", "</s>": "sep"},
    ),
    "gpt2": ("gpt2", gpt2_bpe, {"n_positions": 128}, {}),
    "llama": ("llama", llama3_bpe, {"num_key_value_heads": 2}, {"<|begin_of_text|>": "bos"}),
}
SIZE = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64}
GPT2_SIZE = {"n_embd": 32, "n_layer": 2, "n_head": 4}


def tiny(model_type: str, tokenizer, config: dict, folder: Path) -> Path:
    tok = tokenizer()
    size = GPT2_SIZE if model_type == "gpt2" else SIZE
    ids = {"vocab_size": len(tok), "bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id}
    torch.manual_seed(0)
    cfg = AutoConfig.for_model(model_type, initializer_range=0.4, **ids, **size, **config)
    AutoModel.from_config(cfg).save_pretrained(folder)
    return save(tok, folder)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("roles")
    corpus = cut_conllu(EWT_SAMPLE, 12, root / "ewt12.conllu")
    out = {}
    for name, (model_type, tokenizer, config, roles) in MODELS.items():
        folder = tiny(model_type, tokenizer, config, root / name)
        store, run_id = make_store(root / f"{name}-store", corpus, load_model(str(folder)), kept_mass=None, pack="pair")
        model = AutoModel.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()
        rows = (
            store.connect()
            .execute(
                "SELECT list(piece_id ORDER BY tok_idx), list(piece ORDER BY tok_idx), list(special ORDER BY tok_idx), "
                "       list(role ORDER BY tok_idx), list(word_idx ORDER BY tok_idx) "
                "FROM tokens WHERE run_id = ? GROUP BY example_id ORDER BY example_id",
                [run_id],
            )
            .fetchall()
        )
        inputs = []
        for ids, pieces, special, role, words in rows:
            with torch.inference_mode():
                att = model(input_ids=torch.tensor([ids]), output_attentions=True).attentions
            expected = [roles.get(p) if w is None else None for p, w in zip(pieces, words, strict=True)]
            inputs.append((torch.stack([a[0] for a in att]).double().numpy(), expected, special, role, words))
        out[name] = atlas.open(store.root), run_id, inputs
    return out


def answer(st, name: str, run_id: str) -> tuple[pl.DataFrame, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = st.query(name, run=run_id)
    return df, [str(w.message) for w in caught]


def heads(df: pl.DataFrame, column: str) -> np.ndarray:
    rows = df.filter(pl.col("head").is_not_null()).sort("layer", "head")
    return rows[column].to_numpy().astype(float).reshape(2, 4)


@pytest.mark.parametrize("name", list(MODELS))
def test_roles_are_stored_and_every_word_aligned(runs, name):
    st, run_id, inputs = runs[name]
    for _, expected, special, role, words in inputs:
        assert role == expected
        assert [s is not None for s in special] == [w is None for w in words]
    n_words, aligned = st.connection.execute(
        "SELECT count(*), count(*) FILTER (WHERE n_toks >= 1) FROM words WHERE run_id = ?", [run_id]
    ).fetchone()
    assert n_words == aligned > 200


@pytest.mark.parametrize("name", list(MODELS))
def test_special_tokens_and_sep_to_sep_by_role(runs, name):
    st, run_id, inputs = runs[name]
    cls, sep, sep_sep, rest_sep = [], [], [], []
    for attn, roles, *_ in inputs:
        is_cls = np.array([r in ("cls", "bos") for r in roles])
        is_sep = np.array([r in ("sep", "eos") for r in roles])
        cls.append(attn[..., is_cls].sum(-1).mean(-1))
        sep.append(attn[..., is_sep].sum(-1).mean(-1))
        to_sep = attn[..., is_sep].sum(-1)
        sep_sep.append(to_sep[..., is_sep].mean(-1) if is_sep.any() else np.full((2, 4), np.nan))
        rest_sep.append(to_sep[..., ~is_sep].mean(-1))
    df, notes = answer(st, "special tokens", run_id)
    held = {r for _, roles, *_ in inputs for r in roles}
    lacking = [column for column, kinds in (("cls", {"cls", "bos"}), ("sep", {"sep", "eos"})) if not held & kinds]
    assert [note.split(" ", 1)[0] for note in notes] == lacking  # a structural zero is said, nothing else
    assert all("a structural zero" in note for note in notes)
    np.testing.assert_allclose(heads(df, "cls"), np.mean(cls, axis=0), atol=1e-6)
    np.testing.assert_allclose(heads(df, "sep"), np.mean(sep, axis=0), atol=1e-6)
    df, notes = answer(st, "sep to sep", run_id)
    np.testing.assert_allclose(heads(df, "rest_sep"), np.mean(rest_sep, axis=0), atol=1e-6)
    if name == "roberta":  # three </s> in a pair input, one in a sentence alone
        assert not notes
        np.testing.assert_allclose(heads(df, "sep_sep"), np.mean(sep_sep, axis=0), atol=1e-6)
    else:  # no separator: its columns are empty, and a note says why
        assert df["sep_sep"].null_count() == len(df) and (df["rest_sep"] == 0).all()
        assert any("no special token of role sep or eos" in n for n in notes)


@pytest.mark.parametrize("name", list(MODELS))
def test_entropy_of_the_cls_or_bos_row(runs, name):
    st, run_id, inputs = runs[name]
    df, notes = answer(st, "entropy", run_id)
    if name == "gpt2":
        assert df["cls_entropy"].null_count() == len(df) > 0
        assert any("no special token of role cls or bos" in n for n in notes)
        return
    said = [n for n in notes if "is a decoder's: its BOS row attends only to itself" in n]
    assert len(said) == (name == "llama") == len(notes)  # the decoder's BOS row: a note, nothing else
    per_input = []
    for attn, roles, *_ in inputs:
        first = roles.index("cls" if name == "roberta" else "bos")
        row = 0.9999 * attn[:, :, first] + 1e-4 / attn.shape[-1]
        per_input.append(-(row * np.log(row)).sum(-1))
    np.testing.assert_allclose(heads(df, "cls_entropy"), np.mean(per_input, axis=0), atol=1e-5)
    if name == "llama":  # a BOS at position 0 attends only to itself: the smoothing's entropy alone
        assert heads(df, "cls_entropy").max() < 0.01


@pytest.mark.parametrize("name", list(MODELS))
def test_feature_and_cls_attention_by_role(runs, name):
    st, run_id, inputs = runs[name]
    df, notes = answer(st, "feature attention", run_id)
    assert not notes
    for column, kinds in (("cls", ("cls", "bos")), ("sep", ("sep", "eos"))):
        scores = []
        for attn, roles, *_ in inputs:
            mask = np.array([r in kinds for r in roles])
            received = attn.sum(-2) / attn.shape[-1]  # [L, H, n]: column sums over the length
            scores.append(received[..., mask].max(-1) if mask.any() else np.zeros((2, 4)))
        np.testing.assert_allclose(heads(df, column), np.mean(scores, axis=0), atol=1e-6)  # 0 without the token
    df, notes = answer(st, "cls attention by feature", run_id)
    if name == "gpt2":  # no [CLS] row at all
        assert df.is_empty() and any("no [CLS] row" in n for n in notes)
        return
    kind = "cls" if name == "roberta" else "bos"
    cls = [attn[-1][:, roles.index(kind)][:, [r == kind for r in roles]].max(-1) for attn, roles, *_ in inputs]
    np.testing.assert_allclose(df.sort("head")["cls"].to_numpy(), np.mean(cls, axis=0), atol=1e-6)
    if name == "llama":  # the BOS row sees only itself; no separator: sep empty, with a note
        np.testing.assert_allclose(df["cls"].to_numpy(), 1.0, atol=1e-6)
        assert df["sep"].null_count() == len(df) and any("role sep or eos" in n for n in notes)
        assert any("its BOS row attends only to itself" in n for n in notes)


def test_a_run_without_roles_is_refused_in_one_line(runs, tmp_path):
    """A run written before tokens.role existed (its tokens files lack the column) is refused by the entries
    that find special tokens by role, not answered with empty columns."""
    st, run_id, _ = runs["roberta"]
    copy = tmp_path / "old"
    shutil.copytree(st.store.root, copy)
    for part in (copy / "data" / f"run_id={run_id}" / "tokens").glob("*.parquet"):
        table = pq.read_table(part)
        pq.write_table(table.drop_columns(["role"]), part)
    old = atlas.open(copy)
    for name in ("entropy", "sep to sep", "feature attention", "cls attention by feature"):
        with pytest.raises(AtlasError, match=f"^run {run_id} was ingested before special tokens had roles"):
            old.query(name, run=run_id)
    assert len(old.query("special tokens", run=run_id)) == 10  # read from attn_rows: unchanged
