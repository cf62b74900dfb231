"""Stage 2: split corpus words into the model's pieces, through the fast tokenizer's offset mapping.

A text (one sentence, or the sentences of a window) is tokenized as the tokenizer tokenizes any text, without
special tokens (those come from its template, ``ingest.template``). What the text is, ``text``:

- ``written`` (the default): each sentence as written, what the model reads outside the corpus: a CoNLL-U
  sentence's ``# text`` (else its words joined as ``SpaceAfter=No`` says; ``ingest.conllu``), a GLUE or raw-text
  reader's raw string, spaCy's words placed on it by their character offsets. The sentences of a window are
  joined by a single space. A piece belongs to the word holding its first character other than a space (a
  piece of spaces only, a lone 'Ġ' or '▁', to the word after it). So a piece whose characters span two words
  ('don' of "don't", split by UD as do + n't; 'cannot' of can + not) belongs to the first of them, and a word
  whose characters all lie in a piece of the word before gets no piece: the stored pieces are exactly the
  tokenizer's own pieces of the text. A word without pieces has no word-level row and is never a word-level
  prediction (``ingest.sparsify``); an analysis that scores every word counts it as not predicted.
- ``words``: the words joined by single spaces (Clark et al.'s input: pre-tokenized words, their PTB setup).
  Each piece belongs to the word whose characters it covers (a piece of the space between two words, to the
  word after it); a piece covering characters of two words cannot be aligned: an ``AtlasError`` naming the
  corpus file and line. A word the tokenizer gives no piece at all (only characters its normalizer removes)
  gets the unknown token, so every word owns at least one piece; without an unknown token it is an error too.

WordPiece ('##'), byte-level BPE ('Ġ' before a word that follows a space) and SentencePiece ('▁') pieces align
alike, and each piece keeps the corpus characters it covers (``piece_text``), whatever marker its vocabulary
spelling carries.
"""

from __future__ import annotations

import unicodedata
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path

from transformers import PreTrainedTokenizerBase

from atlas.errors import AtlasError
from atlas.ingestion.conllu import Sentence, Word


@dataclass(frozen=True)
class Pieces:
    """The pieces of a text's words: ids and the corpus characters each piece covers, word by word."""

    ids: list[list[int]]
    text: list[list[str]]

    def __len__(self) -> int:
        return sum(len(p) for p in self.ids)


@dataclass(frozen=True)
class AlignedSentence:
    sentence: Sentence
    pieces: Pieces  # the sentence as a text of its own (the start of an input's text)

    @property
    def word_pieces(self) -> list[list[int]]:
        return self.pieces.ids


@dataclass(frozen=True)
class Text:
    """A text the tokenizer reads, its words and each word's characters in it ([start, end); (k, k): none)."""

    string: str
    words: list[Word]
    spans: list[tuple[int, int]]


def is_punct(text: str) -> bool:
    """True for a piece whose corpus characters (spaces aside) are all punctuation."""
    text = text.strip()
    return bool(text) and all(unicodedata.category(ch).startswith("P") for ch in text)


def words_text(words: list[Word]) -> Text:
    """Words joined by single spaces."""
    spans, at = [], 0
    for w in words:
        spans.append((at, at + len(w.form)))
        at += len(w.form) + 1
    return Text(" ".join(w.form for w in words), words, spans)


def written_text(sentences: list[Sentence]) -> Text:
    """Sentences as written, joined by single spaces (a sentence without a text: its words joined so)."""
    parts: list[str] = []
    words: list[Word] = []
    spans: list[tuple[int, int]] = []
    at = 0
    for s in sentences:
        own = words_text(s.words) if s.text is None or s.spans is None else Text(s.text, s.words, s.spans)
        at += 1 if parts else 0
        parts.append(own.string)
        words.extend(s.words)
        spans.extend((a + at, b + at) for a, b in own.spans)
        at += len(own.string)
    return Text(" ".join(parts), words, spans)


def text_of(sentences: list[Sentence], text: str) -> Text:
    """The text a model reads of ``sentences`` (together, as one text) in mode ``text`` (``written`` or ``words``)."""
    if text == "written":
        return written_text(sentences)
    return words_text([w for s in sentences for w in s.words])


def word_texts(sentence: Sentence, text: str) -> list[Text]:
    """Each word of a sentence as a text of its own: its characters as written, or its form."""
    if text != "written" or sentence.text is None or sentence.spans is None:
        return [words_text([w]) for w in sentence.words]
    spans = zip(sentence.words, sentence.spans, strict=True)
    return [Text(sentence.text[a:b], [w], [(0, b - a)]) for w, (a, b) in spans]


def align_texts(
    tokenizer: PreTrainedTokenizerBase, texts: list[Text], path: Path | str, text: str = "written"
) -> list[Pieces]:
    """Tokenize texts in one batched call; the pieces of each word of each text, by mode ``text``'s rule."""
    if not texts:
        return []
    enc = tokenizer([t.string for t in texts], add_special_tokens=False, return_offsets_mapping=True)
    assign = _by_first_character if text == "written" else _inside_words
    return [
        assign(t, ids, offsets, tokenizer, path)
        for t, ids, offsets in zip(texts, enc["input_ids"], enc["offset_mapping"], strict=True)
    ]


def align(
    tokenizer: PreTrainedTokenizerBase, sentences: list[Sentence], path: Path | str, text: str = "written"
) -> list[AlignedSentence]:
    """Each sentence as a text of its own (one batched tokenizer call), in mode ``text``."""
    pieces = align_texts(tokenizer, [text_of([s], text) for s in sentences], path, text)
    return [AlignedSentence(s, p) for s, p in zip(sentences, pieces, strict=True)]


def _by_first_character(
    text: Text, ids: list[int], offsets: list[tuple[int, int]], tokenizer: PreTrainedTokenizerBase, path: Path | str
) -> Pieces:
    """``written``: each piece to the word holding its first character other than a space (a piece of spaces
    only: the word after them; past the last word: the last word), never to a word before the last piece's."""
    string, ends = text.string, [b for _, b in text.spans]
    by_word: list[list[int]] = [[] for _ in text.words]
    texts: list[list[str]] = [[] for _ in text.words]
    last = 0
    for piece, (a, b) in zip(ids, offsets, strict=True):
        first = a
        while first < b and string[first].isspace():
            first += 1
        j = max(min(bisect_right(ends, a if first == b else first), len(ends) - 1), last)
        by_word[j].append(piece)
        texts[j].append(string[a:b])
        last = j
    return Pieces(by_word, texts)


def _inside_words(
    text: Text, ids: list[int], offsets: list[tuple[int, int]], tokenizer: PreTrainedTokenizerBase, path: Path | str
) -> Pieces:
    """``words``: each piece inside one word (see the module notes)."""
    words, string = text.words, text.string
    starts, ends = [a for a, _ in text.spans], [b for _, b in text.spans]
    by_word: list[list[int]] = [[] for _ in words]
    texts: list[list[str]] = [[] for _ in words]
    last = 0
    for piece, (a, b) in zip(ids, offsets, strict=True):
        j = bisect_right(ends, a)  # the first word ending after the piece's start
        if j == len(words) and a == b and words:  # an empty piece at the very end: the last word's
            j -= 1
        if j == len(words) or j < last or (j + 1 < len(words) and starts[j + 1] < b):
            w = words[min(j, len(words) - 1)]
            raise AtlasError(
                f"{path}:{w.line}: the model's tokenizer gives a piece {string[a:b]!r} that is not inside one word "
                f"(near {w.form!r}); the words cannot be aligned to its pieces"
            )
        by_word[j].append(piece)
        texts[j].append(string[a:b])
        last = j
    for j, w in enumerate(words):
        if not by_word[j]:
            if tokenizer.unk_token_id is None:
                raise AtlasError(
                    f"{path}:{w.line}: the model's tokenizer gives the word {w.form!r} no piece and has no unknown "
                    "token to stand for it"
                )
            by_word[j].append(tokenizer.unk_token_id)
            texts[j].append("")
    return Pieces(by_word, texts)
