"""Model inputs for every tokenizer kind: the layout is the tokenizer's own, every word aligned, roles by attribute.

For each family's kind of tokenizer (``tests/tokenizers_helpers.py``: WordPiece, byte-level BPE, SentencePiece
Unigram and BPE, with BERT's, RoBERTa's, GPT-2's and Llama's templates) and each packing mode, every input of
the UD samples is compared with what the tokenizer itself gives for the same text (the words joined by
spaces, text mode ``words``; a pair as its two texts): ids, token type ids, where special tokens stand, and the
word of each piece (found here from the character offsets independently of ``atlas.ingestion.align``). Text as written
is tested in ``tests/test_text_as_written.py``.
"""

from __future__ import annotations

import unicodedata
from itertools import islice
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
from tokenizers_helpers import TOKENIZERS, bert_wordpiece, gpt2_bpe, roberta_bpe
from transformers import PreTrainedTokenizerFast

import atlas
from atlas.errors import AtlasError
from atlas.ingestion.align import align, is_punct
from atlas.ingestion.examples import Example, Inputs, Layout, group_examples
from atlas.ingestion.pipeline import _targets
from atlas.ingestion.readers.conllu import Sentence, Word, read_conllu
from atlas.ingestion.readers.text import read_text
from atlas.ingestion.template import read_template, role_of
from tests.conftest import EWT_SAMPLE, GUM_SAMPLE

ROOT = Path(__file__).resolve().parent.parent
DECODERS = {"gpt2", "llama3", "llama2"}
# the roles each template's special tokens get, for one text and for a pair
ROLES = {
    "bert": (["cls", "sep"], ["cls", "sep", "sep"]),
    "albert": (["cls", "sep"], ["cls", "sep", "sep"]),
    "roberta": (["cls", "sep"], ["cls", "sep", "sep", "sep"]),
    "xlmr": (["cls", "sep"], ["cls", "sep", "sep", "sep"]),
    "gpt2": ([], []),
    "llama3": (["bos"], ["bos", "bos"]),
    "llama2": (["bos"], ["bos", "bos"]),
}


def sentences(n_ewt: int = 60) -> list[Sentence]:
    return list(islice(read_conllu(EWT_SAMPLE), n_ewt)) + list(read_conllu(GUM_SAMPLE))


def examples(tok: PreTrainedTokenizerFast, pack: str, decoder: bool, max_length: int = 96) -> tuple[Inputs, list]:
    inputs = Inputs.of(tok, decoder, EWT_SAMPLE, "words")
    aligned = align(tok, sentences(), EWT_SAMPLE, "words")
    return inputs, list(group_examples(aligned, pack, max_length, inputs))


def expected_words(text: str, forms: list[str], offsets: list[tuple[int, int]]) -> list[int]:
    """The word of each piece from its offsets: the word owning its first non-space character, or, for a
    piece of spaces only, the word after it."""
    owner = np.full(len(text) + 1, -1)
    at = 0
    for i, form in enumerate(forms):
        owner[at : at + len(form)] = i
        at += len(form) + 1
    out = []
    for a, b in offsets:
        inside = [owner[c] for c in range(a, b) if not text[c].isspace()]
        out.append(inside[0] if inside else next(owner[c] for c in range(a, len(text) + 1) if owner[c] >= 0))
    return out


def own_encoding(tok: PreTrainedTokenizerFast, example: Example) -> tuple[dict, list[int | None]]:
    """The tokenizer's own encoding of the example's texts, and the example word index of each of its tokens."""
    groups = [[a] for a in example.sentences] if example.pair else [example.sentences]
    texts, forms = [], []
    for group in groups:
        forms.append([w.form for a in group for w in a.sentence.words])
        texts.append(" ".join(forms[-1]))
    enc = tok(*texts, return_offsets_mapping=True, return_token_type_ids=True)
    sequence = enc.sequence_ids(0)
    words: list[int | None] = [None] * len(sequence)
    first = [0, len(forms[0])]
    for k, text in enumerate(texts):
        positions = [i for i, s in enumerate(sequence) if s == k]
        found = expected_words(text, forms[k], [enc["offset_mapping"][i] for i in positions])
        for i, w in zip(positions, found, strict=True):
            words[i] = first[k] + w
    return enc, words


@pytest.mark.parametrize("pack", ["none", "pair", "window"])
@pytest.mark.parametrize("kind", sorted(TOKENIZERS))
def test_layout_is_the_tokenizers_own(kind: str, pack: str) -> None:
    tok = TOKENIZERS[kind]()
    decoder = kind in DECODERS
    inputs, exs = examples(tok, pack, decoder)
    assert any(len(e.sentences) > 1 for e in exs) == (pack != "none")
    run = [e for e in exs if not e.skipped]
    assert len(run) > 10
    for ex in run:
        lay = inputs.layout(ex)
        enc, words = own_encoding(tok, ex)
        assert lay.input_ids == enc["input_ids"]
        assert lay.type_ids == enc["token_type_ids"]
        assert [s is not None for s in lay.special] == [s is None for s in enc.sequence_ids(0)]
        assert lay.token_word == words
        assert ex.n_tokens == len(lay.input_ids) <= 96
        assert set(lay.token_word) - {None} == set(range(len(ex.words)))  # every word owns a piece
        n_texts = 2 if ex.pair and len(ex.sentences) == 2 else 1
        assert [r for r in lay.role if r is not None] == ROLES[kind][n_texts - 1]
        strings = tok.convert_ids_to_tokens(lay.input_ids)
        assert lay.special == [p if r else None for p, r in zip(strings, lay.role, strict=True)]


def test_segments_follow_the_texts() -> None:
    """segment: the type ids where they tell the texts apart, else the text, specials going with the text before."""
    for kind, specials in (
        ("bert", [("[CLS]", 0), ("[SEP]", 0), ("[SEP]", 1)]),
        ("roberta", [("<s>", 0), ("</s>", 0), ("</s>", 0), ("</s>", 1)]),
        ("llama3", [("<|begin_of_text|>", 0), ("<|begin_of_text|>", 1)]),
        ("gpt2", []),
    ):
        tok = TOKENIZERS[kind]()
        inputs, exs = examples(tok, "pair", kind in DECODERS)
        for ex in (e for e in exs if len(e.sentences) == 2 and not e.skipped):
            lay = inputs.layout(ex)
            n_a = len(ex.sentences[0].sentence.words)
            words = [w < n_a for w in lay.token_word if w is not None]
            assert [s for w, s in zip(lay.token_word, lay.segments, strict=True) if w is not None] == [
                0 if first else 1 for first in words
            ]
            assert [(p, s) for p, s in zip(lay.special, lay.segments, strict=True) if p] == specials


def test_roles_from_the_tokenizers_attributes_not_strings() -> None:
    rob = roberta_bpe()
    s, e = rob.convert_tokens_to_ids("<s>"), rob.convert_tokens_to_ids("</s>")
    assert [role_of(rob, s, False, True), role_of(rob, e, False, False)] == ["cls", "sep"]  # an encoder: RoBERTa
    assert [role_of(rob, s, True, True), role_of(rob, e, True, False)] == ["bos", "eos"]  # a decoder
    assert role_of(rob, rob.pad_token_id, False, False) == "pad"
    assert role_of(rob, rob.mask_token_id, False, False) == "other"
    gpt = gpt2_bpe()  # <|endoftext|> is bos and eos: a start before the first text, an end after it
    eot = gpt.convert_tokens_to_ids("<|endoftext|>")
    assert [role_of(gpt, eot, True, True), role_of(gpt, eot, True, False)] == ["bos", "eos"]
    # the string does not matter: a BERT-style tokenizer whose cls token is spelled '<s>'
    bert = bert_wordpiece()
    renamed = PreTrainedTokenizerFast(
        tokenizer_object=bert.backend_tokenizer, cls_token="[SEP]", sep_token="[CLS]", unk_token="[UNK]"
    )
    template = read_template(renamed, decoder=False)
    assert [(slot.token, slot.role) for slot in template.single if slot.text is None] == [
        ("[CLS]", "sep"),
        ("[SEP]", "cls"),
    ]


def test_targets_are_roles_and_piece_text() -> None:
    """to_cls / to_sep follow roles (none at all for GPT-2); '.' and ',' are found by their corpus text."""
    for kind, n_cls, n_sep in (("bert", 1, 2), ("roberta", 1, 3), ("llama3", 2, 0), ("gpt2", 0, 0)):
        tok = TOKENIZERS[kind]()
        inputs, exs = examples(tok, "pair", kind in DECODERS)
        ex = next(e for e in exs if len(e.sentences) == 2 and not e.skipped and any(w.form == "," for _, w in e.words))
        lay = inputs.layout(ex)
        masks = _targets(lay)
        assert (masks["cls"].sum(), masks["sep"].sum()) == (n_cls, n_sep)
        texts = [" ".join(w.form for w in a.sentence.words) for a in ex.sentences]
        enc = tok(*texts, return_offsets_mapping=True)
        commas = [
            t
            for t, (k, (start, end)) in enumerate(zip(enc.sequence_ids(0), enc["offset_mapping"], strict=True))
            if k is not None and texts[k][start:end].strip() in (".", ",")
        ]
        assert len(commas) >= 2 and set(np.flatnonzero(masks["dot_comma"])) == set(commas)


@pytest.mark.parametrize("kind", sorted(TOKENIZERS))
def test_punctuation_flags_need_no_wordpiece_marker(kind: str) -> None:
    tok = TOKENIZERS[kind]()
    inputs, exs = examples(tok, "none", kind in DECODERS)
    n_punct = 0
    for ex in (e for e in exs if not e.skipped):
        lay = inputs.layout(ex)
        forms = [w.form for _, w in ex.words]
        for t, w in enumerate(lay.token_word):
            if w is None:
                continue
            all_punct = all(unicodedata.category(c).startswith("P") for c in forms[w])
            any_punct = any(unicodedata.category(c).startswith("P") for c in forms[w])
            if all_punct:  # every piece but a lone space marker ('Ġ', '▁') of a punctuation word
                assert is_punct(lay.text[t]) or not lay.text[t].strip()
                n_punct += is_punct(lay.text[t])
            elif not any_punct:
                assert not is_punct(lay.text[t])
    assert n_punct > 100


def test_a_piece_across_two_words_is_an_error_naming_the_line() -> None:
    backend = Tokenizer(models.WordLevel({"[UNK]": 0, "New York": 1, "is": 2, "big": 3}, unk_token="[UNK]"))
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]")
    words = [Word(i + 1, f, None, None, None, None, None, None, None, 10 + i) for i, f in enumerate(["New", "York"])]
    with pytest.raises(AtlasError, match=r"^corpus.conllu:10: .*'New York'.*cannot be aligned"):
        align(tok, [Sentence(0, "s1", None, 10, words)], "corpus.conllu", "words")


def test_a_word_without_pieces() -> None:
    """Text mode ``words``: it gets the unknown token; a tokenizer without one is an error naming the line."""
    words = [Word(i + 1, f, None, None, None, None, None, None, None, 5 + i) for i, f in enumerate(["big", "\x07"])]
    sentence = Sentence(0, "s1", None, 5, words)
    bert = bert_wordpiece()
    (aligned,) = align(bert, [sentence], "c.conllu", "words")
    assert aligned.word_pieces[1] == [bert.unk_token_id]
    backend = Tokenizer(models.WordLevel({"big": 0}))
    backend.normalizer = normalizers.Replace("\x07", "")
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    with pytest.raises(AtlasError, match=r"^c.conllu:6: .*no piece"):
        align(PreTrainedTokenizerFast(tokenizer_object=backend), [sentence], "c.conllu", "words")


def test_windows_are_tokenized_as_one_text() -> None:
    """A byte-level BPE window: the first word of a later sentence carries the space marker, as in running text."""
    tok = roberta_bpe()
    inputs, exs = examples(tok, "window", False, max_length=200)
    ex = next(e for e in exs if len(e.sentences) > 2 and not e.skipped)
    lay: Layout = inputs.layout(ex)
    second = lay.token_word.index(len(ex.sentences[0].sentence.words))
    assert tok.convert_ids_to_tokens(lay.input_ids[second]).startswith("Ġ")
    assert not tok.convert_ids_to_tokens(ex.sentences[1].word_pieces[0][0]).startswith("Ġ")  # alone: a text start


def test_text_pairs_are_cut_to_the_templates_length() -> None:
    """--format text: a pair fits max_length with the template's own special tokens (RoBERTa: 4, BERT: 3)."""
    for kind in ("roberta", "bert"):
        tok = TOKENIZERS[kind]()
        inputs = Inputs.of(tok, False, "wiki")
        corpus = ROOT / "samples" / "wikitext" / "wiki.test-sample.raw"
        sents = list(islice(read_text(corpus, tok, 40, sample=6), 12))
        aligned = align(tok, sents, corpus)
        exs = list(group_examples(aligned, "pair", 40, inputs))
        assert len(exs) == 6 and not any(e.skipped for e in exs)
        assert max(e.n_tokens for e in exs) <= 40


def test_a_glue_pair_longer_than_max_length_is_skipped_whole(tmp_path):
    """A GLUE example is one input: a pair that does not fit is skipped with both texts, never split in two."""
    mrpc = ROOT / "samples" / "glue" / "MRPC" / "dev.tsv"
    lines = mrpc.read_text(encoding="utf-8-sig").splitlines()[:13]
    corpus = tmp_path / "dev.tsv"
    corpus.write_text("\n".join(lines) + "\n")
    store = tmp_path / "store"
    done = atlas.ingest(corpus, format="glue", task="MRPC", max_length=48, store=store, progress=False)
    rows = atlas.open(store).sql("SELECT sent_ids, n_tokens, skipped FROM examples ORDER BY example_id").rows()
    assert [r[0] for r in rows] == [[f"{i}a", f"{i}b"] for i in range(12)]
    assert all(skipped == (n_tokens > 48) for _, n_tokens, skipped in rows)
    assert 0 < done.n_skipped < 12 and done.n_examples == 12 - done.n_skipped
