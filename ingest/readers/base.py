"""What a corpus reader is: the ``Reader`` protocol every ``--format`` implements, and ``FileReader``, the
defaults of a reader of one corpus file (light to import: a finished run is found by a reader's run-id parts
without loading transformers or a model).

A reader says which corpus options it takes (``CorpusOptions``: a GLUE task, a text file's sample, a drawn
corpus's length and count), which packings its inputs allow, how its corpus is named in ``runs.corpus`` and in
a run id, and reads its sentences; the registry (``atlas.ingestion.readers``) holds one of each format, and
nothing else in the atlas compares a format's name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol

from atlas.errors import AtlasError, arg
from atlas.ingestion.readers.corpus_info import CorpusInfo, check_file, sha256_of

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from atlas.ingestion.align import AlignedSentence
    from atlas.ingestion.readers.conllu import Sentence

# what is said where --sample-seed is given to a format that reads its corpus whole (the readers that draw say it)
DRAW_SEED = "{option}: seeds the draw of {formats}; a {given} corpus is read whole, in order: leave {option} out"


@dataclass(frozen=True)
class CorpusOptions:
    """The ingest's options about the corpus, as given (None: not given)."""

    task: str | None = None  # a GLUE file's task
    sample: int | None = None  # a text file's paragraph pairs drawn at random
    sample_seed: int | None = None  # the seed of a draw
    length: int | None = None  # a drawn corpus's tokens per sequence
    count: int | None = None  # a drawn corpus's sequences
    haystack: str | None = None  # a needle probe's haystack file, or 'random'
    lengths: tuple[int, ...] | None = None  # a needle probe's context lengths
    depths: tuple[int, ...] | None = None  # a needle probe's depths, in percent
    needle: str | None = None  # a needle probe's needle
    question: str | None = None  # and its question

    def given(self) -> list[str]:
        """The options given, in the order of the fields."""
        return [f.name for f in fields(self) if getattr(self, f.name) is not None]


@dataclass(frozen=True)
class Reading:
    """What a corpus is read with where its reader cuts inputs to the model's pieces (a text file's pairs): the
    model's tokenizer, the longest input in pieces, and what the model reads of a sentence (``--text``, see
    ``atlas.ingestion.align``); the other readers read the corpus alike whatever these are."""

    tokenizer: PreTrainedTokenizerBase | None = None
    max_length: int | None = None
    text: str = "written"


class Reader(Protocol):
    """One ``--format``: a kind of corpus and how the ingest reads it."""

    name: str  # --format
    help: str  # the --format help's words for it
    takes_file: bool  # False: a corpus drawn from the model's vocabulary, named by its options (no --corpus)
    has_text: bool  # its sentences have a text the model reads (--text applies); False: pieces as drawn
    whole: bool  # an input holds whole examples (a pair longer than --max-length is skipped, never split)
    generates: bool  # its inputs end with the model's own continuation (``pieces`` is given ``continue_with``)
    # the options it takes -> what is said where another format is given one: a template of {option} (the option),
    # {formats} (the formats that take it) and {given} (the format given)
    options: Mapping[str, str]

    def corpus_path(self, corpus: Path | None, options: CorpusOptions) -> Path:
        """The corpus file, checked for what no reading can take (a pipe, a compressed file); for a drawn corpus
        (``corpus`` None), its name."""
        ...

    def pack(self, pack: str | None, options: CorpusOptions) -> str:
        """The packing its inputs are read with, ``pack`` as given (None: not given); refused where it cannot be."""
        ...

    def info(self, path: Path, options: CorpusOptions) -> CorpusInfo:
        """The corpus as a run id takes it, without reading it (no sha256 yet: ``with_sha256``)."""
        ...

    def with_sha256(self, info: CorpusInfo) -> CorpusInfo:
        """``info`` with the sha256 of what it reads."""
        ...

    def check(self, info: CorpusInfo) -> CorpusInfo:
        """Read the whole corpus once, refusing a bad line before anything is written; ``info`` with its sha256
        and its number of sentences."""
        ...

    def changed(self, info: CorpusInfo) -> bool:
        """The corpus no longer holds what was checked."""
        ...

    def corpus_name(self, info: CorpusInfo) -> str:
        """The corpus as ``runs.corpus`` shows it."""
        ...

    def run_key(self, info: CorpusInfo) -> list[object]:
        """What a run id hashes of the corpus besides its sha256 (empty for CoNLL-U: the ids of the first runs)."""
        ...

    def run_stem(self, info: CorpusInfo) -> str:
        """The start of a run id: the corpus, readable."""
        ...

    def sentences(self, info: CorpusInfo, reading: Reading) -> Iterator[Sentence]:
        """The corpus's sentences in order."""
        ...

    def pieces(
        self,
        info: CorpusInfo,
        tokenizer: PreTrainedTokenizerBase,
        max_length: int,
        continue_with: Callable[[list[int], int, frozenset[int]], list[int]] | None = None,
    ) -> Iterator[AlignedSentence]:
        """A reader without text (``has_text`` False): its inputs as the tokenizer's pieces, in corpus order;
        ``continue_with`` (a reader that ``generates``): the model's greedy continuation of pieces, at most so many
        new tokens, stopping after one of the stop ids."""
        ...

    def check_fits(
        self, info: CorpusInfo, tokenizer: PreTrainedTokenizerBase, max_length: int, model_limit: str
    ) -> None:
        """Refuse, before the staging, inputs that cannot fit ``max_length`` (``model_limit``: the model's name
        where ``max_length`` is its own longest input)."""
        ...

    def summary(
        self, info: CorpusInfo, text: str, n_examples: int, count_examples: Callable[[str], int]
    ) -> dict[str, object]:
        """What the ingest says of the corpus once its run is written, beside its counts (``atlas.Ingested``'s
        fields; ``n_examples``: the run's inputs; ``count_examples(condition)``: how many of the run's examples
        the SQL ``condition`` holds for)."""
        ...


class FileReader:
    """A reader of one corpus file with no options of its own, one sentence per line group, read whole: CoNLL-U's
    defaults, which the other readers override where they differ."""

    name: ClassVar[str]
    help: ClassVar[str]
    takes_file: ClassVar[bool] = True
    has_text: ClassVar[bool] = True
    whole: ClassVar[bool] = False
    generates: ClassVar[bool] = False
    takes_folder: ClassVar[bool] = False  # the corpus may be a folder (FrameNet's lu/)
    options: ClassVar[Mapping[str, str]] = {}

    @property
    def given(self) -> str:
        """``--format NAME`` in a message."""
        return arg("format", repr(self.name))

    def corpus_path(self, corpus: Path | None, options: CorpusOptions) -> Path:
        assert corpus is not None  # the registry refuses a file reader without one
        check_file(corpus, self.takes_folder)
        return corpus

    def pack(self, pack: str | None, options: CorpusOptions) -> str:
        return pack or "none"

    def info(self, path: Path, options: CorpusOptions) -> CorpusInfo:
        info = CorpusInfo(path, "", 0, self.name, options.task)
        return replace(info, label=self.corpus_name(info))

    def with_sha256(self, info: CorpusInfo) -> CorpusInfo:
        return replace(info, sha256=sha256_of(info.path))

    def check(self, info: CorpusInfo) -> CorpusInfo:
        n = sum(1 for _ in self.sentences(info, Reading()))
        if n == 0:
            raise AtlasError(f"{info.path}: the corpus holds no sentence")
        return replace(self.with_sha256(info), n_sentences=n)

    def changed(self, info: CorpusInfo) -> bool:
        return sha256_of(info.path) != info.sha256

    def corpus_name(self, info: CorpusInfo) -> str:
        return info.path.name

    def run_key(self, info: CorpusInfo) -> list[object]:
        return [self.name, info.task]

    def run_stem(self, info: CorpusInfo) -> str:
        return info.path.stem

    def sentences(self, info: CorpusInfo, reading: Reading) -> Iterator[Sentence]:
        raise NotImplementedError

    def pieces(
        self,
        info: CorpusInfo,
        tokenizer: PreTrainedTokenizerBase,
        max_length: int,
        continue_with: Callable[[list[int], int, frozenset[int]], list[int]] | None = None,
    ) -> Iterator[AlignedSentence]:
        raise ValueError(f"a {self.name} corpus has text: its sentences are aligned to the pieces")

    def check_fits(
        self, info: CorpusInfo, tokenizer: PreTrainedTokenizerBase, max_length: int, model_limit: str
    ) -> None:
        return None

    def summary(
        self, info: CorpusInfo, text: str, n_examples: int, count_examples: Callable[[str], int]
    ) -> dict[str, object]:
        return {}
