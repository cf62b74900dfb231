"""Stage 4: turn one input's dense attention ``[layers, heads, n, n]`` into store rows.

- edges: per attention row, the largest weights until the kept-mass target is reached (the argmax is
  always kept); ``kept_mass=None`` is the dense setting: every weight kept.
- rows: per-row statistics from the dense row: entropy (nats, of Clark et al.'s smoothed row
  0.9999 a + 1e-4 / n, as their released General_Analysis computes it), max weight, argmax, kept mass,
  number of kept edges, the mass given to chosen tokens and to the input's first token (position 0,
  whatever it is: [CLS], a BOS, or a word piece), and the attention the row's token receives (the
  column sum of the dense map over every row of the input).
In the sparse setting every stored weight (edge weights, max weight, kept mass, word-level weight) is
rounded to float16 precision (relative error at most 2**-11), which halves its bytes on disk; entropy,
argmax and counts are exact. The dense setting stores everything in exact float32.
- word rows: Clark et al.'s word-level map (attention TO a word = sum over its pieces, FROM a word =
  mean over its pieces, [CLS]/[SEP] as units of their own); for every word, the other real word it
  attends to most (never itself, [CLS] or [SEP]) and that weight, and the other real word attending
  to it most (the transposed map: Clark et al.'s head -> dependent predictor) and that weight. Exact
  whatever the edge sparsity.
"""

from __future__ import annotations

import numpy as np
import torch

Columns = dict[str, np.ndarray]


def _row_index(n_layers: int, n_heads: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Layer, head and source position of each row of a ``[layers * heads * n, n]`` view (store dtypes)."""
    r = np.arange(n_layers * n_heads * n)
    return (r // (n_heads * n)).astype(np.int8), ((r // n) % n_heads).astype(np.int8), (r % n).astype(np.int16)


def _stored(weights: torch.Tensor, kept_mass: float | None) -> torch.Tensor:
    """Weights as stored: exact in the dense setting, at float16 precision (as float32) otherwise."""
    return weights if kept_mass is None else weights.half().float()


ENTROPY_SMOOTHING = 1e-4  # Clark et al.: entropy of (1 - s) a + s / n, "to avoid NaNs"
TARGETS = ("cls", "sep", "dot_comma")  # token kinds whose received attention each row records


def sparsify(
    attn: np.ndarray, kept_mass: float | None, targets: dict[str, np.ndarray] | None = None
) -> tuple[Columns, Columns]:
    """Return (edges, rows) column arrays for one input (sorting done with torch: multithreaded).

    ``targets`` maps each name of ``TARGETS`` to a boolean mask over the input's tokens; each row
    records the attention mass it gives to those tokens (``to_<name>``), and to itself, the previous
    and next token and the input's first token (``to_first``), all from the dense row.
    """
    n_layers, n_heads, n, _ = attn.shape
    rows = torch.from_numpy(attn).reshape(-1, n)
    ranked, order = torch.sort(rows, dim=1, descending=True, stable=True)
    if kept_mass is None:
        keep = torch.ones(ranked.shape, dtype=torch.bool)
    else:
        keep = (torch.cumsum(ranked, dim=1) - ranked) < kept_mass
        keep[:, 0] = True
    r_idx, k_idx = torch.nonzero(keep, as_tuple=True)
    cell, _ = torch.sort(r_idx * n + order[r_idx, k_idx])  # edges ordered by row, then destination
    r_idx, dst = cell // n, cell % n
    weight = rows[r_idx, dst]
    layer, head, src = _row_index(n_layers, n_heads, n)
    r = r_idx.numpy()
    edges = {
        "layer": layer[r],
        "head": head[r],
        "src_tok": src[r],
        "dst_tok": dst.numpy().astype(np.int16),
        "weight": _stored(weight, kept_mass).numpy(),
    }
    stats = {
        "layer": layer,
        "head": head,
        "src_tok": src,
        "entropy": _smoothed_entropy(rows).numpy(),
        "max_weight": _stored(ranked[:, 0], kept_mass).numpy(),
        "argmax_tok": order[:, 0].numpy().astype(np.int16),
        "kept_mass": _stored((ranked.double() * keep).sum(dim=1).float(), kept_mass).numpy(),
        "n_kept": keep.sum(dim=1).numpy().astype(np.int16),
    }
    square = torch.from_numpy(attn)
    zero = torch.zeros(n_layers, n_heads, 1)
    received = {
        "self": torch.diagonal(square, dim1=2, dim2=3),
        "prev": torch.cat([zero, torch.diagonal(square, offset=-1, dim1=2, dim2=3)], dim=2),
        "next": torch.cat([torch.diagonal(square, offset=1, dim1=2, dim2=3), zero], dim=2),
        "first": square[..., 0],
    }
    if targets:
        names = list(targets)
        masks = torch.from_numpy(np.stack([targets[name] for name in names], axis=1).astype(np.float32))
        mass = square @ masks  # [layers, heads, n, targets]
        for i, name in enumerate(names):
            received[name] = mass[..., i]
    for name, mass in received.items():
        stats[f"to_{name}"] = _stored(mass.reshape(-1), kept_mass).numpy()
    stats["received"] = _stored(square.double().sum(dim=2).float().reshape(-1), kept_mass).numpy()
    return edges, stats


def _smoothed_entropy(rows: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of each row after Clark et al.'s smoothing towards uniform, in float64."""
    n = rows.shape[1]
    smoothed = (1 - ENTROPY_SMOOTHING) * rows.double() + ENTROPY_SMOOTHING / n
    return torch.special.entr(smoothed).sum(dim=1).float()


def word_rows(attn: np.ndarray, token_word: list[int | None], kept_mass: float | None) -> Columns:
    """Word-level argmax rows for one input; ``token_word[t]`` is the word of token t (None: special)."""
    n_layers, n_heads, n, _ = attn.shape
    n_words = 1 + max((w for w in token_word if w is not None), default=-1)
    if n_words < 2:
        names = ("layer", "head", "src_word", "dst_word", "weight", "from_word", "from_weight")
        return {k: np.zeros(0, dtype=np.int64) for k in names}
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
    best = words.argmax(axis=-1)  # [L, H, n_words]: the word each word attends to most
    weight = np.take_along_axis(words, best[..., None], axis=-1)[..., 0]
    attending = words.argmax(axis=-2)  # [L, H, n_words]: the word attending most to each word
    from_weight = np.take_along_axis(words, attending[..., None, :], axis=-2)[..., 0, :]
    layer, head, src = _row_index(n_layers, n_heads, n_words)

    def stored(w: np.ndarray) -> np.ndarray:
        return _stored(torch.from_numpy(w.reshape(-1).astype(np.float32)), kept_mass).numpy()

    return {
        "layer": layer,
        "head": head,
        "src_word": src,
        "dst_word": best.reshape(-1).astype(np.int16),
        "weight": stored(weight),
        "from_word": attending.reshape(-1).astype(np.int16),
        "from_weight": stored(from_weight),
    }
