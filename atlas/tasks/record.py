"""Task-model results into the store: ``task_models`` and ``ablations`` rows, keyed by the model's run id."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import numpy as np

from atlas.store import Store
from atlas.tasks.classifier import TaskModel


def task_run_id(tm: TaskModel) -> str:
    """<task>__<checkpoint folder>__<hash of its weights> (hash of config and seed for a random init)."""
    return f"{tm.spec.name}__{Path(tm.lm.source).name}__{tm.lm.model_hash[:10]}"


def write_task_model(store: Store, tm: TaskModel, info: dict, checkpoint: Path) -> str:
    run_id = task_run_id(tm)
    dev = info["dev_metrics"]
    columns = {
        "run_id": run_id,
        "task": tm.spec.name,
        "model": info["model"],
        "init": info["init"],
        "epochs": info["epochs"],
        "n_train": info["n_train"],
        "learning_rate": info["learning_rate"],
        "seed": info["seed"],
        "checkpoint": str(checkpoint.resolve()),
        "n_examples": info["n_dev"],
        "metric": list(dev),
        "value": list(dev.values()),
        "primary_metric": tm.spec.metrics[0],
        "created_at": datetime.now(),
    }
    store.create()
    store.put(run_id, "task_models", "finetune", columns, len(dev))
    return run_id


def write_ablations(
    store: Store, tm: TaskModel, name: str, method: str, rows: list[dict], baseline: dict[str, float], n: int
) -> str:
    """``rows``: kind, layer, head, pruned_share and metrics (one ablations row per metric)."""
    run_id = task_run_id(tm)
    flat = [
        {**{k: row.get(k) for k in ("kind", "layer", "head", "pruned_share")}, "metric": m, "value": v}
        for row in rows
        for m, v in row["metrics"].items()
    ]
    columns = {key: [r[key] for r in flat] for key in flat[0]}
    columns |= {
        "run_id": run_id,
        "task": tm.spec.name,
        "method": method,
        "n_examples": n,
        "primary_metric": tm.spec.metrics[0],
        "baseline": [baseline[r["metric"]] for r in flat],
        "delta": [r["value"] - baseline[r["metric"]] for r in flat],
    }
    store.create()
    store.put(run_id, "ablations", name, columns, len(flat))
    return run_id


def write_importance(store: Store, tm: TaskModel, raw: np.ndarray, normalised: np.ndarray, n_train: int) -> str:
    """Michel et al.'s head importance into ``head_scores`` (analysis 'head importance'), with the number
    of training examples it was computed on (metric 'n_train_examples', the same for every head)."""
    run_id = task_run_id(tm)
    n_layers, n_heads = raw.shape
    layer, head = np.divmod(np.arange(raw.size), n_heads)
    columns = {
        "run_id": run_id,
        "analysis": "head importance",
        "layer": np.tile(layer, 3),
        "head": np.tile(head, 3),
        "metric": np.repeat(["importance", "importance_normalised", "n_train_examples"], raw.size),
        "value": np.concatenate([raw.reshape(-1), normalised.reshape(-1), np.full(raw.size, float(n_train))]),
    }
    store.create()
    store.put(run_id, "head_scores", "importance", columns, 3 * raw.size)
    return run_id
