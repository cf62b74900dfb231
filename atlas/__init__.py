"""Attention Atlas: a queryable store of a transformer's attention heads over an annotated corpus (any
Hugging Face encoder or decoder).

``atlas.open(store)`` reads a store (runs, catalogue queries, SQL, tables, attention maps, figures);
``atlas.ingest(corpus, model, store)`` adds a run to one; see ``atlas.api``.
"""

from atlas.api import Atlas, AtlasNote, AttentionMap, Ingested, ingest, open, queries
from atlas.errors import AtlasError
from atlas.version import __version__

__all__ = ["__version__", "Atlas", "AtlasError", "AtlasNote", "AttentionMap", "Ingested", "ingest", "open", "queries"]
