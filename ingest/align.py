"""Stage 2: split corpus words into the model's pieces, through the fast tokenizer's offset mapping.

A text (one sentence, or the sentences of a window) is its words joined by single spaces, tokenized as the
tokenizer tokenizes any text, without special tokens (those come from its template, ``ingest.template``).
Each piece belongs to the word whose characters it covers; a piece covering only the space between two
words (a lone 'Ġ' of byte-level BPE, '▁' of SentencePiece) belongs to the word after it. So WordPiece
('##'), byte-level BPE ('Ġ' before a word that follows a space) and SentencePiece ('▁') pieces align
alike, and each piece keeps the corpus characters it covers (``piece_text``), whatever marker its vocabulary
spelling carries. A piece covering characters of two words cannot be aligned: an ``AtlasError`` naming the
corpus file and line. A word the tokenizer gives no piece at all (only characters its normalizer removes)
gets the unknown token, so every word owns at least one piece; without an unknown token it is an error too.
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


def is_punct(text: str) -> bool:
    """True for a piece whose corpus characters (spaces aside) are all punctuation."""
    text = text.strip()
    return bool(text) and all(unicodedata.category(ch).startswith("P") for ch in text)


def align_texts(tokenizer: PreTrainedTokenizerBase, texts: list[list[Word]], path: Path | str) -> list[Pieces]:
    """Tokenize texts given as word lists, in one batched call; the pieces of each word of each text."""
    joined = [" ".join(w.form for w in words) for words in texts]
    if not joined:
        return []
    enc = tokenizer(joined, add_special_tokens=False, return_offsets_mapping=True)
    return [
        _assign(words, text, ids, offsets, tokenizer, path)
        for words, text, ids, offsets in zip(texts, joined, enc["input_ids"], enc["offset_mapping"], strict=True)
    ]


def align(tokenizer: PreTrainedTokenizerBase, sentences: list[Sentence], path: Path | str) -> list[AlignedSentence]:
    """Each sentence as a text of its own (one batched tokenizer call)."""
    pieces = align_texts(tokenizer, [s.words for s in sentences], path)
    return [AlignedSentence(s, p) for s, p in zip(sentences, pieces, strict=True)]


def _assign(
    words: list[Word],
    text: str,
    ids: list[int],
    offsets: list[tuple[int, int]],
    tokenizer: PreTrainedTokenizerBase,
    path: Path | str,
) -> Pieces:
    starts, ends, at = [], [], 0
    for w in words:
        starts.append(at)
        ends.append(at + len(w.form))
        at += len(w.form) + 1
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
                f"{path}:{w.line}: the model's tokenizer gives a piece {text[a:b]!r} that is not inside one word "
                f"(near {w.form!r}); the words cannot be aligned to its pieces"
            )
        by_word[j].append(piece)
        texts[j].append(text[a:b])
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
