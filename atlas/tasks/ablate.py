"""Disabling heads and layers (Kovaleva et al. 2019, Section 4.6) or masking them (Michel et al. 2019).

Every single head and every whole layer, evaluated on the dev set against the baseline. A sweep reuses
the baseline's lower layers (see ``evaluate_many``).
"""

from __future__ import annotations

import torch

from atlas.errors import AtlasError, arg
from atlas.model.intervene import Intervention
from atlas.tasks.classifier import Batch, TaskModel, evaluate_many

METHODS = ("uniform", "mask")


def disabling(method: str, n_layers: int, n_heads: int, layer: int, heads: list[int]) -> Intervention:
    """Heads of one layer made uniform, or their outputs gated to 0."""
    if method == "uniform":
        return Intervention(uniform={layer: heads})
    gates = torch.ones(n_layers, n_heads)
    gates[layer, heads] = 0.0
    return Intervention(gates=gates)


def sweep(
    tm: TaskModel,
    batches: list[Batch],
    method: str,
    heads: bool = True,
    layers: bool = True,
    reuse: bool = True,
    progress: bool = False,
) -> tuple[dict[str, float], list[dict]]:
    """Baseline metrics and one row per disabled head (kind 'head') and per disabled layer ('layer');
    ``progress``: a bar over the evaluations."""
    if not heads and not layers:
        raise AtlasError(f"ablate: {arg('heads=False')} and {arg('layers=False')} leave nothing to disable")
    n_layers, n_heads = tm.lm.n_layers, tm.lm.n_heads
    plan: list[dict] = []
    for layer in range(n_layers):
        if heads:
            plan += [{"kind": "head", "layer": layer, "head": h, "heads": [h]} for h in range(n_heads)]
        if layers:
            plan.append({"kind": "layer", "layer": layer, "head": None, "heads": list(range(n_heads))})
    ablations = [(0, Intervention())]
    ablations += [(p["layer"], disabling(method, n_layers, n_heads, p["layer"], p["heads"])) for p in plan]
    results = evaluate_many(tm, batches, ablations, reuse=reuse, progress=progress, desc=f"ablate {tm.spec.name}")
    rows = [
        {**{k: p[k] for k in ("kind", "layer", "head")}, "metrics": m} for p, m in zip(plan, results[1:], strict=True)
    ]
    return results[0], rows
