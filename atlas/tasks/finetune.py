"""Fine-tuning a task model on CPU, as Michel et al.'s released code does, saved as a safetensors checkpoint.

The settings of their ``prepare_task.sh`` (Kovaleva et al. cite the same, Devlin et al.'s): the whole
training set, 3 epochs, batches of 32 drawn in a new random order every epoch, learning rate 2e-5,
max length 128. The optimiser is the code's ``BertAdam`` (``pytorch_pretrained_bert/optimization.py``)
with its ``warmup_linear`` schedule over the updates (warm-up 10 %, ``classifier_args.py``), weight
decay 0.01 except on biases and LayerNorm weights, dropout on (``model.train()``).

Seeded: the task head's initial weights, a random init's encoder, the training subset (``train_limit``:
the first N examples after a seeded shuffle) and the batch order. ``epochs=0`` saves the model as it is:
Kovaleva et al.'s "pre-trained, not fine-tuned" row. The checkpoint folder (weights, config, tokenizer
and ``atlas_task.json`` with the training settings and dev metrics) is written under a temporary name
and put in place of the old one so that a kill at any point leaves one of them whole (``publish``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from atlas.errors import AtlasError, Note, arg
from atlas.ingestion.readers.glue_tsv import Examples
from atlas.tasks.classifier import TASK_FILE, TaskModel, encode, evaluate
from atlas.tasks.publish import publish, recover, staging

NO_DECAY = ("bias", "LayerNorm.weight")  # run_classifier.py: no weight decay on these parameters


@dataclass
class TrainSettings:
    epochs: int = 3
    train_limit: int | None = None  # None: the whole training set
    learning_rate: float = 2e-5
    warmup: float = 0.1  # share of the updates with a linearly rising learning rate
    batch_size: int = 32
    max_length: int = 128
    seed: int = 0


def subset(examples: Examples, n: int | None, seed: int) -> Examples:
    """The first ``n`` examples (all when None) after a seeded shuffle."""
    order = np.random.default_rng(seed).permutation(len(examples))[: n or len(examples)]
    return Examples(
        [examples.text_a[i] for i in order],
        None if examples.text_b is None else [examples.text_b[i] for i in order],
        examples.labels[order],
    )


def updates(n_examples: int, settings: TrainSettings) -> int:
    """The optimiser's updates: one per batch of ``n_examples``, every epoch."""
    return settings.epochs * -(-n_examples // settings.batch_size)


def saved_as_loaded(n_examples: int, settings: TrainSettings) -> bool:
    """Whether training leaves the weights as loaded: one update, at the schedule's progress 0, where its rate is
    0 (with a warm-up)."""
    return updates(n_examples, settings) == 1 and warmup_linear(0.0, settings.warmup) == 0


def one_update_note() -> Note:
    """What a fine-tune of one update with a warm-up does: nothing (the schedule's first update is at progress 0)."""
    return Note(
        "note: one update: the released BertAdam's schedule gives the first update a learning rate of 0 "
        "(warmup_linear at progress 0, with a warm-up), so the weights are saved as loaded; train on more than one "
        f"batch ({arg('epochs')}, {arg('train_limit')}, {arg('batch_size')})"
    )


def warmup_linear(x: float, warmup: float) -> float:
    """The code's schedule at training progress x: rising to 1 over the warm-up, then 1 - x."""
    return x / warmup if x < warmup else 1.0 - x


class BertAdam(torch.optim.Optimizer):
    """Adam without bias correction, eps 1e-6, each parameter's gradient clipped to norm 1, weight decay
    added to the update (not where the gradient is 0); the learning rate of update i is
    ``lr * warmup_linear(i / total, warmup)``."""

    def __init__(self, groups: list[dict], lr: float, total: int, warmup: float) -> None:
        super().__init__(groups, {"lr": lr, "weight_decay": 0.01})
        self.total, self.warmup, self.updates = total, warmup, 0

    @torch.no_grad()
    def step(self, closure: None = None) -> None:
        scale = warmup_linear(self.updates / self.total, self.warmup)
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                torch.nn.utils.clip_grad_norm_(p, 1.0)
                grad, state = p.grad, self.state[p]
                if not state:
                    state["m"], state["v"] = torch.zeros_like(p), torch.zeros_like(p)
                state["m"].mul_(0.9).add_(grad, alpha=0.1)
                state["v"].mul_(0.999).addcmul_(grad, grad, value=0.001)
                update = state["m"] / (state["v"].sqrt() + 1e-6)
                if group["weight_decay"] > 0:
                    update += (group["weight_decay"] * p).masked_fill_(grad.eq(0), 0.0)
                p.add_(update, alpha=-group["lr"] * scale)
        self.updates += 1


def optimiser(model: torch.nn.Module, settings: TrainSettings, total: int) -> BertAdam:
    named = list(model.named_parameters())
    groups = [
        {"params": [p for n, p in named if not any(nd in n for nd in NO_DECAY)]},
        {"params": [p for n, p in named if any(nd in n for nd in NO_DECAY)], "weight_decay": 0.0},
    ]
    return BertAdam(groups, settings.learning_rate, total, settings.warmup)


def train(tm: TaskModel, train_set: Examples, settings: TrainSettings, progress: bool = True) -> int:
    """Fine-tune in place; returns the number of training examples used."""
    examples = subset(train_set, settings.train_limit, settings.seed)
    if settings.epochs == 0:
        return 0
    total = updates(len(examples), settings)
    model = tm.lm.model
    optim = optimiser(model, settings, total)
    order = np.random.default_rng(settings.seed + 1)
    torch.manual_seed(settings.seed)
    model.train()
    bar = tqdm(total=total, desc=f"fine-tune {tm.spec.name}", unit="batch", disable=not progress)
    try:
        for _ in range(settings.epochs):
            shuffled = subset(examples, None, int(order.integers(2**32)))
            for batch in encode(tm, shuffled, settings.batch_size, settings.max_length):
                labels = batch.labels.float() if tm.spec.labels is None else batch.labels
                loss = model(**batch.inputs, labels=labels).loss
                optim.zero_grad()
                loss.backward()
                optim.step()
                bar.update()
                bar.set_postfix(loss=f"{loss.item():.3f}")
    finally:
        bar.close()
        model.eval()
    return len(examples)


def check_out(out: Path) -> None:
    """Refuse an ``out`` folder that would lose data: only a new, empty or checkpoint folder is replaced (after
    a killed save is undone or finished)."""
    given = arg("out", repr(str(out)))
    if not out.resolve().name:
        raise AtlasError(f"{given}: not a folder name")
    if not out.absolute().parent.is_dir():
        raise AtlasError(f"{given}: '{out.absolute().parent}' is not a folder")
    recover(out)
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / TASK_FILE).is_file())):
        raise AtlasError(f"{given}: exists and is not a checkpoint of 'atlas finetune'; choose a new folder")


def save(tm: TaskModel, out: Path, info: dict) -> None:
    """Write the checkpoint folder beside ``out``, then put it in place: an existing one is replaced only once
    the new one is whole, and a kill at any point leaves one of them (see ``atlas.tasks.publish``)."""
    recover(out)
    tmp = staging(out)
    tm.lm.model.save_pretrained(tmp, safe_serialization=True)
    tm.lm.tokenizer.save_pretrained(tmp)
    (tmp / TASK_FILE).write_text(json.dumps(info, indent=2) + "\n")
    publish(out)


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
