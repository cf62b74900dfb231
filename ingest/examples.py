"""Stage 2b: group aligned sentences into model inputs, laid out by the tokenizer's own template.

Packing modes:
- ``none``: one sentence per input.
- ``pair``: two consecutive sentences of a document, as the template's two texts (Clark et al.'s format:
  BERT's ``[CLS] a [SEP] b [SEP]``, RoBERTa's ``<s> a </s></s> b </s>``, GPT-2's ``a b``).
- ``window``: as many consecutive sentences of a document as fit, as one text (long documents are
  windowed sentence by sentence); the window's pieces are those of its sentences as one text (as written:
  joined by single spaces; ``words``: all their words joined by single spaces; see ``atlas.ingestion.align``),
  assembled from each sentence's pieces, tokenized once as a text of its own and at most once more after the
  joining space, where ``atlas.ingestion.align.Joining`` proves that the same; else the window is tokenized as one text.
An input longer than ``max_length`` is never truncated: a sentence that does not fit alone is skipped,
recorded with ``skipped = true``, and counted (a GLUE example, its two texts together). Lengths count the
template's special tokens.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from itertools import chain, groupby, islice
from pathlib import Path

from transformers import PreTrainedTokenizerBase

from atlas.errors import AtlasError
from atlas.ingestion.align import AlignedSentence, Joining, Pieces, align_texts, continuations, joined_pieces, text_of
from atlas.ingestion.readers.conllu import Mention, Sentence, Word
from atlas.ingestion.template import Template, read_template

AHEAD = 64  # sentences whose pieces after the joining space are tokenized in one call (--pack window)
After = Pieces | AtlasError | None  # a sentence's pieces after a window's joining space (Inputs.continuations)


@dataclass
class Example:
    example_id: int
    doc_id: str | None
    sentences: list[AlignedSentence]
    pair: bool  # True: each sentence is its own text of the template
    texts: list[Pieces]  # the input's texts (one, or two for a pair), their words' pieces
    n_tokens: int  # pieces of the texts and the template's special tokens
    skipped: bool = False

    @property
    def words(self) -> list[tuple[Sentence, Word]]:
        return [(a.sentence, w) for a in self.sentences for w in a.sentence.words]

    def word_offsets(self) -> dict[int, int]:
        """Example word index of the first word of each sentence, keyed by corpus sentence index."""
        offsets, at = {}, 0
        for a in self.sentences:
            offsets[a.sentence.index] = at
            at += len(a.sentence.words)
        return offsets

    def mentions(self) -> list[Mention]:
        inside = {a.sentence.index for a in self.sentences}
        return [m for a in self.sentences for m in a.sentence.mentions if m.start[0] in inside]


@dataclass(frozen=True)
class Layout:
    """The token sequence of an example and how it maps back to words."""

    input_ids: list[int]
    type_ids: list[int]  # the template's token type ids (what a model with segment embeddings is given)
    segments: list[int]  # text of each token (tokens.segment): the type ids where they tell the two texts apart,
    #   else 0 up to the end of the first text and the special tokens right after it, 1 from the second text on
    token_word: list[int | None]  # example word index of each token; None for a special token
    special: list[str | None]  # the special token's string ('[CLS]', '<s>', ...), None for a word's piece
    role: list[str | None]  # the special token's role (atlas.ingestion.template), None for a word's piece
    text: list[str]  # the corpus characters of each piece ('' for a special token)


@dataclass
class Inputs:
    """How a model's inputs are made from sentences: its tokenizer, its template, the corpus (for errors) and
    what of a sentence the model reads (``written`` or ``words``, ``atlas.ingestion.align``)."""

    tokenizer: PreTrainedTokenizerBase
    template: Template
    path: Path | str
    mode: str = "written"
    _windows: dict[tuple[int, ...], Pieces] = field(default_factory=dict, repr=False)  # the last two
    _joining: Joining | None = field(default=None, init=False, repr=False)

    @classmethod
    def of(cls, tokenizer: PreTrainedTokenizerBase, decoder: bool, path: Path | str, mode: str = "written") -> Inputs:
        return cls(tokenizer, read_template(tokenizer, decoder), path, mode)

    def continuations(self, sentences: list[AlignedSentence]) -> list[After]:
        """Each sentence's pieces as a later sentence of a window (``atlas.ingestion.align.continuations``): None where
        a window holding it is tokenized as one text."""
        if self._joining is None:
            self._joining = Joining.of(self.tokenizer)
        return continuations(self.tokenizer, self._joining, sentences, self.path, self.mode)

    def text(self, group: list[AlignedSentence]) -> Pieces:
        """The pieces of sentences as one text: a sentence alone as aligned, several as their text's pieces."""
        if len(group) == 1:
            return group[0].pieces
        window = Window(self)
        for a, after in zip(group, self.continuations(group), strict=True):
            window.add(a, after)
        return window.pieces()

    def tokenized(self, group: list[AlignedSentence]) -> Pieces:
        """The pieces of several sentences tokenized together, as one text (the last two kept)."""
        key = tuple(a.sentence.index for a in group)
        if key not in self._windows:
            text = text_of([a.sentence for a in group], self.mode)
            self._windows = {k: v for k, v in self._windows.items() if k == key[:-1]}
            self._windows[key] = align_texts(self.tokenizer, [text], self.path, self.mode)[0]
        return self._windows[key]

    def texts(self, group: list[AlignedSentence], pair: bool) -> list[Pieces]:
        return [a.pieces for a in group] if pair else [self.text(group)]

    @cached_property
    def _specials(self) -> tuple[int, int]:
        """The template's special tokens around one text and around two (``Template.n_special``), counted once."""
        return self.template.n_special(1), self.template.n_special(2)

    @cached_property
    def _typed(self) -> bool:
        """``Template.typed``, read once."""
        return self.template.typed

    def length(self, texts: list[Pieces]) -> int:
        return sum(map(len, texts)) + self._specials[len(texts) != 1]

    def layout(self, example: Example) -> Layout:
        ids: list[int] = []
        types: list[int] = []
        segs: list[int] = []
        words: list[int | None] = []
        special: list[str | None] = []
        role: list[str | None] = []
        text: list[str] = []
        firsts = [0]
        for t in example.texts:
            firsts.append(firsts[-1] + len(t.ids))
        typed = self._typed
        segment = 0
        for slot in self.template.form(len(example.texts)):
            if slot.text is None:
                ids.append(slot.token_id)
                types.append(slot.type_id)
                segs.append(slot.type_id if typed else segment)
                words.append(None)
                special.append(slot.token)
                role.append(slot.role)
                text.append("")
                continue
            segment = slot.type_id if typed else slot.text
            pieces = example.texts[slot.text]
            n = len(pieces)  # the text's pieces at once (word by word: UD EWT dev 1.6, GUM dev's windows 2.9 times)
            ids.extend(chain.from_iterable(pieces.ids))
            types.extend([slot.type_id] * n)
            segs.extend([segment] * n)
            words.extend([w for w, word_ids in enumerate(pieces.ids, firsts[slot.text]) for _ in word_ids])
            special.extend([None] * n)
            role.extend([None] * n)
            text.extend(chain.from_iterable(pieces.text))
        return Layout(ids, types, segs, words, special, role, text)


class Window:
    """A window's sentences and their pieces' count as it grows, sentence by sentence: the first sentence's own
    pieces and each later one's after the joining space (``Inputs.continuations``), added up; where one is None,
    the window is tokenized as one text (``Inputs.tokenized``)."""

    def __init__(self, inputs: Inputs) -> None:
        self.inputs = inputs
        self.sentences: list[AlignedSentence] = []
        self.parts: list[Pieces] | None = []  # None: tokenized as one text
        self.n_pieces = 0

    def length_with(self, sentence: AlignedSentence, after: After) -> int:
        """The input's length with ``sentence`` (and its pieces ``after`` the joining space) added last."""
        if self.parts is None or after is None:
            return self.inputs.length([self.inputs.tokenized([*self.sentences, sentence])])
        if isinstance(after, AtlasError):
            raise after
        return self.n_pieces + len(after) + self.inputs._specials[0]

    def add(self, sentence: AlignedSentence, after: After) -> None:
        """Add ``sentence`` last; ``after``: its pieces after the joining space (of the first sentence: whether
        the window can be assembled, not None)."""
        if not self.sentences:
            self.parts, self.n_pieces = ([sentence.pieces] if after is not None else None), len(sentence.pieces)
        elif self.parts is not None and isinstance(after, Pieces):
            self.parts.append(after)
            self.n_pieces += len(after)
        else:
            self.parts = None
        self.sentences.append(sentence)

    def pieces(self) -> Pieces:
        if len(self.sentences) == 1:
            return self.sentences[0].pieces
        if self.parts is None:
            return self.inputs.tokenized(self.sentences)
        return joined_pieces(self.parts)


def _ahead(sentences: Iterable[AlignedSentence], inputs: Inputs) -> Iterator[tuple[AlignedSentence, After]]:
    """Each sentence with its pieces after the joining space, tokenized ``AHEAD`` sentences at a time."""
    it = iter(sentences)
    while block := list(islice(it, AHEAD)):
        yield from zip(block, inputs.continuations(block), strict=True)


def group_examples(
    sentences: Iterable[AlignedSentence],
    pack: str,
    max_length: int,
    inputs: Inputs,
    first_id: int = 0,
    whole: bool = False,
) -> Iterator[Example]:
    """Yield examples with consecutive ids starting at ``first_id``. ``whole``: each document is one input, all of
    it or, longer than ``max_length``, skipped (a GLUE example: its one or two texts, as the task reads them)."""
    pair = pack == "pair"
    if whole:
        for next_id, (_, doc) in enumerate(groupby(sentences, key=lambda s: s.sentence.doc_id), first_id):
            items = list(doc)
            texts = inputs.texts(items, pair)
            n_tokens = inputs.length(texts)
            yield Example(next_id, items[0].sentence.doc_id, items, pair, texts, n_tokens, n_tokens > max_length)
        return
    limit = 2 if pair else (1 if pack == "none" else None)
    next_id = first_id
    group: list[AlignedSentence] = []
    window = Window(inputs)

    def emit(items: list[AlignedSentence], skipped: bool = False) -> Example:
        nonlocal next_id
        texts = [window.pieces()] if pack == "window" and not skipped else inputs.texts(items, pair)
        example = Example(next_id, items[0].sentence.doc_id, items, pair, texts, inputs.length(texts), skipped)
        next_id += 1
        return example

    def too_long(s: AlignedSentence, after: After) -> bool:
        if pack == "window":
            return window.length_with(s, after) > max_length
        return inputs.length(inputs.texts([*group, s], pair)) > max_length

    items: Iterator[tuple[AlignedSentence, After]]
    items = _ahead(sentences, inputs) if pack == "window" else ((s, None) for s in sentences)
    for s, after in items:
        if inputs.length([s.pieces]) > max_length:
            if group:
                yield emit(group)
                group, window = [], Window(inputs)
            yield emit([s], skipped=True)
            continue
        same_doc = bool(group) and group[0].sentence.doc_id == s.sentence.doc_id
        if group and (not same_doc or len(group) == limit or too_long(s, after)):
            yield emit(group)
            group, window = [], Window(inputs)
        group.append(s)
        window.add(s, after)
    if group:
        yield emit(group)
