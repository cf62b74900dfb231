"""What a new user tripped over: a relative --model, bad numbers, the demo's store."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from atlas.api import store_at
from atlas.cli import cli
from atlas.model.identity import default_model_path
from tests.conftest import EWT_SAMPLE, ROOT, cut_conllu


def atlas(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_a_relative_model_is_found_again_from_anywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run records where the model is, not what was typed; a model moved since gets a line saying so and how
    to point at it."""
    models = tmp_path / "models"
    mini = models / "mini"
    mini.mkdir(parents=True)
    for item in Path(default_model_path()).iterdir():  # the embedded model's files, under another folder
        (mini / item.name).symlink_to(item)
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    cut_conllu(EWT_SAMPLE, 4, work / "four.conllu")
    store = tmp_path / "store"
    monkeypatch.chdir(work)
    done = atlas("ingest", "--corpus", "four.conllu", "--model", "../models/mini", "--store", str(store), "--quiet")
    assert done.exit_code == 0, done.output
    runs = atlas("sql", "SELECT model, model_source FROM runs", "--store", str(store), "--format", "csv")
    assert runs.output.splitlines()[1] == f"../models/mini,{mini.resolve()}"

    monkeypatch.chdir(elsewhere)
    args = ["distances", "--store", str(store), "--examples", "2", "--clusters", "2", "--quiet"]
    done = atlas(*args)
    assert done.exit_code == 0, done.output

    mini.rename(models / "moved")
    done = atlas(*args)
    assert done.exit_code == 1
    (line,) = done.output.strip().splitlines()
    assert f"its model was at {mini.resolve()}, which is no longer there; give --model" in line
    done = atlas(*args, "--model", str(models / "moved"))
    assert done.exit_code == 0, done.output


@pytest.mark.parametrize(
    "args",
    [
        ["ingest", "--max-length", "0"],
        ["ingest", "--max-length", "-3"],
        ["ingest", "--max-edges", "0"],
        ["ingest", "--kept-mass", "0"],
        ["ingest", "--kept-mass", "1.5"],
        ["ingest", "--sample", "0", "--format", "text"],
        ["ingest", "--workers", "0", "--engine", "ray"],
        ["distances", "--examples", "0"],
        ["distances", "--clusters", "0"],
        ["probe", "--train", "A", "--eval", "B", "--epochs", "0"],
        ["probe", "--train", "A", "--eval", "B", "--learning-rate", "0"],
        ["report", "--out", "r.html", "--examples", "-1"],
        ["query", "entropy", "--limit", "0"],
    ],
)
def test_every_bad_number_is_refused_alike(args: list[str], tmp_path: Path) -> None:
    """Exit status 1 and one line 'Error: --option VALUE: ...', before any model is loaded."""
    corpus = cut_conllu(EWT_SAMPLE, 2, tmp_path / "two.conllu")
    if args[0] == "ingest":
        args = [*args, "--corpus", str(corpus)]
    done = atlas(*args, "--store", str(tmp_path / "none"))
    assert done.exit_code == 1, done.output
    (line,) = done.output.strip().splitlines()
    flag = next(a for a in args[1:] if a.startswith("--") and a not in {"--train", "--eval", "--out", "--format"})
    assert re.match(rf"Error: {flag} -?\d", line), line
    assert not (tmp_path / "none").exists()


def test_the_demo_leaves_its_store_where_the_next_command_looks() -> None:
    demo = (ROOT / "scripts" / "demo.sh").read_text()
    default = re.search(r"STORE=\$\{ATLAS_STORE:-([^}]+)\}", demo)
    assert default is not None and Path(default.group(1)) == store_at(None).root
