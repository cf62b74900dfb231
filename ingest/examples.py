"""Stage 2b: group aligned sentences into model inputs ``[CLS] a [SEP] (b [SEP])``.

Packing modes:
- ``none``: one sentence per input.
- ``pair``: two consecutive sentences of a document, as segments A and B (Clark et al.'s format).
- ``window``: as many consecutive sentences of a document as fit, in one segment (long documents are
  windowed sentence by sentence).
An input longer than ``max_length`` is never truncated: a sentence that does not fit alone is skipped,
recorded with ``skipped = true``, and counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ingest.align import AlignedSentence
from ingest.conllu import Mention, Sentence, Word

PACK_MODES = ("none", "pair", "window")


@dataclass
class Example:
    example_id: int
    doc_id: str | None
    sentences: list[AlignedSentence]
    pair: bool  # True: each sentence is its own segment followed by [SEP]
    skipped: bool = False

    @property
    def n_tokens(self) -> int:
        return _length(self.sentences, self.pair)

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


def _length(group: list[AlignedSentence], pair: bool) -> int:
    return sum(s.n_pieces for s in group) + (len(group) if pair else 1) + 1


def group_examples(
    sentences: Iterable[AlignedSentence], pack: str, max_length: int, first_id: int = 0
) -> Iterator[Example]:
    """Yield examples with consecutive ids starting at ``first_id``."""
    pair = pack == "pair"
    limit = 2 if pair else (1 if pack == "none" else None)
    next_id = first_id
    group: list[AlignedSentence] = []

    def emit(items: list[AlignedSentence], skipped: bool = False) -> Example:
        nonlocal next_id
        example = Example(next_id, items[0].sentence.doc_id, items, pair, skipped)
        next_id += 1
        return example

    for s in sentences:
        if _length([s], pair) > max_length:
            if group:
                yield emit(group)
                group = []
            yield emit([s], skipped=True)
            continue
        same_doc = bool(group) and group[0].sentence.doc_id == s.sentence.doc_id
        if group and (not same_doc or len(group) == limit or _length([*group, s], pair) > max_length):
            yield emit(group)
            group = []
        group.append(s)
    if group:
        yield emit(group)


@dataclass(frozen=True)
class Layout:
    """The token sequence of an example and how it maps back to words."""

    input_ids: list[int]
    segments: list[int]
    token_word: list[int | None]  # example word index of each token; None for [CLS]/[SEP]
    special: list[str | None]


def layout(example: Example, cls_id: int, sep_id: int) -> Layout:
    ids, segs, words, special = [cls_id], [0], [None], ["[CLS]"]
    word, segment = 0, 0
    for i, aligned in enumerate(example.sentences):
        for pieces in aligned.word_pieces:
            ids.extend(pieces)
            segs.extend([segment] * len(pieces))
            words.extend([word] * len(pieces))
            special.extend([None] * len(pieces))
            word += 1
        if example.pair or i == len(example.sentences) - 1:
            ids.append(sep_id)
            segs.append(segment)
            words.append(None)
            special.append("[SEP]")
            segment = min(segment + 1, 1)
    return Layout(ids, segs, words, special)
