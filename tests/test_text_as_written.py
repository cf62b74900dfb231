"""Text as written (``--text written``, the default) and first-piece word rows (``--word-rows first``).

A CoNLL-U sentence is read from its ``# text`` (else its words joined as ``SpaceAfter=No`` says), a multiword token
as its surface form; a GLUE pair from its raw strings. The stored pieces are the tokenizer's own pieces of that
text, for byte-level BPE (RoBERTa) and SentencePiece Unigram (XLM-R) tokenizers of tiny random models; a piece goes
to the word of its first character and a word may get none, which then has no word row and is never predicted.
``--text words`` is the input every earlier run read: the same run id and the same best-head table as before the
setting existed. First-piece word rows are Clark et al.'s released ``get_word_word_attention(mode="first")``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner
from conftest import EWT_SAMPLE, GUM_SAMPLE, cut_conllu, make_store
from tokenizers import Tokenizer, models, pre_tokenizers
from tokenizers_helpers import roberta_bpe, save, xlmr_unigram
from transformers import AutoConfig, AutoModel, PreTrainedTokenizerFast

import atlas
import atlas.ingestion.sparsify as sparsify_module
from atlas.catalogue import resolve, run_entry
from atlas.cli import cli
from atlas.errors import AtlasError
from atlas.ingestion.align import align
from atlas.ingestion.corpus import check_corpus
from atlas.ingestion.examples import Inputs, group_examples
from atlas.ingestion.pipeline import Settings, ingest
from atlas.ingestion.readers.conllu import Sentence, Word, read_conllu, unmatched_texts
from atlas.ingestion.readers.corpus_info import CorpusInfo
from atlas.ingestion.readers.text import read_text
from atlas.ingestion.run_id import run_id_for
from atlas.ingestion.sparsify import batch_rows
from atlas.model.load import load_model
from atlas.probe_data import word_maps
from atlas.recompute import StoredInput
from atlas.store import Store

ROOT = Path(__file__).resolve().parent.parent
MRPC = ROOT / "samples" / "glue" / "MRPC" / "dev.tsv"
WIKITEXT = ROOT / "samples" / "wikitext" / "wiki.test-sample.raw"
# sample sentences with multiword tokens (Don't, It's, you'd, cannot, country’s) and SpaceAfter=No
SAMPLE_SENTENCES = {
    EWT_SAMPLE: [
        "weblog-blogspot.com_marketview_20050210075500_ENG_20050210_075500-0003",
        "weblog-blogspot.com_marketview_20050210075500_ENG_20050210_075500-0004",
        "weblog-juancole.com_juancole_20041120060600_ENG_20041120_060600-0007",
    ],
    GUM_SAMPLE: ["GUM_academic_librarians-12"],
}
COLUMNS = "{id}\t{form}\t_\t_\t_\t_\t{head}\t{rel}\t_\t{misc}"


def conllu(sent_id: str, text: str | None, rows: list[tuple[str, str, int | None, str]]) -> str:
    """A sentence: rows (id, form, head, misc); an id 'a-b' is a multiword token's range line."""
    lines = [f"# sent_id = {sent_id}", *([f"# text = {text}"] if text is not None else [])]
    for id_, form, head, misc in rows:
        rng = "-" in id_
        lines.append(
            COLUMNS.format(
                id=id_, form=form, head="_" if rng else head, rel="_" if rng else ("root" if head == 0 else "dep"),
                misc=misc or "_",
            )
        )  # fmt: skip
    return "\n".join(lines) + "\n\n"


DONT = conllu(
    "dont",
    "We don't know why they cannot come, do we?",
    [
        ("1", "We", 3, ""), ("2-3", "don't", None, ""), ("2", "do", 4, ""), ("3", "n't", 4, ""), ("4", "know", 0, ""),
        ("5", "why", 9, ""), ("6", "they", 9, ""), ("7-8", "cannot", None, ""), ("7", "can", 9, ""),
        ("8", "not", 9, ""), ("9", "come", 4, "SpaceAfter=No"), ("10", ",", 4, ""), ("11", "do", 4, ""),
        ("12", "we", 11, "SpaceAfter=No"), ("13", "?", 4, ""),
    ],
)  # fmt: skip
NO_TEXT = conllu(  # no '# text': the surface tokens joined as SpaceAfter=No says (a range line carries it)
    "no-text",
    None,
    [("1", "Well", 3, "SpaceAfter=No"), ("2", ",", 1, ""), ("3-4", "gonna", None, "SpaceAfter=No"),
     ("3", "gon", 0, ""), ("4", "na", 3, ""), ("5", ".", 3, "")],
)  # fmt: skip
DEL = conllu(  # a multiword token whose forms do not concatenate to its surface form
    "del", "Vino del mar.", [("1", "Vino", 0, ""), ("2-3", "del", None, ""), ("2", "de", 4, ""), ("3", "el", 4, ""),
                             ("4", "mar", 1, "SpaceAfter=No"), ("5", ".", 1, "")],
)  # fmt: skip
UNMATCHED = conllu(  # a '# text' that does not hold the words: read as the words joined
    "unmatched", "Hello there, world", [("1", "Hello", 0, ""), ("2", "here", 1, "SpaceAfter=No"), ("3", ",", 1, "")]
)


def sample_blocks() -> str:
    """The sample sentences of SAMPLE_SENTENCES, as they stand in their files."""
    out = []
    for path, ids in SAMPLE_SENTENCES.items():
        for block in path.read_text(encoding="utf-8").split("\n\n"):
            if any(f"# sent_id = {i}\n" in block + "\n" for i in ids):
                out.append(block.strip("\n") + "\n\n")
    assert len(out) == sum(map(len, SAMPLE_SENTENCES.values()))
    return "".join(out)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("written") / "written.conllu"
    path.write_text(sample_blocks() + DONT + NO_TEXT, encoding="utf-8")
    return path


def file_texts(path: Path) -> list[str | None]:
    """Each sentence's '# text' comment, read here from the file's lines."""
    texts: list[str | None] = []
    for block in path.read_text(encoding="utf-8").split("\n\n"):
        if block.strip():
            found = [line.split("=", 1)[1].strip() for line in block.splitlines() if line.startswith("# text =")]
            texts.append(found[0] if found else None)
    return texts


def owners(text: str, forms: list[str]) -> list[int]:
    """The word of each character of ``text`` whose words' forms follow one another in it (-1: a space)."""
    owner, at = [-1] * len(text), 0
    for w, form in enumerate(forms):
        while text[at].isspace():
            at += 1
        assert text.startswith(form, at), (text, form)
        owner[at : at + len(form)] = [w] * len(form)
        at += len(form)
    return owner


def word_of_pieces(text: str, forms: list[str], offsets: list[tuple[int, int]]) -> list[int]:
    """The stated rule, computed apart: the word of a piece's first character that is not a space; a piece of
    spaces only, the word after it."""
    owner = owners(text, forms)
    out = []
    for a, b in offsets:
        inside = [owner[c] for c in range(a, b) if owner[c] >= 0]
        out.append(inside[0] if inside else next(w for w in owner[a:] if w >= 0))
    return out


# -- reading: the sentence as written ------------------------------------------------------------------------------


def test_conllu_sentences_are_read_as_written(tmp_path):
    path = tmp_path / "c.conllu"
    path.write_text(DONT + NO_TEXT + DEL, encoding="utf-8")
    dont, no_text, del_ = read_conllu(path)
    assert [w.form for w in dont.words][:4] == ["We", "do", "n't", "know"]  # the syntactic words stay the words
    assert dont.text == "We don't know why they cannot come, do we?"
    assert [dont.text[a:b] for a, b in dont.spans] == [w.form for w in dont.words]  # each on its own characters
    assert dont.spans[1:3] == [(3, 5), (5, 8)] and not dont.text_unmatched
    assert no_text.text == "Well, gonna." and [no_text.text[a:b] for a, b in no_text.spans] == [
        "Well", ",", "gon", "na", ".",
    ]  # fmt: skip
    assert del_.text == "Vino del mar." and del_.spans[1:3] == [(5, 8), (8, 8)]  # de holds 'del', el nothing
    assert unmatched_texts(path) == []


def test_a_text_that_does_not_hold_the_words_is_read_as_the_words_joined_and_counted(tmp_path):
    path = tmp_path / "c.conllu"
    path.write_text(UNMATCHED + DONT, encoding="utf-8")
    bad, good = read_conllu(path)
    assert bad.text_unmatched and bad.text == "Hello here," and not good.text_unmatched
    assert unmatched_texts(path) == ["unmatched"]
    with pytest.raises(AtlasError, match=r"c.conllu:2: malformed multiword-token range 'x-2'"):
        path.write_text("# sent_id = s\nx-2\tab\t_\t_\t_\t_\t_\t_\t_\t_\n", encoding="utf-8")
        list(read_conllu(path))


def test_the_ingest_says_how_many_texts_did_not_hold_their_words(tmp_path):
    path = tmp_path / "c.conllu"
    path.write_text(UNMATCHED + DONT, encoding="utf-8")
    result = CliRunner().invoke(cli, ["ingest", "--corpus", str(path), "--store", str(tmp_path / "s"), "--quiet"])
    assert result.exit_code == 0, result.output
    assert "'# text' does not hold the words in 1 sentences" in result.output


def test_every_ewt_sentence_is_found_in_its_text():
    for sentence in read_conllu(EWT_SAMPLE):
        assert not sentence.text_unmatched and sentence.spans is not None and sentence.text is not None
        assert [sentence.text[a:b] for a, b in sentence.spans if a < b] != []


# -- alignment -----------------------------------------------------------------------------------------------------


def test_a_piece_across_two_words_goes_to_the_word_of_its_first_character():
    """Never refused, never an unknown token added: 'New York' is one piece, New's; York gets none."""
    backend = Tokenizer(models.WordLevel({"[UNK]": 0, "New York": 1, "is": 2, "big": 3}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Split(" is ", "isolated")
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]")
    words = [Word(i + 1, f, None, None, None, None, None, None, None, 1) for i, f in enumerate(["New", "York"])]
    sentence = Sentence(0, "s", None, 1, words, text="New York", spans=[(0, 3), (4, 8)])
    (written,) = align(tok, [sentence], "c.conllu")
    assert written.word_pieces == [[1], []] and written.pieces.text == [["New York"], []]
    with pytest.raises(AtlasError, match="cannot be aligned"):  # the words joined by spaces: as before
        align(tok, [sentence], "c.conllu", "words")


# -- stored pieces of tiny models ----------------------------------------------------------------------------------

SIZE = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64}
TINY = {"roberta": ("roberta", roberta_bpe), "xlmr": ("xlm-roberta", xlmr_unigram)}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, Path]:
    """A tiny random RoBERTa (byte-level BPE) and XLM-R (SentencePiece Unigram), saved where load_model reads them."""
    out = {}
    for name, (model_type, make) in TINY.items():
        tok, folder = make(), tmp_path_factory.mktemp(name)
        config = AutoConfig.for_model(
            model_type, **SIZE, vocab_size=len(tok), max_position_embeddings=514, pad_token_id=tok.pad_token_id,
            bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        )  # fmt: skip
        torch.manual_seed(0)
        AutoModel.from_config(config).save_pretrained(folder)
        out[name] = save(tok, folder)
    return out


def stored_inputs(store: Store, run_id: str) -> dict[int, tuple[list[int], list[int | None]]]:
    """Each example's piece ids and their words."""
    con = store.connect()
    rows = con.execute(
        "SELECT example_id, list(piece_id ORDER BY tok_idx), list(word_idx ORDER BY tok_idx) FROM tokens "
        "WHERE run_id = ? GROUP BY example_id",
        [run_id],
    ).fetchall()
    return {ex: (ids, words) for ex, ids, words in rows}


@pytest.mark.parametrize("kind", list(TINY))
def test_stored_pieces_are_the_tokenizers_own_pieces_of_the_text(tiny, corpus, tmp_path, kind):
    lm = load_model(str(tiny[kind]))
    tok = lm.tokenizer
    sentences = list(read_conllu(corpus))
    texts = [t if t is not None else s.text for t, s in zip(file_texts(corpus), sentences, strict=True)]
    assert texts[-1] == "Well, gonna."  # the one without '# text'
    store, written = make_store(tmp_path, corpus, lm)
    _, words = make_store(tmp_path, corpus, lm, text="words")
    stored, as_words = stored_inputs(store, written), stored_inputs(store, words)
    differ = 0
    for ex, (sentence, text) in enumerate(zip(sentences, texts, strict=True)):
        forms = [w.form for w in sentence.words]
        ids, token_word = stored[ex]
        enc = tok(text, return_offsets_mapping=True)
        assert ids == enc["input_ids"]  # the tokenizer's own input of the text, its template included
        pieces = [i for i, s in enumerate(enc.sequence_ids()) if s is not None]
        offsets = [enc["offset_mapping"][i] for i in pieces]
        assert [token_word[i] for i in pieces] == word_of_pieces(text, forms, offsets)
        assert as_words[ex][0] == tok(" ".join(forms))["input_ids"]  # text='words': the words joined, as before
        differ += as_words[ex][0] != ids
    assert differ >= 4  # SpaceAfter=No and the contractions change the pieces of byte-level BPE and SentencePiece
    con = store.connect()
    runs = con.execute("SELECT run_id, text, word_rows FROM runs ORDER BY text").fetchall()
    assert sorted(runs) == sorted([(words, "words", "mean"), (written, "written", "mean")])
    # the words table counts each word's pieces; a word may have none (no first token)
    n_toks = con.execute("SELECT sum(n_toks), count(*) FILTER (first_tok IS NULL) = count(*) FILTER (n_toks = 0) "
                         "FROM words WHERE run_id = ?", [written]).fetchone()  # fmt: skip
    assert n_toks == (sum(sum(w is not None for w in tw) for _, tw in stored.values()), True)


def test_mrpc_pairs_are_read_as_the_raw_sentences(tiny, tmp_path):
    """A GLUE pair is the tokenizer's own input of the two raw strings; spaCy's words lie on them."""
    lines = MRPC.read_text(encoding="utf-8-sig").splitlines()
    path = tmp_path / "dev.tsv"
    path.write_text("\n".join(lines[:31]) + "\n", encoding="utf-8")
    lm = load_model(str(tiny["roberta"]))
    store = Store(tmp_path / "s")
    run = ingest(check_corpus(path, "glue", "MRPC"), store, lm, Settings(pack="pair"), progress=False).run_id
    words = ingest(check_corpus(path, "glue", "MRPC"), store, lm, Settings(pack="pair", text="words"), progress=False)
    stored, as_words = stored_inputs(store, run), stored_inputs(store, words.run_id)
    header = lines[0].split("\t")
    differ = 0
    for ex, line in enumerate(lines[1:31]):
        cells = line.split("\t")
        a, b = cells[header.index("#1 String")], cells[header.index("#2 String")]
        assert stored[ex][0] == lm.tokenizer(a, b)["input_ids"]
        differ += as_words[ex][0] != stored[ex][0]
    assert differ >= 10  # "doesn't" read as "does n't", "company's" as "company 's", ...


def test_text_pairs_are_cut_as_written_within_the_length():
    """--format text: a cut paragraph is its kept words' characters, its pieces the tokenizer's own of them."""
    tok = roberta_bpe()
    sentences = list(read_text(WIKITEXT, tok, 40, sample=6))
    assert any(":" in s.sent_id for s in sentences)  # cut pairs
    inputs = Inputs.of(tok, False, WIKITEXT)
    exs = list(group_examples(align(tok, sentences, WIKITEXT), "pair", 40, inputs))
    assert len(exs) == 6 and not any(e.skipped for e in exs)
    for ex in exs:
        texts = [a.sentence.text for a in ex.sentences]
        assert inputs.layout(ex).input_ids == tok(*texts)["input_ids"] and ex.n_tokens <= 40


# -- word rows: words without pieces, first-piece rows -------------------------------------------------------------


def clark_word_attention(attn: np.ndarray, token_word: list[int | None], first: bool) -> np.ndarray:
    """bpe_utils.get_word_word_attention over a word-piece map (TO a word: the sum over its pieces; FROM a word: its
    first piece's row, or the mean of its pieces' rows), words without pieces left as -inf."""
    n_words = 1 + max(w for w in token_word if w is not None)
    pieces = [[t for t, x in enumerate(token_word) if x == w] for w in range(n_words)]
    out = np.full((n_words, n_words), -np.inf)
    for u, rows in enumerate(pieces):
        for v, cols in enumerate(pieces):
            if rows and cols:
                to_v = attn[:, cols].sum(axis=1)
                out[u, v] = to_v[rows[0]] if first else to_v[rows].mean()
    return out


def random_maps(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    p = np.exp(rng.normal(size=(2, 3, n, n)) * 3)
    return (p / p.sum(-1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("first", [False, True])
@pytest.mark.parametrize("engine", ["compiled", "tensors"])
def test_words_without_pieces_have_no_rows_and_are_never_predicted(monkeypatch, first, engine):
    token_words = [
        [None, 0, 0, 1, 3, 3, 3, 4, 6, None],  # words 2 and 5 have no pieces, word 7 (the last) neither
        [None, 0, 1, 1, 2, None],  # every word has pieces
        [None, 1, 1, None],  # one word with pieces: no word rows
        [None, 40, 40, 41, None],  # more words than the longest input has tokens (words 0 to 39 without pieces)
    ]
    n_words = [8, 3, 2, 42]
    lengths = [len(tw) for tw in token_words]
    maps = [random_maps(n, seed) for seed, n in enumerate(lengths)]
    longest = max(lengths)
    padded = [torch.zeros(len(maps), 3, longest, longest) for _ in range(2)]
    for b, m in enumerate(maps):
        for layer in range(2):
            padded[layer][b, :, : lengths[b], : lengths[b]] = torch.from_numpy(m[layer])
    if engine == "tensors":
        monkeypatch.setattr(sparsify_module, "CpuRows", sparsify_module.TensorRows)
    out = batch_rows(padded, lengths, token_words, None, None, first_piece=first)
    for b, (_, _, words) in enumerate(out):
        with_pieces = sorted({w for w in token_words[b] if w is not None})
        if len(with_pieces) < 2:
            assert len(words["src_word"]) == 0
            continue
        assert len(words["src_word"]) == 2 * 3 * len(with_pieces)
        for r in range(len(words["src_word"])):
            layer, head, u = int(words["layer"][r]), int(words["head"][r]), int(words["src_word"][r])
            ref = clark_word_attention(maps[b][layer, head].astype(np.float64), token_words[b], first)
            assert u in with_pieces and words["dst_word"][r] in with_pieces and words["from_word"][r] in with_pieces
            row, col = ref[u].copy(), ref[:, u].copy()
            row[u] = col[u] = -np.inf
            assert words["dst_word"][r] == row.argmax() and words["from_word"][r] == col.argmax()
            np.testing.assert_allclose(words["weight"][r], row.max(), rtol=1e-5)
            np.testing.assert_allclose(words["from_weight"][r], col.max(), rtol=1e-5)
        assert n_words[b] >= len(with_pieces)


def test_probe_maps_of_words_without_pieces_and_first_pieces():
    """The probes' word-level maps: every word of the input (one without pieces: zeros), FROM a word its first
    piece's row where the run's word rows are 'first'."""
    token_word = [None, 0, 0, 2, None]  # word 1 has no piece, nor has word 3 (the last)
    item = StoredInput(0, [0] * 5, [0] * 5, token_word, ["[CLS]", None, None, None, "[SEP]"],
                       ["cls", None, None, None, "sep"])  # fmt: skip
    attn = random_maps(5, 7)
    for first in (False, True):
        pair, root = word_maps(attn, item, 4, first)
        assert pair.shape == (4, 4, 12) and root.shape == (4, 2, 12)
        assert not pair[1].any() and not pair[:, 1].any() and not pair[3].any()
        ref = clark_word_attention(attn[0, 0].astype(np.float64), token_word, first)
        np.testing.assert_allclose(pair[0, 2, 0], ref[0, 2], rtol=1e-3)  # float16 features
        np.testing.assert_allclose(pair[2, 0, 0], ref[2, 0], rtol=1e-3)


def test_cannot_with_the_embedded_model(model, tmp_path):
    """UD splits "cannot" into can + not; the embedded model's WordPiece keeps it whole: not gets no piece. It has
    no word row, no head predicts it, and it counts in every relation's total as a word not predicted."""
    corpus = cut_conllu(EWT_SAMPLE, 28, tmp_path / "ewt-28.conllu")  # sentence 28 holds "cannot"
    store, written = make_store(tmp_path / "s", corpus, model)
    _, words = make_store(tmp_path / "s", corpus, model, text="words")
    con = store.connect()
    (ex, idx, first), *rest = con.execute(
        "SELECT example_id, word_idx, first_tok FROM words WHERE run_id = ? AND n_toks = 0", [written]
    ).fetchall()
    assert not rest and first is None
    assert con.execute("SELECT form FROM words WHERE run_id = ? AND example_id = ? AND word_idx = ? - 1",
                       [written, ex, idx]).fetchone() == ("can",)  # fmt: skip
    predicted = con.execute(
        "SELECT count(*) FILTER (src_word = $3), count(*) FILTER (dst_word = $3 OR from_word = $3), count(*) "
        "FROM word_rows WHERE run_id = $1 AND example_id = $2",
        [written, ex, idx],
    ).fetchone()
    assert predicted[:2] == (0, 0) and predicted[2] > 0
    entry = resolve("best head per dependency relation")
    tables = [run_entry(con, entry, entry.bind({"run": r, "min_count": "1"})) for r in (written, words)]
    assert tables[0]["n"].to_list() == tables[1]["n"].to_list()  # every word counted, with pieces or not


# -- the input every earlier run read ------------------------------------------------------------------------------

# "best head per dependency relation" (min_count 1) of the sparse store of ewt_small (its default: the first 150
# sentences of the EWT sample), as the code before the text setting gave it (run ewt-small__all-MiniLM-L6-v2__
# 7d5f8ea15d): the table, each row as relation, n, best head, direction, correct, baseline offset
BEFORE_RUN = "ewt-small__all-MiniLM-L6-v2__7d5f8ea15d"
BEFORE = """\
all 3145 3-2 d 1254 +1|all (non-root) 2995 3-2 d 1254 +1|case 311 3-9 d 209 +1|det 291 3-9 d 224 +1|
nsubj 246 3-9 d 129 +1|amod 204 3-9 d 173 +1|nmod 163 3-1 d 41 -2|advmod 156 3-2 d 94 +1|obj 138 3-1 d 102 -2|
obl 115 6-11 d 31 -2|mark 101 2-5 d 48 +1|aux 84 2-5 d 54 +2|conj 79 3-5 d 23 -2|compound 78 2-9 d 66 +1|
cc 76 2-5 d 42 +1|cop 65 5-8 h 37 +2|nmod:poss 57 5-10 d 46 +1|advcl 55 5-2 d 15 -2|flat 50 4-1 h 30 -1|
acl:relcl 41 4-2 d 13 -2|xcomp 37 2-7 d 25 -2|ccomp 36 3-11 d 15 -3|aux:pass 29 3-9 d 28 +1|nsubj:pass 27 3-4 d 15 +2|
acl 22 2-10 d 9 -1|nummod 21 3-9 d 17 +1|parataxis 17 3-5 d 5 -1|obl:unmarked 15 3-2 d 9 +2|expl 12 2-10 h 11 +1|
compound:prt 11 5-10 h 11 -1|appos 10 3-3 d 5 -1|nmod:unmarked 9 6-3 h 4 +1|iobj 7 3-1 d 7 -1|
nmod:desc 7 3-12 h 6 +1|fixed 6 5-10 h 6 -1|nsubj:outer 6 5-3 d 2 +2|obl:agent 5 4-1 h 3 -2|reparandum 4 6-10 d 2 +2|
cc:preconj 3 3-9 d 2 +2|csubj 3 6-1 h 2 -2|det:predet 3 4-2 d 3 +2|vocative 1 6-10 d 1 -2"""
DIRECTION = {"d": "dependent -> head", "h": "head -> dependent"}


@pytest.mark.skipif(
    bool(os.environ.get("ATLAS_TEST_CONLLU") or os.environ.get("ATLAS_TEST_SENTENCES")),
    reason="pinned for the default ewt_small",
)
def test_words_reproduce_the_table_and_run_id_from_before(sparse_store):
    store, run_id = sparse_store  # text="words" (conftest)
    assert run_id == BEFORE_RUN
    entry = resolve("best head per dependency relation")
    df = run_entry(store.connect(), entry, entry.bind({"run": run_id, "min_count": "1"}))
    got = [
        (r["relation"], r["n"], r["best_head"], r["direction"], r["correct"], r["baseline_offset"])
        for r in df.iter_rows(named=True)
    ]
    rows = [row.rsplit(" ", 5) for row in BEFORE.replace("\n", "").split("|")]
    assert got == [(rel, int(n), head, DIRECTION[d], int(c), off) for rel, n, head, d, c, off in rows]


def test_run_ids_keep_the_earlier_formula_for_words_and_the_mean():
    """A run read as words with mean word rows has the id every earlier run had; the other settings are hashed."""
    info = CorpusInfo(Path("c.conllu"), "f" * 64, 3)

    class Model:
        name, model_hash, random_init, seed = "m", "a" * 64, False, 0

    settings = Settings(max_length=512, text="words")
    before = [info.sha256, "a" * 64, False, 0, 0.9, 512, "none", 512, 6, "1/256", "entropy 2**-17"]
    assert run_id_for(info, Model, settings) == "c__m__" + hashlib.sha256(json.dumps(before).encode()).hexdigest()[:10]
    ids = {
        run_id_for(info, Model, Settings(max_length=512, text=text, word_rows=rows))
        for text in ("words", "written")
        for rows in ("mean", "first")
    }
    assert len(ids) == 4


def test_older_runs_read_as_words_and_mean(sparse_store, tmp_path):
    """A runs file written before the settings (no text, no word_rows columns) reads as 'words' and 'mean'."""
    store, run_id = sparse_store
    copy = Store(tmp_path / "old")
    copy.make_folders()
    for part in store.run_folder(run_id).rglob("*.parquet"):
        target = copy.run_folder(run_id) / part.relative_to(store.run_folder(run_id))
        target.parent.mkdir(parents=True, exist_ok=True)
        table = pq.read_table(part)
        if part.parent.name == "runs":
            table = table.drop_columns(["text", "word_rows"])
        pq.write_table(table, target)
    copy.write_database()
    assert copy.connect().execute("SELECT text, word_rows FROM runs").fetchall() == [("words", "mean")]
    assert atlas.open(copy.root).table("runs").select("text", "word_rows").collect().rows() == [("words", "mean")]


def test_first_piece_rows_are_a_setting_of_their_own(model, tmp_path):
    corpus = cut_conllu(EWT_SAMPLE, 6, tmp_path / "ewt-6.conllu")
    store, first = make_store(tmp_path / "s", corpus, model, word_rows="first")
    _, mean = make_store(tmp_path / "s", corpus, model)
    con = store.connect()
    assert con.execute("SELECT word_rows FROM runs WHERE run_id = ?", [first]).fetchone() == ("first",)
    split = "SELECT count(*) FROM words WHERE run_id = ? AND n_toks > 1"
    assert con.execute(split, [first]).fetchone()[0] > 0
    rows = "SELECT layer, head, src_word, dst_word FROM word_rows WHERE run_id = ? ORDER BY ALL"
    assert con.execute(rows, [first]).fetchall() != con.execute(rows, [mean]).fetchall()


def test_the_options_are_refused_in_their_own_words(tmp_path):
    with pytest.raises(AtlasError, match=r"^text='raw': expected one of written, words$"):
        atlas.ingest(EWT_SAMPLE, store=tmp_path / "s", text="raw")
    with pytest.raises(AtlasError, match=r"^word_rows='max': expected one of mean, first$"):
        atlas.ingest(EWT_SAMPLE, store=tmp_path / "s", word_rows="max")
    result = CliRunner().invoke(cli, ["ingest", "--corpus", str(EWT_SAMPLE), "--store", str(tmp_path), "--text", "x"])
    assert result.exit_code != 0 and "--text" in result.output and not (tmp_path / "atlas.duckdb").exists()
