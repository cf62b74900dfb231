"""Stage 1 for FrameNet 1.5: lexical-unit exemplar sentences with their target and frame elements.

Reads ``lu/*.xml`` files from the release's exemplar archive (a ``.tar.gz``), a folder of them, or one
file. Words are the space-separated tokens of the sentence text. For each sentence, the frame elements
of its first-rank FE layer (null instantiations have no span and are left out), the target, and
whether each element is core in the frame (the lexical unit's header). Kovaleva et al.'s filters
(Section 4.2) keep a sentence when every annotated element has at most 3 tokens, the sentence has at
most 12 tokens, it has a core element, and every core element is at least 2 tokens from the target.
"""

from __future__ import annotations

import tarfile
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from atlas.errors import AtlasError
from ingest.conllu import Sentence, Word

NS = "{http://framenet.icsi.berkeley.edu}"
MAX_ELEMENT_TOKENS = 3
MAX_SENTENCE_TOKENS = 12
MIN_DISTANCE = 2


@dataclass(frozen=True)
class FrameElement:
    frame: str
    lexical_unit: str
    name: str
    core: bool
    target: tuple[int, int]  # first and last word id (1-based) of the target
    span: tuple[int, int]  # first and last word id of the element


def _tokens(text: str) -> list[tuple[str, int, int]]:
    out, pos = [], 0
    for token in text.split(" "):
        if token:
            out.append((token, pos, pos + len(token) - 1))
        pos += len(token) + 1
    return out


def _span(tokens: list[tuple[str, int, int]], start: int, end: int) -> tuple[int, int] | None:
    ids = [i + 1 for i, (_, a, b) in enumerate(tokens) if a <= end and b >= start]
    return (ids[0], ids[-1]) if ids else None


def _distance(a: tuple[int, int], b: tuple[int, int]) -> int:
    return max(0, max(a[0], b[0]) - min(a[1], b[1]))


def _unit(root: ET.Element, source: str) -> Iterator[tuple[str, str, list[tuple[str, int, int]], list[FrameElement]]]:
    """(sentence id, text, tokens, frame elements) of every annotated sentence of one lexical unit."""
    frame, lu = root.get("frame", ""), root.get("name", "")
    core = {fe.get("name") for fe in root.iter(f"{NS}FE") if fe.get("type") == "Core"}
    for sentence in root.iter(f"{NS}sentence"):
        text = sentence.findtext(f"{NS}text") or ""
        tokens = _tokens(text)
        for annotation in sentence.iter(f"{NS}annotationSet"):
            layers = {(layer.get("name"), layer.get("rank")): layer for layer in annotation.iter(f"{NS}layer")}
            target_layer, fe_layer = layers.get(("Target", "1")), layers.get(("FE", "1"))
            if target_layer is None or fe_layer is None:
                continue
            targets = [
                _span(tokens, int(lab.get("start")), int(lab.get("end")))
                for lab in target_layer.iter(f"{NS}label")
                if lab.get("start") is not None
            ]
            targets = [t for t in targets if t]
            if not targets:
                continue
            target = (min(t[0] for t in targets), max(t[1] for t in targets))
            elements = []
            for label in fe_layer.iter(f"{NS}label"):
                if label.get("start") is None:  # a null instantiation
                    continue
                span = _span(tokens, int(label.get("start")), int(label.get("end")))
                if span is None:
                    raise AtlasError(f"{source}: sentence {sentence.get('ID')}: element outside the text")
                elements.append(FrameElement(frame, lu, label.get("name"), label.get("name") in core, target, span))
            yield sentence.get("ID", ""), text, tokens, elements
            break  # one annotated set per sentence: the lexical unit's own


def keep(n_tokens: int, elements: list[FrameElement]) -> bool:
    """Kovaleva et al.'s filters (see the module docstring)."""
    cores = [e for e in elements if e.core]
    return (
        n_tokens <= MAX_SENTENCE_TOKENS
        and bool(cores)
        and all(e.span[1] - e.span[0] + 1 <= MAX_ELEMENT_TOKENS for e in elements)
        and all(_distance(e.span, e.target) >= MIN_DISTANCE for e in cores)
    )


def _documents(path: Path) -> Iterator[tuple[str, bytes]]:
    if not path.exists():
        raise AtlasError(f"{path}: no such file or folder")
    if path.is_dir():
        for file in sorted(path.glob("lu*.xml")):
            yield str(file), file.read_bytes()
    elif path.name.endswith((".tar.gz", ".tgz")):
        try:
            with tarfile.open(path, "r:gz") as archive:
                for member in archive:
                    name = member.name.rsplit("/", 1)[-1]
                    if member.isfile() and name.startswith("lu") and name.endswith(".xml"):
                        handle = archive.extractfile(member)
                        if handle is not None:
                            yield f"{path}:{member.name}", handle.read()
        except (tarfile.TarError, EOFError, OSError) as exc:
            raise AtlasError(f"{path}: not a readable .tar.gz archive ({exc})") from None
    else:
        yield str(path), path.read_bytes()


def read_framenet(path: Path) -> Iterator[Sentence]:
    """The exemplar sentences that pass the filters, as sentences carrying their frame elements."""
    index = 0
    for source, data in _documents(path):
        try:
            root = ET.fromstring(data)
        except ET.ParseError as exc:
            raise AtlasError(f"{source}:{exc.position[0]}: not well-formed XML") from None
        for sent_id, _, tokens, elements in _unit(root, source):
            if not keep(len(tokens), elements):
                continue
            words = [Word(i + 1, t, None, None, None, None, None, None, None, 0) for i, (t, _, _) in enumerate(tokens)]
            yield Sentence(index, sent_id, root.get("name"), 0, words, frames=elements)
            index += 1
