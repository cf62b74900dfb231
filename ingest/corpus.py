"""The corpus layer's entry: which reader a corpus format uses, and a whole-file check before anything is written."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import transformers

from atlas.errors import AtlasError
from atlas.ingestion.conllu import Sentence, read_conllu
from atlas.ingestion.corpus_info import CorpusInfo, sha256_of
from atlas.ingestion.framenet import read_framenet
from atlas.ingestion.glue_corpus import read_glue
from atlas.ingestion.glue_tsv import task_spec
from atlas.ingestion.text_corpus import read_pairs, read_text


def read_corpus(
    corpus: CorpusInfo, tokenizer: transformers.PreTrainedTokenizerBase | None = None, max_length: int | None = None
) -> Iterator[Sentence]:
    """The corpus's sentences; a text file needs the model's tokenizer and the input length its pairs are cut to."""
    if corpus.fmt == "text":
        if tokenizer is None or max_length is None:
            raise ValueError("read_corpus: a text corpus is read with a tokenizer and a max_length")
        return read_text(corpus.path, tokenizer, max_length, corpus.sample, corpus.sample_seed)
    if corpus.fmt == "glue":
        return read_glue(corpus.path, corpus.task or "")
    if corpus.fmt == "framenet":
        return read_framenet(corpus.path)
    return read_conllu(corpus.path)


def check_corpus(
    path: Path, fmt: str = "conllu", task: str | None = None, sample: int | None = None, sample_seed: int = 0
) -> CorpusInfo:
    """Read the whole corpus once: validates every line before anything is written."""
    if fmt == "glue" and not task:
        raise AtlasError("--format glue needs --task")
    if sample is not None and fmt != "text":
        raise AtlasError("--sample: only a --format text corpus is sampled")
    if fmt == "text":  # its paragraphs are annotated once, at ingest, when they are cut to the model's pieces
        pairs = read_pairs(path, sample)  # fails on a malformed file or a sample larger than its pairs
        n = 2 * (len(pairs) if sample is None else sample)
        return CorpusInfo(path, sha256_of(path), n, fmt, None, sample, sample_seed)
    if fmt == "glue":
        task = task_spec(task).name  # one spelling in run ids and corpus names
    info = CorpusInfo(path, "", 0, fmt, task)
    n = sum(1 for _ in read_corpus(info))
    if n == 0:
        raise AtlasError(f"{path}: the corpus holds no sentence")
    return CorpusInfo(path, sha256_of(path), n, fmt, task)
