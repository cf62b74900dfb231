"""The corpus layer's entry: which reader a corpus format uses, and a whole-file check before anything is written.

``read_aligned`` gives the ingest its sentences aligned to the model's pieces: a file's words through the
tokenizer (``ingest.align``), a repeated-token corpus's drawn ids as they are (``ingest.repeated``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from itertools import islice
from pathlib import Path

import transformers

from atlas.errors import AtlasError, arg
from atlas.ingestion.align import AlignedSentence, align
from atlas.ingestion.conllu import Sentence, read_conllu
from atlas.ingestion.corpus_info import CorpusInfo, check_file, dropped_text, sha256_of
from atlas.ingestion.framenet import REASONS, read_framenet
from atlas.ingestion.glue_corpus import read_glue
from atlas.ingestion.glue_tsv import task_spec
from atlas.ingestion.repeated import Repeated, read_repeated
from atlas.ingestion.text_corpus import read_pairs, read_text

DRAWN = ("repeated",)  # formats with no corpus file: drawn from the model's vocabulary, read as pieces


def read_corpus(
    corpus: CorpusInfo,
    tokenizer: transformers.PreTrainedTokenizerBase | None = None,
    max_length: int | None = None,
    text: str = "written",
) -> Iterator[Sentence]:
    """The corpus's sentences; a text file needs the model's tokenizer and the input length its pairs are cut to
    (in pieces of the text the model reads, ``text``: ``ingest.align``) (a drawn corpus has pieces, not words to
    align: ``read_aligned``)."""
    if corpus.fmt in DRAWN:
        raise ValueError(f"read_corpus: a {corpus.fmt} corpus is read as pieces, by read_aligned")
    if corpus.fmt == "text":
        if tokenizer is None or max_length is None:
            raise ValueError("read_corpus: a text corpus is read with a tokenizer and a max_length")
        return read_text(corpus.path, tokenizer, max_length, corpus.sample, corpus.sample_seed, text)
    if corpus.fmt == "glue":
        return read_glue(corpus.path, corpus.task or "")
    if corpus.fmt == "framenet":
        return read_framenet(corpus.path)
    return read_conllu(corpus.path)


def read_aligned(
    corpus: CorpusInfo,
    tokenizer: transformers.PreTrainedTokenizerBase,
    max_length: int,
    batch: int = 256,
    text: str = "written",
) -> Iterator[AlignedSentence]:
    """The corpus's sentences aligned to the tokenizer's pieces, in corpus order: a file's sentences tokenized
    ``batch`` at a time as the model reads them (``text``: ``written`` or ``words``, ``ingest.align``), a
    repeated-token corpus's drawn ids as they are."""
    if corpus.fmt == "repeated":
        yield from read_repeated(corpus, tokenizer, max_length)
        return
    sentences = iter(read_corpus(corpus, tokenizer, max_length, text))
    while block := list(islice(sentences, batch)):
        yield from align(tokenizer, block, corpus.path, text)


def changed(corpus: CorpusInfo) -> bool:
    """The corpus file no longer holds what was checked (a drawn corpus has no file: never)."""
    return corpus.fmt not in DRAWN and sha256_of(corpus.path) != corpus.sha256


def check_corpus(
    path: Path, fmt: str = "conllu", task: str | None = None, sample: int | None = None, sample_seed: int = 0
) -> CorpusInfo:
    """Read the whole corpus once: validates every line before anything is written (a repeated-token corpus:
    ``path`` is its name, ``repeated(N=..,K=..,seed=..)``, see ``ingest.repeated``)."""
    if fmt == "glue" and not task:
        raise AtlasError(f"{arg('format', repr('glue'))} needs {arg('task')}")
    if sample is not None and fmt != "text":
        raise AtlasError(f"{arg('sample')}: only a {arg('format', repr('text'))} corpus is sampled")
    if fmt == "repeated":
        return Repeated.parse(path.name).info()
    check_file(path, fmt)
    if fmt == "text":  # its paragraphs are annotated once, at ingest, when they are cut to the model's pieces
        pairs = read_pairs(path, sample)  # fails on a malformed file or a sample larger than its pairs
        n = 2 * (len(pairs) if sample is None else sample)
        return CorpusInfo(path, sha256_of(path), n, fmt, None, sample, sample_seed)
    if fmt == "glue":
        task = task_spec(task).name  # one spelling in run ids and corpus names
    counts: Counter[str] = Counter()
    sentences = read_framenet(path, counts) if fmt == "framenet" else read_corpus(CorpusInfo(path, "", 0, fmt, task))
    n = sum(1 for _ in sentences)
    dropped = tuple((reason, counts[reason]) for reason in REASONS if counts[reason])
    if n == 0:
        kept = f" that passes Kovaleva et al.'s filters ({dropped_text(dropped)})" if dropped else ""
        raise AtlasError(f"{path}: the corpus holds no {'exemplar ' if fmt == 'framenet' else ''}sentence{kept}")
    return CorpusInfo(path, sha256_of(path), n, fmt, task, dropped=dropped)
