"""The catalogue on Apache Spark: the Spark SQL of every entry is generated from its ``queries/*.sql`` file, the
store's Parquet files are tables Spark reads as they are, and on a real Spark (pyspark, local mode) every entry
answers the test store as DuckDB does: the same rows in the same order, numbers to 1e-9 relative, the same
notes, and the same one-line refusal where DuckDB refuses.

The store holds a sparse and a dense run of 12 EWT sentences (the dense one ingested by ``atlas ingest``, the
latest), GUM documents in windows (coreference), FrameNet exemplars, head distances, patterns and probes of the
EWT runs, and a tiny BERT's task results (fine-tuned for 0 epochs, ablated, importance, gradients): every entry
of the catalogue answers some call below. One SparkSession serves the module.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import polars as pl
import pyarrow.parquet as pq
import pytest
import sqlglot
from click.testing import CliRunner
from sqlglot import exp

import atlas
from atlas.catalogue import entries, resolve
from atlas.cli import cli
from atlas.engine import DuckDBEngine, Engine
from atlas.errors import AtlasError
from atlas.ingestion.corpus import check_corpus
from atlas.ingestion.pipeline import Settings, ingest
from atlas.needs import SHARED
from atlas.spark import engine
from atlas.spark.sql import entry_sql, translate
from atlas.spark.tables import files, schema_ddl
from atlas.store import Store, table_schemas
from tests.conftest import EWT_SAMPLE, GUM_SAMPLE, ROOT, answer_or_refusal, cut_conllu, make_store, save_tiny_bert

GLUE = ROOT / "samples" / "glue" / "RTE"
FRAMENET = ROOT / "samples" / "framenet" / "lu"
BEST = "best head per dependency relation"
DECODER = ROOT / "samples" / "models" / "induction-2l"
# pyspark's word on the pandas version, which the Arrow path it takes here never uses
pytestmark = pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")


# ---- the SQL, generated (no Spark needed) -------------------------------------------------------------------


@pytest.mark.parametrize("name", [e.name for e in entries()])
def test_the_spark_sql_of_every_entry_is_generated_from_its_file(name):
    entry = resolve(name)
    sql = entry_sql(entry)
    written = {node.name for node in sqlglot.parse_one(entry.sql, read="duckdb").find_all(exp.Placeholder)}
    assert written <= {p.name for p in entry.parameters}
    markers = {node.name for node in sqlglot.parse_one(sql.text, read="spark").find_all(exp.Placeholder)}
    assert set(sql.parameters) == markers == written  # each $name a named marker :name, bound, never pasted
    for need in entry.needs:  # the header's needs run on Spark too
        assert set(translate(need.sql).parameters) <= {p.name for p in entry.parameters}


def test_parameters_become_markers_and_duckdb_functions_become_sparks():
    sql = translate("SELECT error('x $run'), arg_max(a, (b, c)) FROM t WHERE run_id = $run AND k = $min_count")
    assert set(sql.parameters) == {"run", "min_count"}
    assert "run_id = :run" in sql.text and "k = :min_count" in sql.text
    assert "RAISE_ERROR('x $run')" in sql.text and "MAX_BY(a, (b, c))" in sql.text  # text in a literal stays text
    assert "CAST(layer + 1 AS STRING)" in translate("SELECT concat(layer + 1, '-', head)").text
    assert "PERCENTILE(s, 0.99) OVER ()" in translate("SELECT quantile_cont(s, 0.99) OVER () FROM t").text
    filtered = " ".join(translate("SELECT any_value(x) FILTER (WHERE y) FROM t").text.split())
    assert "ANY_VALUE(x) FILTER(WHERE y) IGNORE NULLS" in filtered  # Spark reads FILTER before IGNORE NULLS
    with pytest.raises(AtlasError, match="expected one statement"):
        translate("SELECT 1; SELECT 2")


def test_the_shared_needs_translate():
    for need in SHARED.values():
        assert translate(need.sql).parameters == ("run",)


def test_both_engines_answer_through_the_one_answer_path(tmp_path):
    """Binding, run checks, needs and titles are atlas.engine's, for either engine; Spark's engine only runs SQL."""
    (tmp_path / "data" / "run_id=r" / "runs").mkdir(parents=True)
    (tmp_path / "data" / "run_id=r" / "runs" / "part-00000.parquet").touch()
    spark_engine = engine.SparkEngine(Store(tmp_path))  # starts no Spark until it reads the store
    assert isinstance(spark_engine, Engine) and isinstance(DuckDBEngine(Store(tmp_path), duckdb.connect()), Engine)


def test_importing_atlas_spark_imports_no_pyspark():
    code = "import atlas, atlas.spark, sys; print('pyspark' in sys.modules, 'py4j' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False"]


def test_without_pyspark_the_cli_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pyspark", None)  # import pyspark fails
    result = CliRunner().invoke(cli, ["query", "entropy", "--engine", "spark", "--store", str(tmp_path)])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "Error: --engine 'spark': pyspark is not installed (pip install 'attention-atlas[spark]')"
    ]


# ---- the store ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def store(tmp_path_factory, model) -> tuple[Path, dict[str, str]]:
    """The test store (see the module's docstring) and its runs by name."""
    top = tmp_path_factory.mktemp("spark")
    root = top / "store"
    ewt = cut_conllu(EWT_SAMPLE, 12, top / "ewt12.conllu")
    gum = cut_conllu(GUM_SAMPLE, 20, top / "gum20.conllu")
    _, sparse = make_store(root, ewt, model)
    _, coref = make_store(root, gum, model, pack="window", max_length=128)
    framenet = ingest(check_corpus(FRAMENET, "framenet"), Store(root), model, Settings(kept_mass=None), progress=False)
    needle = atlas.api.ingest(None, str(DECODER), root, format="needle", haystack="random", lengths=[64],
                              depths=[0, 100], progress=False).run_id  # fmt: skip
    dense_ingest = ["ingest", "--corpus", str(ewt), "--store", str(root), "--dense", "--norms", "--rollout", "cls"]
    result = CliRunner().invoke(cli, [*dense_ingest, "--quiet"])
    assert result.exit_code == 0, result.output
    with atlas.open(root) as st:
        dense = st.latest_run()
        st.distances(dense, examples=12, progress=False)
        st.patterns(dense)
        st.probe(sparse, dense, progress=False, train_limit=12, eval_limit=12)
    tiny, checkpoint = _tiny_bert(top / "tiny"), top / "checkpoint"
    atlas.finetune("RTE", str(GLUE), checkpoint, str(tiny), epochs=0, dev_limit=8, progress=False, store=root)
    atlas.ablate(str(checkpoint), "RTE", str(GLUE), dev_limit=8, store=root)
    atlas.importance(str(checkpoint), "RTE", str(GLUE), train_limit=8, dev_limit=8, store=root)
    atlas.grads(str(checkpoint), task="RTE", data=str(GLUE), limit=4, store=root)
    return root, {"sparse": sparse, "dense": dense, "coref": coref, "framenet": framenet.run_id, "needle": needle}


def _tiny_bert(path: Path) -> Path:
    """A 3-layer, 4-head BERT with random weights and the embedded model's tokenizer."""
    return save_tiny_bert(path, 32, 3, 4)


def test_the_parquet_files_hold_only_types_every_engine_reads(store):
    """Signed integers of 8 to 64 bits, floats, doubles, strings, booleans, lists of strings and timestamps
    without a time zone; one glob per table finds every file of the table."""
    root, _ = store
    allowed = {"INT32", "INT64", "FLOAT", "DOUBLE", "BYTE_ARRAY", "BOOLEAN"}
    for name in table_schemas():
        found = sorted(root.glob(f"data/*/{name}/*.parquet"))
        assert found == sorted(p for p in root.glob(f"data/**/{name}/*.parquet")), name
        for path in found:
            schema = pq.ParquetFile(path).schema
            for i in range(len(schema)):
                column = schema.column(i)
                assert column.physical_type in allowed, (path, column.path)
                logical = str(column.logical_type)
                assert "isSigned=false" not in logical and not logical.startswith(("UUID", "Interval")), column.path
                assert "isAdjustedToUTC=true" not in logical, column.path
    assert files("s3a://bucket/atlas-store/", "attn_edges") == "s3a://bucket/atlas-store/data/run_id=*/attn_edges/*.parquet"
    assert schema_ddl("attn_edges").startswith("`run_id` STRING, `example_id` INT, `layer` SMALLINT")


# ---- Spark ---------------------------------------------------------------------------------------------------


def test_the_views_hold_the_tables_as_duckdb_does(store, spark):
    root, _ = store
    assert atlas.spark.register(spark, f"file://{root}") == list(table_schemas())  # a URI as well as a path
    con = Store(root).connect()
    for name, schema in table_schemas().items():
        assert spark.table(name).columns == schema.names, name
        assert spark.table(name).count() == con.execute(f"SELECT count(*) FROM {name}").fetchone()[0], name


def test_a_folder_without_a_store_is_refused(spark, tmp_path, monkeypatch):
    with pytest.raises(AtlasError, match="no store here"):
        atlas.spark.register(spark, tmp_path)
    monkeypatch.setenv("ATLAS_STORE", str(tmp_path))  # named as the variable, as the DuckDB engine names it
    with pytest.raises(AtlasError, match=f"^ATLAS_STORE '{tmp_path}': no store here"):
        atlas.api.answer("entropy", engine="spark")
    monkeypatch.setenv("ATLAS_STORE", "weird://host/store")  # a URI, read by Spark as given (not as a local path)
    with pytest.raises(AtlasError, match=r"^ATLAS_STORE 'weird://host/store': Spark cannot read it \(.*weird"):
        atlas.api.answer("entropy", engine="spark")


def test_the_command_line_on_spark_says_only_the_answers_title(store):
    """Spark's start logs nothing on the terminal (its default profile said its log level and warned of Hadoop's
    native library); only the Java VM's own line on the incubator module it is given is left."""
    root, runs = store
    code = "from atlas.cli import main; main()"
    args = ["query", "entropy", "--engine", "spark", "--run", runs["sparse"], "--store", str(root), "--limit", "1"]
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if not line.startswith("WARNING: Using incubator modules")]
    assert len(said) == 1 and said[0].startswith("entropy (Clark et al. 2019"), done.stderr


@pytest.mark.parametrize(
    ("uri", "cause"),
    [
        ("weird://host/store", 'No FileSystem for scheme "weird"'),
        ("s3a://bucket/store", "S3AFileSystem not found"),  # no hadoop-aws on this classpath
    ],
)
def test_a_store_spark_cannot_read_is_refused_in_one_line(spark, uri, cause):
    with pytest.raises(AtlasError) as raised:
        atlas.spark.register(spark, uri)
    text = str(raised.value)
    assert text.startswith(f"store='{uri}': Spark cannot read it (") and cause in text and "\n" not in text


def test_a_master_spark_cannot_start_on_is_refused_in_one_line(tmp_path):
    """In a process of its own: this one's session is running, and a running session is taken as it is."""
    code = "from atlas.cli import main; main()"
    (tmp_path / "data" / "run_id=r" / "runs").mkdir(parents=True)  # a store's files, as far as is checked before Spark
    (tmp_path / "data" / "run_id=r" / "runs" / "part-00000.parquet").touch()
    args = ["query", "entropy", "--engine", "spark", "--spark-master", "bogus://x", "--store", str(tmp_path)]
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr  # a scheme no cluster manager has
    assert done.stderr.strip().splitlines()[-1].startswith("Error: --spark-master 'bogus://x': Spark did not start (")
    args[args.index("bogus://x")] = "local[x]"  # refused before Spark starts: Java printed its stack trace first
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and done.stderr.strip() == (
        "Error: --spark-master 'local[x]': not a Spark master (masters are local[N], spark://HOST:PORT, yarn, "
        "k8s://URL)"
    )
    for master in ("local[x]", "local[2", "bogus", "localhost:7077"):
        with pytest.raises(AtlasError, match=r"^master='.*': not a Spark master \(masters are local\[N\]"):
            engine.check_master(master)
    for master in ("local", "local[*]", "local[4, 2]", "local-cluster[2, 1, 1024]", "yarn", "spark://h:7077",
                   "k8s://https://h:443", "ray://h:10001"):  # fmt: skip
        engine.check_master(master)  # a plugin's scheme (ray://) is Spark's to judge


def _calls(runs: dict[str, str]) -> dict[str, list[dict[str, object]]]:
    """The calls of each entry: its defaults (the latest run, the dense EWT run) or the parameters it needs to
    answer, and calls that it refuses."""
    sparse, coref, framenet = runs["sparse"], runs["coref"], runs["framenet"]
    calls: dict[str, list[dict[str, object]]] = {e.name: [{}] for e in entries()}
    for name in ("attention sink", "entropy", "feature attention", "relative position", "sep to sep", "special tokens"):
        calls[name].append({"run": sparse})
    for name in ("cls attention by feature", "token to token", "head distances", "probe weights"):
        calls[name].append({"run": sparse})  # refused (sparse; not computed) or, probe weights, its train run
    for name in ("norm-based attention", "weight-norm correlation", "attention rollout", "rollout attributions"):
        calls[name].append({"run": sparse})  # refused: ingested without --norms and --rollout
    calls["attention rollout"] += [{"token": "0"}, {"token": "last"}]  # the second refused: not kept
    calls["rollout attributions"] += [{"example": 3}, {"example": 99}]  # the second refused: no such input
    calls["attention sink"] += [{"run": coref, "threshold": 0.5}, {"threshold": 1.5}]  # the second refused
    calls[BEST] = [{"min_count": 3, "poss_rule": False}, {"direction": "sideways"}]  # the defaults: the CLI test
    calls["coreference heads"] = [{"run": coref}, {}]
    calls["frame heads"] = [{"run": framenet}, {"run": framenet, "pairs": "zip"}, {"run": framenet, "pairs": "first"}]
    calls["fine-tuning change"] = [{"base": runs["dense"], "tuned": runs["dense"]}, {"base": sparse, "tuned": sparse}]
    calls["fine-tuning change"].append({"base": runs["dense"], "tuned": runs["dense"], "max_examples": 0})
    for name in ("head ablation", "layer ablation"):
        calls[name] = [{"task": "RTE"}, {"task": "rte", "method": "mask"}, {"method": "mask"}]
    calls["head importance"] = [{"task": "RTE"}, {}]
    calls["pruning curve"].append({"model_run": "nope"})
    calls["retrieval heads"] = [{"run": runs["needle"]}, {}]  # the second refused: no needle probe
    calls["attention distance"].append({"run": runs["needle"]})
    calls["streaming heads"] += [{"run": runs["needle"], "sink": 1, "window_size": 8}, {"window_size": 3}]
    return calls


def _spark(spark, root: Path, name: str, params: dict[str, object]) -> tuple[pl.DataFrame, str, tuple] | AtlasError:
    try:
        found = atlas.spark.answer(spark, root, name, **params)
        return found.collect(), found.title, found.notes
    except AtlasError as exc:
        return exc


def assert_same_rows(want: pl.DataFrame, got: pl.DataFrame) -> None:
    """The same columns of the same kind, and the same rows in the same order (numbers to 1e-9 relative)."""
    assert got.columns == want.columns
    for column in want.columns:
        kinds = (want.schema[column], got.schema[column])
        assert all(k.is_integer() for k in kinds) or all(k.is_float() for k in kinds) or kinds[0] == kinds[1], column
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(want.iter_rows(), got.iter_rows(), strict=True)):
        for column, x, y in zip(want.columns, a, b, strict=True):
            if isinstance(x, float) and y is not None:
                same = math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(x) and math.isnan(y))
            else:
                same = x == y
            assert same, f"row {i}, {column}: DuckDB {x!r}, Spark {y!r}"


@pytest.mark.parametrize("name", [e.name for e in entries()])
def test_every_entry_answers_on_spark_as_on_duckdb(store, spark, name):
    root, runs = store
    answered = 0
    for params in _calls(runs)[name]:
        want, got = answer_or_refusal(root, name, params), _spark(spark, root, name, params)
        if isinstance(want, AtlasError) or isinstance(got, AtlasError):
            assert str(got) == str(want), params  # refused alike
            continue
        frame, title, notes = got
        assert (title, notes) == (want.title, want.notes), params
        assert_same_rows(want.frame, frame)
        answered += len(frame) > 0
    assert answered, f"'{name}' answers none of its calls on the test store"


def test_runs_written_before_roles_and_first_token_answer_as_now(store, spark, tmp_path):
    """A run whose files lack tokens.role and attn_rows.to_first gets both derived on Spark, as in the DuckDB
    views (store.OLDER_RUNS): the entries that read them answer as for the same run written now."""
    root, runs = store
    old = tmp_path / "old"
    shutil.copytree(root, old)
    for table, column in (("tokens", "role"), ("attn_rows", "to_first")):
        for part in (old / "data" / f"run_id={runs['dense']}" / table).glob("*.parquet"):
            pq.write_table(pq.read_table(part).drop_columns([column]), part)
    for name in ("attention sink", "entropy", "sep to sep", "cls attention by feature"):
        now = answer_or_refusal(root, name, {})
        got = _spark(spark, old, name, {})
        assert not isinstance(got, AtlasError), (name, got)
        assert_same_rows(now.frame, got[0])
    atlas.spark.register(spark, old)
    assert spark.sql("SELECT count(*) FROM tokens WHERE role IS NULL AND special IS NOT NULL").first()[0] == 0


def test_query_returns_a_spark_dataframe(store, spark):
    from pyspark.sql import DataFrame

    root, runs = store
    frame = atlas.spark.query(spark, root, "entropy", run=runs["sparse"])
    assert isinstance(frame, DataFrame) and frame.count() == 72
    by_hash = atlas.api.answer("entropy", root, run=runs["sparse"].rpartition("__")[2][:7], engine="spark")
    assert runs["sparse"] in by_hash.title and by_hash.frame.height == 72  # a run named by a start of its hash
    with pytest.raises(AtlasError, match=r"the start of 2 runs"):
        atlas.api.answer("entropy", root, run=runs["sparse"][:10], engine="spark")
    with pytest.raises(AtlasError, match="takes no run"):
        atlas.spark.query(spark, root, "glue baselines", run=runs["dense"])
    with pytest.raises(AtlasError, match="no such run"):
        atlas.spark.query(spark, root, "entropy", run="nope")
    with pytest.raises(AtlasError, match="expected a whole number"):
        atlas.spark.query(spark, root, BEST, min_count="many")
    with pytest.warns(atlas.AtlasNote, match=r"is sparse: the scores count its kept edges only"):  # as on DuckDB
        atlas.spark.query(spark, root, "induction heads", run=runs["sparse"])
    assert atlas.spark.entry_sql("entropy") == atlas.spark.entry_sql(resolve("entropy"))  # by name, or the entry


def test_what_needs_no_spark_is_refused_before_it_starts(store, monkeypatch, tmp_path):
    root, runs = store
    monkeypatch.setattr("atlas.spark.engine.session", lambda *args: pytest.fail("Spark was started"))
    with pytest.raises(AtlasError, match=r"^foo: 'entropy' has no such parameter"):
        atlas.api.answer("entropy", root, engine="spark", params={"foo": 1})
    with pytest.raises(AtlasError, match=r"^min_count=many: expected a whole number"):
        atlas.api.answer(BEST, root, engine="spark", params={"min_count": "many"})
    with pytest.raises(AtlasError, match=r"^run: 'glue baselines' takes no run"):
        atlas.api.answer("glue baselines", root, run=runs["dense"], engine="spark")
    with pytest.raises(AtlasError, match=rf"^store='{tmp_path}': no store here \(no data/run_id=\*/runs/\*.parquet\)$"):
        atlas.api.answer("entropy", tmp_path, engine="spark")


def test_the_cli_prints_the_same_table_on_spark(store, spark):
    """atlas query --engine spark on the store made by atlas ingest: the rows of the default engine, in CSV."""
    root, _ = store
    args = ["query", BEST, "--store", str(root), "--format", "csv"]
    duckdb_out = CliRunner().invoke(cli, args)
    spark_out = CliRunner().invoke(cli, [*args, "--engine", "spark", "--spark-master", "local[2]"])
    assert duckdb_out.exit_code == 0 and spark_out.exit_code == 0, spark_out.output
    assert spark_out.stdout == duckdb_out.stdout and spark_out.stdout.count("\n") >= 3
    assert spark_out.stderr.splitlines()[-1] == duckdb_out.stderr.splitlines()[-1]  # the title line
    refused = CliRunner().invoke(cli, [*args, "--engine", "spark", "--compare", "x"])
    assert refused.exit_code == 1 and "--compare: compares runs on the default engine" in refused.output
