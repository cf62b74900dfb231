"""Head importance and pruning (Michel et al. 2019, Section 4), as their released code computes them.

Importance (``classifier_eval.py``, ``calculate_head_importance``): over the training examples in
batches of 32, the gradient of the batch's mean loss with respect to each head's context vectors
ctx_t; per head, the sum over examples and tokens of |<dL/dctx_t, ctx_t>| (the absolute value is
taken per token, before any sum). A gate on every token of every head's output gives exactly these
dot products: d L / d xi_{h,t} = <dL/dctx_t, ctx_t> at xi = 1. The sums are divided by the number of
real tokens, the last layer's by the number of examples, then normalised per layer by their l2 norm.

Pruning (``run_classifier.py``, ``pruning.py``): heads are masked in ascending order of normalised
importance, computed once; at p = 5, 10, ..., 100 % the first int(K p / 100) of the K heads are masked
and the model is scored on the dev set. "All heads but one" masks every head of a layer but one.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from atlas.model.intervene import Intervention, intervening
from atlas.tasks.classifier import Batch, TaskModel, evaluate_many

PERCENTS = range(5, 101, 5)  # heads_pruning.sh: --prune_percent `seq 5 5 100`


def example_losses(tm: TaskModel, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The fine-tuning loss of each example: cross-entropy, or squared error for a regression task."""
    if tm.spec.labels is None:
        return (logits[:, 0] - labels.float()) ** 2
    return nn.functional.cross_entropy(logits, labels, reduction="none")


def head_importance(tm: TaskModel, batches: list[Batch], progress: bool = False) -> tuple[np.ndarray, int]:
    """Raw importance ``[layers, heads]`` (not normalised) and the number of examples it was computed on;
    ``progress``: a bar over the batches."""
    tm.lm.model.requires_grad_(False)  # only the gates need gradients
    n_layers, n_heads = tm.lm.n_layers, tm.lm.n_heads
    total = torch.zeros(n_layers, n_heads, dtype=torch.float64)
    tokens = n = 0
    with tqdm(batches, desc=f"importance {tm.spec.name}", unit="batch", disable=not progress) as bar:
        for batch in bar:
            size, length = batch.inputs["input_ids"].shape
            gates = torch.ones(size, n_layers, n_heads, length, requires_grad=True)
            with intervening(Intervention(gates=gates)):
                logits = tm.lm.model(**batch.inputs).logits
            example_losses(tm, logits, batch.labels).mean().backward()  # the batch's mean loss, as in the code
            total += gates.grad.abs().sum(dim=(0, 3)).double()
            tokens += int(batch.inputs["attention_mask"].sum())
            n += size
    total[:-1] /= tokens
    total[-1] /= n
    return total.numpy(), n


def normalise(importance: np.ndarray) -> np.ndarray:
    """Each layer's scores divided by their l2 norm (plus 1e-20, as the code adds)."""
    return importance / (np.linalg.norm(importance, axis=1, keepdims=True) + 1e-20)


def pruned_counts(k: int) -> list[int]:
    """Heads masked at each step: none, then int(K p / 100) for each percentage (repeats left out)."""
    return sorted({0} | {int(k * float(p) / 100) for p in PERCENTS})


def _masked(n_layers: int, n_heads: int, heads: list[tuple[int, int]]) -> tuple[int, Intervention]:
    gates = torch.ones(n_layers, n_heads)
    for layer, head in heads:
        gates[layer, head] = 0.0
    first = min((layer for layer, _ in heads), default=n_layers)
    return min(first, n_layers - 1), Intervention(gates=gates)


def pruning_and_single_heads(
    tm: TaskModel, batches: list[Batch], normalised: np.ndarray, progress: bool = False
) -> tuple[dict[str, float], list[dict]]:
    """Baseline metrics; rows 'pruned' (each step of ``pruned_counts``) and 'all_but_one' (per layer and head);
    ``progress``: a bar over the evaluations."""
    n_layers, n_heads = normalised.shape
    order = [divmod(int(i), n_heads) for i in np.argsort(normalised.reshape(-1), kind="stable")]
    k = n_layers * n_heads
    plan: list[dict] = [
        {"kind": "pruned", "pruned_share": count / k, "heads": order[:count]} for count in pruned_counts(k)
    ]
    for layer in range(n_layers):
        for keep in range(n_heads):
            others = [(layer, h) for h in range(n_heads) if h != keep]
            plan.append({"kind": "all_but_one", "layer": layer, "head": keep, "heads": others})
    ablations = [(0, Intervention())] + [_masked(n_layers, n_heads, p["heads"]) for p in plan]
    results = evaluate_many(tm, batches, ablations, progress=progress, desc=f"prune {tm.spec.name}")
    rows = [
        {**{key: p.get(key) for key in ("kind", "layer", "head", "pruned_share")}, "metrics": m}
        for p, m in zip(plan, results[1:], strict=True)
    ]
    return results[0], rows
