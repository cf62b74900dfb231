"""--format text: WikiText / plain-text paragraphs paired as Clark et al.'s Wikipedia segments.

The truncation is checked against a copy of ``truncate_seq_pair`` from the released
``preprocess_unlabeled.py``; the end-to-end run against plain loops over transformers' eager attention.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from atlas.catalogue import resolve, run_entry
from atlas.cli import cli
from atlas.errors import AtlasError
from atlas.ingestion.corpus import check_corpus
from atlas.ingestion.pipeline import Settings, ingest
from atlas.ingestion.readers.base import CorpusOptions
from atlas.ingestion.readers.glue import _nlp
from atlas.ingestion.readers.text import Text, read_articles, read_pairs, read_text, truncate_pair
from atlas.store import Store
from tests.conftest import ROOT
from tests.reference import RefSentence, dense_inputs, surface

SAMPLE = ROOT / "samples" / "wikitext" / "wiki.test-sample.raw"

WIKITEXT = (
    " \r\n = First Article = \r\n \r\n"
    " It is a well @-@ known place of 1 @,@ 000 people and 2 @.@ 5 rivers . \r\n \r\n"
    " = = History = = \r\n \r\n"
    " Second paragraph here . \r\n \r\n"
    " = = = Early years = = = \r\n \r\n"
    " Third paragraph . \r\n \r\n"
    " = Second Article = \r\n \r\n"
    " Only paragraph . \r\n \r\n"
    " = Third Article = \r\n"
    " One . \r\n"
    " Two . \r\n"
    " = Not closed , so a paragraph \r\n"
)


def write(tmp_path: Path, text: str | bytes, name: str = "corpus.txt") -> Path:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def test_wikitext_headings_paragraphs_and_markers(tmp_path):
    articles = read_articles(write(tmp_path, WIKITEXT))
    assert [title for title, _ in articles] == ["First Article", "Second Article", "Third Article"]
    first = articles[0][1]
    assert [p.text for p in first] == [
        "It is a well-known place of 1,000 people and 2.5 rivers .",
        "Second paragraph here .",
        "Third paragraph .",
    ]
    assert [p.line for p in first] == [4, 8, 12]
    assert [p.text for p in articles[2][1]] == ["One .", "Two .", "= Not closed , so a paragraph"]


def test_plain_text_blocks_are_paragraphs(tmp_path):
    path = write(tmp_path, "\ufeffFirst line of one\nparagraph, wrapped.\n\n\n  Second paragraph.  \n\nThird\n")
    [(title, paragraphs)] = read_articles(path)
    assert title == "corpus.txt"
    assert [(p.text, p.line, p.line_starts) for p in paragraphs] == [
        ("First line of one paragraph, wrapped.", 1, (0, 18)),
        ("Second paragraph.", 5, (0,)),
        ("Third", 7, (0,)),
    ]


def test_pairs_are_consecutive_paragraphs_of_one_article(tmp_path):
    pairs = read_pairs(write(tmp_path, WIKITEXT))
    assert [(p.doc_id, p.a.line, p.b.line) for p in pairs] == [("First Article", 4, 8), ("Third Article", 19, 20)]
    # an article's odd last paragraph (lines 12 and 21) and a one-paragraph article (line 16) are left out
    sample = read_pairs(SAMPLE)
    assert len(sample) == 6 // 2 + 44 // 2 + 27 // 2


def truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng):
    """preprocess_unlabeled.py, as released."""
    while True:
        total_length = len(tokens_a) + len(tokens_b)
        if total_length <= max_num_tokens:
            break
        trunc_tokens = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        assert len(trunc_tokens) >= 1
        if rng.random() < 0.5:
            del trunc_tokens[0]
        else:
            trunc_tokens.pop()


@pytest.mark.parametrize("seed", range(20))
def test_truncation_is_the_released_procedure_on_one_piece_words(seed):
    draw = random.Random(1000 + seed)
    n_a, n_b, budget = draw.randint(1, 90), draw.randint(1, 90), draw.randint(2, 125)
    tokens_a, tokens_b = list(range(n_a)), list(range(n_b))
    truncate_seq_pair(tokens_a, tokens_b, budget, random.Random(seed))
    keep_a, keep_b = truncate_pair([1] * n_a, [1] * n_b, budget, random.Random(seed))
    assert (list(keep_a), list(keep_b)) == (tokens_a, tokens_b)


@pytest.mark.parametrize("seed", range(20))
def test_truncation_by_whole_words_fits_and_stops_at_once(seed):
    draw = random.Random(seed)
    a, b = ([draw.randint(1, 4) for _ in range(draw.randint(1, 60))] for _ in range(2))
    budget = draw.randint(10, 125)
    keep_a, keep_b = truncate_pair(a, b, budget, random.Random(seed))
    kept = sum(a[i] for i in keep_a) + sum(b[i] for i in keep_b)
    assert kept <= budget
    if len(keep_a) + len(keep_b) < len(a) + len(b):  # it cut: the last word removed took it below the budget
        assert kept > budget - 4


def test_cut_pairs_fit_and_are_recorded(model):
    max_length = 64
    sentences = list(read_text(SAMPLE, model.tokenizer, max_length))
    assert len(sentences) == 2 * len(read_pairs(SAMPLE))
    paragraphs = {p.line: p for _, ps in read_articles(SAMPLE) for p in ps}
    n_cut = 0
    for a, b in zip(sentences[::2], sentences[1::2], strict=True):
        assert a.doc_id == b.doc_id and b.index == a.index + 1
        pieces = sum(len(model.tokenizer.tokenize(w.form)) or 1 for s in (a, b) for w in s.words)
        assert pieces + 3 <= max_length
        for s in (a, b):
            line, _, span = s.sent_id.partition(":")
            spacy_words = [t.text for t in _nlp()(paragraphs[int(line)].text) if not t.is_space]
            first, last = (int(x) for x in span.split("/")[0].split("-")) if span else (1, len(spacy_words))
            n_cut += bool(span)
            assert [w.form for w in s.words] == spacy_words[first - 1 : last]
            assert [w.id for w in s.words] == list(range(1, len(s.words) + 1))
            for w in s.words:
                assert (w.head is None) == (w.deprel is None)
                assert w.head is None or 0 <= w.head <= len(s.words)
    assert n_cut > 0


def test_words_keep_their_file_lines(model, tmp_path):
    path = write(tmp_path, "The first paragraph\nspans two lines.\n\nThe second one\n\nhas\nthree.\n")
    a, b = read_text(path, model.tokenizer, 128)
    assert [(w.form, w.line) for w in a.words] == [
        ("The", 1),
        ("first", 1),
        ("paragraph", 1),
        ("spans", 2),
        ("two", 2),
        ("lines", 2),
        (".", 2),
    ]
    assert (a.sent_id, b.sent_id, b.words[0].line) == ("1", "4", 4)


def test_sampling_is_reproducible_by_seed(model):
    def drawn(seed: int) -> list[str]:
        return [s.sent_id for s in read_text(SAMPLE, model.tokenizer, 512, sample=4, seed=seed)]

    pairs = read_pairs(SAMPLE)
    assert drawn(3) == drawn(3) != drawn(4)
    order = random.Random(3).sample(range(len(pairs)), len(pairs))[:4]  # the released code's shuffle, seeded
    assert [int(s.split(":")[0]) for s in drawn(3)[::2]] == [pairs[i].a.line for i in order]


@pytest.mark.parametrize(
    ("content", "where", "message"),
    [
        (b"", ":1:", "empty file"),
        (b" = T = \n a b \n c \xff d \n", ":3:", "not UTF-8 (byte 0xff at column 4)"),
        (b"one\n\ntwo\x00\n", ":3:", "NUL byte"),
        (b" = T = \r\n = = S = = \r\n \r\n", ":1:", "no paragraph"),
        (b"\n  \n\r\n", ":1:", "no paragraph"),
        (b" = A = \n one . \n = B = \n two . \n", ":1:", "no article has two paragraphs"),
    ],
)
def test_errors_name_the_file_and_line(tmp_path, content, where, message):
    path = write(tmp_path, content)
    with pytest.raises(AtlasError) as err:
        check_corpus(path, "text")
    assert str(err.value).startswith(f"{path}{where}") and message in str(err.value)
    assert "\n" not in str(err.value)


def test_sample_and_format_errors(tmp_path):
    with pytest.raises(AtlasError, match=r"sample=39: .* holds only 38 paragraph pairs"):
        check_corpus(SAMPLE, "text", sample=39)
    with pytest.raises(AtlasError, match="no such file"):
        check_corpus(tmp_path / "missing.txt", "text")
    with pytest.raises(AtlasError, match="sample: only a format='text'"):
        check_corpus(SAMPLE, "conllu", sample=3)


def listing(root: Path) -> dict[str, bytes | None]:
    """Every path under the store with its bytes (None for a folder)."""
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in root.rglob("*")}


def test_store_unchanged_when_the_reader_fails_during_ingest(tmp_path, model):
    store = Store(tmp_path / "store")
    ingest(check_corpus(SAMPLE, "text", sample=2), store, model, Settings(max_length=32, pack="pair"), progress=False)
    before = listing(store.root)
    # passes the check, but at --max-length 5 the long word leaves nothing of the first paragraph
    bad = write(tmp_path, " = T = \n incomprehensibilities \n a \n")
    with pytest.raises(AtlasError, match="sample=1: only 0 of the 1 paragraph pairs"):
        ingest(check_corpus(bad, "text", sample=1), store, model, Settings(max_length=5, pack="pair"), progress=False)
    assert listing(store.root) == before
    fresh = Store(tmp_path / "fresh")
    with pytest.raises(AtlasError):
        ingest(check_corpus(bad, "text", sample=1), fresh, model, Settings(max_length=5, pack="pair"), progress=False)
    assert not fresh.root.exists()


def test_cli_ingest_of_the_sample_and_a_section_3_entry(tmp_path, model):
    runner = CliRunner()
    store = str(tmp_path / "store")
    empty = write(tmp_path, b"")
    failed = runner.invoke(cli, ["ingest", "--format", "text", "--corpus", str(empty), "--store", store])
    assert failed.exit_code == 1 and f"{empty}:1: empty file" in failed.output and not Path(store).exists()
    args = ["ingest", "--format", "text", "--corpus", str(SAMPLE), "--sample", "1", "--sample-seed", "5"]
    result = runner.invoke(cli, [*args, "--max-length", "128", "--dense", "--quiet", "--store", store])
    assert result.exit_code == 0, result.output
    assert "1 inputs, 0 skipped" in result.output and "of the 1 pairs cut to --max-length" in result.output
    answer = runner.invoke(cli, ["query", "special tokens", "--store", store, "--format", "csv"])
    assert answer.exit_code == 0, answer.output

    con = Store(Path(store)).connect()
    run_id, corpus, pack, max_length = con.execute("SELECT run_id, corpus, pack, max_length FROM runs").fetchone()
    assert (corpus, pack, max_length) == ("wiki.test-sample.raw (sample 1, seed 5)", "pair", 128)
    words = con.execute("SELECT sent_id, form FROM words ORDER BY word_idx").fetchall()
    sides = [[form for sent_id, form in words if sent_id == s] for s in dict.fromkeys(s for s, _ in words)]
    [(attns, pieces)] = dense_inputs(model.source, [[RefSentence(forms, [], []) for forms in sides]])
    stored = [p for (p,) in con.execute("SELECT piece FROM tokens ORDER BY tok_idx").fetchall()]
    assert stored == pieces and pieces.count("[SEP]") == 2 and len(pieces) <= 128
    ref = surface([(attns, pieces)])  # one input: per-input means and pooled rows agree
    entries = {"special tokens": ("cls", "sep", "dot_comma"), "relative position": ("prev", "next")}
    for phrase, columns in entries.items():
        entry = resolve(phrase)
        df = run_entry(con, entry, entry.bind({"run": run_id}))
        heads = df.filter(df["head"].is_not_null()).sort(["layer", "head"])
        for column in columns:
            got = heads[column].to_numpy().reshape(ref[column].shape)
            np.testing.assert_allclose(got, ref[column], rtol=1e-5, atol=1e-6, err_msg=f"{phrase}: {column}")


def test_paragraphs_without_a_partner_are_counted_apart_from_the_pairs_left_out(tmp_path):
    """An article's odd last paragraph makes no input: the ingest says how many, beside the pairs left out for their
    length; the inputs are the same as before."""
    checked = Text().check(Text().info(write(tmp_path, WIKITEXT), CorpusOptions()))
    said = Text().summary(checked, "written", 2, lambda condition: 0)
    assert said == {"n_cut": 0, "n_left_out": 0, "n_unpaired": 3}  # lines 12, 16 and 21
    five = write(tmp_path, "\n\n".join(f"Paragraph number {i} is here." for i in range(1, 6)) + "\n", "five.txt")
    store = str(tmp_path / "store")
    result = CliRunner().invoke(cli, ["ingest", "--format", "text", "--corpus", str(five), "--store", store, "--quiet"])
    assert result.exit_code == 0, result.output
    assert ": 2 inputs, 0 skipped" in result.output
    assert "0 left out (a paragraph would lose every word); 1 paragraph left out without a partner" in result.output
    paired = Store(Path(store)).connect().execute("SELECT list(sent_ids ORDER BY example_id) FROM examples")
    assert paired.fetchone() == ([["1", "3"], ["5", "7"]],)  # paragraphs 1-4 by their lines; 5 (line 9) in none
