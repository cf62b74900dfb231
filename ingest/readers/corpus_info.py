"""What identifies a corpus in a run: its file, the sha256 of its bytes and how it is read (light to import:
a finished ingest is found by it without loading a reader or a model)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from atlas.errors import AtlasError, arg


@dataclass(frozen=True)
class CorpusInfo:
    path: Path  # the corpus file (a drawn corpus: its name)
    sha256: str
    n_sentences: int
    fmt: str = "conllu"  # the reader's name (--format; see atlas.ingestion.readers)
    task: str | None = None  # the GLUE task of a glue file
    sample: int | None = None  # text: the number of paragraph pairs drawn (None: every pair)
    sample_seed: int = 0  # text: seed of the draw and of the truncation
    # framenet: the exemplar sentences Kovaleva et al.'s filters drop, by reason (``REASONS`` of its reader)
    dropped: tuple[tuple[str, int], ...] = field(default=(), compare=False)
    label: str = field(default="", compare=False)  # runs.corpus, as the reader names it (empty: the file's name)
    probe: str = ""  # needle: the probe's settings, as JSON (atlas.ingestion.readers.needle.Probe)

    @property
    def name(self) -> str:
        """The corpus as runs.corpus shows it: the file name, or the reader's name for it (SST-2/dev.tsv,
        wiki.test.raw (sample 1000, seed 0))."""
        return self.label or self.path.name


def dropped_text(dropped: tuple[tuple[str, int], ...]) -> str:
    """FrameNet's dropped sentences as the ingest says them: '3 dropped: 2 more than 12 tokens, 1 target ...'."""
    n = sum(count for _, count in dropped)
    return f"{n:,} dropped" + (": " + ", ".join(f"{count:,} {reason}" for reason, count in dropped) if n else "")


def sha256_of(path: Path) -> str:
    """Of the file's bytes; of a folder (FrameNet lu/), of its file names and bytes in order."""
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]:
        if path.is_dir():
            digest.update(str(file.relative_to(path)).encode())
        with file.open("rb") as handle:
            while block := handle.read(1 << 20):
                digest.update(block)
    return digest.hexdigest()


def check_file(path: Path, folder: bool = False) -> None:
    """Refuse a corpus path that no reader reads (before the model is loaded): a pipe (the corpus is read more
    than once), a folder (where the reader reads none: ``folder``), a gzip-compressed file."""
    if path.exists() and not path.is_file() and not path.is_dir():  # <(zcat ...), a FIFO: it reads once
        raise AtlasError(f"{path}: not a regular file (a pipe?); the corpus is read more than once: write it to a file")
    given = arg("corpus", repr(str(path)))
    if path.is_dir() and not folder:
        raise AtlasError(f"{given}: is a folder; name the corpus file")
    if path.is_file() and not folder:
        with path.open("rb") as handle:
            if handle.read(2) == b"\x1f\x8b":
                raise AtlasError(f"{given}: is gzip-compressed; decompress it first (gunzip -k)")
