"""Stage 1 for raw text: paragraphs of WikiText or plain text, paired as Clark et al.'s Wikipedia segments.

Clark et al. (Section 3) ran BERT over 1,000 random Wikipedia segments ``[CLS] paragraph [SEP] paragraph
[SEP]`` of at most 128 pieces; their ``preprocess_unlabeled.py`` cuts a longer pair with ``truncate_seq_pair``.

Files (CRLF line ends and a UTF-8 byte-order mark are accepted):
- WikiText raw, recognised by its first non-blank line being a ``= Title =`` heading: every ``= Title =``
  line starts an article, ``= = Section = =`` lines (any depth) are dropped, and every other non-blank line
  is one paragraph. WikiText's split markers `` @-@ ``, `` @,@ `` and `` @.@ `` are joined back
  (``well-known``, ``1,000``, ``1.5``), as the text stood in Wikipedia; the rest is kept as it is.
- plain text: paragraphs are blocks of non-blank lines between blank lines (their lines joined by a
  space), and the file is one article.
An empty file, a line that is not UTF-8 or holds a NUL byte, and a file without two paragraphs to pair are
one-line errors naming file:line.

Inputs: the paragraphs of an article two by two, without overlap: (1, 2), (3, 4), ...; an article's odd
last paragraph is left out (the ingest's summary counts those paragraphs without a partner apart from the pairs
left out for their length), section headings do not interrupt the pairing. (Pairs of paragraphs are the
paper's text. The released code reads one sentence per line, fills a run of lines up to 125 pieces and
splits it at a random line into A and B; on one paragraph per line its ``break`` ends an article where a
paragraph of 125 pieces or more starts a run: 57 inputs from the whole WikiText-2 test split.) A pair longer than
``max_length`` pieces is cut as ``truncate_seq_pair`` cuts it: while the two hold more than ``max_length``
less the template's special tokens (3 for BERT's ``[CLS] a [SEP] b [SEP]``, 4 for RoBERTa's) pieces, the
longer (the second on a tie) loses its first or its last word, each with probability 1/2. The released code
drops pieces; here whole words go, so that a word is never split (a word that comes to begin its paragraph
is counted as a text's first word: byte-level BPE tokenizes it without its space marker). The words kept are
recorded in the sentence id: ``LINE`` for a whole paragraph, ``LINE:FIRST-LAST/N`` for words FIRST to LAST
(1-based) of its N. A pair that would lose every word of one paragraph is left out (the released code's
``break`` leaves it out too, and the rest of its document with it). With ``sample``, N pairs are drawn at
random without replacement by ``random.Random(seed)`` (the paper's "1,000 random segments"; the released
code takes the first 1,000 of its file) and kept in the order drawn (the released code shuffles its
segments); without, every pair in file order. The truncation draws come from the same generator.

Words, POS tags and dependencies come from spaCy (the GLUE reader's annotation) over the whole paragraph,
before the cut: a kept word whose head was cut off has no head and no relation.

What the model reads (``text``, see ``atlas.ingestion.align``): by default the paragraph as written, spaCy's words
placed on it by their character offsets, a cut paragraph from its first kept word's first character to its last kept
word's last; a word's pieces for the cut are those the first-character rule gives it. Where a cut parts two words
that share a piece (written text only), the tokenizer splits their characters anew: while the two cut texts hold
more pieces than the budget, the longer (the second on a tie) loses its last word. ``words``: the words joined by
single spaces, as the released code's pre-tokenized input.
"""

from __future__ import annotations

import random
import re
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING

from atlas.errors import AtlasError, arg
from atlas.ingestion.readers.base import DRAW_SEED, CorpusOptions, FileReader, Reading
from atlas.ingestion.readers.conllu import Sentence, Word
from atlas.ingestion.readers.corpus_info import CorpusInfo
from atlas.ingestion.readers.glue import _nlp, _words, word_spans

if TYPE_CHECKING:  # light to import: a finished run is found by its settings without loading transformers
    from spacy.tokens import Doc
    from transformers import PreTrainedTokenizerBase

_HEADING = re.compile(r"((?:= )+)(.*?)((?: =)+)")
_WIKITEXT_MARKER = re.compile(r" @([-,.])@ ")
_BLOCK = 64  # pairs annotated per spaCy call


@dataclass(frozen=True)
class Paragraph:
    text: str
    line: int  # file line of its first line
    line_starts: tuple[int, ...]  # offset in text where each of its file lines starts


@dataclass(frozen=True)
class Pair:
    doc_id: str  # the article's title (WikiText) or the file name (plain text)
    a: Paragraph
    b: Paragraph


def _lines(path: Path) -> list[str]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise AtlasError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise AtlasError(f"{path}: a folder, expected a text file") from None
    if not data:
        raise AtlasError(f"{path}:1: empty file")
    lines = []
    for number, raw in enumerate(data.removeprefix(b"\xef\xbb\xbf").split(b"\n"), start=1):
        if b"\x00" in raw:
            raise AtlasError(f"{path}:{number}: a NUL byte, expected text")
        try:
            lines.append(raw.removesuffix(b"\r").decode("utf-8"))
        except UnicodeDecodeError as exc:
            where = f"byte 0x{raw[exc.start]:02x} at column {exc.start + 1}"
            raise AtlasError(f"{path}:{number}: not UTF-8 ({where})") from None
    return lines


def _heading(line: str) -> tuple[int, str] | None:
    """(depth, title) of a WikiText heading line (``= Title =`` is depth 1), None for any other line."""
    match = _HEADING.fullmatch(line.strip())
    return (len(match.group(1)) // 2, match.group(2)) if match else None


def read_articles(path: Path) -> list[tuple[str, list[Paragraph]]]:
    """The articles of a file, each as (title, paragraphs), in file order."""
    lines = _lines(path)
    first = next((line for line in lines if line.strip()), None)
    if first is None:
        raise AtlasError(f"{path}:1: no paragraph, only blank lines")
    articles: list[tuple[str, list[Paragraph]]] = []
    if (_heading(first) or (0, ""))[0] == 1:  # WikiText: one paragraph per line
        for number, line in enumerate(lines, start=1):
            heading = _heading(line)
            if heading and heading[0] == 1:
                articles.append((heading[1], []))
            elif line.strip() and not heading:
                text = _WIKITEXT_MARKER.sub(r"\1", line.strip())
                articles[-1][1].append(Paragraph(text, number, (0,)))
    else:  # plain text: blocks of lines between blank lines
        paragraphs: list[Paragraph] = []
        block: list[tuple[int, str]] = []
        for number, line in enumerate([*lines, ""], start=1):
            if line.strip():
                block.append((number, line.strip()))
            elif block:
                starts = tuple(sum(len(text) + 1 for _, text in block[:i]) for i in range(len(block)))
                paragraphs.append(Paragraph(" ".join(text for _, text in block), block[0][0], starts))
                block = []
        articles.append((path.name, paragraphs))
    if not any(paragraphs for _, paragraphs in articles):
        raise AtlasError(f"{path}:1: no paragraph, only headings and blank lines")
    return articles


def read_pairs(path: Path, sample: int | None = None) -> list[Pair]:
    """Every pair of the file, in file order; fails when there is none or fewer than ``sample``."""
    pairs = [
        Pair(title, paragraphs[i], paragraphs[i + 1])
        for title, paragraphs in read_articles(path)
        for i in range(0, len(paragraphs) - 1, 2)
    ]
    if not pairs:
        raise AtlasError(f"{path}:1: no article has two paragraphs to pair")
    if sample is not None and sample > len(pairs):
        raise AtlasError(f"{arg('sample', sample)}: {path} holds only {len(pairs)} paragraph pairs")
    return pairs


def truncate_pair(
    a: list[int], b: list[int], budget: int, rng: random.Random, first: tuple[list[int], list[int]] | None = None
) -> tuple[range, range]:
    """The words of two paragraphs kept (by their piece counts a and b) so that at most ``budget`` pieces
    remain: preprocess_unlabeled.py's ``truncate_seq_pair``, by whole words instead of pieces. ``first``: each
    word's piece count when it begins its text (a byte-level BPE tokenizes a text's first word without the
    space marker); None: the same counts (WordPiece)."""
    starts = first or (a, b)
    spans = [[0, len(a)], [0, len(b)]]
    sizes = [sum(a), sum(b)]
    while sizes[0] + sizes[1] > budget:
        side = 0 if sizes[0] > sizes[1] else 1
        pieces, span, start = (a, b)[side], spans[side], starts[side]
        if rng.random() < 0.5:
            sizes[side] -= start[span[0]]
            span[0] += 1
            if span[0] < span[1]:  # the next word begins the text now
                sizes[side] += start[span[0]] - pieces[span[0]]
        else:
            span[1] -= 1
            sizes[side] -= start[span[1]] if span[1] == span[0] else pieces[span[1]]
    return range(*spans[0]), range(*spans[1])


def _part(sentence: Sentence, keep: range) -> Sentence:
    """The words ``keep`` of a paragraph and their text: from the first one's first character to the last one's
    last (their ids and heads as they were)."""
    assert sentence.text is not None and sentence.spans is not None
    spans = sentence.spans[keep.start : keep.stop]
    start = spans[0][0]
    return replace(
        sentence,
        words=sentence.words[keep.start : keep.stop],
        text=sentence.text[start : spans[-1][1]],
        spans=[(a - start, b - start) for a, b in spans],
    )


def _fitted(
    tokenizer: PreTrainedTokenizerBase, whole: list[Sentence], keep: tuple[range, range], budget: int, path: Path
) -> tuple[range, range]:
    """The cut of a pair as written, within ``budget`` pieces (see the module notes)."""
    from atlas.ingestion.align import align

    spans = [[k.start, k.stop] for k in keep]
    while all(a < b for a, b in spans):
        parts = [_part(s, range(*k)) for s, k in zip(whole, spans, strict=True)]
        sizes = [len(a.pieces) for a in align(tokenizer, parts, path, "written")]
        if sum(sizes) <= budget:
            break
        spans[0 if sizes[0] > sizes[1] else 1][1] -= 1
    return range(*spans[0]), range(*spans[1])


def _cut(whole: Sentence, keep: range, paragraph: Paragraph, index: int) -> Sentence:
    """The kept words as a sentence: its id, the words renumbered from 1, heads inside the cut remapped, and their
    text (``_part``)."""
    words = whole.words
    whole_kept = len(keep) == len(words)
    sent_id = f"{paragraph.line}" if whole_kept else f"{paragraph.line}:{keep[0] + 1}-{keep[-1] + 1}/{len(words)}"
    out = []
    for word in words[keep.start : keep.stop]:
        inside = word.head is not None and (word.head == 0 or word.head - 1 in keep)
        out.append(
            word._replace(
                id=word.id - keep.start,
                head=(word.head - keep.start if word.head else 0) if inside else None,
                deprel=word.deprel if inside else None,
            )
        )
    part = _part(whole, keep)
    return Sentence(index, sent_id, whole.doc_id, out[0].line, out, text=part.text, spans=part.spans)


def _annotate(paragraph: Paragraph, doc: Doc) -> list[Word]:
    """spaCy's words of a paragraph (the GLUE reader's annotation), each on the file line it starts on."""
    starts = [tok.idx for tok in doc if not tok.is_space]
    words = _words(doc, paragraph.line)
    lines = [paragraph.line + bisect_right(paragraph.line_starts, i) - 1 for i in starts]
    return [w._replace(line=line) for w, line in zip(words, lines, strict=True)]


def read_text(
    path: Path,
    tokenizer: PreTrainedTokenizerBase,
    max_length: int,
    sample: int | None = None,
    seed: int = 0,
    text: str = "written",
) -> Iterator[Sentence]:
    """Yield the two paragraphs of each input, cut to ``max_length`` pieces of the text the model reads in mode
    ``text`` (``written`` or ``words``, ``atlas.ingestion.align``; see the module notes)."""
    from atlas.ingestion.align import align, align_texts, word_texts

    pairs = read_pairs(path, sample)
    rng = random.Random(seed)
    order = iter(rng.sample(range(len(pairs)), len(pairs)) if sample is not None else range(len(pairs)))
    wanted = len(pairs) if sample is None else sample
    taken = 0
    while block := [pairs[i] for i in islice(order, min(_BLOCK, wanted - taken))]:
        docs = iter(_nlp().pipe([p.text for pair in block for p in (pair.a, pair.b)], batch_size=_BLOCK))
        for pair in block:
            paragraphs = (pair.a, pair.b)
            annotated = [next(docs) for _ in paragraphs]
            whole = [
                Sentence(0, "", pair.doc_id, p.line, _annotate(p, doc), text=p.text, spans=word_spans(doc))
                for p, doc in zip(paragraphs, annotated, strict=True)
            ]
            aligned = align(tokenizer, whole, path, text)
            counts = [[len(pieces) for pieces in s.word_pieces] for s in aligned]
            budget = max_length - tokenizer.num_special_tokens_to_add(pair=True)
            first = None
            if sum(map(sum, counts)) > budget:  # each word's pieces as a text's first word, where a cut puts it
                alone = [[len(p) for p in align_texts(tokenizer, word_texts(s, text), path, text)] for s in whole]
                first = (alone[0], alone[1])
            keep = truncate_pair(*counts, budget, rng, first)
            if text == "written" and first is not None and all(keep):
                keep = _fitted(tokenizer, whole, keep, budget, path)
            if not all(keep):
                continue
            for side, (p, s, k) in enumerate(zip(paragraphs, whole, keep, strict=True)):
                yield _cut(s, k, p, 2 * taken + side)
            taken += 1
    if sample is not None and taken < sample:
        raise AtlasError(
            f"{arg('sample', sample)}: only {taken} of the {len(pairs)} paragraph pairs of {path} keep words of both "
            f"paragraphs within {arg('max_length', max_length)}"
        )


class Text(FileReader):
    """``--format text``: WikiText raw or plain text, an article's paragraphs two by two as pair inputs, cut to the
    model's pieces as they are read."""

    name = "text"
    help = (
        "WikiText raw or plain text, an article's paragraphs two by two as a pair input (Clark et al.'s Wikipedia "
        "segments), words and dependencies by spaCy"
    )
    options = {
        "sample": "{option}: only a {formats} corpus is sampled",
        "sample_seed": DRAW_SEED,
    }

    def pack(self, pack: str | None, options: CorpusOptions) -> str:
        if pack not in (None, "pair"):
            raise AtlasError(f"{arg('pack')}: a text file is read as paragraph pairs; leave {arg('pack')} out")
        return "pair"

    def info(self, path: Path, options: CorpusOptions) -> CorpusInfo:
        info = CorpusInfo(path, "", 0, self.name, None, options.sample, options.sample_seed or 0)
        return replace(info, label=self.corpus_name(info))

    def check(self, info: CorpusInfo) -> CorpusInfo:
        # its paragraphs are annotated once, at ingest, when they are cut to the model's pieces
        pairs = read_pairs(info.path, info.sample)  # fails on a malformed file or a sample larger than its pairs
        n = 2 * (len(pairs) if info.sample is None else info.sample)
        return replace(self.with_sha256(info), n_sentences=n)

    def corpus_name(self, info: CorpusInfo) -> str:
        if info.sample is not None:
            return f"{info.path.name} (sample {info.sample}, seed {info.sample_seed})"
        return info.path.name

    def run_key(self, info: CorpusInfo) -> list[object]:
        return [self.name, None, info.sample, info.sample_seed]

    def sentences(self, info: CorpusInfo, reading: Reading) -> Iterator[Sentence]:
        if reading.tokenizer is None or reading.max_length is None:
            raise ValueError("a text corpus is read with a tokenizer and a max_length")
        return read_text(info.path, reading.tokenizer, reading.max_length, info.sample, info.sample_seed, reading.text)

    def summary(
        self, info: CorpusInfo, text: str, n_examples: int, count_examples: Callable[[str], int]
    ) -> dict[str, object]:
        cut = count_examples("len(list_filter(sent_ids, s -> contains(s, ':'))) > 0")  # LINE:FIRST-LAST/N: cut
        # a sample draws pairs: the paragraphs without a partner were never among what it draws from
        unpaired = None if info.sample is not None else sum(len(p) % 2 for _, p in read_articles(info.path))
        return {"n_cut": cut, "n_left_out": info.n_sentences // 2 - n_examples, "n_unpaired": unpaired}
