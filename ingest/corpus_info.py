"""What identifies a corpus in a run: its file, the sha256 of its bytes and how it is read (light to import:
a finished ingest is found by it without loading a reader or a model)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CorpusInfo:
    path: Path
    sha256: str
    n_sentences: int
    fmt: str = "conllu"  # conllu | glue | framenet | text
    task: str | None = None  # the GLUE task of a glue file
    sample: int | None = None  # text: the number of paragraph pairs drawn (None: every pair)
    sample_seed: int = 0  # text: seed of the draw and of the truncation

    @property
    def name(self) -> str:
        """The corpus as runs.corpus shows it: the file name, with the task for GLUE files (SST-2/dev.tsv)
        and the draw for a sampled text file (wiki.test.raw (sample 1000, seed 0))."""
        if self.fmt == "text" and self.sample is not None:
            return f"{self.path.name} (sample {self.sample}, seed {self.sample_seed})"
        return f"{self.task}/{self.path.name}" if self.fmt == "glue" else self.path.name


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
