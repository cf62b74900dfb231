"""Shared fixtures: the embedded model, small corpora cut from the shipped samples, and stores."""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import atlas  # noqa: E402
from atlas.errors import AtlasError  # noqa: E402
from atlas.ingestion.corpus import check_corpus  # noqa: E402
from atlas.ingestion.pipeline import Settings, ingest  # noqa: E402
from atlas.ingestion.readers.conllu import write_first_sentences  # noqa: E402
from atlas.model.load import LoadedModel, load_model  # noqa: E402
from atlas.store import Store  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
EWT_SAMPLE = ROOT / "samples" / "ud" / "en_ewt-ud-dev-sample.conllu"
GUM_SAMPLE = ROOT / "samples" / "ud" / "en_gum-ud-dev-sample.conllu"


def cut_conllu(src: Path, n_sentences: int, dst: Path) -> Path:
    """The first n sentences of a CoNLL-U file (document comments kept)."""
    return write_first_sentences(src, n_sentences, dst)


def interrupt_at_chunk(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    """Make the ingest stop (as by Ctrl-C) when it comes to write chunk ``chunk``, the chunks before it written."""
    from atlas.ingestion import pipeline

    real = pipeline.write_table

    def crash(run_dir: Path, at: int, *rest: object) -> None:
        if at == chunk:
            raise KeyboardInterrupt
        real(run_dir, at, *rest)

    monkeypatch.setattr(pipeline, "write_table", crash)


def save_tiny_bert(path: Path, hidden: int, layers: int, heads: int) -> Path:
    """A BERT of ``layers`` layers of ``heads`` heads with random weights (seed 0) and the embedded model's tokenizer,
    saved to ``path``."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from atlas.model.load import default_model_path

    torch.manual_seed(0)
    config = BertConfig(
        hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=2 * hidden,
        max_position_embeddings=128,
    )  # fmt: skip
    BertModel(config).save_pretrained(path, safe_serialization=True)
    AutoTokenizer.from_pretrained(default_model_path()).save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def model() -> LoadedModel:
    return load_model(None)


@pytest.fixture(scope="session")
def ewt_small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A held-in corpus for exactness tests; ATLAS_TEST_CONLLU points the tests at any other UD file."""
    path = tmp_path_factory.mktemp("corpus") / "ewt-small.conllu"
    src = Path(os.environ.get("ATLAS_TEST_CONLLU", EWT_SAMPLE))
    return cut_conllu(src, int(os.environ.get("ATLAS_TEST_SENTENCES", "150")), path)


def rewrite_as_before(root: Path, run_id: str, tables: tuple[str, ...], columns: dict[str, list[str]]) -> None:
    """Rewrite run ``run_id`` of the store at ``root`` as the atlas wrote it before ``tables`` and ``columns`` (per
    table) were added: without them, and with views of another schema."""
    import duckdb
    import pyarrow.parquet as pq

    run, schema = root / "data" / f"run_id={run_id}", root / "data" / "run_id=.schema"
    for name in tables:
        for folder in (run / name, schema / name):
            shutil.rmtree(folder)
    for name, dropped in columns.items():
        for part in [*(run / name).glob("*.parquet"), *(schema / name).glob("*")]:
            pq.write_table(pq.read_table(part).drop_columns(dropped), part)
    con = duckdb.connect(str(root / "atlas.duckdb"))
    con.execute("UPDATE atlas_meta SET value = 'older schema' WHERE key = 'view_state'")
    con.close()


def as_older_layout(root: Path) -> None:
    """Rewrite the store at ``root`` as atlas wrote stores before the runs' Hive partitions: each run's folder
    ``data/<run_id>`` and its run id the first column of every file, dictionary-encoded; the schema files under
    ``data/.schema``; views over ``data/*/<table>/*.parquet`` read without partitions, of another view state."""
    import duckdb
    import pyarrow as pa
    import pyarrow.parquet as pq

    from atlas.store import ROOT_SQL, table_schemas

    data = root / "data"
    for folder in sorted(data.glob("run_id=*")):
        run_id = folder.name.removeprefix("run_id=")
        older = data / run_id
        folder.rename(older)
        for part in older.glob("*/*.parquet"):  # the schema files too: no rows, every declared column
            table = pq.read_table(part)
            ids = pa.DictionaryArray.from_arrays(pa.array([0] * table.num_rows, pa.int32()), pa.array([run_id]))
            pq.write_table(table.add_column(0, "run_id", ids), part)
    con = duckdb.connect(str(root / "atlas.duckdb"))
    for name, schema in table_schemas().items():
        columns = ", ".join(f'"{c}"' for c in schema.names)
        files = f"{ROOT_SQL} || 'data/*/{name}/*.parquet'"
        con.execute(
            f"CREATE OR REPLACE VIEW {name} AS SELECT {columns} FROM read_parquet({files}, union_by_name = true, "
            "hive_partitioning = false)"
        )
    con.execute("UPDATE atlas_meta SET value = 'older layout' WHERE key = 'view_state'")
    con.close()


def make_store(root: Path, corpus: Path, model: LoadedModel, **settings: object) -> tuple[Store, str]:
    store = Store(root)
    result = ingest(check_corpus(corpus), store, model, Settings(**settings), progress=False)
    return store, result.run_id


# The stores of ewt_small read the words joined by spaces (text="words"): Clark et al.'s pre-tokenized input, what
# tests/reference.py's released procedures read; text as written is tests/test_text_as_written.py's.
@pytest.fixture(scope="session")
def dense_store(tmp_path_factory, ewt_small, model) -> tuple[Store, str]:
    return make_store(tmp_path_factory.mktemp("dense"), ewt_small, model, kept_mass=None, text="words")


@pytest.fixture(scope="session")
def sparse_store(tmp_path_factory, ewt_small, model) -> tuple[Store, str]:
    return make_store(tmp_path_factory.mktemp("sparse"), ewt_small, model, text="words")


def answer_or_refusal(root: Path, name: str, params: dict[str, object]) -> atlas.Answer | AtlasError:
    """Entry ``name``'s answer on the store at ``root`` (its notes silenced), or the refusal it gave."""
    with warnings.catch_warnings(), atlas.open(root) as st:
        warnings.simplefilter("ignore", atlas.AtlasNote)
        try:
            return st.answer(name, **params)
        except AtlasError as exc:
            return exc


@pytest.fixture(scope="session")
def spark():
    """One local Spark session of two cores, without its UI, console progress or logging, for every test that needs
    one (its start takes seconds)."""
    pytest.importorskip("pyspark")
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("atlas-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("OFF")
    yield session
    session.stop()


CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-dev-shm-usage",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1300,1800",
)


@pytest.fixture
def browser(tmp_path):
    """Headless Chromium driven through chromedriver, its console kept (the report's and atlas serve's browser
    tests); skipped where either or selenium is absent, failed instead where ATLAS_BROWSER_TESTS=required (CI)."""
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    try:
        from selenium import webdriver
    except ImportError:
        webdriver = None
    missing = [
        name
        for name, found in (("chromium", chromium), ("chromedriver", driver_path), ("selenium", webdriver))
        if not found
    ]
    if missing:
        reason = f"the browser test needs {', '.join(missing)} (apt-get install chromium chromium-driver)"
        if os.environ.get("ATLAS_BROWSER_TESTS") == "required":
            pytest.fail(reason)
        pytest.skip(reason)
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
