"""Attention Atlas: a queryable store of a BERT-style encoder's attention over an annotated corpus.

``atlas.open(store)`` reads a store (runs, catalogue queries, SQL, tables, attention maps, figures);
``atlas.ingest(corpus, model, store)`` adds a run to one; see ``atlas.api``.
"""

__version__ = "0.1.0"

from atlas.api import Atlas, AtlasNote, AttentionMap, Ingested, ingest, open, queries  # noqa: E402
from atlas.errors import AtlasError  # noqa: E402

__all__ = ["Atlas", "AtlasError", "AtlasNote", "AttentionMap", "Ingested", "ingest", "open", "queries"]
