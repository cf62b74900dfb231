"""--pack window: a window's pieces assembled from its sentences' equal those of its text tokenized as one.

The reference here is how windows were made before they were assembled: each time a window grows by a sentence,
the text of all its sentences (``atlas.ingestion.align.text_of``: as written, joined by single spaces, or all the words
joined by single spaces) tokenized and aligned again (``align_texts``). For every tokenizer kind of the tests
(``tests/tokenizers_helpers.py``: WordPiece, byte-level BPE, SentencePiece Unigram and BPE), the embedded model's,
and variants of them, in both text modes, every window of the shipped UD EWT and GUM samples at several
max_lengths is the reference's: the same sentences, ids, per-word piece texts, lengths and skipped sentences.
Where ``Joining`` cannot prove assembling exact (Llama 2's normalizer, an offset trimming that differs at a text's
start, a sentence with spaces at its edges or an added token's text) the window is tokenized as one text, and
equal all the same.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest
from tokenizers import Regex, Tokenizer, pre_tokenizers, processors
from tokenizers_helpers import TOKENIZERS, llama3_bpe, roberta_bpe, xlmr_unigram
from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

from atlas.ingestion.align import AFTER_SPACE, OWN, AlignedSentence, Joining, Pieces, align, align_texts, text_of
from atlas.ingestion.examples import Inputs, group_examples
from atlas.ingestion.readers.conllu import Sentence, read_conllu
from tests.conftest import EWT_SAMPLE, GUM_SAMPLE

DECODERS = {"gpt2", "llama3", "llama2", "qwen2"}
MAX_LENGTHS = (64, 128, 512)
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)


def _variant(tok: PreTrainedTokenizerFast, change) -> PreTrainedTokenizerFast:
    backend = Tokenizer.from_str(tok.backend_tokenizer.to_str())
    change(backend)
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, **{k: v for k, v in tok.special_tokens_map.items() if isinstance(v, str)}
    )


@cache
def qwen2_bpe() -> PreTrainedTokenizerFast:
    """Llama 3's byte-level BPE with Qwen2's split (digits one by one)."""

    def split(backend: Tokenizer) -> None:
        backend.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )

    return _variant(llama3_bpe(), split)


@cache
def roberta_prefix_trimmed() -> PreTrainedTokenizerFast:
    """RoBERTa with a prefix space and trimmed offsets: a text's first piece is trimmed otherwise (not assembled)."""

    def prefix(backend: Tokenizer) -> None:
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
        backend.post_processor = processors.RobertaProcessing(
            ("</s>", backend.token_to_id("</s>")), ("<s>", backend.token_to_id("<s>")), True, True
        )

    return _variant(roberta_bpe(), prefix)


@cache
def xlmr_unsplit() -> PreTrainedTokenizerFast:
    """XLM-R's Unigram over a whole text, not split at spaces (not assembled)."""

    def unsplit(backend: Tokenizer) -> None:
        backend.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first", split=False)

    return _variant(xlmr_unigram(), unsplit)


VARIANTS = {"qwen2": qwen2_bpe, "roberta_prefix_trimmed": roberta_prefix_trimmed, "xlmr_unsplit": xlmr_unsplit}
# how each tokenizer's windows are made: from each sentence's own pieces, its pieces after a space, or tokenized
ASSEMBLED = {
    "bert": OWN,
    "embedded": OWN,
    "albert": AFTER_SPACE,
    "xlmr": AFTER_SPACE,
    "roberta": AFTER_SPACE,
    "gpt2": AFTER_SPACE,
    "llama3": AFTER_SPACE,
    "qwen2": AFTER_SPACE,
    "llama2": None,
    "roberta_prefix_trimmed": None,
    "xlmr_unsplit": None,
}


def tokenizer_of(kind: str, request: pytest.FixtureRequest) -> PreTrainedTokenizerBase:
    if kind == "embedded":
        return request.getfixturevalue("model").tokenizer
    return {**TOKENIZERS, **VARIANTS}[kind]()


def reference(aligned: list[AlignedSentence], max_length: int, inputs: Inputs) -> list[tuple]:
    """The windows as they were made before: every window tried tokenized and aligned as one text."""
    out: list[tuple] = []
    group: list[AlignedSentence] = []

    def pieces(items: list[AlignedSentence]) -> Pieces:
        if len(items) == 1:
            return items[0].pieces
        text = text_of([a.sentence for a in items], inputs.mode)
        return align_texts(inputs.tokenizer, [text], inputs.path, inputs.mode)[0]

    def emit(items: list[AlignedSentence], skipped: bool = False) -> None:
        p = pieces(items)
        out.append(([a.sentence.index for a in items], p.ids, p.text, inputs.length([p]), skipped))

    for s in aligned:
        if inputs.length([s.pieces]) > max_length:
            if group:
                emit(group)
                group = []
            emit([s], skipped=True)
            continue
        same_doc = bool(group) and group[0].sentence.doc_id == s.sentence.doc_id
        if group and (not same_doc or inputs.length([pieces([*group, s])]) > max_length):
            emit(group)
            group = []
        group.append(s)
    if group:
        emit(group)
    return out


def windows(aligned: list[AlignedSentence], max_length: int, inputs: Inputs) -> list[tuple]:
    out = []
    for e in group_examples(aligned, "window", max_length, inputs):
        assert len(e.texts) == 1 and not e.pair
        (p,) = e.texts
        assert e.n_tokens == inputs.length([p])
        out.append(([a.sentence.index for a in e.sentences], p.ids, p.text, e.n_tokens, e.skipped))
    return out


def check_windows(tok: PreTrainedTokenizerBase, kind: str, sentences: list[Sentence], path: Path, mode: str) -> None:
    aligned = align(tok, sentences, path, mode)
    for max_length in MAX_LENGTHS:
        inputs = Inputs.of(tok, kind in DECODERS, path, mode)
        got = windows(aligned, max_length, inputs)
        assert got == reference(aligned, max_length, Inputs.of(tok, kind in DECODERS, path, mode)), max_length
        if max_length == MAX_LENGTHS[-1]:
            assert any(len(w[0]) > 2 for w in got)


@pytest.mark.parametrize("mode", ["written", "words"])
@pytest.mark.parametrize("kind", sorted(ASSEMBLED))
def test_windows_equal_their_text_tokenized(kind: str, mode: str, request: pytest.FixtureRequest) -> None:
    tok = tokenizer_of(kind, request)
    joining = Joining.of(tok)
    assert joining.after == ASSEMBLED[kind]
    for path in (EWT_SAMPLE, GUM_SAMPLE):
        sentences = list(read_conllu(path))
        if joining.after is not None:  # nearly every sentence of the samples joins a window as its pieces say
            joins = [joining.joins(text_of([s], mode)) for s in sentences]
            assert sum(joins) >= 0.97 * len(sentences)
        check_windows(tok, kind, sentences, path, mode)


def edited(tok: PreTrainedTokenizerBase) -> list[Sentence]:
    """GUM's sample with sentences that do not join as their pieces say: spaces before or after the text, and an
    added token's text (a special token's) as a word."""
    added = sorted(tok.get_added_vocab())[-1]
    out = []
    for i, s in enumerate(read_conllu(GUM_SAMPLE)):
        if s.text is not None and s.spans is not None and i % 5 == 1:
            s = replace(s, text=f" {s.text}", spans=[(a + 1, b + 1) for a, b in s.spans])
        elif s.text is not None and i % 5 == 3:
            s = replace(s, text=f"{s.text}  ")
        elif i % 7 == 2:
            words = [w._replace(form=added if k == 1 else w.form) for k, w in enumerate(s.words)]
            s = replace(s, words=words, text=None, spans=None)
        out.append(s)
    return out


@pytest.mark.parametrize("mode", ["written", "words"])
@pytest.mark.parametrize("kind", ["bert", "albert", "roberta", "llama3"])
def test_sentences_that_do_not_join_are_tokenized_with_their_window(kind: str, mode: str) -> None:
    """Windows mixing sentences that join as their pieces say and sentences that do not: equal all the same."""
    tok = TOKENIZERS[kind]()
    sentences = edited(tok)
    joining = Joining.of(tok)
    joins = [joining.joins(text_of([s], mode)) for s in sentences]
    assert 0 < joins.count(False) < len(joins)
    check_windows(tok, kind, sentences, GUM_SAMPLE, mode)


def test_inputs_text_of_sentences() -> None:
    """``Inputs.text``, the pieces of any sentences as one text, is the text's own pieces."""
    tok = roberta_bpe()
    sentences = list(read_conllu(GUM_SAMPLE))[:6]
    for mode in ("written", "words"):
        aligned = align(tok, sentences, GUM_SAMPLE, mode)
        inputs = Inputs.of(tok, False, GUM_SAMPLE, mode)
        for n in range(1, 7):
            text = text_of(sentences[:n], mode)
            assert inputs.text(aligned[:n]) == align_texts(tok, [text], GUM_SAMPLE, mode)[0]
