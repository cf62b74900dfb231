"""The ingest as it runs beside an accelerator: the next chunk read and prepared in a thread of its own, each
batch's rows taken into tables in a second thread, large tables written as several files at once. Run here on a
CPU (the pipeline switched on), its store holds the same rows as the sequential ingest's; an interrupted chunk's
files, cut in parts or not, are replaced when it is run again."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from conftest import EWT_SAMPLE, cut_conllu, make_store

import atlas
from atlas.ingestion import pipeline, write
from atlas.ingestion.ahead import read_ahead

TABLES = {
    "attn_edges": "example_id, layer, head, src_tok, dst_tok",
    "attn_rows": "example_id, layer, head, src_tok",
    "word_rows": "example_id, layer, head, src_word",
    "tokens": "example_id, tok_idx",
    "words": "example_id, word_idx",
    "examples": "example_id",
}


def _tables(root):
    sql = atlas.open(root).connection.sql
    return {name: sql(f"SELECT * EXCLUDE (run_id) FROM {name} ORDER BY {keys}").fetchnumpy()
            for name, keys in TABLES.items()}  # fmt: skip


def test_the_pipeline_writes_the_sequential_ingests_rows(tmp_path, model, monkeypatch):
    corpus = cut_conllu(EWT_SAMPLE, 90, tmp_path / "ninety.conllu")
    settings = {"chunk_examples": 32}  # three chunks: one read ahead while another runs
    make_store(tmp_path / "sequential", corpus, model, **settings)
    monkeypatch.setattr(pipeline, "_pipelined", lambda _settings: True)
    monkeypatch.setattr(pipeline, "PART_ROWS", 5_000)  # the attention tables in several files
    make_store(tmp_path / "pipelined", corpus, model, **settings)
    edges = list((tmp_path / "pipelined" / "data").glob("*/attn_edges/*.parquet"))
    assert any(p.stem.count("-") == 2 for p in edges)  # part-CHUNK-PART: cut in parts
    want, got = _tables(tmp_path / "sequential"), _tables(tmp_path / "pipelined")
    for name, columns in want.items():
        for column, values in columns.items():
            np.testing.assert_array_equal(got[name][column], values, err_msg=f"{name}.{column}")


def test_parts_are_the_tables_rows_in_order():
    table = pa.table({"x": np.arange(10)})
    for n in (1, 2, 3, 4, 10):
        pieces = write.parts(table, n)
        assert len(pieces) <= n and pa.concat_tables(pieces)["x"].to_pylist() == list(range(10))


def test_an_unfinished_chunks_files_are_replaced(tmp_path):
    (tmp_path / "attn_edges").mkdir()
    stale = [tmp_path / "attn_edges" / f"part-00003-{k:02d}.parquet" for k in range(3)]
    kept = tmp_path / "attn_edges" / "part-00002.parquet"
    for path in [*stale, kept]:
        path.write_bytes(b"")
    write.clear_chunk(tmp_path, 3)
    assert not any(path.exists() for path in stale) and kept.exists()


def test_read_ahead_hands_on_the_items_and_their_error():
    assert list(read_ahead(iter(range(5)))) == list(range(5))

    def broken():
        yield 1
        raise ValueError("bad line")

    with pytest.raises(ValueError, match="bad line"):
        list(read_ahead(broken()))
    taken = read_ahead(iter(range(1000)))  # the caller stops: the thread stops
    assert next(taken) == 0
    taken.close()
