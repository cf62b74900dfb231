"""Half precision (``--dtype``) and a random model's config overrides (``--random-init --config KEY=VALUE``).

The weights' dtype is part of the run id only where it is not float32 (every earlier run keeps its id), and is
recorded in ``runs.dtype`` (older stores read as float32). bfloat16 runs on a CPU; its statistics stay close to
float32's (the softmax and the statistics are float32; the difference is the model's own arithmetic). Config
overrides change a random model's shape and hash; a run made with them is found again, and never mistaken for
one made without.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import atlas
from atlas.cli import cli
from atlas.errors import AtlasError
from atlas.ingestion.device import resolve_dtype
from atlas.ingestion.readers.corpus_info import CorpusInfo
from atlas.ingestion.run_id import Settings, check_settings, ingested_run, run_id_for
from atlas.model.identity import config_overrides, model_identity
from atlas.recompute import run_model
from atlas.store import Store
from tests.conftest import EWT_SAMPLE, ROOT, cut_conllu

TINY = ["num_hidden_layers=2", "num_attention_heads=4", "hidden_size=32", "intermediate_size=64"]


class Model:  # what a run id takes of a model
    name, model_hash, random_init, seed = "m", "a" * 64, False, 0


INFO = CorpusInfo(Path("c.conllu"), "f" * 64, 3)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return cut_conllu(EWT_SAMPLE, 8, tmp_path_factory.mktemp("dtype") / "ewt8.conllu")


def ingest_cli(*args: str):
    return CliRunner().invoke(cli, ["ingest", "--quiet", *args])


@pytest.fixture(scope="module")
def both(tmp_path_factory, corpus) -> tuple[Path, str, str]:
    """A store with dense float32 and bfloat16 runs of the embedded model (bfloat16 from the command line)."""
    store = tmp_path_factory.mktemp("both") / "store"
    float32 = atlas.ingest(corpus, store=store, dense=True, dtype="float32", progress=False).run_id
    done = ingest_cli("--corpus", str(corpus), "--store", str(store), "--dense", "--dtype", "bfloat16")
    assert done.exit_code == 0, done.output
    bfloat16 = done.output.split()[1].rstrip(":")
    return store, float32, bfloat16


def test_a_float32_run_keeps_its_id_and_half_precision_is_another_run():
    """The ids of float32 runs are those computed before the setting existed (literal), for several settings."""
    before = {
        "c__m__93cb49966b": Settings(max_length=512),
        "c__m__77896091b3": Settings(max_length=128, kept_mass=None, text="words"),
        "c__m__b212b20228": Settings(max_length=512, word_rows="first", pack="pair"),
    }
    for run_id, settings in before.items():
        assert settings.dtype == "float32"
        assert run_id_for(INFO, Model, settings) == run_id
    words = Settings(max_length=512, text="words")
    formula = [INFO.sha256, "a" * 64, False, 0, 0.9, 512, "none", 512, 6, "1/256", "entropy 2**-17"]
    assert run_id_for(INFO, Model, words) == "c__m__" + hashlib.sha256(json.dumps(formula).encode()).hexdigest()[:10]
    ids = {run_id_for(INFO, Model, Settings(max_length=512, dtype=d)) for d in ("float32", "bfloat16", "float16")}
    assert len(ids) == 3


def test_auto_is_bfloat16_on_cuda_and_float32_elsewhere():
    assert resolve_dtype("auto", "cpu") == resolve_dtype("auto", "mps") == "float32"
    assert resolve_dtype("auto", "cuda") == "bfloat16"
    assert resolve_dtype("auto", "auto", worker_gpus=1) == "bfloat16"  # a Ray worker that claims a GPU
    assert resolve_dtype("auto", "auto", worker_gpus=0) == "float32"
    assert resolve_dtype("float16", "cuda") == "float16" and resolve_dtype("bfloat16", "cpu") == "bfloat16"
    import torch

    assert resolve_dtype("auto") == ("bfloat16" if torch.cuda.is_available() else "float32")
    with pytest.raises(AtlasError, match=r"^dtype='auto': resolved with the device first"):
        check_settings(Settings(dtype="auto"))


def test_auto_is_told_without_importing_torch_on_a_cpu_build():
    code = (
        "import sys; from atlas.ingestion.device import resolve_dtype; "
        "print(resolve_dtype('auto', 'auto'), 'torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    import torch

    if torch.version.cuda is None and torch.version.hip is None:
        assert done.stdout.split() == ["float32", "False"]


def test_bfloat16_on_a_cpu_is_recorded_and_found_again(both, corpus):
    store, float32, bfloat16 = both
    assert bfloat16 != float32
    st = atlas.open(store)
    rows = st.sql("SELECT run_id, dtype FROM runs ORDER BY dtype").rows()
    assert rows == [(bfloat16, "bfloat16"), (float32, "float32")]
    assert st.runs().filter(run_id=bfloat16)["dtype"].to_list() == ["bfloat16"]
    again = atlas.ingest(corpus, store=store, dense=True, dtype="bfloat16", progress=False)
    assert again.already_present and again.run_id == bfloat16
    dense = Settings(kept_mass=None, device="cpu")
    found = [
        ingested_run(Path(store) / "data", corpus, "conllu", None, None, 0, None, False, 0, Settings(**s))
        for s in ({**dense.__dict__, "dtype": "bfloat16"}, dense.__dict__, {**dense.__dict__, "dtype": "float16"})
    ]
    assert found == [bfloat16, float32, None]


def test_bfloat16_statistics_are_close_to_float32s(both):
    """Measured on these 8 sentences (dense, embedded model, CPU; 13,248 rows): per row at most 0.043 nats of
    entropy and 0.018 of a mass to self, previous, next, [CLS], [SEP] or punctuation; per head the mean entropy
    moves by at most 0.0099 nats and the mean masses by at most 0.0033 ([CLS]); 0.6 % of the rows' argmax change.
    The bounds are about twice those."""
    store, float32, bfloat16 = both
    st = atlas.open(store)
    masses = ["to_self", "to_prev", "to_next", "to_cls", "to_sep", "to_dot_comma"]
    pairs = f"attn_rows a JOIN attn_rows b USING (example_id, layer, head, src_tok) WHERE a.run_id = '{float32}' "
    pairs += f"AND b.run_id = '{bfloat16}'"
    differences = ", ".join(f"max(abs(a.{m} - b.{m}))" for m in masses)
    n, entropy, *mass, argmax = st.sql(
        f"SELECT count(*), max(abs(a.entropy - b.entropy)), {differences}, avg((a.argmax_tok <> b.argmax_tok)::INT) "
        f"FROM {pairs}"
    ).row(0)
    assert n == st.sql(f"SELECT count(*) FROM attn_rows WHERE run_id = '{float32}'").item() > 1000
    assert 0 < entropy < 0.1 and max(mass) < 0.04 and argmax < 0.02
    means = ", ".join(f"avg(a.{m}) - avg(b.{m}) AS {m}" for m in ["entropy", *masses])
    per_head = f"SELECT layer, head, {means} FROM {pairs} GROUP BY layer, head"
    entropy, *mass = st.sql(
        f"SELECT {', '.join(f'max(abs({m}))' for m in ['entropy', *masses])} FROM ({per_head})"
    ).row(0)
    assert entropy < 0.02 and max(mass) < 0.01


def test_older_runs_read_as_float32(both, tmp_path):
    """A runs file written before the setting (no dtype column) reads as 'float32'."""
    store, float32, _ = both
    old, new = Store(store), Store(tmp_path / "old")
    new.make_folders()
    for part in old.run_folder(float32).rglob("*.parquet"):
        target = new.run_folder(float32) / part.relative_to(old.run_folder(float32))
        target.parent.mkdir(parents=True, exist_ok=True)
        table = pq.read_table(part)
        pq.write_table(table.drop_columns(["dtype"]) if part.parent.name == "runs" else table, target)
    new.write_database()
    assert new.connect().execute("SELECT dtype FROM runs").fetchall() == [("float32",)]
    assert atlas.open(new.root).table("runs").select("dtype").collect().rows() == [("float32",)]


def test_float16_runs_on_a_cpu(tmp_path, corpus):
    done = atlas.ingest(
        corpus, store=tmp_path / "s", random_init=True, config=TINY, dtype="float16", dense=True, progress=False
    )
    st = atlas.open(tmp_path / "s")
    assert st.sql("SELECT dtype, n_layers, n_heads FROM runs").rows() == [("float16", 2, 4)]
    sums = "SELECT min(entropy), max(to_self + to_prev + to_next) FROM attn_rows WHERE run_id = ?"
    low, high = st.connection.execute(sums, [done.run_id]).fetchone()
    assert low > 0 and high <= 1.0001


def test_a_runs_model_is_loaded_again_in_its_dtype_with_its_config(tmp_path, corpus):
    """What recomputes a run's maps (distances, probes, patterns) loads the model that made them."""
    done = atlas.ingest(
        corpus, store=tmp_path / "s", random_init=True, config=TINY, dtype="bfloat16", progress=False
    )
    assert atlas.open(tmp_path / "s").sql("SELECT config FROM runs").item() == json.dumps(
        config_overrides(TINY), sort_keys=True
    )
    lm = run_model(Store(tmp_path / "s"), done.run_id)
    assert (lm.dtype, lm.n_layers, lm.n_heads, lm.model.config.hidden_size) == ("bfloat16", 2, 4, 32)


def test_config_overrides_shape_a_random_model(tmp_path, corpus):
    store = tmp_path / "s"
    args = ["--corpus", str(corpus), "--store", str(store), "--random-init", *(f"--config={c}" for c in TINY[:2])]
    done = ingest_cli(*args)
    assert done.exit_code == 0, done.output
    run_id = done.output.split()[1].rstrip(":")
    st = atlas.open(store)
    assert st.sql("SELECT n_layers, n_heads, dtype FROM runs").rows() == [(2, 4, "float32")]
    shown = st.runs().select("weights", "shape", "kept_mass").rows()  # what tells it from the default shape's run
    assert shown == [("random (seed 0; num_attention_heads=4 num_hidden_layers=2)", "2 x 4", "0.9 (max 6)")]
    assert ingest_cli(*args).output.startswith(f"run {run_id} is already in")
    overrides = {"num_hidden_layers": 2, "num_attention_heads": 4}
    assert config_overrides(TINY[:2]) == overrides
    model_hash = st.sql("SELECT model_hash FROM runs").item()
    assert model_identity(None, True, 0, overrides).model_hash == model_hash != model_identity(None, True, 0).model_hash
    assert model_identity(None, False, 0, overrides) is None  # a pretrained model's hash would not tell the change
    settings = Settings(device="cpu")
    found = [ingested_run(store / "data", corpus, "conllu", None, None, 0, None, True, 0, settings, c) for c in
             (overrides, None, {"num_hidden_layers": 2})]  # fmt: skip
    assert found == [run_id, None, None]
    api = atlas.ingest(corpus, store=store, random_init=True, config=overrides, progress=False)
    assert api.already_present and api.run_id == run_id


def one_line_error(result, start: str) -> None:
    assert result.exit_code == 1, result.output
    assert result.output.startswith(f"Error: {start}"), result.output
    assert result.output.count("\n") == 1 and "Traceback" not in result.output and result.exception is not None


def test_the_options_are_refused_in_one_line(tmp_path, corpus):
    base = ["--corpus", str(corpus), "--store", str(tmp_path / "s")]
    for args, start in [
        (["--config", "num_hidden_layers=2"], "--config num_hidden_layers=2: the pretrained weights would not match"),
        (["--random-init", "--config", "num_hidden_layers"], "--config num_hidden_layers: expected KEY=VALUE"),
        (["--random-init", "--config", "=2"], "--config =2: expected KEY=VALUE"),
        (["--random-init", "--config", "no_such_key=1"], "--config no_such_key=1: not a key of all-MiniLM-L6-v2's"),
        (["--random-init", "--config", "revision=main"], "--config revision=main: not a key of"),
        (["--random-init", "--config", "dtype=float16"], "--config dtype=float16: the weights' dtype is --dtype's"),
        (["--random-init", "--config", "hidden_size=7"], "--config hidden_size=7: all-MiniLM-L6-v2 cannot be built"),
        (["--random-init", "--config", "hidden_size=abc"], "--config hidden_size=abc: all-MiniLM-L6-v2's config"),
        (["--random-init", "--config", "num_hidden_layers=0"], "--config num_hidden_layers=0: all-MiniLM-L6-v2 cannot"),
        (["--random-init", "--config", "num_hidden_layers=-1"], "--config num_hidden_layers=-1: all-MiniLM-L6-v2 can"),
        (["--random-init", "--config", "num_attention_heads=0"], "--config num_attention_heads=0: all-MiniLM-L6-v2 c"),
        (["--random-init", "--config", "vocab_size=10"], "--config vocab_size=10: all-MiniLM-L6-v2 cannot be built so"),
        (["--dtype", "half"], "--dtype half: expected one of auto, float32, bfloat16, float16"),
    ]:
        one_line_error(ingest_cli(*base, *args), start)
    assert not (tmp_path / "s" / "data").exists() or not any((tmp_path / "s" / "data").iterdir())


def test_the_api_says_them_in_its_words(tmp_path, corpus):
    store = tmp_path / "s"
    for kwargs, start in [
        ({"config": {"num_hidden_layers": 2}}, "config=num_hidden_layers=2: the pretrained weights would not match"),
        ({"random_init": True, "config": ["x"]}, "config=x: expected KEY=VALUE"),
        ({"random_init": True, "config": {"foo": 1}}, "config=foo=1: not a key of"),
        ({"random_init": True, "config": {"hidden_size": "abc"}}, "config=hidden_size=abc: all-MiniLM-L6-v2's config"),
        ({"random_init": True, "config": {"vocab_size": 10}}, "config=vocab_size=10: all-MiniLM-L6-v2 cannot be built"),
        ({"dtype": "half"}, "dtype='half': expected one of auto, float32, bfloat16, float16"),
    ]:
        with pytest.raises(AtlasError) as refused:
            atlas.ingest(corpus, store=store, progress=False, **kwargs)
        assert str(refused.value).startswith(start), str(refused.value)


def test_a_ray_worker_loads_the_drivers_dtype_and_config(tmp_path, corpus):
    """A Ray actor loads the model in the run's dtype with the driver's overrides: its weights' hash matches."""
    ray_engine = pytest.importorskip("atlas.ingestion.ray_engine")
    from atlas.model.load import load_model

    driver = load_model(None, random_init=True, dtype="bfloat16", **config_overrides(TINY))
    (tmp_path / "done").mkdir()
    settings = Settings(dtype="bfloat16")
    worker = ray_engine.ChunkStager(
        driver.source, True, 0, driver.model_hash, driver.config_overrides, corpus, settings, tmp_path, None, {}
    )
    assert worker.failed is None
    assert (worker.lm.dtype, worker.lm.n_layers, worker.lm.n_heads) == ("bfloat16", 2, 4)
    assert next(worker.lm.model.parameters()).dtype == driver.model.dtype
