"""Stage 2: split corpus words into the model's pieces, through the fast tokenizer's offset mapping.

A text (one sentence, or the sentences of a window) is tokenized as the tokenizer tokenizes any text, without
special tokens (those come from its template, ``atlas.ingestion.template``). What the text is, ``text``:

- ``written`` (the default): each sentence as written, what the model reads outside the corpus: a CoNLL-U
  sentence's ``# text`` (else its words joined as ``SpaceAfter=No`` says; ``atlas.ingestion.readers.conllu``), a GLUE or
  raw-text reader's raw string, spaCy's words placed on it by their character offsets. The sentences of a window are
  joined by a single space. A piece belongs to the word holding its first character other than a space (a
  piece of spaces only, a lone 'Ġ' or '▁', to the word after it). So a piece whose characters span two words
  ('don' of "don't", split by UD as do + n't; 'cannot' of can + not) belongs to the first of them, and a word
  whose characters all lie in a piece of the word before gets no piece: the stored pieces are exactly the
  tokenizer's own pieces of the text. A word without pieces has no word-level row and is never a word-level
  prediction (``atlas.ingestion.sparsify``); an analysis that scores every word counts it as not predicted.
- ``words``: the words joined by single spaces (Clark et al.'s input: pre-tokenized words, their PTB setup).
  Each piece belongs to the word whose characters it covers (a piece of the space between two words, to the
  word after it); a piece covering characters of two words cannot be aligned: an ``AtlasError`` naming the
  corpus file and line. A word the tokenizer gives no piece at all (only characters its normalizer removes)
  gets the unknown token, so every word owns at least one piece; without an unknown token it is an error too.

WordPiece ('##'), byte-level BPE ('Ġ' before a word that follows a space) and SentencePiece ('▁') pieces align
alike, and each piece keeps the corpus characters it covers (``piece_text``), whatever marker its vocabulary
spelling carries.

A window's text (``--pack window``: sentences joined by single spaces) is not tokenized again as it grows:
``Joining`` tells, from the tokenizer's own parts (normalizer, pre-tokenizer, model, post-processor, added tokens),
whether its pieces of the joined text are provably each sentence's pieces, the first sentence's as a text of its
own and every later one's as the text ' ' + the sentence (its pieces after the joining space), their offsets
shifted; and ``continuations`` tokenizes the sentences so, once each. This holds where the joining space is a
boundary that nothing crosses: a pre-tokenizer that splits at it (BERT's and the whitespace pre-tokenizers: a
sentence's pieces after the space are then its own; SentencePiece's Metaspace; byte-level BPE's regular
expression, GPT-2's, or Llama 3's or Qwen2's split before byte-level, where a text's last character is not a
space), a normalizer that maps each character on its own, a model that tokenizes each pre-token on its own
(WordPiece, BPE without dropout, Unigram, WordLevel), no offsets trimmed differently at a text's start, and no
added token in the sentences' text. The alignment then splits too, where each sentence's words are in order and
its last word ends the text (``Joining.joins``). Elsewhere (Llama 2's normalizer, a pre-tokenizer or regular
expression not listed, a sentence that is not so) the window is tokenized as one text, as before.
"""

from __future__ import annotations

import json
import unicodedata
from bisect import bisect_right
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from transformers import PreTrainedTokenizerBase
from transformers.tokenization_utils_tokenizers import TokenizersBackend

from atlas.errors import AtlasError
from atlas.ingestion.readers.conllu import Sentence, Word


@dataclass(frozen=True)
class Pieces:
    """The pieces of a text's words: ids and the corpus characters each piece covers, word by word."""

    ids: list[list[int]]
    text: list[list[str]]

    def __len__(self) -> int:
        return sum(map(len, self.ids))


@dataclass(frozen=True)
class AlignedSentence:
    sentence: Sentence
    pieces: Pieces  # the sentence as a text of its own (the start of an input's text)
    mode: str = "written"  # the text its pieces are of (``written`` or ``words``)

    @property
    def word_pieces(self) -> list[list[int]]:
        return self.pieces.ids


@dataclass(frozen=True)
class Text:
    """A text the tokenizer reads, its words and each word's characters in it ([start, end); (k, k): none)."""

    string: str
    words: list[Word]
    spans: list[tuple[int, int]]


@lru_cache(maxsize=1 << 16)  # pieces recur: 5,600 texts among UD EWT dev's 30,000 pieces, 16,500 among train's 232,000
def is_punct(text: str) -> bool:
    """True for a piece whose corpus characters (spaces aside) are all punctuation."""
    text = text.strip()
    return bool(text) and all(unicodedata.category(ch).startswith("P") for ch in text)


def is_dot_comma(role: str | None, text: str) -> bool:
    """True for a word's piece whose corpus characters (spaces aside) are '.' or ',' (a special token never is)."""
    return role is None and text.strip() in (".", ",")


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
        if s.text is None or s.spans is None:
            own = words_text(s.words)
            string, own_spans = own.string, own.spans
        else:
            string, own_spans = s.text, s.spans
        at += 1 if parts else 0
        parts.append(string)
        words.extend(s.words)
        spans.extend([(a + at, b + at) for a, b in own_spans] if at else own_spans)
        at += len(string)
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
    assign = _by_first_character if text == "written" else _inside_words
    return [assign(t, ids, offsets, tokenizer, path) for t, ids, offsets in _encode(tokenizer, texts)]


def _encode(tokenizer: PreTrainedTokenizerBase, texts: list[Text]) -> list[tuple[Text, list[int], list]]:
    """Each text with its pieces' ids and offsets, from one batched tokenizer call without special tokens."""
    if not texts:
        return []
    enc = tokenizer(
        [t.string for t in texts],
        add_special_tokens=False,
        return_offsets_mapping=True,
        return_token_type_ids=False,  # not read: the template's are (atlas.ingestion.template)
        return_attention_mask=False,
    )
    return list(zip(texts, enc["input_ids"], enc["offset_mapping"], strict=True))


def align(
    tokenizer: PreTrainedTokenizerBase, sentences: list[Sentence], path: Path | str, text: str = "written"
) -> list[AlignedSentence]:
    """Each sentence as a text of its own (one batched tokenizer call), in mode ``text``."""
    pieces = align_texts(tokenizer, [text_of([s], text) for s in sentences], path, text)
    return [AlignedSentence(s, p, text) for s, p in zip(sentences, pieces, strict=True)]


# Joining: a window's pieces from its sentences' (see the module notes)
OWN = "own"  # after the joining space, a sentence's pieces are those it has as a text of its own
AFTER_SPACE = "after space"  # they are those of the text ' ' + the sentence
_SPLIT_AT_SPACES = {"BertPreTokenizer", "Whitespace", "WhitespaceSplit"}  # split at every space, drop spaces
_SPLIT_INSIDE = {"Punctuation", "Digits"}  # after those: split each pre-token further, never join two
_PER_CHARACTER = {"BertNormalizer", "Lowercase", "NFC", "NFD", "NFKC", "NFKD", "StripAccents"}
_NO_NEW_SPACE = {"Lowercase", "NFC", "NFD"}  # per character, and no space made of another character
_MODELS = {"WordPiece", "BPE", "Unigram", "WordLevel"}  # tokenize each pre-token on its own
_TOKENIZE = ("__call__", "_encode_plus", "_convert_encoding")  # the Python of a call, as the fast tokenizer's own
# byte-level split patterns with no match that takes a character before a space and the space (a match takes
# a space only as its first character, or spaces only), no look-behind and no anchor: Llama 3's (GPT-4's), Qwen2's
_BYTE_LEVEL_SPLITS = {
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+",
}


def _state(component: object) -> dict | None:
    """A tokenizer part's settings (normalizer, pre-tokenizer, post-processor), as its JSON spells them."""
    return None if component is None else json.loads(component.__getstate__())


def _types(spec: dict | None, key: str) -> list[dict]:
    """The parts of a normalizer or pre-tokenizer, a sequence's in order."""
    if spec is None:
        return []
    return [p for inner in spec[key] for p in _types(inner, key)] if spec["type"] == "Sequence" else [spec]


def _trims_a_start(spec: dict | None) -> bool:
    """A post-processor that trims a piece's offsets otherwise at a text's start (byte-level, a prefix space)."""
    if spec is None:
        return False
    if spec["type"] == "Sequence":
        return any(_trims_a_start(p) for p in spec["processors"])
    return bool(spec.get("trim_offsets")) and bool(spec.get("add_prefix_space"))


def _after_space(tokenizer: PreTrainedTokenizerBase) -> str | None:
    """``OWN``, ``AFTER_SPACE`` or None (not proven) for a tokenizer (see the module notes)."""
    if not isinstance(tokenizer, TokenizersBackend) or any(
        getattr(type(tokenizer), name) is not getattr(TokenizersBackend, name) for name in _TOKENIZE
    ):
        return None  # a tokenizer without offsets, or one that changes a text in Python
    backend = tokenizer.backend_tokenizer
    model = backend.model
    if type(model).__name__ not in _MODELS or getattr(model, "dropout", None):
        return None
    if any(not t.content or any(c.isspace() for c in t.content) for t in backend.get_added_tokens_decoder().values()):
        return None  # an added token could take the joining space
    if _trims_a_start(_state(backend.post_processor)):
        return None
    normalizers = {n["type"] for n in _types(_state(backend.normalizer), "normalizers")}
    pre = _types(_state(backend.pre_tokenizer), "pretokenizers")
    types = [p["type"] for p in pre]
    if types and types[0] in _SPLIT_AT_SPACES and set(types[1:]) <= _SPLIT_INSIDE and normalizers <= _PER_CHARACTER:
        return OWN
    if types == ["Metaspace"] and pre[0].get("split", True) and normalizers <= _PER_CHARACTER:
        return AFTER_SPACE
    if normalizers <= _NO_NEW_SPACE and (
        (types == ["ByteLevel"] and pre[0].get("use_regex", True))
        or (
            types == ["Split", "ByteLevel"]
            and pre[0]["pattern"].get("Regex") in _BYTE_LEVEL_SPLITS
            and pre[0]["behavior"] == "Isolated"
            and not pre[0]["invert"]
            and not pre[1].get("use_regex", True)
        )
    ):
        return AFTER_SPACE
    return None


def _fold(text: str) -> str:
    """A text as no normalizer of ``_PER_CHARACTER`` could make it match an added token's content and this not:
    compatibility-decomposed, without marks and control characters, case-folded."""
    kept = (c for c in unicodedata.normalize("NFKD", text) if not unicodedata.category(c).startswith(("M", "C")))
    return "".join(kept).casefold()


@dataclass(frozen=True)
class Joining:
    """How a window's pieces are assembled from its sentences' for a tokenizer: ``after`` is ``OWN``,
    ``AFTER_SPACE`` or None (the window is tokenized as one text); ``raw`` and ``folded`` the added tokens'
    contents, as matched in a text as written and after normalization (``folded`` by ``_fold``)."""

    after: str | None
    raw: tuple[str, ...] = ()
    folded: tuple[str, ...] = ()
    starts: str = ""  # the first characters of ``raw`` (a text without any of them holds none of ``raw``)

    @classmethod
    def of(cls, tokenizer: PreTrainedTokenizerBase) -> Joining:
        after = _after_space(tokenizer)
        if after is None:
            return cls(None)
        added = tokenizer.backend_tokenizer.get_added_tokens_decoder().values()
        raw = tuple(sorted({t.content for t in added if not t.normalized}))
        folded = tuple(sorted({_fold(t.content) for t in added if t.normalized}))
        return cls(after, raw, folded, "".join(sorted({t[0] for t in raw})))

    def joins(self, text: Text) -> bool:
        """Whether a sentence's text joins others as its pieces say: a text of words, its first and last characters
        not spaces, its last word ending it, its words in order, and no added token's content in it."""
        string, spans = text.string, text.spans
        if self.after is None or not spans or string[0].isspace() or string[-1].isspace():
            return False
        ends = [b for _, b in spans]
        if ends[-1] != len(string) or ends != sorted(ends):  # (by pairs in Python: 1.3 to 1.5 times the time)
            return False
        if any(c in string for c in self.starts) and any(t in string for t in self.raw):
            return False
        return not (self.folded and any(t in _fold(string) for t in self.folded))


def continuations(
    tokenizer: PreTrainedTokenizerBase,
    joining: Joining,
    sentences: list[AlignedSentence],
    path: Path | str,
    text: str = "written",
) -> list[Pieces | AtlasError | None]:
    """Each sentence's pieces as a later sentence of a window in mode ``text``, after the joining space (one
    batched tokenizer call): the error its words would meet there (raised where it is one), or None where a
    window holding it is tokenized as one text (``Joining.joins``)."""
    texts = [text_of([a.sentence], text) if a.mode == text else None for a in sentences]
    out: list[Pieces | AtlasError | None] = [None] * len(sentences)
    joined = [i for i, t in enumerate(texts) if t is not None and joining.joins(t)]
    if joining.after == OWN:
        for i in joined:
            out[i] = sentences[i].pieces
        return out
    spaced = [Text(" " + t.string, t.words, [(a + 1, b + 1) for a, b in t.spans]) for t in (texts[i] for i in joined)]
    assign = _by_first_character if text == "written" else _inside_words
    for i, (t, ids, offsets) in zip(joined, _encode(tokenizer, spaced), strict=True):
        try:
            out[i] = assign(t, ids, offsets, tokenizer, path)
        except AtlasError as error:
            out[i] = error
    return out


def joined_pieces(parts: list[Pieces]) -> Pieces:
    """The pieces of a window from its sentences' (the first's own, the others' ``continuations``)."""
    return Pieces([w for p in parts for w in p.ids], [w for p in parts for w in p.text])


def _by_first_character(
    text: Text, ids: list[int], offsets: list[tuple[int, int]], tokenizer: PreTrainedTokenizerBase, path: Path | str
) -> Pieces:
    """``written``: each piece to the word holding its first character other than a space (a piece of spaces
    only: the word after them; past the last word: the last word), never to a word before the last piece's."""
    string, ends = text.string, [b for _, b in text.spans]
    by_word: list[list[int]] = [[] for _ in text.words]
    texts: list[list[str]] = [[] for _ in text.words]
    last, top = 0, len(ends) - 1
    for piece, (a, b) in zip(ids, offsets, strict=True):
        chars = string[a:b]
        rest = chars.lstrip()  # without the spaces before its first other character
        j = bisect_right(ends, b - len(rest) if rest else a)
        j = top if j > top else j
        j = last if j < last else j
        by_word[j].append(piece)
        texts[j].append(chars)
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
