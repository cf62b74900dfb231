"""How ``load_model`` tells a hub id (NAME or ORG/NAME) from a local folder."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from atlas.errors import AtlasError
from atlas.model.identity import default_model_path
from atlas.model.load import load_model

ROOT = Path(__file__).resolve().parent.parent


def _cached_hub_model(tmp_path: Path) -> Path:
    """The embedded model as the Hugging Face cache holds hub id 'atlas-test/tiny'; returns the cache."""
    commit = "0" * 40
    repo = tmp_path / "hub" / "models--atlas-test--tiny"
    shutil.copytree(default_model_path(), repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    return tmp_path / "hub"


def _python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``code`` run by a Python process of its own with ``env``, which exits 0."""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done


def test_an_org_slash_name_hub_id_loads_from_the_cache(tmp_path):
    """'ORG/NAME' is a hub id (found in the Hugging Face cache, offline), not a missing local folder."""
    env = {**os.environ, "HF_HUB_CACHE": str(_cached_hub_model(tmp_path)), "HF_HUB_OFFLINE": "1"}
    code = (
        "from atlas.model.load import load_model\n"
        "from atlas.model.identity import model_identity\n"
        "lm = load_model('atlas-test/tiny')\n"
        "print(lm.name, lm.n_layers, lm.model_hash == model_identity('atlas-test/tiny').model_hash)\n"
    )
    assert _python(code, env).stdout.split() == ["atlas-test/tiny", "6", "True"]


@pytest.mark.parametrize("name", ["./no-such-model", "/no/such/model", "~/no-such-model", "no/such/model"])
def test_a_missing_local_folder_is_named_as_such(name):
    with pytest.raises(AtlasError, match=f"^model='{name}': no such model directory$"):
        load_model(name)


def test_a_hub_that_cannot_be_reached_is_not_waited_for(tmp_path):
    """Without a network (here: a hub address that refuses connections) and without HF_HUB_OFFLINE, a cached
    hub id loads from the cache and an uncached one is refused in one line, both without huggingface_hub's
    retries (about 25 s a file)."""
    proxies = {"http_proxy", "https_proxy", "all_proxy", "no_proxy"}
    env = {k: v for k, v in os.environ.items() if k.lower() not in proxies and k != "HF_HUB_OFFLINE"}
    env |= {"HF_HUB_CACHE": str(_cached_hub_model(tmp_path)), "HF_ENDPOINT": "http://127.0.0.1:9"}
    code = (
        "from atlas.model.load import load_model\n"
        "from atlas.errors import AtlasError\n"
        "print(load_model('atlas-test/tiny').n_layers)\n"
        "try:\n"
        "    load_model('atlas-test/none')\n"
        "except AtlasError as exc:\n"
        "    print(exc)\n"
        "from huggingface_hub import constants\n"
        "print(constants.HF_HUB_OFFLINE)\n"  # the process's hub settings are left as they were
    )
    done = _python(code, env)
    assert "Retrying" not in done.stderr, done.stderr
    layers, refused, offline = done.stdout.strip().splitlines()
    assert layers == "6" and offline == "False"
    assert refused.startswith("model='atlas-test/none': not a folder here, and not in the Hugging Face cache; the hub ")
    assert refused.endswith("(127.0.0.1: Connection refused)")


def test_the_hub_is_tried_unless_offline_mode_or_a_proxy_is_set(monkeypatch):
    from huggingface_hub import constants

    from atlas.model import identity

    for name in [k for k in os.environ if k.lower().endswith("_proxy")]:
        monkeypatch.delenv(name)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setattr(identity, "_TRIED", {})
    monkeypatch.setenv("NO_PROXY", "localhost")  # names no proxy
    assert identity.hub_unreachable() == "127.0.0.1: Connection refused"
    assert identity.cache_only("atlas-test/tiny") and not identity.cache_only(default_model_path())
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    assert identity.hub_unreachable() is None
    monkeypatch.delenv("HTTPS_PROXY")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert identity.hub_unreachable() is None


def test_a_folder_without_config_or_tokenizer_files_is_named_as_such(tmp_path):
    """An empty folder has no config.json (transformers asks for a model_type key); a folder of config and weights
    alone would get an empty tokenizer from AutoTokenizer, and the ingest would fail on its template."""
    model = ROOT / "samples" / "models" / "induction-2l"
    (tmp_path / "empty").mkdir()
    with pytest.raises(AtlasError, match=r"^model='.*empty': no config.json in this folder \(a model's folder hol"):
        load_model(str(tmp_path / "empty"))
    untokenized = tmp_path / "untokenized"
    untokenized.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(model / name, untokenized)
    with pytest.raises(AtlasError, match=r"^model='.*untokenized': no tokenizer files \(tokenizer.json, or its "):
        load_model(str(untokenized))
    shutil.copy(model / "tokenizer.json", untokenized)
    assert load_model(str(untokenized)).tokenizer.vocab_size > 0
