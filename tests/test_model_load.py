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


def test_an_org_slash_name_hub_id_loads_from_the_cache(tmp_path):
    """'ORG/NAME' is a hub id (found in the Hugging Face cache, offline), not a missing local folder."""
    commit = "0" * 40
    repo = tmp_path / "hub" / "models--atlas-test--tiny"
    shutil.copytree(default_model_path(), repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    code = (
        "from atlas.model.load import load_model\n"
        "from atlas.model.identity import model_identity\n"
        "lm = load_model('atlas-test/tiny')\n"
        "print(lm.name, lm.n_layers, lm.model_hash == model_identity('atlas-test/tiny').model_hash)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["atlas-test/tiny", "6", "True"]


@pytest.mark.parametrize("name", ["./no-such-model", "/no/such/model", "~/no-such-model", "no/such/model"])
def test_a_missing_local_folder_is_named_as_such(name):
    with pytest.raises(AtlasError, match=f"^model='{name}': no such model directory$"):
        load_model(name)
