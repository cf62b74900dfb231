"""Dense attention recomputed for the inputs of a stored run, with the run's own model.

Analyses that need whole attention maps (head distances, attention probes) read the word pieces of a
run from the store and run the model again, so their answers are exact whatever the edge sparsity. The
model is the run's: its weights hash is checked against the one recorded at ingest.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from atlas import checks
from atlas.errors import AtlasError, arg
from atlas.model.forward import attention
from atlas.model.load import LoadedModel, load_model
from atlas.store import Store

BATCH = 16  # inputs per forward pass


@dataclass
class StoredInput:
    example_id: int
    piece_ids: list[int]
    segments: list[int]
    token_word: list[int | None]  # word_idx of each token, None for a special token
    special: list[str | None]  # the special token's string ('[CLS]', '<s>'), None for a word's piece
    role: list[str | None]  # the special token's role (tokens.role), None for a word's piece


def run_model(store: Store, run_id: str, param: str = "run", model: str | None = None) -> LoadedModel:
    """Load the model a run was made with, in its dtype and with its config overrides (``model``: from there instead,
    where it has moved since); refuse one whose weights differ from the recorded hash (``param``: the parameter the
    run was given as)."""
    checks.named("model", model, "empty; name a hub id or a folder, or leave it out")  # not the run's own, unsaid
    con = store.connect()
    row = con.execute(
        "SELECT model_source, model_hash, random_init, seed, dtype, config FROM runs WHERE run_id = ?", [run_id]
    ).fetchone()
    con.close()
    given = arg(param, repr(run_id))
    if row is None:
        raise AtlasError(f"{given}: no such run in {store.root} (see 'atlas runs')")
    source, model_hash, random_init, seed, dtype, config = row
    if model is None and Path(source).is_absolute() and not Path(source).is_dir():
        raise AtlasError(
            f"{given}: its model was at {source}, which is no longer there; give {arg('model')} and "
            "the model's folder now (its weights are checked against the run's)"
        )
    # in the run's dtype, with its config overrides: the model that made its maps
    lm = load_model(model or source, random_init=random_init, seed=seed, dtype=dtype, **json.loads(config or "{}"))
    if lm.model_hash != model_hash:
        raise AtlasError(f"{given}: the model at {model or source} is not the one the run was made with")
    return lm


def stored_inputs(store: Store, run_id: str, limit: int | None = None) -> list[StoredInput]:
    """The run's inputs (not skipped), in example order; the first ``limit`` when given."""
    con = store.connect()
    rows = con.execute(
        "SELECT example_id, list(piece_id ORDER BY tok_idx), list(segment ORDER BY tok_idx), "
        "       list(word_idx ORDER BY tok_idx), list(special ORDER BY tok_idx), list(role ORDER BY tok_idx) "
        "FROM tokens WHERE run_id = ? AND example_id IN ("
        "  SELECT example_id FROM examples WHERE run_id = ? AND NOT skipped ORDER BY example_id LIMIT ?) "
        "GROUP BY example_id ORDER BY example_id",
        [run_id, run_id, limit],
    ).fetchall()
    con.close()
    return [StoredInput(*row) for row in rows]


def dense_maps(lm: LoadedModel, inputs: list[StoredInput]) -> Iterator[tuple[StoredInput, np.ndarray]]:
    """Each input with its attention ``[layers, heads, n, n]``, shortest first, run in padded batches."""
    ordered = sorted(inputs, key=lambda item: len(item.piece_ids))
    for start in range(0, len(ordered), BATCH):
        batch = ordered[start : start + BATCH]
        yield from zip(batch, attention(lm, [(item.piece_ids, item.segments) for item in batch]), strict=True)
