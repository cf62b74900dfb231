"""The attention explorer's data: the stored edges of a few inputs, as compact as a page can hold them.

Per input, every layer and head's map (the kept edges, zeros elsewhere) quantised to one byte per
weight (round(255 w)), laid out [layer][head][src][dst], deflated (zlib) and base64-encoded; the page
inflates it with the browser's DecompressionStream. A weight below 1/510 reads as 0 (a line of opacity
under 0.2 %, which nobody sees).
"""

from __future__ import annotations

import base64
import zlib

import duckdb
import numpy as np

from atlas.maps import read_maps


def chosen_examples(con: duckdb.DuckDBPyConnection, run_id: str, n: int) -> list[int]:
    """The first ``n`` inputs of a run that were run through the model, by example id."""
    rows = con.execute(
        "SELECT example_id FROM examples WHERE run_id = ? AND NOT skipped ORDER BY example_id LIMIT ?", [run_id, n]
    ).fetchall()
    return [r[0] for r in rows]


def quantised(weights: np.ndarray) -> bytes:
    """Weights in [0, 1] as deflated bytes of round(255 w)."""
    levels = np.rint(np.clip(weights, 0.0, 1.0) * 255).astype(np.uint8)
    return zlib.compress(levels.tobytes(), 9)


def _texts(con: duckdb.DuckDBPyConnection, run_id: str, example_ids: list[int]) -> dict[int, str]:
    rows = con.execute(
        "SELECT example_id, string_agg(form, ' ' ORDER BY word_idx) FROM words "
        "WHERE run_id = ? AND list_contains(?, example_id) GROUP BY example_id",
        [run_id, example_ids],
    ).fetchall()
    return dict(rows)


def run_payload(con: duckdb.DuckDBPyConnection, run_id: str, example_ids: list[int]) -> dict:
    """One run's explorer data: its shape, how its edges were kept, and the chosen inputs' maps."""
    n_layers, n_heads, kept_mass, model, corpus = con.execute(
        "SELECT n_layers, n_heads, kept_mass, model, corpus FROM runs WHERE run_id = ?", [run_id]
    ).fetchone()
    texts = _texts(con, run_id, example_ids)
    examples = []
    for example_id, found in read_maps(con, run_id, example_ids).items():
        examples.append(
            {
                "id": example_id,
                "text": texts.get(example_id) or " ".join(found.tokens),
                "tokens": found.tokens,
                "data": base64.b64encode(quantised(found.weights)).decode("ascii"),
            }
        )
    return {
        "run": run_id,
        "model": model,
        "corpus": corpus,
        "layers": int(n_layers),
        "heads": int(n_heads),
        "kept_mass": kept_mass,
        "examples": examples,
    }
