"""The pattern classifier on synthetic maps of each class, written straight into a store."""

from __future__ import annotations

import numpy as np

from atlas.patterns import classify
from atlas.store import Store

SEGMENTS = [0, 0, 0, 0, 0, 1, 1, 1, 1, 1]  # [CLS] a a a [SEP] b b b b [SEP]
SPECIAL = ["[CLS]", None, None, None, "[SEP]", None, None, None, None, "[SEP]"]
N = len(SEGMENTS)


def _rows(m: np.ndarray) -> np.ndarray:
    return m / m.sum(axis=1, keepdims=True)


def synthetic() -> dict[str, np.ndarray]:
    specials = np.array([s is not None for s in SPECIAL])
    own = np.array(SEGMENTS)[:, None] == np.array(SEGMENTS)[None, :]
    eye = np.eye(N)
    prev = np.eye(N, k=-1) + np.eye(N, k=1)
    return {
        "Vertical": _rows(np.where(specials[None, :], 1.0, 0.02) + 0 * eye),
        "Diagonal": _rows(prev + 0.01),
        "Vertical+Diagonal": _rows(prev + np.where(specials[None, :], 0.6, 0.01)),
        "Block": _rows(np.where(own & ~specials[None, :], 1.0, 0.01) + 0.5 * eye),
        "Heterogeneous": _rows(np.random.default_rng(0).random((N, N)) + 0.3),
    }


def test_each_synthetic_class_is_recognised(tmp_path):
    store = Store(tmp_path / "s")
    store.create()
    maps = synthetic()
    run = "synthetic"
    n_ex = len(maps)
    store.put(run, "runs", "run", {"run_id": run, "n_layers": 1, "n_heads": 1, "corpus": "synthetic"}, 1)
    store.put(
        run,
        "examples",
        "examples",
        {"run_id": run, "example_id": np.arange(n_ex), "n_sentences": 2, "n_tokens": N, "skipped": False},
        n_ex,
    )
    ex = np.repeat(np.arange(n_ex), N)
    tok = np.tile(np.arange(N), n_ex)
    store.put(
        run,
        "tokens",
        "tokens",
        {
            "run_id": run,
            "example_id": ex,
            "tok_idx": tok,
            "segment": np.tile(SEGMENTS, n_ex),
            "special": SPECIAL * n_ex,
            "word_idx": [None if s else i for _ in range(n_ex) for i, s in enumerate(SPECIAL)],
        },
        n_ex * N,
    )
    rows, edges = [], []
    cls = np.array([s == "[CLS]" for s in SPECIAL])
    sep = np.array([s == "[SEP]" for s in SPECIAL])
    for e, m in enumerate(maps.values()):
        for i in range(N):
            rows.append(
                (e, i, m[i, cls].sum(), m[i, sep].sum(), m[i, i - 1] if i else 0.0, m[i, i + 1] if i + 1 < N else 0.0)
            )
            edges += [(e, i, j, m[i, j]) for j in range(N)]
    r = np.array(rows)
    store.put(
        run,
        "attn_rows",
        "rows",
        {
            "run_id": run,
            "example_id": r[:, 0],
            "layer": 0,
            "head": 0,
            "src_tok": r[:, 1],
            "to_cls": r[:, 2],
            "to_sep": r[:, 3],
            "to_prev": r[:, 4],
            "to_next": r[:, 5],
        },
        len(r),
    )
    g = np.array(edges)
    store.put(
        run,
        "attn_edges",
        "edges",
        {
            "run_id": run,
            "example_id": g[:, 0],
            "layer": 0,
            "head": 0,
            "src_tok": g[:, 1],
            "dst_tok": g[:, 2],
            "weight": g[:, 3],
        },
        len(g),
    )
    assert classify(store, run) == n_ex
    got = store.connect().execute("SELECT example_id, pattern FROM patterns ORDER BY example_id").fetchall()
    assert [p for _, p in got] == list(maps)
