"""A sentence(-pair) classifier or regressor on an encoder, its inputs and its dev-set evaluation.

Evaluation can reuse work across many ablations of one model: for an ablation whose first changed
layer is l, the layers below l give the baseline's hidden states, so ``evaluate_many`` runs them once
per batch and lets each ablation start at its own first layer.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn
from tqdm import tqdm
from transformers import AutoModelForSequenceClassification

from atlas.errors import AtlasError, Note, arg
from atlas.ingestion.readers.glue_tsv import Examples, TaskSpec
from atlas.model.intervene import Intervention, intervening
from atlas.model.load import LoadedModel, load_model
from atlas.tasks.metrics import metrics

TASK_FILE = "atlas_task.json"  # what a checkpoint folder records about its task and training


@dataclass
class TaskModel:
    lm: LoadedModel  # lm.model has the task head
    spec: TaskSpec
    info: dict  # the checkpoint's atlas_task.json, empty for a model that is not one


def checkpoint_info(name: str | None) -> dict:
    """What a checkpoint folder of ``atlas finetune`` records (its ``atlas_task.json``); empty for another model."""
    if name is None or not (Path(name) / TASK_FILE).is_file():
        return {}
    try:
        return json.loads((Path(name) / TASK_FILE).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise AtlasError(f"{Path(name) / TASK_FILE}: not valid JSON ({exc})") from None


def untrained_head(tm: TaskModel) -> str | None:
    """Why a task model's head is untrained, where it is: its weights are not in the model's files (an encoder
    without a task head, as the embedded one: a fresh head), or it is a checkpoint saved without training
    (``atlas finetune --epochs 0``). None: the head was read from the files (and may be trained)."""
    prefix = f"{tm.lm.model.base_model_prefix}."
    head = [name for name in tm.lm.fresh_weights if not name.startswith(prefix)]
    if head:
        return f"the model's files hold no {', '.join(head)}: initialised at random"
    if tm.info.get("epochs") == 0:
        return "a checkpoint of 'atlas finetune' of 0 epochs keeps its fresh head"
    return None


def untrained_head_note(why: str, what: str) -> Note:
    """What ``what`` (the task loss, the ablation scores) of a model with an untrained head measures."""
    return Note(f"note: the classification head is untrained ({why}): {what} not a fine-tuned model's")


def load_task_model(name: str | None, spec: TaskSpec, random_init: bool = False, seed: int = 0) -> TaskModel:
    """A task model: a checkpoint of ``atlas finetune`` for this task, or an encoder with a fresh head."""
    info = checkpoint_info(name)
    if info and info.get("task") != spec.name:
        raise AtlasError(f"{arg('model', repr(str(name)))}: a checkpoint for {info.get('task')}, not {spec.name}")
    overrides: dict[str, object] = {"num_labels": spec.n_labels}
    if spec.labels is None:
        overrides["problem_type"] = "regression"
    lm = load_model(
        name, random_init=random_init, seed=seed, auto_class=AutoModelForSequenceClassification, **overrides
    )
    if lm.decoder:  # its tokenizer pads with no token, its classifier reads the last one: not these papers' setting
        raise AtlasError(
            f"{arg('model', repr(lm.name))}: a decoder (causal LM); the GLUE task commands take an encoder"
        )
    return TaskModel(lm, spec, info)


@dataclass
class Batch:
    inputs: dict[str, torch.Tensor]
    labels: torch.Tensor


def encode(tm: TaskModel, examples: Examples, batch_size: int = 32, max_length: int = 128) -> list[Batch]:
    """Tokenised, padded batches in the examples' order (texts longer than max_length are truncated)."""
    out = []
    for start in range(0, len(examples), batch_size):
        a = examples.text_a[start : start + batch_size]
        b = None if examples.text_b is None else examples.text_b[start : start + batch_size]
        enc = tm.lm.tokenizer(a, b, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
        out.append(Batch(dict(enc), torch.from_numpy(examples.labels[start : start + batch_size])))
    return out


def predictions(tm: TaskModel, logits: torch.Tensor) -> np.ndarray:
    if tm.spec.labels is None:
        return logits[:, 0].float().numpy()
    return logits.argmax(dim=-1).numpy()


def evaluate(tm: TaskModel, batches: list[Batch], intervention: Intervention | None = None) -> dict[str, float]:
    """The task's metrics on the batches, with an intervention on the attention heads."""
    return evaluate_many(tm, batches, [(0, intervention or Intervention())], reuse=False)[0]


def labels(batches: list[Batch]) -> np.ndarray:
    return torch.cat([b.labels for b in batches]).numpy()


def encoder_layers(model: nn.Module, n_layers: int) -> nn.ModuleList:
    """The encoder's list of layers (the first ModuleList of that length in the base model)."""
    for module in model.base_model.modules():
        if isinstance(module, nn.ModuleList) and len(module) == n_layers:
            return module
    raise AtlasError(f"{type(model).__name__}: no list of {n_layers} encoder layers found")


@contextmanager
def _reusing(layers: nn.ModuleList, outputs: list[object], first: int) -> Iterator[None]:
    """Layers below ``first`` return their recorded outputs instead of computing them."""
    for i in range(first):
        layers[i].forward = lambda *args, _out=outputs[i], **kwargs: _out
    try:
        yield
    finally:
        for i in range(first):
            del layers[i].forward


def evaluate_many(
    tm: TaskModel,
    batches: list[Batch],
    ablations: list[tuple[int, Intervention]],
    reuse: bool = True,
    progress: bool = False,
    desc: str = "evaluate",
) -> list[dict[str, float]]:
    """Metrics for each ``(first changed layer, intervention)``; with ``reuse`` the unchanged lower
    layers are run once per batch (their outputs recorded on the baseline pass), else every ablation
    runs every layer. ``progress``: a bar (labelled ``desc``) over the batches times the ablations."""
    layers = encoder_layers(tm.lm.model, tm.lm.n_layers)
    preds: list[list[np.ndarray]] = [[] for _ in ablations]
    total = len(batches) * len(ablations)
    with torch.inference_mode(), tqdm(total=total, desc=desc, unit="pass", disable=not progress) as bar:
        for batch in batches:
            outputs: list[object] = []
            if reuse:
                hooks = [
                    layer.register_forward_hook(lambda _m, _a, out, keep=outputs.append: keep(out)) for layer in layers
                ]
                try:
                    tm.lm.model(**batch.inputs)
                finally:
                    for hook in hooks:
                        hook.remove()
            for slot, (first, intervention) in enumerate(ablations):
                with intervening(intervention), _reusing(layers, outputs, first if reuse else 0):
                    preds[slot].append(predictions(tm, tm.lm.model(**batch.inputs).logits))
                bar.update()
    gold = labels(batches)
    return [metrics(tm.spec, np.concatenate(p), gold) for p in preds]
