"""Head importance and pruning (Michel et al. 2019, Sections 3-4).

A gate xi_h multiplies each head's output. Importance I_h = E_x |d L(x) / d xi_h| at xi = 1, over the
dev examples (one gate set per example, so one backward pass gives every example's gradient), then
normalised per layer by its l2 norm. Pruning masks heads in order of normalised importance, least
important first, in steps of 5 % of all heads; "all heads but one" keeps a single head of a layer.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from atlas.tasks.classifier import Batch, TaskModel, evaluate_many
from ingest.intervene import Intervention, intervening

STEP = 0.05


def example_losses(tm: TaskModel, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The fine-tuning loss of each example: cross-entropy, or squared error for a regression task."""
    if tm.spec.labels is None:
        return (logits[:, 0] - labels.float()) ** 2
    return nn.functional.cross_entropy(logits, labels, reduction="none")


def head_importance(tm: TaskModel, batches: list[Batch]) -> np.ndarray:
    """E_x |d L(x) / d xi_h| as ``[layers, heads]`` (not normalised)."""
    tm.lm.model.requires_grad_(False)  # only the gates need gradients
    total = torch.zeros(tm.lm.n_layers, tm.lm.n_heads, dtype=torch.float64)
    n = 0
    for batch in batches:
        size = len(batch.labels)
        gates = torch.ones(size, tm.lm.n_layers, tm.lm.n_heads, requires_grad=True)
        with intervening(Intervention(gates=gates)):
            logits = tm.lm.model(**batch.inputs).logits
        example_losses(tm, logits, batch.labels).sum().backward()
        total += gates.grad.abs().sum(dim=0).double()
        n += size
    return (total / n).numpy()


def normalise(importance: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(importance, axis=1, keepdims=True)
    return importance / np.where(norms > 0, norms, 1.0)


def _masked(n_layers: int, n_heads: int, heads: list[tuple[int, int]]) -> tuple[int, Intervention]:
    gates = torch.ones(n_layers, n_heads)
    for layer, head in heads:
        gates[layer, head] = 0.0
    first = min((layer for layer, _ in heads), default=n_layers)
    return min(first, n_layers - 1), Intervention(gates=gates)


def pruning_and_single_heads(
    tm: TaskModel, batches: list[Batch], normalised: np.ndarray
) -> tuple[dict[str, float], list[dict]]:
    """Baseline metrics; rows 'pruned' (5 % steps up to every head, a step that rounds to the previous
    one's head count left out) and 'all_but_one' (per layer and head)."""
    n_layers, n_heads = normalised.shape
    order = [divmod(int(i), n_heads) for i in np.argsort(normalised.reshape(-1), kind="stable")]
    k = n_layers * n_heads
    plan: list[dict] = []
    counts = sorted({round(step * STEP * k) for step in range(round(1 / STEP) + 1)})  # steps that differ
    plan += [{"kind": "pruned", "pruned_share": count / k, "heads": order[:count]} for count in counts]
    for layer in range(n_layers):
        for keep in range(n_heads):
            others = [(layer, h) for h in range(n_heads) if h != keep]
            plan.append({"kind": "all_but_one", "layer": layer, "head": keep, "heads": others})
    ablations = [(0, Intervention())] + [_masked(n_layers, n_heads, p["heads"]) for p in plan]
    results = evaluate_many(tm, batches, ablations)
    rows = [
        {**{key: p.get(key) for key in ("kind", "layer", "head", "pruned_share")}, "metrics": m}
        for p, m in zip(plan, results[1:], strict=True)
    ]
    return results[0], rows
