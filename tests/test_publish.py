"""A checkpoint folder replaced by ``atlas finetune``: killed at each step of the swap (before each rename,
exchange or removal, and half-way through a removal), the folder is the old one or the new one, whole, at
once where the folders are exchanged in one step and after the next run's recovery where they cannot be."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from atlas.errors import AtlasError
from atlas.tasks import publish
from atlas.tasks.finetune import check_out


def files(folder: Path) -> dict[str, bytes] | None:
    if not folder.exists():
        return None
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def checkpoint(folder: Path, tag: str) -> dict[str, bytes]:
    (folder / "sub").mkdir(parents=True)
    for name in ("model.safetensors", "config.json", "sub/vocab.txt"):
        (folder / name).write_text(f"{tag} {name}")
    (folder / "atlas_task.json").write_text(json.dumps({"tag": tag}))
    return files(folder)


class Killed(BaseException):
    """Stands for kill -9: nothing after the step that raises it runs."""


def killing_at(step: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the publish steps (renames, the exchange, removals) raise ``Killed`` at the ``step``-th one; a removal
    killed removes one file first."""
    seen = [0]

    def count() -> bool:
        seen[0] += 1
        return seen[0] - 1 == step

    real_rename, real_exchange, real_rmtree = Path.rename, publish._exchange, shutil.rmtree

    def rename(self, target):
        if count():
            raise Killed
        return real_rename(self, target)

    def exchange(a, b):
        if count():
            raise Killed
        return real_exchange(a, b)

    def rmtree(path, *args, **kwargs):
        if count():
            next(p for p in Path(path).rglob("*") if p.is_file()).unlink()
            raise Killed
        return real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(Path, "rename", rename)
    monkeypatch.setattr(publish, "_exchange", exchange)
    monkeypatch.setattr(publish.shutil, "rmtree", rmtree)


@pytest.mark.parametrize("exchange", [True, False], ids=["exchanged", "two renames"])
def test_a_swap_killed_at_each_step_leaves_the_old_or_the_new_folder(tmp_path, monkeypatch, exchange):
    if not exchange:
        monkeypatch.setattr(publish, "_exchange", lambda a, b: False)
    out = tmp_path / "ckpt"
    step, finished = 0, False
    while not finished:
        shutil.rmtree(tmp_path)
        old = checkpoint(out, "old")
        new = checkpoint(publish.staging(out), "new")
        with monkeypatch.context() as m:
            killing_at(step, m)
            try:
                publish.publish(out)
                finished = True
            except Killed:
                pass
        if exchange:
            assert files(out) in (old, new), f"killed at step {step}"
        else:  # only between the two renames is there no folder under the name; the old one is beside it
            assert files(out) in (old, new) or files(out.with_name(".ckpt.old")) == old, f"killed at step {step}"
        publish.recover(out)  # what the next run does first
        assert files(out) == new if finished else files(out) in (old, new)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
        step += 1
    assert step >= 3  # every step was killed once before the swap ran through


def test_the_next_finetune_puts_back_a_checkpoint_killed_between_the_renames(tmp_path, monkeypatch):
    monkeypatch.setattr(publish, "_exchange", lambda a, b: False)
    out = tmp_path / "ckpt"
    old = checkpoint(out, "old")
    checkpoint(publish.staging(out), "new")
    real_rename = Path.rename

    def rename(self, target):
        if self == publish.staging(out):
            raise Killed
        return real_rename(self, target)

    with monkeypatch.context() as m:
        m.setattr(Path, "rename", rename)
        with pytest.raises(Killed):
            publish.publish(out)
    assert not out.exists()
    check_out(out)  # the first thing 'atlas finetune --out ckpt' does
    assert files(out) == old and sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_a_symlinked_checkpoint_is_replaced_not_written_through(tmp_path):
    target = tmp_path / "elsewhere"
    old = checkpoint(target, "old")
    out = tmp_path / "ckpt"
    out.symlink_to(target)
    new = checkpoint(publish.staging(out), "new")
    publish.publish(out)
    assert files(out) == new and files(target) == old and not publish.staging(out).exists()


def test_check_out_still_refuses_a_folder_that_is_not_a_checkpoint(tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("mine")
    with pytest.raises(AtlasError, match="is not a checkpoint"):
        check_out(tmp_path / "notes")
