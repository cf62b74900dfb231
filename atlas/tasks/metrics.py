"""Dev-set metrics of a GLUE task: the task's headline metric and its companions."""

from __future__ import annotations

import numpy as np
from scipy.stats import pearsonr, spearmanr

from atlas.ingestion.readers.glue_tsv import TaskSpec


def metrics(spec: TaskSpec, predictions: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """The papers' metrics in percent: accuracy; F1 of class 1 (MRPC, QQP); Pearson/Spearman (STS-B)."""
    if spec.labels is None:
        return {
            "pearson": 100 * float(pearsonr(predictions, labels).statistic),
            "spearman": 100 * float(spearmanr(predictions, labels).statistic),
        }
    out = {"accuracy": 100 * float(np.mean(predictions == labels))}
    if "f1" in spec.metrics:
        tp = float(np.sum((predictions == 1) & (labels == 1)))
        fp = float(np.sum((predictions == 1) & (labels != 1)))
        fn = float(np.sum((predictions != 1) & (labels == 1)))
        out["f1"] = 100 * 2 * tp / max(2 * tp + fp + fn, 1.0)
    return {name: out[name] for name in spec.metrics}
