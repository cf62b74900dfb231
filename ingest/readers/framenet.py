"""Stage 1 for FrameNet 1.5: lexical-unit exemplar sentences with their target and frame elements.

Input: the release's ``lu/*.xml`` files: the ``lu/`` folder, one file of it, or an archive (``.tar.gz``)
holding them. Each frame's core set comes from the release's frame definitions, ``frame/<frame>.xml``:
the names in its ``<FEcoreSet>`` elements, which is what Kovaleva et al.'s code takes as core (NLTK's
``lu['frame']['FEcoreSets']``; a frame without core sets has no core element, though its ``coreType``
may call some elements Core). The definitions are read from the ``frame/`` folder beside the folder that
holds the lu files (``lu/../frame``); for an archive, from ``frame/*.xml`` inside it, else from the
``frame/`` folder where it unpacks (the archive's folder joined with the path of its ``lu/`` folder's
parent, e.g. ``fndata-1.5/frame`` beside ``fndata-1.5-lu-exemplars.tar.gz``).

Words are the space-separated tokens of the sentence text (the release's texts are tokenised; NLTK's
``word_tokenize``, which the code uses, keeps the same sentences); the text a model reads as written is the
sentence text from its first token to its last. A sentence's annotation is the last of
its annotation sets with a labelled target (NLTK's reader lets later sets overwrite earlier ones), its
elements the overt labels of that set's first-rank FE layer. The filters of the released code
(``visualize_attention.ipynb`` cells 57-59; the paper's Section 4.2), in its order: a sentence is kept
when it has at most 12 tokens; its target is one span; every element has at most 3 tokens; the target is
one whole token and no token of any element (core or not) lies within 2 tokens of it; and it has an
element of the frame's core set. The code tests nearness by token strings (a token of the window equal
to any element's token); here by positions, as the paper's text says ("the linked objects are less than
two tokens apart").
"""

from __future__ import annotations

import re
import tarfile
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

from atlas.errors import AtlasError, arg
from atlas.ingestion.readers.base import CorpusOptions, FileReader, Reading
from atlas.ingestion.readers.conllu import Sentence, Word
from atlas.ingestion.readers.corpus_info import CorpusInfo, dropped_text

NS = "{http://framenet.icsi.berkeley.edu}"
MAX_SENTENCE_TOKENS = 12
MAX_ELEMENT_TOKENS = 3
MIN_DISTANCE = 3  # an element token at most 2 tokens from the target drops the sentence
# why a sentence is dropped, one reason per filter, in the order they apply (``rejection``)
REASONS = (
    f"more than {MAX_SENTENCE_TOKENS} tokens",
    "target of more than one span",
    f"an element of more than {MAX_ELEMENT_TOKENS} tokens",
    "target not one token",
    f"an element within {MIN_DISTANCE - 1} tokens of the target",
    "no element of the frame's core set",
)
ARCHIVES = (".tar.gz", ".tgz")
LU_FILE = re.compile(r"lu\d+\.xml")


@dataclass(frozen=True)
class FrameElement:
    frame: str
    lexical_unit: str
    name: str
    core: bool  # in one of the frame's core sets
    target: tuple[int, int]  # first and last word id (1-based) of the target
    span: tuple[int, int]  # first and last word id of the element


@dataclass(frozen=True)
class Exemplar:
    """One annotated sentence of a lexical unit, before the filters."""

    sent_id: str
    tokens: list[tuple[str, int, int]]  # form, first and last character
    targets: list[tuple[int, int]]  # first and last character of each Target label
    elements: list[tuple[str, tuple[int, int], bool]]  # name, first and last word id, in a core set


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


def _overt(layer: ET.Element) -> list[ET.Element]:
    """Labels with a span (null instantiations have none), in the order NLTK sorts them."""
    labels = [lab for lab in layer.iter(f"{NS}label") if lab.get("start") is not None]
    return sorted(labels, key=lambda lab: (int(lab.get("start")), int(lab.get("end")), lab.get("name", "")))


def _annotation(sentence: ET.Element) -> tuple[ET.Element, ET.Element | None] | None:
    """The Target layer and first-rank FE layer of the sentence's last annotation set with a labelled target."""
    found = None
    for annotation in sentence.iter(f"{NS}annotationSet"):
        layers = list(annotation.iter(f"{NS}layer"))
        target = next((la for la in layers if la.get("name") == "Target" and _overt(la)), None)
        if target is not None:
            found = target, next((la for la in layers if la.get("name") == "FE" and la.get("rank") == "1"), None)
    return found


def _check_positions(sentence: ET.Element, source: str) -> None:
    """Every label with a span has a start and an end that are character positions (a one-line error)."""
    for label in sentence.iter(f"{NS}label"):
        start, end = label.get("start"), label.get("end")
        if start is None and end is None:
            continue  # a null instantiation
        for attr, value in (("start", start), ("end", end)):
            if value is None or not value.isascii() or not value.isdigit():
                raise AtlasError(
                    f"{source}: sentence {sentence.get('ID')}: label '{label.get('name', '')}' has "
                    f"{attr}={value!r}, not a character position"
                )


def exemplars(root: ET.Element, source: str, core: frozenset[str]) -> Iterator[Exemplar]:
    """Every sentence of one lexical unit with a labelled target; ``core``: its frame's core set."""
    for sentence in root.iter(f"{NS}sentence"):
        _check_positions(sentence, source)
        found = _annotation(sentence)
        if found is None:
            continue
        target_layer, fe_layer = found
        tokens = _tokens(sentence.findtext(f"{NS}text") or "")
        elements = []
        for label in [] if fe_layer is None else _overt(fe_layer):
            span = _span(tokens, int(label.get("start")), int(label.get("end")))
            if span is None:
                raise AtlasError(f"{source}: sentence {sentence.get('ID')}: element outside the text")
            elements.append((label.get("name", ""), span, label.get("name") in core))
        targets = [(int(lab.get("start")), int(lab.get("end"))) for lab in _overt(target_layer)]
        yield Exemplar(sentence.get("ID", ""), tokens, targets, elements)


def target_word(ex: Exemplar) -> int | None:
    """Word id of the target when it is one span covering exactly one whole token."""
    if len(ex.targets) != 1:
        return None
    ids = [i + 1 for i, (_, a, b) in enumerate(ex.tokens) if (a, b) == ex.targets[0]]
    return ids[0] if ids else None


def rejection(ex: Exemplar) -> str | None:
    """Why the released code's filters drop the sentence, one of ``REASONS`` (None: kept); see the module
    docstring."""
    long_sentence, split_target, long_element, wide_target, near, no_core = REASONS
    if len(ex.tokens) > MAX_SENTENCE_TOKENS:
        return long_sentence
    if len(ex.targets) > 1:
        return split_target
    if any(last - first + 1 > MAX_ELEMENT_TOKENS for _, (first, last), _ in ex.elements):
        return long_element
    target = target_word(ex)
    if target is None:
        return wide_target
    if any(first - target < MIN_DISTANCE and target - last < MIN_DISTANCE for _, (first, last), _ in ex.elements):
        return near
    if not any(core for _, _, core in ex.elements):
        return no_core
    return None


def _core_sets(data: bytes, source: str) -> frozenset[str]:
    root = _parse(data, source)
    return frozenset(m.get("name", "") for s in root.iter(f"{NS}FEcoreSet") for m in s.iter(f"{NS}memberFE"))


def _parse(data: bytes, source: str) -> ET.Element:
    try:
        return ET.fromstring(data)
    except ET.ParseError as exc:
        raise AtlasError(f"{source}:{exc.position[0]}: not well-formed XML") from None
    except (LookupError, ValueError) as exc:  # e.g. an unknown encoding in the XML declaration
        raise AtlasError(f"{source}:1: not readable XML ({exc})") from None


class Frames:
    """Each frame's core set, from ``frame/<frame>.xml`` (read on first use)."""

    def __init__(self, where: str, read: Callable[[str], bytes | None]) -> None:
        self.where, self._read, self._cache = where, read, {}

    def core(self, frame: str, source: str) -> frozenset[str]:
        if frame not in self._cache:
            data = self._read(frame)
            if data is None:
                raise AtlasError(f"{source}: frame '{frame}' has no definition (no {self.where}/{frame}.xml)")
            self._cache[frame] = _core_sets(data, f"{self.where}/{frame}.xml")
        return self._cache[frame]


def _folder_frames(folder: Path, path: Path) -> Frames:
    def read(frame: str) -> bytes | None:  # looked for at the first frame: a file that is no lu file says so first
        if not folder.is_dir():
            raise AtlasError(
                f"{path}: no frame definitions at {folder} (the release's frame/ folder, beside lu/, gives the core "
                "sets)"
            )
        file = folder / f"{frame}.xml"
        return file.read_bytes() if file.is_file() else None

    return Frames(str(folder), read)


def _is_lu(name: str) -> bool:
    return bool(LU_FILE.fullmatch(PurePosixPath(name).name))


def _archive_frames(path: Path) -> Frames:
    """frame/*.xml inside the archive, else the frame/ folder where the archive unpacks beside its lu/."""
    inside: dict[str, bytes] = {}
    release: PurePosixPath | None = None
    with _open_archive(path) as archive:
        for member in _read_members(archive, path):
            name = PurePosixPath(member.name)
            if member.isfile() and name.parent.name == "frame" and name.suffix == ".xml":
                handle = archive.extractfile(member)
                if handle is not None:
                    inside[name.stem] = handle.read()
            elif member.isfile() and release is None and _is_lu(member.name):
                release = name.parent.parent
    if inside:
        return Frames(f"{path}:frame", inside.get)
    return _folder_frames(path.parent / (release or PurePosixPath()) / "frame", path)


def _open_archive(path: Path) -> tarfile.TarFile:
    try:
        return tarfile.open(path, "r:gz")
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise AtlasError(f"{path}: not a readable .tar.gz archive ({exc})") from None


def _read_members(archive: tarfile.TarFile, path: Path) -> Iterator[tarfile.TarInfo]:
    try:
        yield from archive
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise AtlasError(f"{path}: not a readable .tar.gz archive ({exc})") from None


def _documents(path: Path) -> Iterator[tuple[str, bytes]]:
    if path.is_dir():
        files = sorted(f for f in path.glob("lu*.xml") if _is_lu(f.name))
        if not files:
            raise AtlasError(f"{path}: no lexical-unit files (lu<number>.xml) in this folder")
        for file in files:
            yield str(file), file.read_bytes()
    elif path.name.endswith(ARCHIVES):
        found = False
        with _open_archive(path) as archive:
            for member in _read_members(archive, path):
                if member.isfile() and _is_lu(member.name):
                    handle = archive.extractfile(member)
                    if handle is not None:
                        found = True
                        yield f"{path}:{member.name}", handle.read()
        if not found:
            raise AtlasError(f"{path}: no lexical-unit files (lu<number>.xml) in this archive")
    else:
        yield str(path), path.read_bytes()


def frames_for(path: Path) -> Frames:
    """Where the core sets of ``path``'s frames are read from (see the module docstring)."""
    if not path.exists():
        raise AtlasError(f"{path}: no such file or folder")
    if path.is_dir():
        if (path / "lu").is_dir() and not any(_is_lu(f.name) for f in path.glob("lu*.xml")):
            raise AtlasError(f"{path}: a FrameNet release's folder; name its lu/ folder ({path / 'lu'})")
        return _folder_frames(path.parent / "frame", path)
    if path.name.endswith(ARCHIVES):
        return _archive_frames(path)
    return _folder_frames(path.parent.parent / "frame", path)


def _written(tokens: list[tuple[str, int, int]]) -> tuple[str, list[tuple[int, int]]]:
    """The sentence text from its first token to its last, and each token's characters in it."""
    start = tokens[0][1] if tokens else 0
    text = ""
    for form, first, _ in tokens:
        text += " " * (first - start - len(text)) + form
    return text, [(first - start, last + 1 - start) for _, first, last in tokens]


def read_framenet(path: Path, dropped: Counter[str] | None = None) -> Iterator[Sentence]:
    """The exemplar sentences that pass the filters, as sentences carrying their frame elements; ``dropped``
    counts the others by the reason of the first filter that drops them."""
    frames = frames_for(path)
    index = 0
    for source, data in _documents(path):
        root = _parse(data, source)
        if root.tag != f"{NS}lexUnit":
            raise AtlasError(f"{source}: not a FrameNet lexical-unit file (no <lexUnit> root)")
        frame, lu = root.get("frame", ""), root.get("name", "")
        for ex in exemplars(root, source, frames.core(frame, source)):
            reason = rejection(ex)
            if reason is not None:
                if dropped is not None:
                    dropped[reason] += 1
                continue
            target = target_word(ex)
            assert target is not None  # rejection() refuses a target that is not one whole token
            words = [
                Word(i + 1, t, None, None, None, None, None, None, None, 0) for i, (t, _, _) in enumerate(ex.tokens)
            ]
            elements = [FrameElement(frame, lu, name, core, (target, target), span) for name, span, core in ex.elements]
            text, spans = _written(ex.tokens)
            yield Sentence(index, ex.sent_id, lu, 0, words, frames=elements, text=text, spans=spans)
            index += 1


class FrameNet(FileReader):
    """``--format framenet``: FrameNet 1.5's exemplar sentences, one per input, after Kovaleva et al.'s filters."""

    name = "framenet"
    help = (
        "FrameNet 1.5 lexical-unit exemplars (lu/*.xml, their folder or .tar.gz; the release's frame/ folder beside "
        "lu/ gives each frame's core set), Kovaleva et al.'s filters"
    )
    takes_folder = True

    def pack(self, pack: str | None, options: CorpusOptions) -> str:
        if pack not in (None, "none"):
            raise AtlasError(f"{arg('pack')}: FrameNet sentences are read one per input; leave {arg('pack')} out")
        return "none"

    def check(self, info: CorpusInfo) -> CorpusInfo:
        counts: Counter[str] = Counter()
        n = sum(1 for _ in read_framenet(info.path, counts))
        dropped = tuple((reason, counts[reason]) for reason in REASONS if counts[reason])
        if n == 0:
            kept = f" that passes Kovaleva et al.'s filters ({dropped_text(dropped)})" if dropped else ""
            raise AtlasError(f"{info.path}: the corpus holds no exemplar sentence{kept}")
        return replace(self.with_sha256(info), n_sentences=n, dropped=dropped)

    def sentences(self, info: CorpusInfo, reading: Reading) -> Iterator[Sentence]:
        return read_framenet(info.path)

    def summary(
        self, info: CorpusInfo, text: str, n_examples: int, count_examples: Callable[[str], int]
    ) -> dict[str, object]:
        return {"dropped": info.dropped}
