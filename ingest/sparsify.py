"""Stage 4: turn one input's dense attention ``[layers, heads, n, n]`` into store rows.

- edges: per attention row, the largest weights until the kept-mass target is reached (the argmax is
  always kept), with weights rounded to float16 precision (relative error at most 2**-11; half the
  bytes on disk); ``kept_mass=None`` is the dense setting: every weight, exact float32.
- rows: exact per-row statistics from the dense row: entropy (nats), max weight, argmax, kept mass and
  number of kept edges.
- word rows: Clark et al.'s word-level map (attention TO a word = sum over its pieces, FROM a word =
  mean over its pieces, [CLS]/[SEP] as units of their own); for every word, the other real word it
  attends to most (never itself, [CLS] or [SEP]) and that weight. Exact whatever the edge sparsity.
"""

from __future__ import annotations

import numpy as np

Columns = dict[str, np.ndarray]


def _row_index(n_layers: int, n_heads: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r = np.arange(n_layers * n_heads * n)
    return r // (n_heads * n), (r // n) % n_heads, r % n


def sparsify(attn: np.ndarray, kept_mass: float | None) -> tuple[Columns, Columns]:
    """Return (edges, rows) column arrays for one input."""
    n_layers, n_heads, n, _ = attn.shape
    rows = attn.reshape(-1, n)
    order = np.argsort(-rows, axis=1, kind="stable")
    ranked = np.take_along_axis(rows, order, axis=1)
    if kept_mass is None:
        keep = np.ones(ranked.shape, dtype=bool)
    else:
        keep = (np.cumsum(ranked, axis=1) - ranked) < kept_mass
        keep[:, 0] = True
    layer, head, src = _row_index(n_layers, n_heads, n)
    r_idx, k_idx = np.nonzero(keep)
    dst = order[r_idx, k_idx]
    by_dst = np.lexsort((dst, r_idx))
    r_idx, dst = r_idx[by_dst], dst[by_dst]
    edges = {
        "layer": layer[r_idx],
        "head": head[r_idx],
        "src_tok": src[r_idx],
        "dst_tok": dst,
        "weight": rows[r_idx, dst] if kept_mass is None else rows[r_idx, dst].astype(np.float16).astype(np.float32),
    }
    with np.errstate(divide="ignore", invalid="ignore"):
        plogp = np.where(rows > 0, rows * np.log(rows), 0.0)
    stats = {
        "layer": layer,
        "head": head,
        "src_tok": src,
        "entropy": -plogp.sum(axis=1),
        "max_weight": ranked[:, 0],
        "argmax_tok": order[:, 0],
        "kept_mass": (ranked * keep).sum(axis=1),
        "n_kept": keep.sum(axis=1),
    }
    return edges, stats


def word_rows(attn: np.ndarray, token_word: list[int | None]) -> Columns:
    """Word-level argmax rows for one input; ``token_word[t]`` is the word of token t (None: special)."""
    n_layers, n_heads, n, _ = attn.shape
    n_words = 1 + max((w for w in token_word if w is not None), default=-1)
    if n_words < 2:
        return {k: np.zeros(0, dtype=np.int64) for k in ("layer", "head", "src_word", "dst_word", "weight")}
    # units: words 0..n_words-1, then one unit per special token
    unit = np.empty(n, dtype=np.int64)
    extra = n_words
    for t, w in enumerate(token_word):
        if w is None:
            unit[t] = extra
            extra += 1
        else:
            unit[t] = w
    to_unit = np.zeros((n, extra), dtype=np.float64)
    to_unit[np.arange(n), unit] = 1.0
    from_unit = to_unit.T / to_unit.sum(axis=0)[:, None]
    words = from_unit @ attn.astype(np.float64) @ to_unit  # [L, H, units, units]
    words = words[:, :, :n_words, :n_words].copy()
    idx = np.arange(n_words)
    words[:, :, idx, idx] = -np.inf
    best = words.argmax(axis=-1)  # [L, H, n_words]
    weight = np.take_along_axis(words, best[..., None], axis=-1)[..., 0]
    layer, head, src = _row_index(n_layers, n_heads, n_words)
    return {
        "layer": layer,
        "head": head,
        "src_word": src,
        "dst_word": best.reshape(-1),
        "weight": weight.reshape(-1),
    }
