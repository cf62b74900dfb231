"""The corpus readers, one module per ``--format`` (each implementing ``base.Reader``), and their registry: the
one place a format is found by its name. Adding a format is a module and one ``register`` line here (or in the
code that uses it: a test registers a reader of its own the same way).

Light to import: a finished run is found by its reader's run-id parts without loading transformers or a model.
"""

from __future__ import annotations

from pathlib import Path

from atlas.errors import AtlasError, arg, said_as_format
from atlas.ingestion.readers.base import CorpusOptions, Reader
from atlas.ingestion.readers.conllu import Conllu
from atlas.ingestion.readers.framenet import FrameNet
from atlas.ingestion.readers.glue import Glue
from atlas.ingestion.readers.lines import Lines
from atlas.ingestion.readers.needle import Needle
from atlas.ingestion.readers.repeated import RepeatedTokens
from atlas.ingestion.readers.text import Text

READERS: dict[str, Reader] = {}  # --format -> its reader, in the order the help lists them
DEFAULT = "conllu"  # --format when none is given


def register(reader: Reader) -> Reader:
    """Make ``reader`` the one of its ``--format`` (``reader.name``)."""
    READERS[reader.name] = reader
    said_as_format(reader.name)
    return reader


register(Conllu())
register(Glue())
register(FrameNet())
register(Text())
register(Lines())
register(RepeatedTokens())
register(Needle())


def names() -> tuple[str, ...]:
    """The formats, as ``--format`` takes them."""
    return tuple(READERS)


def reader(name: str) -> Reader:
    """The reader of ``--format name``; refused in one line when there is none."""
    try:
        return READERS[name]
    except KeyError:
        raise AtlasError(f"{arg('format', repr(name))}: expected one of {', '.join(READERS)}") from None


def format_help() -> str:
    """The ``--format`` help: each reader's own words."""
    return "; ".join(f"{r.name}: {r.help}" for r in READERS.values() if r.help) + "."


def _formats(readers: list[Reader]) -> str:
    said = [arg("format", repr(r.name)) for r in readers]
    return " and ".join(said) if len(said) < 3 else ", ".join(said[:-1]) + " and " + said[-1]


def check_options(chosen: Reader, options: CorpusOptions) -> None:
    """Refuse a corpus option that ``chosen`` does not take, in the words of the readers that take it."""
    for option in options.given():
        if option in chosen.options:
            continue
        owners = [r for r in READERS.values() if option in r.options]
        template = owners[0].options[option] if owners else "{option}: no format takes it; leave {option} out"
        raise AtlasError(template.format(option=arg(option), formats=_formats(owners), given=chosen.name))


def corpus_path(chosen: Reader, corpus: Path | None, options: CorpusOptions) -> Path:
    """The corpus ``chosen`` reads (a drawn corpus: its name), checked for what no reading can take."""
    if corpus is None and chosen.takes_file:
        drawn = [r for r in READERS.values() if not r.takes_file]
        reads = f"only {_formats(drawn)} {'reads' if len(drawn) == 1 else 'read'} none"
        raise AtlasError(f"{arg('corpus')}: name the corpus file ({reads})")
    return chosen.corpus_path(corpus, options)


def drawn_seed_note(chosen: Reader) -> str:
    """Where a corpus is drawn with ``--sample-seed``: that the model's seed is not the draw's."""
    if chosen.takes_file or "sample_seed" not in chosen.options:
        return ""
    return f" (the tokens of {_formats([chosen])} are drawn with {arg('sample_seed')})"
