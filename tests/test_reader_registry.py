"""A corpus format is one module and one line: a reader defined in this file and registered here ingests through
the API and answers a catalogue entry, with no other file changed; and what the registry says of formats comes
from the readers themselves."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import atlas
from atlas.errors import AtlasError
from atlas.ingestion.readers import READERS, check_options, format_help, reader, register
from atlas.ingestion.readers.base import CorpusOptions, FileReader, Reader, Reading
from atlas.ingestion.readers.conllu import Sentence, Word
from atlas.ingestion.readers.corpus_info import CorpusInfo


class WordPerLine(FileReader):
    """A tiny format: one word per line, a blank line between sentences (no annotation)."""

    name = "word-per-line"
    help = "one word per line, a blank line between sentences"

    def sentences(self, info: CorpusInfo, reading: Reading) -> Iterator[Sentence]:
        words: list[Word] = []
        index = 0
        for number, line in enumerate([*info.path.read_text().splitlines(), ""], start=1):
            if line.strip():
                words.append(Word(len(words) + 1, line.strip(), None, None, None, None, None, None, None, number))
            elif words:
                yield Sentence(index, str(index + 1), None, words[0].line, words)
                index, words = index + 1, []


@pytest.fixture
def registered() -> Iterator[Reader]:
    added = register(WordPerLine())  # the one line that adds a format
    yield added
    del READERS[added.name]


def test_a_reader_registered_in_one_line_ingests_and_answers(tmp_path: Path, registered: Reader) -> None:
    corpus = tmp_path / "tiny.txt"
    corpus.write_text("The\ncat\nsat\n.\n\nA\ndog\nbarked\nloudly\n.\n")
    done = atlas.ingest(corpus, store=tmp_path / "store", format=registered.name, progress=False)
    assert done.n_examples == 2 and not done.already_present
    assert done.run_id.startswith("tiny__all-MiniLM-L6-v2__")
    with atlas.open(tmp_path / "store") as st:
        assert st.sql("SELECT corpus, n_sentences FROM runs").rows() == [("tiny.txt", 2)]
        answer = st.answer("relative position")
        words = st.sql("SELECT form FROM words ORDER BY example_id, word_idx")["form"].to_list()
    assert words == ["The", "cat", "sat", ".", "A", "dog", "barked", "loudly", "."]
    assert answer.frame.height == 6 * 12  # every head of the embedded model's 6 layers of 12
    # the same ingest again is found without reading the corpus or loading the model
    assert atlas.ingest(corpus, store=tmp_path / "store", format=registered.name, progress=False).already_present


def test_an_unknown_format_is_refused_naming_every_registered_one(registered: Reader) -> None:
    every = r"one of conllu, glue, framenet, text, lines, repeated, needle, word-per-line"
    with pytest.raises(AtlasError, match=every):
        reader("conll")
    assert format_help().endswith("; word-per-line: one word per line, a blank line between sentences.")


def test_an_option_of_another_format_is_refused_in_its_readers_words() -> None:
    with pytest.raises(AtlasError) as refused:
        check_options(reader("conllu"), CorpusOptions(sample_seed=3))
    said = str(refused.value)
    assert "seeds the draw of" in said and "'text'" in said and "'repeated'" in said and "a conllu corpus" in said
    with pytest.raises(AtlasError, match="names the GLUE task"):
        check_options(reader("text"), CorpusOptions(task="MRPC"))
    check_options(reader("glue"), CorpusOptions(task="MRPC"))  # its own option: taken
