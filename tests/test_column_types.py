"""The store's integer widths: layers and heads are SMALLINT (128 heads or more overflow TINYINT), positions in an
input INTEGER (inputs of over 32,767 tokens overflow SMALLINT), as ``atlas.ingestion.row_batch`` names them for the
ingest.

A store may hold runs written before the change (TINYINT layers and heads, SMALLINT positions) beside runs written
after it: the DuckDB views, ``Atlas.table`` (Polars) and the Spark engine read every file widened to schema.sql's
types, so every entry answers a run of such a mixed store as it answers the same run in a store written now.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

import atlas
import atlas.ingestion.sparsify as sparsify_module
from atlas.catalogue import entries
from atlas.errors import AtlasError
from atlas.ingestion.cpu_rows import _compact
from atlas.ingestion.row_batch import LAYER_TYPE, POSITION_TYPE
from atlas.ingestion.sparsify import _keys, batch_rows
from atlas.ingestion.tensor_rows import _edge_columns
from atlas.ingestion.write import write_table
from atlas.store import Store, table_schemas, to_table
from tests.conftest import EWT_SAMPLE, GUM_SAMPLE, answer_or_refusal, as_older_layout, cut_conllu, make_store

# the columns schema.sql declared TINYINT (layers, heads) and SMALLINT (positions, counts) before they were widened
LAYERS = {"layer", "head", "layer_a", "head_a", "layer_b", "head_b"}
POSITIONS = {
    "examples": {"n_sentences"},
    "tokens": {"tok_idx", "word_idx"},
    "words": {"word_idx", "conllu_id", "head_word_idx", "first_tok", "n_toks"},
    "mentions": {"first_word", "last_word", "head_word"},
    "frames": {"target_first", "target_last", "element_first", "element_last"},
    "attn_edges": {"src_tok", "dst_tok"},
    "attn_rows": {"src_tok", "argmax_tok"},
    "word_rows": {"src_word", "dst_word", "from_word"},
}
NEVER_ANSWERED = {"fine-tuning change"}  # two runs of one model: none here


def _older(table: pa.Table, name: str) -> pa.Table:
    """The table as a run written before the change holds it: layers and heads int8, positions int16."""
    fields = []
    for field in table.schema:
        kind = field.type
        if field.name in LAYERS:
            kind = pa.int8()
        elif field.name in POSITIONS.get(name, ()):
            kind = pa.int16()
        fields.append(field.with_type(kind))
    return table.cast(pa.schema(fields))


def _make_older(root: Path, run_id: str) -> None:
    """Rewrite a store of one run as atlas wrote it before the run partitions (``as_older_layout``) and the wider
    types: its run's files and the .schema files with the older types, the views of another schema (the next
    connection rewrites them)."""
    as_older_layout(root)
    for part in [*root.glob(f"data/{run_id}/*/*.parquet"), *root.glob("data/.schema/*/*.parquet")]:
        name = part.parent.name
        pq.write_table(_older(pq.read_table(part), name), part, compression="zstd")


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("column-types")
    return cut_conllu(GUM_SAMPLE, 10, folder / "gum.conllu"), cut_conllu(EWT_SAMPLE, 8, folder / "ewt.conllu")


@pytest.fixture(scope="module")
def stores(tmp_path_factory, corpora, model) -> tuple[Path, Path, str, str]:
    """(a store written now, a mixed store, run A, run B): both hold a sparse run A of GUM sentences (coreference)
    and a dense run B of EWT sentences; in the mixed one, run A was written with the older types and B added after."""
    gum, ewt = corpora
    new = tmp_path_factory.mktemp("new") / "store"
    mixed = tmp_path_factory.mktemp("mixed") / "store"
    _, run_a = make_store(new, gum, model, text="words")
    _, run_b = make_store(new, ewt, model, kept_mass=None, text="words")
    assert make_store(mixed, gum, model, text="words")[1] == run_a
    _make_older(mixed, run_a)
    older = pq.read_schema(next((mixed / "data" / run_a / "attn_edges").glob("*.parquet")))
    assert older.field("head").type == pa.int8()
    assert make_store(mixed, ewt, model, kept_mass=None, text="words")[1] == run_b
    return new, mixed, run_a, run_b




def assert_same_frame(want: pl.DataFrame, got: pl.DataFrame) -> None:
    """The same columns of the same types, and the same rows in the same order (floats to 1e-12: DuckDB's parallel
    sums may differ in the last bits)."""
    assert got.schema == want.schema
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(want.iter_rows(), got.iter_rows(), strict=True)):
        for column, x, y in zip(want.columns, a, b, strict=True):
            if isinstance(x, float) and isinstance(y, float):
                same = math.isclose(x, y, rel_tol=1e-12, abs_tol=1e-12) or (math.isnan(x) and math.isnan(y))
            else:
                same = x == y
            assert same, f"row {i}, {column}: {x!r} against {y!r}"


def test_the_store_declares_wide_layers_heads_and_positions():
    schemas = table_schemas()
    for name, schema in schemas.items():
        for field in schema:
            if field.name in LAYERS:
                assert field.type == pa.from_numpy_dtype(LAYER_TYPE) == pa.int16(), (name, field.name)
            if field.name in POSITIONS.get(name, ()):
                assert field.type == pa.from_numpy_dtype(POSITION_TYPE) == pa.int32(), (name, field.name)
    assert schemas["runs"].field("n_heads").type == pa.int16()


@pytest.mark.parametrize("rows", ["CpuRows", "TensorRows"])
def test_the_rows_come_in_the_store_types(monkeypatch, rows):
    """Both computations give the attention tables' keys in the store's types: to_table takes them as they are."""
    monkeypatch.setattr(sparsify_module, "CpuRows", getattr(sparsify_module, rows))
    rng = np.random.default_rng(0)
    maps = [torch.from_numpy(rng.dirichlet(np.ones(7), size=(2, 3, 7)).astype(np.float32)) for _ in range(2)]
    token_words = [[None, 0, 0, 1, 2, 3, None], [None, 0, 1, 1, None, None, None]]
    for kept_mass in (0.9, None):
        edges, stat_rows, words = batch_rows(maps, [7, 5], token_words, None, kept_mass)[0]
        for columns, keys in ((edges, ("src_tok", "dst_tok")), (stat_rows, ("src_tok", "argmax_tok")),
                              (words, ("src_word", "dst_word", "from_word"))):  # fmt: skip
            assert columns["layer"].dtype == columns["head"].dtype == LAYER_TYPE
            assert all(columns[key].dtype == POSITION_TYPE for key in keys), keys


def test_mixed_store_reads_every_file_in_the_declared_types(stores):
    new, mixed, run_a, _ = stores
    older = pq.read_schema(next((mixed / "data" / f"run_id={run_a}" / "attn_rows").glob("*.parquet")))
    assert (older.field("layer").type, older.field("argmax_tok").type) == (pa.int8(), pa.int16())
    with Store(new).connect() as a, Store(mixed).connect() as b:
        for name in table_schemas():
            assert b.execute(f"DESCRIBE {name}").fetchall() == a.execute(f"DESCRIBE {name}").fetchall(), name
        assert b.execute("SELECT DISTINCT typeof(head), typeof(dst_tok) FROM attn_edges").fetchall() == [
            ("SMALLINT", "INTEGER")
        ]


def test_mixed_store_tables_hold_the_same_rows(stores):
    """Every table of a mixed store, read by the DuckDB views and by Atlas.table (Polars), holds the rows of the
    store written now (the runs' creation times aside)."""
    new, mixed, _, _ = stores
    with atlas.open(new) as a, atlas.open(mixed) as b:
        for name, schema in table_schemas().items():
            keep = [c for c in schema.names if c != "created_at"]
            order = [c for c in keep if not pa.types.is_list(schema.field(c).type)]
            for polars in (True, False):
                want, got = (
                    (st.table(name).collect() if polars else st.sql(f"SELECT * FROM {name}"))
                    .select(keep)
                    .sort(order, nulls_last=True)
                    for st in (a, b)
                )
                assert_same_frame(want, got)
        assert b.table("attn_edges").collect().schema["head"] == pl.Int16
        assert b.table("words").collect().schema["first_tok"] == pl.Int32


@pytest.mark.parametrize("name", [e.name for e in entries() if e.name not in NEVER_ANSWERED])
def test_every_entry_answers_a_mixed_store_as_a_store_written_now(stores, name):
    """Each run of the mixed store (the older one and the one added after it), and both compared, answer as in the
    store written now: the same rows of the same types, or the same refusal."""
    new, mixed, run_a, run_b = stores
    for params in ({"run": run_a}, {"run": run_b}, {"runs": [run_a, run_b]}, {}):
        want, got = answer_or_refusal(new, name, params), answer_or_refusal(mixed, name, params)
        if isinstance(want, AtlasError) or isinstance(got, AtlasError):
            assert str(got) == str(want), params
            continue
        assert (got.title, got.notes) == (want.title, want.notes)
        assert_same_frame(want.frame, got.frame)


def test_entries_over_both_runs_answer(stores):
    """The entries the runs answer do answer (the comparison above is not of refusals alone)."""
    _, mixed, run_a, run_b = stores
    for name in ("entropy", "special tokens", "relative position", "best head per dependency relation"):
        for params in ({"run": run_a}, {"run": run_b}, {"runs": [run_a, run_b]}):
            answer = answer_or_refusal(mixed, name, params)
            assert not isinstance(answer, AtlasError) and len(answer.frame), (name, params, answer)
    assert len(answer_or_refusal(mixed, "coreference heads", {"run": run_a}).frame)


@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")
def test_mixed_store_on_spark(stores, spark):
    """The Spark engine reads the older run's narrower integers widened, as DuckDB's views do."""
    import atlas.spark

    new, mixed, run_a, run_b = stores
    atlas.spark.register(spark, mixed)
    kinds = dict(spark.table("attn_edges").dtypes)
    assert (kinds["layer"], kinds["head"], kinds["src_tok"]) == ("smallint", "smallint", "int")
    count = spark.sql(f"SELECT count(*) FROM attn_edges WHERE run_id = '{run_a}'").first()[0]
    with Store(new).connect() as con:
        assert count == con.execute("SELECT count(*) FROM attn_edges WHERE run_id = ?", [run_a]).fetchone()[0]
    answered = 0
    for name in ("entropy", "best head per dependency relation", "coreference heads"):
        for run in (run_a, run_b):
            want = answer_or_refusal(new, name, {"run": run})
            if isinstance(want, AtlasError):
                continue
            got = atlas.spark.answer(spark, mixed, name, run=run).collect()
            assert got.columns == want.frame.columns and len(got) == len(want.frame), (name, run)
            for a, b in zip(want.frame.iter_rows(), got.iter_rows(), strict=True):
                assert all(
                    math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12) if isinstance(x, float) else x == y
                    for x, y in zip(a, b, strict=True)
                ), (name, run, a, b)
            answered += len(got) > 0
    assert answered >= 4


# ---- beyond the older ranges ------------------------------------------------------------------------------


def test_heads_and_positions_beyond_the_older_ranges_survive_a_write_and_a_read(tmp_path):
    """Head 199 of 200 and position 40,000 of an input of 40,001 tokens: keyed by the ingest's own _keys, written
    by its writer, read back by the views and Atlas.table as they were."""
    keys = _keys(np.array([3, 40_001]), n_layers=2, n_heads=200).columns
    assert keys["layer"].dtype == keys["head"].dtype == LAYER_TYPE and keys["position"].dtype == POSITION_TYPE
    far = np.flatnonzero((keys["head"] >= 198) & (keys["position"] >= 39_998))  # the second input's last rows
    assert len(far) == 2 * 2 * 3
    columns = {
        "example_id": np.full(len(far), 1, dtype=np.int32),
        "layer": keys["layer"][far],
        "head": keys["head"][far],
        "src_tok": keys["position"][far],
        "dst_tok": keys["position"][far] - 1,
        "weight": np.full(len(far), 0.5, dtype=np.float32),
    }
    store = Store(tmp_path / "store")
    store.create()
    run = store.run_folder("long-run")
    write_table(run, 0, "attn_edges", to_table("attn_edges", columns, len(far), partitioned=True), False)
    words = {"example_id": [1], "word_idx": [40_000], "conllu_id": [40_001], "first_tok": [39_999], "n_toks": [35_000]}
    write_table(run, 0, "words", to_table("words", words, 1, partitioned=True), False)
    con = store.connect()
    got = con.execute("SELECT max(layer), max(head), max(src_tok), min(dst_tok), count(*) FROM attn_edges").fetchone()
    assert got == (1, 199, 40_000, 39_997, 12)
    assert con.execute("SELECT word_idx, conllu_id, first_tok, n_toks FROM words").fetchone() == (
        40_000,
        40_001,
        39_999,
        35_000,
    )
    with atlas.open(store.root) as st:
        frame = st.table("attn_edges").collect()
    assert frame["head"].max() == 199 and frame["src_tok"].max() == 40_000
    assert sorted(frame["head"].unique().to_list()) == [198, 199]


def test_the_compiled_pass_and_the_tensor_operations_key_heads_and_positions_past_the_older_ranges():
    """The edges' layer, head and positions as both computations lay them out, for head 199 of 200 and token
    40,000 (the slots and counts of one edge: the rest of an input that long is more than a test computes)."""
    n, n_heads = 40_001, 200
    lengths = np.array([n], dtype=np.int64)
    edge_n = np.zeros((1, n_heads, n), dtype=np.int32)
    edge_n[0, n_heads - 1, n - 1] = 1  # the last token's row in head 199: one edge, to token 39,999
    slot = (n_heads - 1) * n + (n - 1)  # k = 1 slot per row
    edge_dst = np.zeros(n_heads * n, dtype=POSITION_TYPE)
    edge_dst[slot] = n - 2
    edge_w = np.zeros(n_heads * n, dtype=np.float32)
    edge_w[slot] = 0.75
    out = {
        "layer": np.empty(1, LAYER_TYPE),
        "head": np.empty(1, LAYER_TYPE),
        "src": np.empty(1, POSITION_TYPE),
        "dst": np.empty(1, POSITION_TYPE),
        "w": np.empty(1, np.float32),
    }
    counts = np.zeros(1, dtype=np.int64)
    _compact(edge_dst, edge_w, edge_n, lengths, np.zeros(1, np.int64), 1, 1, n_heads, *out.values(), counts)
    assert [int(out[k][0]) for k in ("layer", "head", "src", "dst")] == [0, 199, 40_000, 39_999]
    rows = torch.tensor([[0, n_heads - 1, n - 1]])  # example, layer * heads + head, source
    edges, found = _edge_columns([(rows, torch.tensor([n - 2]), torch.tensor([0.75]), 0, 1)], 1, 1, n_heads, 2**-8)
    edges = {name: column.numpy() for name, column in edges.items()}  # on the device until they cross to the host
    assert found.tolist() == [1]
    assert {k: edges[k].dtype for k in ("layer", "head", "src_tok", "dst_tok")} == {
        "layer": LAYER_TYPE, "head": LAYER_TYPE, "src_tok": POSITION_TYPE, "dst_tok": POSITION_TYPE,
    }  # fmt: skip
    assert [int(edges[k][0]) for k in ("layer", "head", "src_tok", "dst_tok")] == [0, 199, 40_000, 39_999]
