"""The read stage's entry: a corpus's sentences through its format's reader (``atlas.ingestion.readers``), and a
whole-corpus check before anything is written.

``read_aligned`` gives the ingest its sentences aligned to the model's pieces: a file's words through the
tokenizer (``atlas.ingestion.align``), a drawn corpus's ids as they are.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from itertools import islice
from pathlib import Path

import transformers

from atlas.ingestion.align import AlignedSentence, align
from atlas.ingestion.readers import DEFAULT, check_options, reader
from atlas.ingestion.readers.base import CorpusOptions, Reading
from atlas.ingestion.readers.conllu import Sentence
from atlas.ingestion.readers.corpus_info import CorpusInfo
from atlas.ingestion.readers.needle import Continue

__all__ = ["CorpusInfo", "changed", "check_corpus", "read_aligned", "read_corpus"]


def read_corpus(
    corpus: CorpusInfo,
    tokenizer: transformers.PreTrainedTokenizerBase | None = None,
    max_length: int | None = None,
    text: str = "written",
) -> Iterator[Sentence]:
    """The corpus's sentences; a reader that cuts its inputs to the model's pieces (text) needs the model's
    tokenizer and the input length (in pieces of the text the model reads, ``text``: ``atlas.ingestion.align``);
    a drawn corpus has pieces, not words to align: ``read_aligned``."""
    return reader(corpus.fmt).sentences(corpus, Reading(tokenizer, max_length, text))


def read_aligned(
    corpus: CorpusInfo,
    tokenizer: transformers.PreTrainedTokenizerBase,
    max_length: int,
    batch: int = 256,
    text: str = "written",
    continue_with: Continue | None = None,
) -> Iterator[AlignedSentence]:
    """The corpus's sentences aligned to the tokenizer's pieces, in corpus order: a file's sentences tokenized
    ``batch`` at a time as the model reads them (``text``: ``written`` or ``words``, ``atlas.ingestion.align``), a
    drawn corpus's ids as they are (a needle probe's with the model's continuation: ``continue_with``)."""
    read = reader(corpus.fmt)
    if not read.has_text:
        yield from read.pieces(corpus, tokenizer, max_length, continue_with)
        return
    sentences = iter(read.sentences(corpus, Reading(tokenizer, max_length, text)))
    while block := list(islice(sentences, batch)):
        yield from align(tokenizer, block, corpus.path, text)


def changed(corpus: CorpusInfo) -> bool:
    """The corpus no longer holds what was checked (a drawn corpus has no file: never)."""
    return reader(corpus.fmt).changed(corpus)


def check_corpus(
    path: Path,
    fmt: str = DEFAULT,
    task: str | None = None,
    sample: int | None = None,
    sample_seed: int = 0,
    options: CorpusOptions | None = None,
) -> CorpusInfo:
    """Read the whole corpus once: validates every line before anything is written (a drawn corpus: ``path`` is its
    name, e.g. ``repeated(N=..,K=..,seed=..)``, see ``atlas.ingestion.readers.repeated``); ``options``: every corpus
    option as given (instead of ``task``, ``sample`` and ``sample_seed``)."""
    chosen = reader(fmt)
    if options is None:
        options = CorpusOptions(task=task, sample=sample, sample_seed=sample_seed)
    check_options(chosen, replace(options, sample_seed=None))
    if chosen.takes_file:
        chosen.corpus_path(path, options)
    return chosen.check(chosen.info(path, options))
