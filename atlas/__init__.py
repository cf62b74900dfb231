"""Attention Atlas: a queryable store of a transformer's attention heads over an annotated corpus (any
Hugging Face encoder or decoder).

``atlas.open(store)`` reads a store (runs, catalogue queries, SQL, tables, attention maps, figures) and adds
the analyses computed in Python (head distances, probes, patterns); ``atlas.ingest(corpus, model, store)``
adds a run to one; ``atlas.finetune``, ``ablate``, ``importance`` and ``grads`` record task models and their
scores; ``atlas.look(text)`` shows one text's heads without a corpus. Every ``atlas`` command is one of these
calls; see ``atlas.api`` and ``atlas.api_tasks``.
"""

from pathlib import Path

from atlas.checkout import map_top_level

map_top_level(Path(__file__).resolve().parent)  # in a checkout: ingest/, queries/, cli.py as packaging maps them

from atlas.api import Answer, Atlas, AtlasNote, AttentionMap, Classed, Ingested, describe, ingest, open, queries  # noqa: E402
from atlas.api_tasks import FineTuned, Gradients, Importance, ablate, finetune, grads, importance  # noqa: E402
from atlas.errors import AtlasError  # noqa: E402
from atlas.look import Look, look  # noqa: E402
from atlas.version import __version__  # noqa: E402
from atlas.views import Heads  # noqa: E402

__all__ = [
    "__version__",
    "Answer",
    "Atlas",
    "AtlasError",
    "AtlasNote",
    "AttentionMap",
    "Classed",
    "FineTuned",
    "Gradients",
    "Heads",
    "Importance",
    "Ingested",
    "Look",
    "ablate",
    "describe",
    "finetune",
    "grads",
    "importance",
    "ingest",
    "look",
    "open",
    "queries",
]
