"""Re-running a finished ingest: the run is found by its id, computed without loading the model (the id the
ingest computes, for the embedded model, a random init, a GLUE file and a text file), so the answer comes
without importing torch (a random init's serialised config from a cache keyed by config.json's bytes)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from atlas import api
from atlas.errors import AtlasError
from atlas.ingestion.run_id import Settings, ingested_run
from atlas.model.identity import config_hash, model_identity
from tests.conftest import EWT_SAMPLE, ROOT, cut_conllu

MRPC = ROOT / "samples" / "glue" / "MRPC" / "dev.tsv"
WIKITEXT = ROOT / "samples" / "wikitext" / "wiki.test-sample.raw"


def _corpus(tmp_path: Path, fmt: str) -> Path:
    if fmt == "glue":
        path = tmp_path / "dev.tsv"
        path.write_text("\n".join(MRPC.read_text(encoding="utf-8-sig").splitlines()[:3]) + "\n")
        return path
    if fmt == "text":
        return WIKITEXT
    return cut_conllu(EWT_SAMPLE, 3, tmp_path / "three.conllu")


@pytest.fixture(autouse=True)
def config_cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "attention-atlas" / "configs"


CASES = {  # format, ingest options
    "embedded model": ("conllu", {}),
    "random init": ("conllu", {"random_init": True, "seed": 3, "dense": True}),
    "glue": ("glue", {"task": "mrpc", "max_length": 64}),
    "text": ("text", {"sample": 1, "sample_seed": 2}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_finished_ingest_is_found_by_the_run_id_the_ingest_computes(tmp_path, case):
    fmt, options = CASES[case]
    corpus, store = _corpus(tmp_path, fmt), tmp_path / "store"
    kept = None if options.get("dense") else Settings().kept_mass
    pack = {"glue": "pair", "text": "pair"}.get(fmt, "none")
    settings = Settings(kept, options.get("max_length"), pack)
    task, sample, sample_seed = options.get("task"), options.get("sample"), options.get("sample_seed", 0)
    random_init, seed = options.get("random_init", False), options.get("seed", 0)

    def found() -> str | None:
        return ingested_run(store / "data", corpus, fmt, task, sample, sample_seed, None, random_init, seed, settings)

    assert found() is None
    first = api.ingest(corpus, store=store, format=fmt, progress=False, **options)
    assert not first.already_present
    assert found() == first.run_id  # the id the ingest computed with the model loaded
    again = api.ingest(corpus, store=store, format=fmt, progress=False, **options)
    assert again.already_present and again.run_id == first.run_id
    other = Settings(kept, 32, pack)  # other settings: another run
    assert ingested_run(store / "data", corpus, fmt, task, sample, sample_seed, None, random_init, seed, other) is None


@pytest.mark.parametrize("random_init", [False, True])
def test_a_rerun_answers_without_importing_torch(tmp_path, random_init):
    corpus, store = _corpus(tmp_path, "conllu"), tmp_path / "store"
    api.ingest(corpus, store=store, random_init=random_init, progress=False)
    args = ["ingest", "--corpus", str(corpus), "--store", str(store), *(["--random-init"] if random_init else [])]
    script = (
        "import json, sys; from click.testing import CliRunner; from atlas.cli import cli; "
        f"r = CliRunner().invoke(cli, {args!r}); "
        "print(json.dumps([r.exit_code, r.output, 'torch' in sys.modules, 'transformers' in sys.modules]))"
    )
    run = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    code, output, torch_loaded, transformers_loaded = json.loads(run.stdout.strip().splitlines()[-1])
    assert code == 0 and "is already in" in output, output
    assert not torch_loaded and not transformers_loaded


def test_the_config_cache_is_keyed_by_the_config_file(tmp_path, config_cache):
    from transformers import AutoConfig

    from atlas.model.identity import default_model_path

    model = tmp_path / "model"
    shutil.copytree(default_model_path(), model)
    first = model_identity(str(model), random_init=True, seed=1)
    assert first is not None and len(list(config_cache.glob("*.json"))) == 1
    expected = config_hash(AutoConfig.from_pretrained(model).to_json_string(), 1)
    assert first.model_hash == expected
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "num_attention_heads": 4}))
    second = model_identity(str(model), random_init=True, seed=1)
    assert second is not None and len(list(config_cache.glob("*.json"))) == 2
    assert second.model_hash == config_hash(AutoConfig.from_pretrained(model).to_json_string(), 1) != expected


def test_a_rerun_with_an_option_the_corpus_check_refuses_is_refused(tmp_path):
    corpus, store = _corpus(tmp_path, "conllu"), tmp_path / "store"
    api.ingest(corpus, store=store, progress=False)
    with pytest.raises(AtlasError, match="sample: only a format='text' corpus is sampled"):
        api.ingest(corpus, store=store, sample=1, progress=False)


def test_the_longest_input_is_read_from_the_config_only_where_it_is_as_written(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    for model_type, expected in (("bert", 512), ("roberta", None)):
        (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type, "max_position_embeddings": 512}))
        identity = model_identity(str(tmp_path))
        assert identity is not None and identity.max_positions == expected
    # without it, only a run ingested with --max-length given is found before loading the model
    assert model_identity(str(tmp_path / "missing")) is None
