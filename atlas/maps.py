"""Attention maps read back from a run's stored edges: one (layers, heads, tokens, tokens) array per input.

The store keeps each attention row's largest weights (``attn_edges``): every weight of a dense run
(``--dense``, float32, exact), or on a sparse run the largest ones up to the run's kept mass (float16),
so a map read back here holds zeros where the ingest dropped an edge.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import numpy as np


@dataclass(frozen=True)
class ExampleMaps:
    example_id: int
    tokens: list[str]  # word pieces in input order, [CLS] and [SEP] included
    weights: np.ndarray  # float32 (layers, heads, n, n): weights[layer, head, src, dst], 0-based


def read_maps(con: duckdb.DuckDBPyConnection, run_id: str, example_ids: list[int]) -> dict[int, ExampleMaps]:
    """The maps of the given inputs of a run (the ones that were run through the model; skipped inputs have
    none), by example id."""
    n_layers, n_heads = con.execute("SELECT n_layers, n_heads FROM runs WHERE run_id = ?", [run_id]).fetchone()
    ids = [int(i) for i in example_ids]
    span = (min(ids, default=0), max(ids, default=-1))  # a range the scan skips row groups by (a list it does not)
    tokens: dict[int, list[str]] = {}
    rows = con.execute(
        "SELECT example_id, piece FROM tokens WHERE run_id = ? AND example_id BETWEEN ? AND ? "
        "AND list_contains(?, example_id) ORDER BY example_id, tok_idx",
        [run_id, *span, ids],
    ).fetchall()
    for example_id, piece in rows:
        tokens.setdefault(example_id, []).append(piece)
    maps = {i: np.zeros((n_layers, n_heads, len(t), len(t)), dtype=np.float32) for i, t in tokens.items()}
    edges = con.execute(
        "SELECT example_id, layer, head, src_tok, dst_tok, weight FROM attn_edges "
        "WHERE run_id = ? AND example_id BETWEEN ? AND ? AND list_contains(?, example_id)",
        [run_id, *span, ids],
    ).fetchnumpy()
    for example_id, weights in maps.items():
        mine = edges["example_id"] == example_id
        index = tuple(np.asarray(edges[c][mine], dtype=np.intp) for c in ("layer", "head", "src_tok", "dst_tok"))
        weights[index] = edges["weight"][mine]
    return {i: ExampleMaps(i, tokens[i], maps[i]) for i in ids if i in maps}


def token_labels(con: duckdb.DuckDBPyConnection, run_id: str, example_id: int) -> tuple[str, ...]:
    """What each token of an input says on hover, in input order: a word's piece its word, POS, relation and head
    word (``piece  word 3 'cat': NOUN, nsubj of 'sat'``); a special token its role (``[CLS]  special: cls``)."""
    rows = con.execute(
        "SELECT t.piece, t.role, w.word_idx, w.form, w.upos, w.deprel, h.form FROM tokens t "
        "LEFT JOIN words w ON w.run_id = t.run_id AND w.example_id = t.example_id AND w.word_idx = t.word_idx "
        "LEFT JOIN words h ON h.run_id = w.run_id AND h.example_id = w.example_id AND h.word_idx = w.head_word_idx "
        "WHERE t.run_id = ? AND t.example_id = ? ORDER BY t.tok_idx",
        [run_id, example_id],
    ).fetchall()
    labels = []
    for piece, role, word_idx, form, upos, deprel, head in rows:
        if role is not None:
            labels.append(f"{piece}  special: {role}")
        elif word_idx is None:
            labels.append(piece)
        else:
            said = ", ".join(
                p for p in (upos, f"{deprel} of '{head}'" if head is not None else deprel) if p is not None
            )
            labels.append(f"{piece}  word {word_idx + 1} '{form}'" + (f": {said}" if said else ""))
    return tuple(labels)
