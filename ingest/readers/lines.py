"""Stage 1 for one text per line: a researcher's own sentences, each line one input, annotated by spaCy.

Every non-blank line is one input of one text (``[CLS] text [SEP]`` for BERT), read as it stands in the file
(surrounding spaces aside). Words, POS tags and dependencies come from spaCy's English pipeline, as for a GLUE
file (``atlas.ingestion.readers.glue``): each spaCy sentence root in a line has no head. A line longer than
``max_length`` pieces is skipped, never cut. This is what ``atlas look`` reads its text as. An empty file, a file
of blank lines, a line that is not UTF-8 or holds a NUL byte are one-line errors naming file:line.
"""

from __future__ import annotations

from collections.abc import Iterator

from atlas.errors import AtlasError, arg
from atlas.ingestion.readers.base import CorpusOptions, FileReader, Reading
from atlas.ingestion.readers.conllu import Sentence
from atlas.ingestion.readers.corpus_info import CorpusInfo
from atlas.ingestion.readers.glue import _nlp, _words, word_spans
from atlas.ingestion.readers.text import _lines

_BLOCK = 256  # lines annotated per spaCy call


def read_lines(info: CorpusInfo) -> Iterator[Sentence]:
    """The file's non-blank lines, each a sentence of its own, in file order."""
    numbered = [(number, line.strip()) for number, line in enumerate(_lines(info.path), start=1) if line.strip()]
    if not numbered:
        raise AtlasError(f"{info.path}:1: no text, only blank lines")
    for start in range(0, len(numbered), _BLOCK):
        block = numbered[start : start + _BLOCK]
        docs = _nlp().pipe([text for _, text in block])
        for index, ((number, _), doc) in enumerate(zip(block, docs, strict=True), start=start):
            yield Sentence(index, str(number), None, number, _words(doc, number), text=doc.text, spans=word_spans(doc))


class Lines(FileReader):
    """``--format lines``: a text file, each non-blank line one single-text input."""

    name = "lines"
    help = "a text file, each non-blank line one input of one text, words and dependencies by spaCy"

    def pack(self, pack: str | None, options: CorpusOptions) -> str:
        if pack is not None:
            raise AtlasError(f"{arg('pack')}: a lines file is read one line per input; leave {arg('pack')} out")
        return "none"

    def sentences(self, info: CorpusInfo, reading: Reading) -> Iterator[Sentence]:
        return read_lines(info)
