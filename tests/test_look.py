"""Looking at heads: the views of a stored input (``Atlas.attention``, ``Atlas.heads``), ``atlas.look`` on one text
against an ingest of the same text, and runs named by a start of their id or hash."""

from __future__ import annotations

import re
import shutil
from html import unescape
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import EWT_SAMPLE, cut_conllu

import atlas
from atlas.cli import cli
from atlas.views import HEAD_FLOOR, THUMB_FLOOR

TOKEN_COLUMNS = ["layer", "head", "src_tok", "entropy", "argmax_tok", "to_self", "to_prev", "to_next", "to_cls",
                 "to_sep", "to_dot_comma", "received"]  # fmt: skip


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> tuple[Path, Path, list[str]]:
    """A sparse store of three EWT sentences and a dense one; the sentences' texts as written."""
    root = tmp_path_factory.mktemp("look")
    corpus = cut_conllu(EWT_SAMPLE, 3, root / "three.conllu")
    atlas.ingest(corpus, store=root / "sparse", progress=False)
    atlas.ingest(corpus, store=root / "dense", dense=True, progress=False)
    texts = re.findall(r"^# text = (.*)$", corpus.read_text(encoding="utf-8"), flags=re.MULTILINE)
    return root / "sparse", root / "dense", texts


def lines_of(html: str) -> list[tuple[int, int, float]]:
    """The head view's lines: (attending token, attended token, opacity)."""
    found = []
    for group in re.finditer(r'<g class="aa-src" data-src="(\d+)">(.*?)</g>', html):
        for line in re.finditer(r'stroke-opacity="([0-9.]+)" data-dst="(\d+)"', group.group(2)):
            found.append((int(group.group(1)), int(line.group(2)), float(line.group(1))))
    return found


def test_head_view_draws_the_stored_weights_and_says_each_token(stores):
    sparse, dense, _ = stores
    with atlas.open(dense) as st:
        m = st.attention(example=1, layer=2, head=3)
        html = m._repr_html_()
        words = st.sql("SELECT form, upos, deprel FROM words WHERE example_id = 1 ORDER BY word_idx")
    drawn = lines_of(html)
    expected = [(i, j) for i, j in zip(*np.nonzero(m.weights >= HEAD_FLOOR), strict=True)]
    assert [(i, j) for i, j, _ in drawn] == expected and len(drawn) > len(m.tokens)
    assert all(abs(w - m.weights[i, j]) <= 5e-4 for i, j, w in drawn)
    said = unescape(html)
    for token in m.tokens:
        assert f">{token}</text>" in said
    first = words.row(0)
    assert f"word 1 '{first[0]}': {first[1]}, {first[2]}" in said  # the word, its POS and relation on hover
    assert "special: cls" in html and "special: sep" in html
    assert "sparse run" not in html and m.note == ""
    with atlas.open(sparse) as st:
        kept = st.attention(example=1, layer=2, head=3)
    assert kept.note.startswith("sparse run: each row keeps its largest weights up to 0.9 of its mass")
    low, high = (float(v) for v in re.search(r"rows hold (\d+) to (\d+) %", kept.note).groups())
    sums = kept.weights.sum(axis=1)
    assert low == round(100 * sums.min()) and high == round(100 * sums.max()) and low < 100
    assert "sparse run" in kept._repr_html_()


def test_model_view_has_a_thumbnail_per_head(stores):
    _, dense, _ = stores
    with atlas.open(dense) as st:
        every = st.heads(example=0)
        some = st.heads(example=0, layers=[2, 5], heads=[1, 12])
        with pytest.raises(atlas.AtlasError, match=r"layers=7: run .* has layers 1 to 6"):
            st.heads(example=0, layers=[1, 7])
    assert every.weights.shape[:2] == (6, 12) and every.layers == tuple(range(1, 7))
    html = every._repr_html_()
    assert html.count("<svg") == 72 and "layer 6, head 12" in html
    assert np.array_equal(some.weights[1, 0], every.weights[4, 0])
    assert np.array_equal(some.head(5, 12).weights, every.weights[4, 11])
    thumb = re.search(r"<title>layer 2, head 12</title>(.*?)</svg>", some._repr_html_()).group(1)
    assert thumb.count("<line") == int((every.weights[1, 11] >= THUMB_FLOOR).sum())


def test_look_is_an_ingest_of_the_text(stores):
    _, dense, texts = stores
    with atlas.open(dense) as st, atlas.look(texts[2]) as seen:
        run = st.latest_run()
        stored = st.sql(
            f"SELECT {', '.join(TOKEN_COLUMNS)} FROM attn_rows WHERE example_id = 2 ORDER BY layer, head, src_tok"
        )
        pieces = st.sql("SELECT piece FROM tokens WHERE example_id = 2 ORDER BY tok_idx")["piece"].to_list()
        maps = st.heads(example=2, run=run)
        assert seen.tokens["piece"].to_list() == pieces
        rows = seen.rows.select(TOKEN_COLUMNS)
        assert rows.shape == stored.shape == (6 * 12 * len(pieces), len(TOKEN_COLUMNS))
        for column in TOKEN_COLUMNS:
            a, b = rows[column].to_numpy(), stored[column].to_numpy()
            if column in ("layer", "head", "src_tok", "argmax_tok"):
                assert np.array_equal(a, b), column
            else:
                np.testing.assert_allclose(a, b, atol=2e-5, err_msg=column)
        np.testing.assert_allclose(seen.heads().weights, maps.weights, atol=2e-6)
        edges = seen.edges
        assert len(edges) == 6 * 12 * len(pieces) ** 2  # dense: every weight
        assert seen.words["upos"].null_count() == 0  # spaCy's POS
        assert "layer 1, head 1" in seen.html() and seen.html(3, 4).count("<svg") == 1
    assert not Path(seen.atlas.store.root).exists()  # the look's store is gone once it is closed


def test_look_refuses_what_it_cannot_look_at(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))  # where a look makes its folder
    with pytest.raises(atlas.AtlasError, match=r"^text='  ': empty"):
        atlas.look("  ")
    with pytest.raises(atlas.AtlasError, match=r"^text: every input is longer than max_length=4 pieces"):
        atlas.look("A sentence of more than four pieces.", max_length=4)
    assert not list(tmp_path.glob("atlas-look-*"))  # removed where the look failed
    with atlas.look("Dogs bark.", dense=False) as seen:
        with pytest.raises(atlas.AtlasError, match=r"^head=13: not among the heads read, 1, 2"):
            seen.heads(heads=[1, 2]).head(1, 13)
        with pytest.raises(atlas.AtlasError, match=r"^layer: give layer and head together"):
            seen.html(layer=2)
        weights, tokens = seen.attention(1, 1)  # unpacked as before the maps drew themselves
        assert tokens == ["[CLS]", "dogs", "bark", ".", "[SEP]"] and weights.shape == (5, 5)
        assert len(seen.edges) < 6 * 12 * 25  # dense=False: the kept edges only
    assert not list(tmp_path.glob("atlas-look-*"))


def test_look_command_writes_the_page(tmp_path):
    out = tmp_path / "one.html"
    result = CliRunner().invoke(
        cli, ["look", "Dogs bark.", "--out", str(out), "--layer", "2", "--head", "3", "--quiet"]
    )
    assert result.exit_code == 0, result.output
    assert "layer 2, head 3 over 5 tokens" in result.output
    page = out.read_text()
    assert (
        page.count('class="aa-head"') == 1
        and ">bark</text>" in page
        and "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    )
    for args, said in (
        (["--layer", "2"], "Error: --layer: give --layer and --head together"),
        (["--layer", "9", "--head", "1"], "Error: --layer 9: run look__"),
        (["--out", str(tmp_path / "x.png")], "the page is an HTML file"),
        (["--max-length", "3"], "Error: TEXT: every input is longer than --max-length 3 pieces"),
    ):
        result = CliRunner().invoke(cli, ["look", "Dogs bark.", "--quiet", *args])
        assert result.exit_code == 1 and said in result.output and "Traceback" not in result.output
        assert len(result.output.strip().splitlines()) == 1, result.output


def test_a_run_is_named_by_a_start_of_its_id_or_hash(stores, tmp_path):
    sparse, dense, _ = stores
    both = tmp_path / "both"
    shutil.copytree(sparse, both)
    with atlas.open(dense) as st:
        dense_id = st.latest_run()
    atlas.ingest(cut_conllu(EWT_SAMPLE, 3, tmp_path / "three.conllu"), store=both, dense=True, progress=False)
    with atlas.open(both) as st:
        runs = st.runs()["run_id"].to_list()
        assert dense_id in runs and len(runs) == 2
        sparse_id = next(r for r in runs if r != dense_id)
        assert st.run_id(dense_id[:-3]) == dense_id  # a start of the id, longer than the shared stem
        assert st.run_id(sparse_id.rpartition("__")[2][:6]) == sparse_id  # a start of the hash
        with pytest.raises(atlas.AtlasError, match=r"run='three': the start of 2 runs \(three__"):
            st.run_id("three")
        answer = st.answer("special tokens", run=sparse_id[:-2])
        assert sparse_id in answer.title and not any("latest" in n for n in answer.notes)
        latest = st.answer("special tokens")
        assert latest.notes[0] == (
            f"note: run {dense_id} answered, the store's latest; it holds 1 other run: name one with run=RUN "
            "(see Atlas.runs())"
        )
        m = st.attention(example=0, layer=1, head=1)
        assert "latest of its 2 runs" in m.source
        compared = st.answer("special tokens", runs=[dense_id[:-4], sparse_id.rpartition("__")[2][:6]])
        assert compared.runs == (dense_id, sparse_id) and not compared.notes
        st.report(tmp_path / "latest.html", examples=1, progress=False)
        st.report(tmp_path / "named.html", run=dense_id[:-4], examples=1, progress=False)
    assert "the store&#x27;s latest run, beside 1 other" in (tmp_path / "latest.html").read_text()
    assert dense_id in (tmp_path / "named.html").read_text()
    assert "latest run, beside" not in (tmp_path / "named.html").read_text()
    cli_runs = CliRunner().invoke(cli, ["query", "special tokens", "--store", str(both), "--run", dense_id[:-4]])
    assert cli_runs.exit_code == 0 and "latest" not in cli_runs.output
    said = CliRunner().invoke(cli, ["query", "special tokens", "--store", str(both)])
    assert said.exit_code == 0 and "it holds 1 other run: name one with --run RUN (see 'atlas runs')" in said.output
    wrong = CliRunner().invoke(cli, ["query", "special tokens", "--store", str(both), "--run", "three"])
    assert wrong.exit_code == 1 and "Error: --run 'three': the start of 2 runs" in wrong.output
