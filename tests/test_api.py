"""The Python API (atlas.open, atlas.ingest) gives what the command line prints: the same runs, catalogue,
answers, SQL results, figures and exports, and the same one-line errors, raised."""

from __future__ import annotations

import json
import math
import shutil
from datetime import datetime
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from PIL import Image
from polars.testing import assert_frame_equal

import atlas
from atlas.cli import FLAGS, cli
from atlas.ingestion.run_id import MAX_EDGES
from atlas.plot import save
from atlas.store import table_schemas
from tests.conftest import EWT_SAMPLE, cut_conllu
from tests.reference import dense_inputs, read_sentences


def run_cli(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def cli_json(*args: str) -> list[dict]:
    result = run_cli(*args, "--format", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def cli_error(*args: str) -> str:
    """The one line the command line prints for a user error."""
    result = run_cli(*args)
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    return lines[0]


def assert_same_rows(frame: pl.DataFrame, rows: list[dict]) -> None:
    """An API frame holds the rows the CLI printed as JSON (floats as JSON holds them, NaN as null)."""
    assert len(frame) == len(rows) and len(rows) > 0
    assert frame.columns == list(rows[0])
    for got, want in zip(frame.to_dicts(), rows, strict=True):
        for key, value in got.items():
            if isinstance(value, float):
                assert (want[key] is None) if not math.isfinite(value) else want[key] == pytest.approx(value, 1e-6)
            elif isinstance(value, datetime):
                assert datetime.fromisoformat(want[key]) == value
            else:
                assert want[key] == value, key


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> tuple[Path, Path, atlas.Ingested]:
    root = tmp_path_factory.mktemp("api")
    corpus = cut_conllu(EWT_SAMPLE, 12, root / "tiny.conllu")
    done = atlas.ingest(corpus, store=root / "store", progress=False)
    return root / "store", corpus, done


@pytest.fixture(scope="module")
def st(sample) -> atlas.Atlas:
    with atlas.open(sample[0]) as opened:
        yield opened


def test_ingest_is_the_cli_ingest(sample, tmp_path):
    store, corpus, done = sample
    assert not done.already_present and done.n_examples == 12 and done.n_edges > 0 and done.store == store
    again = run_cli("ingest", "--corpus", str(corpus), "--store", str(store), "--quiet")
    assert again.output.strip() == f"run {done.run_id} is already in {store}; nothing to do"
    assert atlas.ingest(corpus, store=store, progress=False).already_present
    fresh = run_cli("ingest", "--corpus", str(corpus), "--store", str(tmp_path / "cli-store"), "--quiet")
    assert fresh.output.startswith(f"run {done.run_id}: 12 inputs, 0 skipped")
    assert f"{done.n_edges:,} attention edges" in fresh.output
    assert "unknown token" not in fresh.output


def test_the_ingest_counts_the_pieces_the_tokenizer_did_not_know(sample, tmp_path):
    """The sample decoder knows 256 made-up pieces: English text is almost all its unknown token, and the ingest
    says so (its induction and duplicate-token scores would count each unknown piece a copy of the others)."""
    store, corpus, done = sample
    with atlas.open(store) as opened:
        n_tokens = opened.sql(f"SELECT count(*) AS n FROM tokens WHERE run_id = '{done.run_id}'")["n"][0]
    assert done.n_tokens == n_tokens and done.n_unknown == 0  # WordPiece has a piece for each of these words
    folder = Path(__file__).resolve().parent.parent / "samples" / "models" / "induction-2l"
    made_up = atlas.ingest(corpus, model=folder, store=tmp_path / "s", progress=False)
    with atlas.open(tmp_path / "s") as opened:
        sql = f"SELECT count(*) AS n FROM tokens WHERE run_id = '{made_up.run_id}' AND piece = '<unk>'"
        assert made_up.n_unknown == opened.sql(sql)["n"][0] > 0.8 * made_up.n_tokens
    result = run_cli("ingest", "--corpus", str(corpus), "--model", str(folder), "--store", str(tmp_path / "t"))
    share = f"{made_up.n_unknown / made_up.n_tokens:.1%}"
    said = f"{made_up.n_unknown:,} of the {made_up.n_tokens:,} pieces ({share}) are the tokenizer's unknown token: "
    assert said in result.output
    assert atlas.ingest(corpus, model=folder, store=tmp_path / "s", progress=False).n_unknown is None  # present
    # a special token of the template is no unknown piece, and an unknown token that is also the tokenizer's bos,
    # eos, cls or sep (GPT-2's <|endoftext|>) is not counted at all
    from types import SimpleNamespace

    from atlas.ingestion.corpus import check_corpus
    from atlas.ingestion.summary import summary
    from atlas.store import Store

    cls = 101  # the embedded WordPiece's [CLS], first in every input
    checked = check_corpus(corpus)

    def counted(tokenizer: SimpleNamespace) -> int | None:
        return summary(Store(Path(store)), done.run_id, checked, done.n_examples, "written", tokenizer)["n_unknown"]

    assert counted(SimpleNamespace(unk_token_id=cls)) == 0
    for role in ("bos", "eos", "cls", "sep"):
        assert counted(SimpleNamespace(unk_token_id=cls, **{f"{role}_token_id": cls})) is None


def test_a_model_folder_is_named_as_text_or_a_path(tmp_path):
    """``model`` takes a folder as a ``Path`` as it takes its text: the same run, found again."""
    folder = Path(__file__).resolve().parent.parent / "samples" / "models" / "induction-2l"
    kwargs = {"store": tmp_path / "s", "format": "repeated", "length": 5, "count": 1, "progress": False}
    done = atlas.ingest(model=folder, **kwargs)
    again = atlas.ingest(model=str(folder), **kwargs)
    assert again.already_present and again.run_id == done.run_id
    for relative in (Path("missing-model"), Path("models/missing")):  # a path, not a hub id: refused at once
        with pytest.raises(atlas.AtlasError, match=rf"model='\./{relative}': no such model directory"):
            atlas.ingest(model=relative, **kwargs)


def test_ingest_refuses_what_the_cli_refuses(sample, tmp_path):
    store, corpus, _ = sample
    zipped = tmp_path / "c.conllu.gz"
    zipped.write_bytes(b"\x1f\x8b\x08\x00rest")
    cases = [
        ({"seed": 3}, ["--seed", "3"]),
        ({"kept_mass": 0.5, "dense": True}, ["--kept-mass", "0.5", "--dense"]),
        ({"task": "SST-2"}, ["--task", "SST-2"]),
        ({"corpus": tmp_path}, ["--corpus", str(tmp_path)]),
        ({"corpus": zipped}, ["--corpus", str(zipped)]),
        ({"format": "glue"}, ["--format", "glue"]),
        ({"pack": "window", "format": "text"}, ["--pack", "window", "--format", "text"]),
        ({"corpus": tmp_path / "missing.conllu"}, ["--corpus", str(tmp_path / "missing.conllu")]),
    ]
    for kwargs, args in cases:
        kwargs = {"corpus": corpus, **kwargs}
        with pytest.raises(atlas.AtlasError) as raised:
            atlas.ingest(store=store, progress=False, **kwargs)
        if "--corpus" not in args:
            args = ["--corpus", str(corpus), *args]
        assert cli_error("ingest", *args, "--store", str(store)) == f"Error: {raised.value.cli_text(FLAGS)}"
        assert "--" not in str(raised.value)  # the API's words: its parameters, not the CLI's options
    with pytest.raises(atlas.AtlasError, match="format='xml': expected one of conllu, glue, framenet, text"):
        atlas.ingest(corpus, store=store, format="xml")
    for misspelt in ({"format": "Repeated"}, {"format": "Repeated", "sample_seed": 1}):  # no corpus: the format first
        with pytest.raises(atlas.AtlasError, match="^format='Repeated': expected one of conllu, glue, framenet, t"):
            atlas.ingest(store=store, **misspelt)


def test_open_a_missing_store(tmp_path):
    with pytest.raises(atlas.AtlasError) as raised:
        atlas.open(tmp_path / "nowhere")
    assert cli_error("runs", "--store", str(tmp_path / "nowhere")) == f"Error: {raised.value.cli_text(FLAGS)}"
    assert "no store here" in str(raised.value)


def test_runs_and_queries_are_what_the_cli_lists(sample, st):
    store, _, done = sample
    runs = st.runs()
    assert isinstance(runs, pl.DataFrame) and runs["run_id"].to_list() == [done.run_id]
    assert_same_rows(runs, cli_json("runs", "--store", str(store)))
    assert st.runs(unfinished=True).columns == ["unfinished_run"] and st.runs(unfinished=True).is_empty()
    assert_same_rows(st.queries(), cli_json("queries"))
    assert st.queries().equals(atlas.queries()) and "special tokens" in st.queries()["name"].to_list()


@pytest.mark.parametrize(
    ("name", "params", "args"),
    [
        ("special tokens", {}, []),
        ("relative position", {"threshold": 0.3}, ["--param", "threshold=0.3"]),
        (
            "best head per dependency relation",
            {"min_count": 1, "poss_rule": False},
            ["--param", "min_count=1", "--param", "poss_rule=false"],
        ),
        ("entropy", {}, []),
    ],
)
def test_query_is_what_the_cli_answers(sample, st, name, params, args):
    store, _, done = sample
    frame = st.query(name, run=done.run_id, **params)
    assert_same_rows(frame, cli_json("query", name, "--run", done.run_id, *args, "--store", str(store)))
    answer = st.answer(name, **params)  # the latest run: the only one
    assert_frame_equal(answer.frame, frame, rel_tol=1e-9)  # DuckDB's parallel sums may differ in the last bit
    title = run_cli("query", name, *args, "--store", str(store)).stderr.splitlines()[0]
    assert answer.title == title and done.run_id in title


def test_query_errors_are_the_cli_errors(sample, st):
    store, _, done = sample
    cases = [
        (("special tokens",), {"run": "no-such-run"}, ["--run", "no-such-run"]),
        (("special tokens",), {"colour": "red"}, ["--param", "colour=red"]),
        (("relative position",), {"threshold": "high"}, ["--param", "threshold=high"]),
        (("probe results",), {"run": done.run_id}, ["--run", done.run_id]),
        (("head distances",), {}, []),
        (("frobnicate the heads",), {}, []),
    ]
    for (name,), kwargs, args in cases:
        with pytest.raises(atlas.AtlasError) as raised:
            st.query(name, **kwargs)
        assert cli_error("query", name, *args, "--store", str(store)) == f"Error: {raised.value.cli_text(FLAGS)}"


def test_a_note_is_a_warning(st):
    """A note, and the entry close words chose, are warnings pointing at the caller's line, not into atlas."""
    with pytest.warns(atlas.AtlasNote, match="has no two-segment inputs") as notes:
        frame = st.query("sep to sep")
    assert not frame.is_empty() and {note.filename for note in notes} == {__file__}
    with pytest.warns(atlas.AtlasNote, match="taken as 'best head per dependency relation'") as notes:
        st.answer("best head", min_count=1)
    assert {note.filename for note in notes} == {__file__}


def test_sql_is_read_only_and_what_the_cli_prints(sample, st):
    store, _, _ = sample
    text = "SELECT layer, head, avg(entropy) AS entropy, count(*) AS n FROM attn_rows GROUP BY ALL ORDER BY ALL"
    frame = st.sql(text)
    assert len(frame) == 6 * 12
    assert_same_rows(frame, cli_json("sql", text, "--store", str(store)))
    for bad in ("DELETE FROM runs", "SELECT 1; SELECT 2", "SELEC 1", "SELECT * FROM read_csv('/etc/passwd')"):
        with pytest.raises(atlas.AtlasError) as raised:
            st.sql(bad)
        assert cli_error("sql", bad, "--store", str(store)) == f"Error: {raised.value}"
    assert st.sql("SELECT count(*) AS n FROM runs")["n"][0] == 1  # the store is as it was


def test_table_is_a_lazy_scan_of_the_parquet_files(st):
    edges = st.table("attn_edges")
    assert isinstance(edges, pl.LazyFrame)
    assert "parquet" in edges.explain().lower()
    assert edges.select(pl.len()).collect().item() == st.sql("SELECT count(*) FROM attn_edges").item()
    orders = {
        "tokens": "example_id, tok_idx",
        "words": "example_id, word_idx",
        "examples": "example_id",
        "attn_rows": "example_id, layer, head, src_tok",  # to_first: NULL in the files where it is to_cls
    }
    for name, order in orders.items():
        lazy = st.table(name).collect().sort(order.split(", "))
        assert lazy.columns == table_schemas()[name].names
        assert_frame_equal(lazy, st.sql(f"SELECT * FROM {name} ORDER BY {order}"), check_dtypes=False)
    with pytest.raises(atlas.AtlasError, match="table 'edges': no such table"):
        st.table("edges")


def test_table_derives_the_columns_older_runs_lack_as_the_views_do(sample, tmp_path):
    """Files written before tokens.role and attn_rows.to_first existed: the scans derive both from the SQL the
    views derive them with (store.OLDER_RUNS), to the same rows."""
    old = tmp_path / "old"
    shutil.copytree(sample[0], old)
    orders = {"tokens": ("role", "example_id, tok_idx"), "attn_rows": ("to_first", "example_id, layer, head, src_tok")}
    for name, (column, _) in orders.items():
        for part in old.glob(f"data/run_id=[!.]*/{name}/*.parquet"):  # the run's files, not the .schema ones
            pq.write_table(pq.read_table(part).drop_columns([column]), part)
    with atlas.open(old) as before:
        for name, (column, order) in orders.items():
            lazy = before.table(name).collect().sort(order.split(", "))
            assert_frame_equal(lazy, before.sql(f"SELECT * FROM {name} ORDER BY {order}"), check_dtypes=False)
            assert lazy[column].null_count() < len(lazy), column


def test_attention_is_the_stored_edges(st):
    found = st.attention(example=3, layer=2, head=5)
    weights, tokens = found.weights, found.tokens
    pieces = st.sql("SELECT piece FROM tokens WHERE example_id = 3 ORDER BY tok_idx")["piece"].to_list()
    assert tokens == pieces and weights.shape == (len(pieces), len(pieces)) and weights.dtype == np.float32
    edges = st.sql("SELECT src_tok, dst_tok, weight FROM attn_edges WHERE example_id = 3 AND layer = 1 AND head = 4")
    expected = np.zeros_like(weights)
    expected[edges["src_tok"].to_numpy(), edges["dst_tok"].to_numpy()] = edges["weight"].to_numpy()
    assert np.array_equal(weights, expected) and (weights == 0).any()  # a sparse run: dropped edges are 0
    argmax = st.sql("SELECT argmax_tok FROM attn_rows WHERE example_id = 3 AND layer = 1 AND head = 4 ORDER BY src_tok")
    assert (weights[np.arange(len(pieces)), argmax["argmax_tok"].to_numpy()] > 0).all()  # every row keeps its argmax
    assert ((weights.sum(axis=1) >= 0.9 - 1e-6) | ((weights > 0).sum(axis=1) == MAX_EDGES)).all()  # mass or cap
    for kwargs, message in (
        ({"example": 3, "layer": 0, "head": 5}, "layer=0: run .* has layers 1 to 6"),
        ({"example": 3, "layer": 1, "head": 13}, "head=13: run .* has heads 1 to 12"),
        ({"example": 99, "layer": 1, "head": 1}, "example=99: run .* has examples 0 to 11"),
        ({"example": 1, "layer": 1, "head": 1, "run": "nope"}, "run='nope': no such run"),
    ):
        with pytest.raises(atlas.AtlasError, match=message):
            st.attention(**kwargs)


def test_attention_of_a_dense_run_is_the_models_map(model, tmp_path):
    corpus = cut_conllu(EWT_SAMPLE, 3, tmp_path / "three.conllu")
    done = atlas.ingest(corpus, store=tmp_path / "dense", dense=True, progress=False)
    reference = dense_inputs(model.source, [[s] for s in read_sentences(corpus)])
    with atlas.open(tmp_path / "dense") as dense:
        for example, (maps, pieces) in enumerate(reference):
            for layer, head in ((1, 1), (3, 7), (6, 12)):
                found = dense.attention(run=done.run_id, example=example, layer=layer, head=head)
                weights, tokens = found.weights, found.tokens
                assert tokens == pieces
                np.testing.assert_allclose(weights, maps[layer - 1, head - 1], atol=1e-6)


def test_plot_is_the_figure_the_cli_saves(sample, st, tmp_path):
    store, _, _ = sample
    figure = st.plot("special tokens")
    answer = st.answer("special tokens")
    assert figure.get_suptitle() == "special tokens (Clark et al. 2019)"
    assert answer.title.endswith("; " + figure.get_supxlabel().replace("\n", " "))  # the runs, at its foot
    save(figure, tmp_path / "api.png")
    result = run_cli("plot", "special tokens", "--out", str(tmp_path / "cli.png"), "--store", str(store))
    assert result.exit_code == 0, result.output
    api_png, cli_png = (np.asarray(Image.open(tmp_path / f"{w}.png")) for w in ("api", "cli"))
    assert api_png.shape == cli_png.shape and np.array_equal(api_png, cli_png)
    with pytest.raises(atlas.AtlasError, match="'probe results' has no figure|no probe results"):
        st.plot("probe results")


def test_export_writes_what_the_cli_writes(sample, st, tmp_path, capsys):
    store, _, done = sample
    written = st.export(tmp_path / "api", run=done.run_id, progress=False)
    assert capsys.readouterr().err == ""  # no progress bar
    result = run_cli("export", "--out", str(tmp_path / "cli"), "--run", done.run_id, "--store", str(store))
    assert result.exit_code == 0, result.output
    assert "\rexport:   0%|" in result.output  # a progress bar over the rows
    assert set(written) == set(table_schemas()) and written["attn_edges"] == done.n_edges
    for name, n_rows in written.items():
        assert f"{name}: {n_rows:,} rows" in result.output
        assert pq.read_table(tmp_path / "api" / f"{name}.parquet").equals(
            pq.read_table(tmp_path / "cli" / f"{name}.parquet")
        )
    with pytest.raises(atlas.AtlasError, match="run='nope': no such run"):
        st.export(tmp_path / "x", run="nope")
    a_file = tmp_path / "notes.txt"
    a_file.write_text("precious")
    with pytest.raises(atlas.AtlasError, match=f"^out='{a_file}': is a file; name a folder to write the tables into$"):
        st.export(a_file)
    with pytest.raises(atlas.AtlasError, match=f"^out='{a_file}/x': '{a_file}' is a file, not a folder$"):
        st.export(a_file / "x")
    assert a_file.read_text() == "precious"


def test_answer_on_spark_is_the_one_answer_call_on_spark(monkeypatch):
    """Earlier versions' call on Spark goes through ``atlas.api.answer``, its parameters as the entry's."""
    calls = []
    monkeypatch.setattr(atlas.api, "answer", lambda *args, **kwargs: calls.append((args, kwargs)))
    atlas.api.answer_on_spark("entropy", "st", "RUN", master="local[1]", min_count=3)
    assert calls == [(("entropy", "st", "RUN"), {"engine": "spark", "master": "local[1]", "params": {"min_count": 3}})]
