"""Fine-tuning a task model on CPU (Kovaleva et al. Table 1), saved as a safetensors checkpoint.

Seeded: the task head's initial weights, a random init's encoder, the training subset (the first
``train_limit`` examples after a seeded shuffle) and the batch order. AdamW with a linear decay of the
learning rate. ``epochs=0`` saves the model as it is: the paper's "pre-trained, not fine-tuned" row.
The checkpoint folder (weights, config, tokenizer and ``atlas_task.json`` with the training settings
and dev metrics) is written under a temporary name and renamed into place.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from atlas.errors import AtlasError
from atlas.tasks.classifier import TASK_FILE, TaskModel, encode, evaluate
from atlas.tasks.glue import Examples


@dataclass
class TrainSettings:
    epochs: int = 3
    train_limit: int | None = 4000  # None: the whole training set
    learning_rate: float = 5e-5
    batch_size: int = 32
    max_length: int = 128
    seed: int = 0


def _subset(examples: Examples, n: int | None, seed: int) -> Examples:
    order = np.random.default_rng(seed).permutation(len(examples))[: n or len(examples)]
    return Examples(
        [examples.text_a[i] for i in order],
        None if examples.text_b is None else [examples.text_b[i] for i in order],
        examples.labels[order],
    )


def train(tm: TaskModel, train_set: Examples, settings: TrainSettings, progress: bool = True) -> int:
    """Fine-tune in place; returns the number of training examples used."""
    subset = _subset(train_set, settings.train_limit, settings.seed)
    if settings.epochs == 0:
        return 0
    batches = encode(tm, subset, settings.batch_size, settings.max_length)
    model = tm.lm.model
    optimiser = torch.optim.AdamW(model.parameters(), lr=settings.learning_rate, weight_decay=0.01)
    total = settings.epochs * len(batches)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimiser, lambda step: 1.0 - step / total)
    order = np.random.default_rng(settings.seed + 1)
    torch.manual_seed(settings.seed)
    model.train()
    bar = tqdm(total=total, desc=f"fine-tune {tm.spec.name}", unit="batch", disable=not progress)
    try:
        for _ in range(settings.epochs):
            for index in order.permutation(len(batches)):
                batch = batches[index]
                labels = batch.labels.float() if tm.spec.labels is None else batch.labels
                loss = model(**batch.inputs, labels=labels).loss
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
                schedule.step()
                bar.update()
                bar.set_postfix(loss=f"{loss.item():.3f}")
    finally:
        bar.close()
        model.eval()
    return len(subset)


def check_out(out: Path) -> None:
    """Refuse an --out folder that would lose data: only a new, empty or checkpoint folder is replaced."""
    if not out.resolve().name:
        raise AtlasError(f"--out '{out}': not a folder name")
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / TASK_FILE).is_file())):
        raise AtlasError(f"--out '{out}': exists and is not a checkpoint of 'atlas finetune'; choose a new folder")


def save(tm: TaskModel, out: Path, info: dict) -> None:
    """Write the checkpoint folder atomically (an existing one is replaced only once the new one is whole)."""
    tmp = out.with_name(f".{out.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tm.lm.model.save_pretrained(tmp, safe_serialization=True)
    tm.lm.tokenizer.save_pretrained(tmp)
    (tmp / TASK_FILE).write_text(json.dumps(info, indent=2) + "\n")
    old = out.with_name(f".{out.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if out.exists():
        out.rename(old)
    tmp.rename(out)
    shutil.rmtree(old, ignore_errors=True)


def finetune(
    tm: TaskModel, train_set: Examples, dev_set: Examples, settings: TrainSettings, out: Path, progress: bool = True
) -> dict:
    """Train, evaluate on dev, save; returns what the checkpoint records."""
    check_out(out)
    n_train = train(tm, train_set, settings, progress)
    dev = evaluate(tm, encode(tm, dev_set, settings.batch_size, settings.max_length))
    info = {
        "task": tm.spec.name,
        "model": tm.lm.name,
        "init": "random" if tm.lm.random_init else "pretrained",
        **asdict(settings),
        "n_train": n_train,  # examples actually trained on (0 when not fine-tuned)
        "n_dev": len(dev_set),
        "dev_metrics": dev,
    }
    save(tm, out, info)
    return info
