"""Head distances (Clark et al. 2019, Section 6): Jensen-Shannon divergence between the attention
distributions of every pair of heads, a 2-D MDS embedding and a clustering.

As the released head_distances.py: every row of every input ([CLS]/[SEP] rows included) is smoothed
to 0.999 a + 0.001 / n (n: the input's tokens) and JS(P, Q) = (KL(P || M) + KL(Q || M)) / 2 with
M = (P + Q) / 2, in nats, is summed over the rows of the inputs. The released code keeps that sum; here it
is divided by the number of rows summed (``head_pairs.n_rows``), so ``js`` is the mean divergence per
token, comparable across runs and corpora; ``js * n_rows`` is the released number. The division is one
constant for every pair, so the MDS embedding only scales and the clusters are unchanged.

The released notebook (General_Analysis.ipynb cell 18) embeds the heads with metric MDS (n_init=5,
max_iter=1000, eps=1e-10, random starts); here SMACOF starts from classical MDS (deterministic) with the
same iteration limit and tolerance. The clustering (average linkage) is the project's own: the paper
colours the MDS points by behaviour and by layer.

Exact: the dense attention of the run's first inputs is recomputed with the run's own model (its
weights hash is checked) from the word pieces stored in the run, so the answer does not depend on the
edge sparsity. Results go back into the store (``head_pairs`` and ``head_scores``) with the run id.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.spatial.distance import squareform
from sklearn.manifold import MDS
from tqdm import tqdm

from atlas.errors import AtlasError, arg
from atlas.model.load import LoadedModel
from atlas.recompute import dense_maps, run_model, stored_inputs
from atlas.store import Store

ANALYSIS = "head distances"
MIXTURE_BYTES = 2**28  # memory of one block of the pairwise mixtures (float64 [block, K, n, n])
JS_SMOOTHING = 1e-3  # head_distances.py: each row becomes (1 - s) a + s / n


def js_sums(attn: np.ndarray) -> tuple[np.ndarray, int]:
    """Sum over the rows of one input of JS(head a's row, head b's row) for every pair; and the row count.

    Rows smoothed as released; JS(P, Q) = H((P + Q) / 2) - (H(P) + H(Q)) / 2 in nats, with H the entropy
    (equal to the released (KL(P || M) + KL(Q || M)) / 2), in float64.
    """
    n_layers, n_heads, n, _ = attn.shape
    rows = (1 - JS_SMOOTHING) * torch.from_numpy(attn.reshape(n_layers * n_heads, n, n)).double() + JS_SMOOTHING / n
    own = torch.special.entr(rows).sum(dim=-1)  # [K, n]
    k = rows.shape[0]
    out = torch.zeros(k, k, dtype=torch.float64)
    step = max(1, MIXTURE_BYTES // (8 * k * n * n))
    for start in range(0, k, step):
        block = rows[start : start + step]
        mixture = torch.special.entr((block[:, None] + rows[None]) / 2).sum(dim=-1)  # [b, K, n]
        js = mixture - (own[start : start + step, None] + own[None]) / 2
        out[start : start + step] = js.sum(dim=-1)
    return out.numpy(), n


def compute(
    store: Store, run_id: str, n_examples: int, n_clusters: int, progress: bool = True, model: str | None = None
) -> None:
    """Compute head distances for a run and write them into the store (``model``: see ``run_model``)."""
    lm = run_model(store, run_id, model=model)
    inputs = stored_inputs(store, run_id, n_examples)
    if not inputs:
        raise AtlasError(f"{arg('run', repr(run_id))}: the run has no input to compare heads on")
    k = lm.n_layers * lm.n_heads
    if n_clusters > k:
        raise AtlasError(f"{arg('clusters', n_clusters)}: the model has {k} heads; expected {k} clusters or fewer")
    total = np.zeros((k, k))
    n_rows = 0
    maps = dense_maps(lm, inputs)
    for _, attn in tqdm(maps, total=len(inputs), desc="head distances", unit="input", disable=not progress):
        sums, n = js_sums(attn)
        total += sums
        n_rows += n
    js = total / n_rows
    js = (js + js.T) / 2
    np.fill_diagonal(js, 0.0)
    mds = MDS(n_components=2, metric="precomputed", init="classical_mds", max_iter=1000, eps=1e-10, random_state=0)
    coords = mds.fit_transform(js)
    clusters = fcluster(linkage(squareform(js, checks=False), method="average"), n_clusters, criterion="maxclust")
    _write(store, run_id, lm, js, n_rows, coords, clusters)


def _write(
    store: Store, run_id: str, lm: LoadedModel, js: np.ndarray, n_rows: int, coords: np.ndarray, clusters: np.ndarray
) -> None:
    k = lm.n_layers * lm.n_heads
    a, b = np.divmod(np.arange(k * k), k)
    pairs = {
        "run_id": run_id,
        "layer_a": a // lm.n_heads,
        "head_a": a % lm.n_heads,
        "layer_b": b // lm.n_heads,
        "head_b": b % lm.n_heads,
        "js": js.reshape(-1),
        "n_rows": n_rows,
    }
    heads = np.arange(k)
    metrics = {"mds_x": coords[:, 0], "mds_y": coords[:, 1], "cluster": clusters.astype(float)}
    scores = {
        "run_id": run_id,
        "analysis": ANALYSIS,
        "layer": np.tile(heads // lm.n_heads, len(metrics)),
        "head": np.tile(heads % lm.n_heads, len(metrics)),
        "metric": np.repeat(list(metrics), k),
        "value": np.concatenate(list(metrics.values())),
    }
    store.put(run_id, "head_pairs", "distances", pairs, k * k)
    store.put(run_id, "head_scores", "distances", scores, 3 * k)
