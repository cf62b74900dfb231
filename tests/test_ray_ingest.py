"""atlas ingest --engine ray: Ray Data actors stage the chunks; the store is the single-process ingest's, row for
row, resumption works across engines, a failing worker publishes nothing, and the default ingest never imports Ray.

One local Ray instance (2 CPUs, no local mode) serves the whole session: starting one costs seconds.
"""

from __future__ import annotations

import inspect
import logging
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest
import torch
from click.testing import CliRunner
from polars.testing import assert_frame_equal
from tqdm import tqdm

import atlas.ingestion.cpu_rows as cpu_rows
import atlas.ingestion.pipeline as pipeline
import atlas.ingestion.ray_engine as ray_engine
from atlas import api
from atlas.catalogue import entries
from atlas.cli import cli
from atlas.errors import AtlasError
from atlas.ingestion.budget import budget_for
from atlas.ingestion.corpus import check_corpus
from atlas.ingestion.examples import Inputs
from atlas.ingestion.readers.conllu import read_conllu
from atlas.ingestion.readers.repeated import Repeated
from atlas.ingestion.run_id import Settings
from atlas.model.load import load_model
from atlas.store import Store, table_schemas
from tests.conftest import EWT_SAMPLE, cut_conllu, interrupt_at_chunk, make_store

ray = pytest.importorskip("ray")

ROOT = Path(__file__).resolve().parent.parent
CHUNK = 6  # examples per chunk: 36 sentences make 6 chunks
SETTINGS = Settings(chunk_examples=CHUNK)


@pytest.fixture(scope="session")
def ray_local():
    """The session's Ray instance: 2 CPUs (the actors claim half a CPU each, see ray_engine.CPUS_PER_WORKER)."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return cut_conllu(EWT_SAMPLE, 6 * CHUNK, tmp_path_factory.mktemp("ray-corpus") / "ewt.conllu")


@pytest.fixture(scope="module")
def whole(tmp_path_factory, corpus, model) -> tuple[Store, str]:
    """The single-process store of the corpus."""
    return make_store(tmp_path_factory.mktemp("single"), corpus, model, chunk_examples=CHUNK)


def ray_ingest(store: Store, corpus: Path, model, workers: int = 2) -> pipeline.IngestResult:
    engine = ray_engine.RayEngine(workers=workers)
    return pipeline.ingest(check_corpus(corpus), store, model, SETTINGS, progress=False, stage=engine)


def tables(store: Store, run_id: str) -> dict[str, pl.DataFrame]:
    """Every table of the store, the run's rows in a fixed order (runs: but its creation time)."""
    con = store.connect()
    out = {}
    for name, schema in table_schemas().items():
        if "run_id" not in schema.names:
            out[name] = con.execute(f"SELECT * FROM {name} ORDER BY ALL").pl()
        elif name == "runs":
            out[name] = con.execute("SELECT * EXCLUDE (created_at) FROM runs WHERE run_id = ?", [run_id]).pl()
        else:
            out[name] = con.execute(f"SELECT * FROM {name} WHERE run_id = ? ORDER BY ALL", [run_id]).pl()
    con.close()
    return out


def answers(store: Store, run_id: str) -> dict[str, pl.DataFrame | str]:
    """Every catalogue entry's answer for the run (or its one-line refusal, the store's path left out)."""
    out: dict[str, pl.DataFrame | str] = {}
    with api.open(store.root) as st:
        for entry in entries():
            run = run_id if "run" in {p.name for p in entry.parameters} else None
            try:
                out[entry.name] = st.answer(entry.name, run=run).frame
            except AtlasError as exc:
                out[entry.name] = str(exc).replace(str(store.root), "STORE")
    return out


def assert_same_store(store: Store, whole: tuple[Store, str], run_id: str) -> None:
    ref, ref_id = whole
    assert run_id == ref_id
    got, want = tables(store, run_id), tables(ref, ref_id)
    assert got.keys() == want.keys()
    for name in want:
        assert got[name].equals(want[name]), name  # exact, every row and value
    assert want["attn_edges"].height > 0 and want["words"].height > 0
    assert not (store.staging / run_id).exists()


def staged_chunks(store: Store, run_id: str) -> list[int]:
    return sorted(int(p.stem) for p in (store.staging / run_id / "done").glob("*.json"))


@pytest.fixture
def small_chunks(monkeypatch) -> None:
    """Chunks of CHUNK examples for the CLI too (its default is CHUNK_EXAMPLES): a small corpus makes several."""
    defaults = list(Settings.__init__.__defaults__)
    defaults[list(inspect.signature(Settings).parameters).index("chunk_examples")] = CHUNK
    monkeypatch.setattr(Settings.__init__, "__defaults__", tuple(defaults))


def atlas_ingest(corpus: Path, store: Store, *options: str):
    args = ["ingest", "--corpus", str(corpus), "--store", str(store.root), "--quiet", *options]
    return CliRunner().invoke(cli, args)


def test_ray_ingest_equals_the_single_process_store(ray_local, small_chunks, tmp_path, corpus, whole):
    store = Store(tmp_path / "ray")
    done = atlas_ingest(corpus, store, "--engine", "ray", "--workers", "2")
    assert done.exit_code == 0, done.output
    run_id = whole[1]
    assert done.output.startswith(f"run {run_id}: {6 * CHUNK} inputs, 0 skipped")
    assert_same_store(store, whole, run_id)
    got, want = answers(store, run_id), answers(*whole)
    assert sum(isinstance(a, pl.DataFrame) and a.height > 0 for a in want.values()) >= 7  # all a sparse run answers
    for name, answer in want.items():
        if isinstance(answer, str):
            assert got[name] == answer, name
        else:  # the same rows; DuckDB's parallel sums may differ in their last bits between two stores
            assert_frame_equal(got[name], answer, rel_tol=1e-12, abs_tol=1e-12)
    assert "already in" in atlas_ingest(corpus, store, "--engine", "ray").output


def test_a_failing_worker_publishes_nothing_and_a_single_process_rerun_completes(
    ray_local, small_chunks, tmp_path, corpus, whole, model, monkeypatch
):
    real_chunks = ray_engine.chunks

    def corrupt_chunk_3(*args):
        for chunk, block in enumerate(real_chunks(*args)):
            if chunk == 3:
                block[0].texts[0].ids[0][0] = 10**8  # passes the corpus check, fails in the model's embedding
            yield block

    monkeypatch.setattr(ray_engine, "chunks", corrupt_chunk_3)
    store = Store(tmp_path / "failed")
    failed = atlas_ingest(corpus, store, "--engine", "ray", "--workers", "2")
    line = list(read_conllu(corpus))[3 * CHUNK].line  # the first word of the chunk's first sentence
    assert failed.exit_code == 1 and failed.output.count("\n") == 1, failed.output
    assert failed.output.startswith(f"Error: {corpus}:{line}: chunk 3 (examples 18-23) failed on a Ray worker: Index")
    run_id = whole[1]
    assert not store.run_folder(run_id).exists() and 3 not in staged_chunks(store, run_id)

    monkeypatch.undo()
    done_before = staged_chunks(store, run_id)
    seen: set[int] = set()
    real_write = pipeline.write_table
    monkeypatch.setattr(pipeline, "write_table", lambda d, c, *rest: (seen.add(c), real_write(d, c, *rest)))
    result = pipeline.ingest(check_corpus(corpus), store, model, SETTINGS, progress=False)
    assert sorted(seen) == [c for c in range(6) if c not in done_before]  # only the unfinished chunks, here
    assert_same_store(store, whole, result.run_id)


def test_ingests_interrupted_by_either_engine_resume_with_ray(ray_local, tmp_path, corpus, whole, model, monkeypatch):
    """A single-process ingest stopped after two chunks, then a ray ingest stopped (as by Ctrl-C) once it has
    finished one more (its worker may have finished the others by then): each leaves its chunks staged and nothing
    published; a ray ingest then completes it."""
    run_id = whole[1]
    store = Store(tmp_path / "interrupted")
    interrupt_at_chunk(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        pipeline.ingest(check_corpus(corpus), store, model, SETTINGS, progress=False)
    assert staged_chunks(store, run_id) == [0, 1]
    monkeypatch.undo()

    class StopAtFirst(tqdm):  # the bar counts the finished chunks (it shows nothing here: progress=False)
        def update(self, n: float | None = 1) -> bool | None:
            raise KeyboardInterrupt

    monkeypatch.setattr(ray_engine, "tqdm", StopAtFirst)
    with pytest.raises(KeyboardInterrupt):
        ray_ingest(store, corpus, model, workers=1)
    done = staged_chunks(store, run_id)
    assert {0, 1} < set(done) and not store.run_folder(run_id).exists()
    assert store.unfinished_runs() == [run_id]
    monkeypatch.undo()
    assert_same_store(store, whole, ray_ingest(store, corpus, model, workers=1).run_id)


def test_a_worker_that_does_not_see_the_staging_folder_refuses_to_write(ray_local, tmp_path, corpus, model):
    """The store is not at the same path on a worker's node (no shared filesystem): the ingest fails in one line and
    the worker writes nothing there."""
    elsewhere = tmp_path / "not-shared" / "staging"
    settings = replace(SETTINGS, max_length=model.max_positions)
    block = next(pipeline.chunks(check_corpus(corpus), model, settings, Inputs.of(model.tokenizer, False, corpus)))
    refs, blocks = [ray.put(pa.table({"chunk": [0]}))], {0: ray.put(block)}
    with pytest.raises(AtlasError) as failed:
        ray_engine.RayEngine(workers=1)._stage(
            refs, blocks, {0: (1, 0, CHUNK - 1)}, check_corpus(corpus), model, settings, elsewhere, False
        )
    message = str(failed.value)
    assert message.startswith(f"{corpus}:1: chunk 0 (examples 0-5) failed on a Ray worker: {elsewhere}: not found on")
    assert message.endswith("; every node must see the store at the same path (a shared filesystem)"), message
    assert not elsewhere.parent.exists()


def test_engine_options_are_refused_in_one_line(tmp_path, corpus):
    for kwargs, wanted in [
        ({"workers": 2}, "workers: sets up the Ray workers; add engine='ray' or leave workers out"),
        ({"ray_address": "auto"}, "ray_address: sets up the Ray workers"),
        ({"engine": "spark"}, "engine='spark': expected one of local, ray"),
        ({"engine": "ray", "workers": 0}, "workers=0: expected 1 or more"),
        ({"engine": "ray", "gpus_per_worker": -1}, "gpus_per_worker=-1: expected 0 or more"),
        ({"engine": "ray", "device": "cuda"}, "device='cuda': a Ray worker sees only the GPUs it claims"),
        ({"engine": "ray", "device": "cpu", "gpus_per_worker": 1}, "gpus_per_worker=1: claims GPUs that device='cpu'"),
        ({"engine": "ray", "device": "tpu"}, "device='tpu': expected one of auto, cpu, cuda, mps"),
        ({"device": "gpu"}, "device='gpu': expected one of auto, cpu, cuda, mps"),
    ]:
        with pytest.raises(AtlasError, match=wanted.replace("(", r"\(")):
            api.ingest(corpus, store=tmp_path / "store", **kwargs)
    refused = atlas_ingest(corpus, Store(tmp_path / "store"), "--gpus-per-worker", "1")
    assert refused.exit_code == 1 and refused.output.startswith("Error: --gpus-per-worker: sets up the Ray workers")
    assert not (tmp_path / "store").exists()


def test_gpus_the_cluster_has_not_are_refused_not_waited_for(ray_local, tmp_path, corpus, model):
    store = Store(tmp_path / "store")
    engine = ray_engine.RayEngine(workers=1, gpus_per_worker=ray.cluster_resources().get("GPU", 0) + 1)
    with pytest.raises(AtlasError, match=r"gpus_per_worker=\d+: the Ray cluster has \d+ GPUs; a worker would wait"):
        pipeline.ingest(check_corpus(corpus), store, model, SETTINGS, progress=False, stage=engine)
    assert store.unfinished_runs() == [] and not list(store.data.glob("*"))


def test_the_default_ingest_does_not_import_ray(tmp_path, corpus):
    small = cut_conllu(corpus, 2, tmp_path / "two.conllu")
    code = (
        "import sys\n"
        "from cli import main\n"
        f"sys.argv = ['atlas', 'ingest', '--corpus', {str(small)!r}, '--store', {str(tmp_path / 's')!r}, '--quiet']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as done:\n"
        "    assert not done.code, done.code\n"
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
    assert "run " in done.stdout  # the ingest ran


def test_ray_workers_read_long_inputs_by_rows_as_one_process_does(ray_local, tmp_path, monkeypatch):
    """Inputs over a CPU's attention budget are read by rows in the workers too, whose model is loaded with the
    driver's config overrides (here more positions): the store is the single-process ingest's, row for row."""
    lm = load_model(str(ROOT / "samples" / "models" / "induction-2l"), random_init=True, n_positions=2304)
    repeated = Repeated(length=1100, count=2)  # inputs of 2,201 tokens with the BOS: 38.8 M weights each
    assert lm.n_layers * lm.n_heads * (2 * repeated.length + 1) ** 2 > budget_for(torch.device("cpu")).batch_weights
    settings = Settings(chunk_examples=1)  # a chunk for each worker
    blocks = []
    with monkeypatch.context() as patch:  # the single process's inputs go by rows (the workers' are not seen here)
        rows = cpu_rows.CpuBlockRows.rows
        patch.setattr(cpu_rows.CpuBlockRows, "rows", lambda self, *args: blocks.append(1) or rows(self, *args))
        single = pipeline.ingest(repeated.info(), Store(tmp_path / "single"), lm, settings, progress=False)
    assert blocks
    store = Store(tmp_path / "ray")
    engine = ray_engine.RayEngine(workers=2)
    done = pipeline.ingest(repeated.info(), store, lm, settings, progress=False, stage=engine)
    assert_same_store(store, (Store(tmp_path / "single"), single.run_id), done.run_id)
