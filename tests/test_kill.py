"""kill -9 at any point of a command that writes leaves the store (and a checkpoint folder, new or replacing
one) as before or complete, never half-written, and the same command then succeeds.

Each command is killed twice, once at a seeded random moment and once the moment its first pending,
temporary or journal file appears (the write phase), then run to the end; what the store shows after
each kill must be what it showed before or what the finished command shows. The crash points inside a
transaction are also taken one by one in-process.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from atlas.cli import cli
from atlas.store import Store
from tests.conftest import EWT_SAMPLE, cut_conllu, save_tiny_bert

ROOT = Path(__file__).resolve().parent.parent
GLUE = ROOT / "samples" / "glue"
WRITING = (".pending", ".tmp", ".json")  # what a writer leaves while it writes (journal: .journal-*.json)


def visible(store: Path) -> dict[str, int]:
    """What the views read: every Parquet file of a run's folder (data/run_id=<run id>) not hidden, as <run
    id>/<table>/<file>, with its row count (after a reader opened the store, which completes journalled results)."""
    Store(store).connect().close()
    data = store / "data"
    return {
        str(p.relative_to(data)).removeprefix("run_id="): pq.ParquetFile(p).metadata.num_rows
        for p in sorted(data.glob("run_id=*/*/*.parquet"))
        if not any(part.startswith(".") for part in str(p.relative_to(data)).removeprefix("run_id=").split("/"))
    }


def checkpoint_state(out: Path | None) -> str:
    """'absent', or which checkpoint is in place (the hash of its weights), whole."""
    if out is None or not out.exists():
        return "absent"
    info = json.loads((out / "atlas_task.json").read_text())  # a folder in place is whole
    weights = (out / "model.safetensors").read_bytes()
    assert weights and info
    return hashlib.sha256(weights).hexdigest()


def _writing(store: Path, out: Path | None) -> bool:
    names = [p.name for p in store.rglob(".*") if p.name.endswith(WRITING)]
    return bool(names) or (out is not None and out.with_name(f".{out.name}.tmp").exists())


def _run_killed(args: list[str], store: Path, out: Path | None, delay: float | None) -> bool:
    """Run ``atlas ARGS`` and kill -9 it after ``delay`` seconds, or (None) when it starts writing; True if
    it was killed before it finished."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "atlas.cli", *args], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    start = time.monotonic()
    while proc.poll() is None:
        if (delay is not None and time.monotonic() - start >= delay) or (delay is None and _writing(store, out)):
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            return True
        time.sleep(0.001)
    assert proc.returncode == 0, proc.stderr.read()
    return False


def _kill_at_random(args: list[str], store: Path, out: Path | None, delay: float) -> None:
    """Kill at ``delay`` seconds; on a machine fast enough to finish sooner, put the store (and checkpoint) back as
    they were and try again at half the delay."""
    saved = store.with_name(f"{store.name}.saved")
    shutil.copytree(store, saved / "store")
    if out is not None and out.exists():
        shutil.copytree(out, saved / "out")
    try:
        while not _run_killed(args, store, out, delay):
            assert delay > 0.05, "finished before any kill"
            delay /= 2
            for now, then in ((store, saved / "store"), (out, saved / "out")):
                if now is not None:
                    shutil.rmtree(now, ignore_errors=True)
                    if then.exists():
                        shutil.copytree(then, now)
    finally:
        shutil.rmtree(saved)


def check_kills(args: list[str], store: Path, window: tuple[float, float], out: Path | None = None) -> None:
    """Kill at a random moment of ``window`` (seconds: within the command's run) and when it starts writing."""
    before = (visible(store), checkpoint_state(out))
    _kill_at_random(args, store, out, random.Random(" ".join(args[:2])).uniform(*window))
    after_kills = [(visible(store), checkpoint_state(out))]
    _run_killed(args, store, out, None)
    after_kills.append((visible(store), checkpoint_state(out)))
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    complete = (visible(store), checkpoint_state(out))
    assert complete != before
    for state in after_kills:
        assert state in (before, complete)
    assert not [p for p in store.rglob(".*") if p.name.endswith((".pending", ".json"))]


@pytest.fixture(scope="module")
def run_store(tmp_path_factory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("kill") / "store"
    corpus = cut_conllu(EWT_SAMPLE, 6, root.parent / "six.conllu")
    assert CliRunner().invoke(cli, ["ingest", "--corpus", str(corpus), "--store", str(root), "--quiet"]).exit_code == 0
    return root, Store(root).run_ids()[0]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A 2-layer, 2-head BERT with random weights and the embedded model's tokenizer."""
    return save_tiny_bert(tmp_path_factory.mktemp("tiny-bert"), 16, 2, 2)


@pytest.mark.parametrize(
    ("command", "window"),
    [
        (["distances", "--examples", "4", "--quiet"], (1.0, 6.0)),
        (["patterns"], (0.5, 1.5)),
        (["probe", "--train-limit", "3", "--eval-limit", "3", "--quiet"], (1.0, 4.0)),
    ],
    ids=["distances", "patterns", "probe"],
)
def test_kill_an_analysis(run_store, command, window):
    store, run_id = run_store
    if command[0] == "probe":
        args = [*command, "--train", run_id, "--eval", run_id]
    else:
        args = [*command, "--run", run_id]
    check_kills([*args, "--store", str(store)], store, window)


def test_kill_finetune_and_ablate(tiny, tmp_path):
    store, out = tmp_path / "store", tmp_path / "ckpt"
    data = ["--task", "RTE", "--data", str(GLUE / "RTE"), "--store", str(store), "--dev-limit", "8"]
    Store(store).create()
    finetune = ["finetune", "--model", str(tiny), "--out", str(out), "--train-limit", "16", "--epochs", "1", "--quiet"]
    check_kills([*finetune, *data], store, (1.0, 2.5), out)
    check_kills([*finetune, "--seed", "1", *data], store, (1.0, 2.5), out)  # over the checkpoint: old or new
    check_kills(["ablate", "--model", str(out), "--method", "mask", *data], store, (1.0, 2.5))


def test_a_transaction_killed_at_each_point(tmp_path, monkeypatch):
    """Stopped before its journal: nothing visible, and the pending files are removed by the next writer;
    stopped half-way through its renames: the next reader completes it."""
    store = Store(tmp_path / "store")
    store.create()
    rows = {"run_id": "r", "analysis": "a", "layer": [0, 1], "head": [0, 0], "metric": "m", "value": [1.0, 2.0]}

    def write_two() -> None:
        with store.transaction():
            store.put("r", "head_scores", "one", rows, 2)
            store.put("r", "head_pairs", "two", {"run_id": "r", "js": [0.5]}, 1)

    real_replace = os.replace
    for stop_after in range(2):  # renames done before the crash: 0 (journal not yet applied) or 1
        calls = []

        def crashing_replace(src, dst, calls=calls, stop_after=stop_after):
            if str(src).endswith(".pending"):
                if len(calls) == stop_after:
                    raise KeyboardInterrupt  # stands for the kill: nothing after this line runs
                calls.append(src)
            return real_replace(src, dst)

        monkeypatch.setattr(os, "replace", crashing_replace)
        with pytest.raises(KeyboardInterrupt):
            write_two()
        monkeypatch.setattr(os, "replace", real_replace)
        journal = list(store.root.glob(".journal-*.json"))
        assert len(journal) == 1  # written before the first rename
        got = visible(store.root)  # a reader completes the journalled transaction
        assert got == {"r/head_pairs/two.parquet": 1, "r/head_scores/one.parquet": 2}
        assert not list(store.root.glob(".journal-*.json")) and not list(store.root.rglob("*.pending"))
        store.remove("r")

    def killed_before_the_journal(path, data):
        raise KeyboardInterrupt

    monkeypatch.setattr("atlas.store.write_file", killed_before_the_journal)
    with pytest.raises(KeyboardInterrupt):
        write_two()
    monkeypatch.undo()
    assert visible(store.root) == {}
    store.put("r", "head_pairs", "three", {"run_id": "r", "js": [0.1]}, 1)  # a later writer cleans up
    assert not list(store.root.rglob("*.pending")) and visible(store.root) == {"r/head_pairs/three.parquet": 1}
