"""Stage 2: split each corpus word into the model's word pieces (fast tokenizer, word by word)."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from transformers import PreTrainedTokenizerBase

from ingest.conllu import Sentence


@dataclass(frozen=True)
class AlignedSentence:
    sentence: Sentence
    word_pieces: list[list[int]]  # piece ids of each word, in order

    @property
    def n_pieces(self) -> int:
        return sum(len(p) for p in self.word_pieces)


def is_punct(piece: str) -> bool:
    """True for a piece made only of punctuation characters (a WordPiece '##' prefix is ignored)."""
    text = piece.removeprefix("##")
    return bool(text) and all(unicodedata.category(ch).startswith("P") for ch in text)


def align(tokenizer: PreTrainedTokenizerBase, sentences: list[Sentence]) -> list[AlignedSentence]:
    """Tokenize every word of the sentences in one batched call.

    Each word is tokenized on its own (as with ``is_split_into_words``), so a word's pieces never
    straddle a word boundary. A word the tokenizer maps to nothing gets the unknown token, so every
    word owns at least one piece.
    """
    forms = [w.form for s in sentences for w in s.words]
    ids = tokenizer(forms, add_special_tokens=False)["input_ids"] if forms else []
    unk = tokenizer.unk_token_id
    out: list[AlignedSentence] = []
    at = 0
    for s in sentences:
        pieces = [list(p) or [unk] for p in ids[at : at + len(s.words)]]
        at += len(s.words)
        out.append(AlignedSentence(s, pieces))
    return out
