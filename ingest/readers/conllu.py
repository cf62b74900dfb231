"""Stage 1: read a CoNLL-U (UD v2) file into sentences, words and CorefUD coreference mentions.

Streams sentence by sentence. The analyses work on the syntactic words: empty nodes (``8.1``) are skipped,
and a multiword token (``3-4 don't``) gives its words (``do``, ``n't``), not a word of its own. Every malformed
line raises ``AtlasError`` naming ``file:line``: among them HEADs that make words head each other in a cycle,
and a multiword token's range that is not the words after it.

Each sentence also carries its text as written and each word's characters in it (``Sentence.text``,
``Sentence.spans``), what a model reads by default (``atlas.ingestion.align``):
- the sentence's ``# text`` comment, when its words are found in it in order, separated by nothing but
  whitespace (a multiword token by its surface form: ``don't``, not ``do n't``); otherwise, and for a
  sentence without ``# text``, its surface tokens joined by single spaces, none after a token whose MISC
  says ``SpaceAfter=No`` (on a multiword token, its range line's). A sentence whose ``# text`` is not found
  so is marked (``Sentence.text_unmatched``; ``unmatched_texts`` counts them).
- the words of a multiword token lie on its surface form: each on its own characters where their forms
  concatenate to it (``do`` + ``n't`` = ``don't``, ``can`` + ``not`` = ``cannot``); otherwise (``del`` = ``de``
  + ``el``) the first word holds the whole surface form and the others no character.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from atlas.errors import AtlasError
from atlas.ingestion.readers.base import FileReader, Reading
from atlas.ingestion.readers.corpus_info import CorpusInfo

_ENTITY_ITEM = re.compile(r"\(([^()]+)\)|\(([^()]+)|([^()]+)\)")
_DISCONTINUOUS = re.compile(r"\[\d+/\d+\]$")
_RANGE = re.compile(r"(\d+)-(\d+)")


class Word(NamedTuple):
    """One syntactic word (a named tuple: made in a quarter of the time of a frozen dataclass, once per corpus
    word)."""

    id: int  # CoNLL-U ID, 1-based within the sentence
    form: str
    lemma: str | None
    upos: str | None
    xpos: str | None
    feats: str | None
    head: int | None  # 0 = root, None = no syntactic annotation
    deprel: str | None
    misc: str | None
    line: int  # line of the corpus file


@dataclass(frozen=True, slots=True)
class Mention:
    """A coreference mention; positions are (sentence number in the corpus, word id)."""

    entity_id: str
    start: tuple[int, int]
    end: tuple[int, int]


@dataclass(frozen=True)
class NeedleFacts:
    """A needle-in-a-haystack input (``--format needle``): its context length and depth (percent), the answer's
    span [needle_start, needle_end) among its pieces (None: not found), where the model's continuation starts and
    how long it is, and the continuation's ROUGE-1 recall of the answer (times 100)."""

    length: int
    depth: int
    needle_start: int | None
    needle_end: int | None
    generated_start: int
    n_generated: int
    recall: float


@dataclass
class Sentence:
    index: int  # 0-based position in the corpus
    sent_id: str
    doc_id: str | None
    line: int  # line of the first word
    words: list[Word] = field(default_factory=list)
    mentions: list[Mention] = field(default_factory=list)  # mentions that end in this sentence
    label: str | None = None  # the task label of a task example (GLUE), None for a treebank
    frames: list = field(default_factory=list)  # FrameNet frame elements (its reader's FrameElement)
    text: str | None = None  # the sentence as written (None: known only as its words)
    spans: list[tuple[int, int]] | None = None  # each word's characters in text, [start, end); (k, k): none
    text_unmatched: bool = False  # CoNLL-U: its '# text' does not hold its words; text is their joined forms
    needle: NeedleFacts | None = None  # a needle probe's input (--format needle)


class _Entities:
    """Tracks open CorefUD ``Entity=`` brackets across the words of one document."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.open: dict[str, list[tuple[tuple[int, int], int]]] = {}

    def feed(self, value: str, pos: tuple[int, int], lineno: int) -> list[Mention]:
        done: list[Mention] = []
        at = 0
        for match in _ENTITY_ITEM.finditer(value):
            if match.start() != at:
                break
            at = match.end()
            single, opening, closing = match.groups()
            if single is not None:
                if (eid := self._counted(single.partition("-")[0])) is not None:
                    done.append(Mention(eid, pos, pos))
            elif opening is not None:
                self.open.setdefault(opening.partition("-")[0], []).append((pos, lineno))
            else:
                key = closing.partition("-")[0]
                starts = self.open.get(key)
                if not starts:
                    raise AtlasError(f"{self.path}:{lineno}: Entity bracket closes '{key}', which is not open")
                start, _ = starts.pop()
                if (eid := self._counted(key)) is not None:
                    done.append(Mention(eid, start, pos))
        if at != len(value):
            raise AtlasError(f"{self.path}:{lineno}: malformed Entity value '{value}'")
        return done

    @staticmethod
    def _counted(key: str) -> str | None:
        """The entity id of a bracket's key (its attributes' first, e.g. 'e5[1/2]': with its discontinuous-part
        marker), None for a part after the first: a discontinuous mention ('[k/n]' parts) is kept as its first part
        only, so it counts once."""
        if "[" not in key:  # most: no marker to search for (UD GUM dev's brackets in 0.92 of the time)
            return key
        part = _DISCONTINUOUS.search(key)
        return _DISCONTINUOUS.sub("", key) if part is None or part.group(0).startswith("[1/") else None

    def close_document(self) -> None:
        for eid, starts in self.open.items():
            if starts:
                raise AtlasError(f"{self.path}:{starts[-1][1]}: Entity bracket '({eid}' is never closed")
        self.open = {}


def _parse_word(path: Path, lineno: int, cols: list[str], expected_id: int) -> Word:
    wid, form, lemma, upos, xpos, feats, head_col, deprel, _, misc = cols
    if wid != str(expected_id):
        raise AtlasError(f"{path}:{lineno}: expected word id {expected_id}, found '{wid}'")
    head: int | None
    if head_col == "_":
        head = None
    else:
        try:
            head = int(head_col)
        except ValueError:
            raise AtlasError(f"{path}:{lineno}: HEAD '{head_col}' is not an integer") from None
        if head < 0:
            raise AtlasError(f"{path}:{lineno}: HEAD {head} is negative")
        if head == expected_id:
            raise AtlasError(f"{path}:{lineno}: HEAD {head} is the word itself")
    if not form:
        raise AtlasError(f"{path}:{lineno}: empty FORM")
    return Word(
        expected_id,
        form,
        None if lemma == "_" else lemma,
        None if upos == "_" else upos,
        None if xpos == "_" else xpos,
        None if feats == "_" else feats,
        head,
        None if deprel == "_" else deprel,
        None if misc == "_" else misc,
        lineno,
    )


@dataclass(frozen=True)
class _Range:
    """A multiword token's range line: its words' ids (``first``-``last``), its surface form, its MISC."""

    first: int
    last: int
    form: str
    misc: str | None
    line: int


def _space_after(misc: str | None) -> bool:
    return misc is None or "SpaceAfter=No" not in misc or "SpaceAfter=No" not in misc.split("|")


def _surface(words: list[Word], ranges: list[_Range]) -> list[tuple[str, int, int, bool]]:
    """The sentence's surface tokens: (form, its first and last word (0-based, inclusive), a space after it)."""
    starting = {r.first: r for r in ranges}
    out: list[tuple[str, int, int, bool]] = []
    i = 1
    while i <= len(words):
        r = starting.get(i)
        if r is not None and i <= r.last <= len(words):
            out.append((r.form, i - 1, r.last - 1, _space_after(r.misc) and _space_after(words[r.last - 1].misc)))
            i = r.last + 1
        else:
            out.append((words[i - 1].form, i - 1, i - 1, _space_after(words[i - 1].misc)))
            i += 1
    return out


def _found(forms: list[str], text: str) -> list[int] | None:
    """Where each surface token (of ``forms``) starts in ``text``, when they are all there in order, separated by
    whitespace only; None when they are not."""
    starts: list[int] = []
    at, n = 0, len(text)
    for form in forms:
        while at < n and text[at].isspace():
            at += 1
        if not text.startswith(form, at):
            return None
        starts.append(at)
        at += len(form)
    return starts if not text[at:].strip() else None


def _joined(forms: list[str], spaces: list[bool]) -> tuple[str, list[int]]:
    """Surface tokens joined by single spaces, none after a token without a space after it nor after the last, and
    where each starts."""
    parts: list[str] = []
    starts, at = [], 0
    for n, (form, space) in enumerate(zip(forms, spaces, strict=True)):
        starts.append(at)
        parts.append(form + (" " if space and n + 1 < len(forms) else ""))
        at += len(parts[-1])
    return "".join(parts), starts


def _placed(forms: list[str], surface: str, start: int) -> list[tuple[int, int]]:
    """The characters of a surface token's words: each its own where their forms concatenate to the surface
    form, else the whole token for the first and none for the others."""
    end = start + len(surface)
    if len(forms) == 1:
        return [(start, end)]
    if "".join(forms) != surface:
        return [(start, end)] + [(end, end)] * (len(forms) - 1)
    out, at = [], start
    for form in forms:
        out.append((at, at + len(form)))
        at += len(form)
    return out


def written(words: list[Word], ranges: list[_Range], text: str | None) -> tuple[str, list[tuple[int, int]], bool]:
    """A sentence as written (see the module notes), each word's characters in it, and whether a ``# text``
    given does not hold the words."""
    # a sentence without multiword tokens (most) is its words, each a surface token of its own on its characters,
    # the spaces after them read only where no '# text' holds them: made surface tokens first, as a sentence with
    # multiword tokens is, UD EWT and GUM dev's sentences took 1.8 times the time
    tokens = _surface(words, ranges) if ranges else None
    forms = [w.form for w in words] if tokens is None else [t[0] for t in tokens]
    starts = None if text is None else _found(forms, text)
    unmatched = text is not None and starts is None
    if starts is None:
        spaces = [_space_after(w.misc) for w in words] if tokens is None else [t[3] for t in tokens]
        text, starts = _joined(forms, spaces)
    if tokens is None:
        return text, [(start, start + len(form)) for form, start in zip(forms, starts, strict=True)], unmatched
    spans: list[tuple[int, int]] = []
    for (form, first, last, _), start in zip(tokens, starts, strict=True):
        spans.extend(_placed([w.form for w in words[first : last + 1]], form, start))
    return text, spans, unmatched


def _check_heads(path: Path, sentence: Sentence, lines: list[int], ranges: list[_Range]) -> None:
    """Every HEAD a word of the sentence, and no words heading each other in a cycle that never reaches the root
    (a word without a HEAD ends a walk as the root does); every multiword token's words in the sentence."""
    n = len(sentence.words)
    for r in ranges:
        if r.last > n:
            raise AtlasError(f"{path}:{r.line}: multiword-token range {r.first}-{r.last} is out of range "
                             f"(sentence has {n} words)")  # fmt: skip
    heads = [None, *[word.head for word in sentence.words]]  # by word id
    up = [h or 0 for h in heads]  # each word's head, the root's for none (0: the root)
    if max(up) > n:
        for word, lineno in zip(sentence.words, lines, strict=True):
            if word.head is not None and word.head > n:
                raise AtlasError(f"{path}:{lineno}: HEAD {word.head} is out of range (sentence has {n} words)")
    # no cycle where every word's 2^k-th head is the root, k up to log2(n) + 1: the walks below, which find the
    # cycle to report, took 1.4 to 1.6 times the time of this (UD EWT and GUM dev)
    for _ in range(len(up).bit_length() + 1):
        if not any(up):
            return
        up = [up[h] for h in up]
    done = [False] * (n + 1)
    for start in range(1, n + 1):
        walk: dict[int, None] = {}  # the words walked from start, in order
        at: int | None = start
        while at and not done[at] and at not in walk:
            walk[at] = None
            at = heads[at]
        if at and at in walk:
            walk_list = list(walk)
            cycle = walk_list[walk_list.index(at) :]
            raise AtlasError(
                f"{path}:{lines[at - 1]}: HEAD {heads[at]}: words {', '.join(map(str, sorted(cycle)))} head each "
                "other in a cycle that never reaches the root (HEAD 0)"
            )
        for visited in walk:
            done[visited] = True


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """Numbered lines, decoded one by one so that bad UTF-8 is reported with its line."""
    with path.open("rb") as handle:
        for lineno, raw in enumerate(handle, start=1):
            try:
                yield lineno, raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError:
                raise AtlasError(f"{path}:{lineno}: not valid UTF-8") from None


def read_conllu(path: Path) -> Iterator[Sentence]:
    """Yield the sentences of a CoNLL-U file in order."""
    if not path.is_file():
        raise AtlasError(f"{path}: no such file")
    entities = _Entities(path)
    doc_id: str | None = None
    sent_id: str | None = None
    sentence: Sentence | None = None
    word_lines: list[int] = []
    text: str | None = None  # the sentence's '# text'
    ranges: list[_Range] = []  # its multiword tokens
    index = 0

    def finish() -> Sentence | None:
        nonlocal sentence, sent_id, text, index
        done = sentence
        if done is None and ranges:  # a multiword token, and no words
            r = ranges[0]
            raise AtlasError(f"{path}:{r.line}: multiword-token range {r.first}-{r.last} is out of range "
                             "(sentence has 0 words)")  # fmt: skip
        if done is not None:
            _check_heads(path, done, word_lines, ranges)
            done.text, done.spans, done.text_unmatched = written(done.words, ranges, text)
            index += 1
        sentence, sent_id, text = None, None, None
        word_lines.clear()
        ranges.clear()
        return done

    for lineno, raw in _lines(path):
        line = raw.rstrip("\r\n")
        if "\0" in line:
            raise AtlasError(f"{path}:{lineno}: a NUL byte, expected text")
        if not line or line.isspace():
            if (done := finish()) is not None:
                yield done
            continue
        if line.startswith("#"):
            key, _, value = line[1:].partition("=")
            key, value = key.strip(), value.strip()
            if key == "newdoc id" or (key.startswith("newdoc") and not value):
                if sentence is not None:
                    raise AtlasError(f"{path}:{lineno}: comment inside a sentence")
                entities.close_document()
                doc_id = value or f"doc-line-{lineno}"
            elif key == "sent_id":
                sent_id = value
            elif key == "text":
                text = value
            continue
        cols = line.split("\t")
        if len(cols) != 10:
            raise AtlasError(f"{path}:{lineno}: expected 10 tab-separated columns, found {len(cols)}")
        if "-" in cols[0]:  # multiword-token range: its words follow
            match = _RANGE.fullmatch(cols[0])
            if match is None:
                raise AtlasError(f"{path}:{lineno}: malformed multiword-token range '{cols[0]}'")
            first, last, expected = int(match[1]), int(match[2]), (len(sentence.words) if sentence else 0) + 1
            if first != expected or last <= first:
                raise AtlasError(
                    f"{path}:{lineno}: multiword-token range '{cols[0]}' must span the words that follow it, "
                    f"from {expected} to a later one"
                )
            ranges.append(_Range(first, last, cols[1], None if cols[9] == "_" else cols[9], lineno))
            continue
        if sentence is None:
            sentence = Sentence(index, sent_id or f"s{index + 1}", doc_id, lineno)
        if "." in cols[0]:  # empty node: not a word, but its coreference brackets count (at the word before)
            at = max(len(sentence.words), 1)
        else:
            word = _parse_word(path, lineno, cols, len(sentence.words) + 1)
            sentence.words.append(word)
            word_lines.append(lineno)
            at = word.id
        if "Entity=" in cols[9]:
            for item in cols[9].split("|"):
                if item.startswith("Entity="):
                    sentence.mentions.extend(entities.feed(item[len("Entity=") :], (index, at), lineno))
    if (done := finish()) is not None:
        yield done
    entities.close_document()


def unmatched_texts(path: Path) -> list[str]:
    """The sent_ids of the sentences whose ``# text`` does not hold their words (read as their joined forms)."""
    return [s.sent_id for s in read_conllu(path) if s.text_unmatched]


def write_first_sentences(src: Path, n_sentences: int, dst: Path) -> Path:
    """Copy the first n sentences of a CoNLL-U file (comments kept, lines unchanged) to ``dst``."""
    out, seen = [], 0
    for line in src.read_text(encoding="utf-8").splitlines(keepends=True):
        out.append(line)
        if not line.strip():
            seen += 1
            if seen == n_sentences:
                break
    dst.write_text("".join(out), encoding="utf-8")
    return dst


class Conllu(FileReader):
    """``--format conllu`` (the default): a CoNLL-U file, its sentences one per input unless packed."""

    name = "conllu"
    help = ""

    def run_key(self, info: CorpusInfo) -> list[object]:
        return []  # the first runs' ids: a CoNLL-U corpus is its bytes alone

    def sentences(self, info: CorpusInfo, reading: Reading) -> Iterator[Sentence]:
        return read_conllu(info.path)

    def summary(
        self, info: CorpusInfo, text: str, n_examples: int, count_examples: Callable[[str], int]
    ) -> dict[str, object]:
        return {"n_text_unmatched": len(unmatched_texts(info.path))} if text == "written" else {}
