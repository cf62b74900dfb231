"""Property test of every reader: a malformed or unusual file (a valid one mutated at random: bytes and
lines deleted, repeated or inserted, invalid UTF-8, stray tabs, brackets and quotes) is either read
cleanly or refused with one line naming the file (and the line, where the reader gives one; a pattern-label
CSV always names it, and its lines before that one read cleanly), never a traceback; and an ingest that fails
leaves the store byte-identical.

Hypothesis runs derandomized (the same cases on every run), a few hundred cases per reader.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from atlas.errors import AtlasError
from atlas.ingestion.corpus import check_corpus
from atlas.ingestion.pipeline import Settings, ingest
from atlas.pattern_cnn import read_labels
from atlas.store import Store
from tests.conftest import EWT_SAMPLE, ROOT, cut_conllu

INSERTS = [
    b"\t", b"\n", b"\r\n", b" ", b"#", b"=", b"_", b"-", b"0", b"1", b"12", b"-3", b"(", b")", b"|", b",", b'"',
    b"'", b"<", b">", b"&", b"/", b"\xff", b"\xc3", b"\x00", "é".encode(), "\ufeff".encode(), "漢".encode(),
    b"Entity=(e1", b"e1)", b"# sent_id = x", b"\n\n", b"<sentence>", b"</text>", b'start="3"', b"NaN", b"1e9",
]  # fmt: skip


FRAMENET = ROOT / "samples" / "framenet"
FRAMENET_LU, FRAMENET_FRAME = FRAMENET / "lu" / "lu9017.xml", FRAMENET / "frame" / "Stinginess.xml"


def _labels_base() -> bytes:
    patterns = ["Vertical", "Diagonal", "Vertical+Diagonal", "Block", "Heterogeneous"]
    rows = [f"{i % 4},{1 + i % 6},{1 + i % 12},{patterns[i % 5]}" for i in range(12)]
    return ("example_id,layer,head,pattern\n" + "\n".join(rows) + "\n").encode()


def _lines(path: Path, first: int, last: int) -> bytes:
    return b"".join(path.read_bytes().splitlines(keepends=True)[first:last])


@st.composite
def mutated(draw: st.DrawFn, base: bytes) -> bytes:
    """``base`` with up to five random edits, or (rarely) bytes of its own alphabet in random order."""
    if draw(st.integers(0, 19)) == 0:
        return draw(st.binary(max_size=200))
    data = bytearray(base)
    for _ in range(draw(st.integers(1, 5))):
        op = draw(st.sampled_from(["insert", "delete", "replace", "truncate", "repeat_line", "drop_line"]))
        at = draw(st.integers(0, len(data)))
        if op == "insert":
            data[at:at] = draw(st.sampled_from(INSERTS))
        elif op == "delete":
            del data[at : at + draw(st.integers(1, 8))]
        elif op == "replace" and at < len(data):
            data[at] = draw(st.sampled_from(INSERTS))[0]
        elif op == "truncate":
            del data[at:]
        else:
            lines = bytes(data).splitlines(keepends=True)
            if lines:
                k = draw(st.integers(0, len(lines) - 1))
                lines[k : k + 1] = [lines[k]] * 2 if op == "repeat_line" else []
                data = bytearray(b"".join(lines))
    return bytes(data)


class Reader:
    def __init__(self, name: str, base: bytes, file: str, read: Callable[[Path], object]) -> None:
        self.name, self.base, self.file, self.read = name, base, file, read

    def place(self, folder: Path, data: bytes) -> Path:
        """Write the case where the reader looks for it (FrameNet: lu/ beside a frame/ folder)."""
        path = folder / self.file
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        if self.name == "framenet":
            (folder / "frame").mkdir(exist_ok=True)
            shutil.copy(FRAMENET_FRAME, folder / "frame" / FRAMENET_FRAME.name)
        return path


def _readers(tmp: Path) -> dict[str, Reader]:
    if not (FRAMENET_LU.is_file() and FRAMENET_FRAME.is_file()):
        pytest.skip("the FrameNet samples lu/lu9017.xml and frame/Stinginess.xml are not in this checkout")
    conllu = cut_conllu(EWT_SAMPLE, 3, tmp / "base.conllu").read_bytes()
    return {
        "conllu": Reader("conllu", conllu, "c.conllu", lambda p: check_corpus(p, "conllu")),
        "glue": Reader(
            "glue",
            _lines(ROOT / "samples/glue/MRPC/dev.tsv", 0, 4),
            "dev.tsv",
            lambda p: check_corpus(p, "glue", "MRPC"),
        ),
        "framenet": Reader(
            "framenet", FRAMENET_LU.read_bytes(), "lu/lu9017.xml", lambda p: check_corpus(p, "framenet")
        ),
        "text": Reader(
            "text",
            _lines(ROOT / "samples/wikitext/wiki.test-sample.raw", 0, 12),
            "a.raw",
            lambda p: check_corpus(p, "text"),
        ),
        "labels": Reader("labels", _labels_base(), "labels.csv", read_labels),
    }


@pytest.fixture(scope="module")
def readers(tmp_path_factory) -> dict[str, Reader]:
    return _readers(tmp_path_factory.mktemp("bases"))


def assert_one_line_naming(exc: AtlasError, path: Path, data: bytes) -> None:
    message = str(exc)
    assert message and "\n" not in message and "Traceback" not in message, message
    assert str(path) in message or path.name in message, message
    lines = len(re.split(rb"\r\n|\r|\n", data))  # as an XML parser counts them: a lone CR ends a line too
    for line in re.findall(re.escape(str(path)) + r":(\d+):", message):
        assert 1 <= int(line) <= lines, message


def assert_first_bad_line(exc: AtlasError, path: Path, data: bytes) -> None:
    """A labels file is refused at a line (``path:LINE: ...``), and its lines before that one read cleanly."""
    named = re.match(re.escape(str(path)) + r":(\d+): ", str(exc))
    assert named, str(exc)
    before = path.with_name(f"before-{path.name}")
    before.write_bytes(b"\n".join(data.split(b"\n")[: int(named.group(1)) - 1]))
    if int(named.group(1)) > 1:
        read_labels(before)


KNOWN: dict[str, list[Callable[[bytes], bytes]]] = {
    "framenet": [lambda base: base.replace(b'encoding="UTF-8"', b'encoding="TF-8"', 1)],  # LookupError once
}

CASES = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)


@pytest.mark.parametrize("name", ["conllu", "glue", "framenet", "text", "labels"])
def test_a_reader_reads_cleanly_or_names_the_file_and_line(readers, tmp_path_factory, name):
    reader = readers[name]
    folder = tmp_path_factory.mktemp(name)
    reader.read(reader.place(folder, reader.base))  # the unmutated base is read cleanly
    for data in KNOWN.get(name, ()):  # cases found by earlier (random) runs
        path = reader.place(folder, data(reader.base))
        with pytest.raises(AtlasError) as caught:
            reader.read(path)
        assert_one_line_naming(caught.value, path, data(reader.base))

    @CASES
    @given(data=mutated(reader.base))
    def case(data: bytes) -> None:
        path = reader.place(folder, data)
        try:
            reader.read(path)
        except AtlasError as exc:
            assert_one_line_naming(exc, path, data)
            if name == "labels":
                assert_first_bad_line(exc, path, data)

    case()


def snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(root.rglob("*"))
    }


@pytest.mark.parametrize("name", ["conllu", "glue", "framenet", "text"])
def test_a_failed_ingest_leaves_the_store_as_it_was(readers, model, tmp_path_factory, name):
    reader = readers[name]
    folder = tmp_path_factory.mktemp(f"{name}-ingest")
    store = Store(folder / "store")
    fmt, task = ("glue", "MRPC") if name == "glue" else (name, None)
    ingest(check_corpus(reader.place(folder / "base", reader.base), fmt, task), store, model, Settings(), False)

    @settings(CASES, max_examples=6)
    @given(data=mutated(reader.base))
    def case(data: bytes) -> None:
        before = snapshot(store.root)
        case_folder = folder / "case"
        shutil.rmtree(case_folder, ignore_errors=True)
        path = reader.place(case_folder, data)
        try:
            ingest(check_corpus(path, fmt, task), store, model, Settings(max_length=48), False)
        except AtlasError as exc:
            assert_one_line_naming(exc, path, data)
            assert snapshot(store.root) == before

    case()
