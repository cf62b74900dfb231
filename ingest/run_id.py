"""A run's id: of the corpus, the model and the settings; and a finished ingest found by it without loading
the model (nothing here imports torch)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from atlas.errors import AtlasError, arg
from atlas.ingestion.readers import check_options, reader
from atlas.ingestion.readers.base import CorpusOptions
from atlas.ingestion.readers.corpus_info import CorpusInfo
from atlas.model.identity import DEFAULT_MODEL, model_identity
from atlas.store import run_ids_in

CHUNK_EXAMPLES = 512  # examples per Parquet part
MAX_EDGES = 6  # default cap on the edges kept per attention row (sparse setting)
MAX_EDGES_MOST = 2**31 - 1  # the largest cap a run records (runs.max_edges is an INTEGER)
STORED_WEIGHTS = "1/256"  # runs.weight_precision of a sparse run: edge and word weights in steps of 1/256
SPARSE_ROWS = "entropy 2**-17"  # what else a sparse run rounds (part of its id: a store of other roundings differs)
DEVICES = ("auto", "cpu", "cuda", "mps")  # --device (see atlas.ingestion.device)
PACK_MODES = ("none", "pair", "window")  # --pack: sentences per input (see atlas.ingestion.examples)
TEXTS = ("written", "words")  # --text: what a model reads of a sentence (see atlas.ingestion.align)
WORD_ROWS = ("mean", "first")  # --word-rows: how a word of several pieces attends (see atlas.ingestion.sparsify)
# --dtype: the weights' dtype; auto: bfloat16 where the model runs on CUDA, else float32 (see atlas.ingestion.device)
ID_BYTES = 255  # a run id names its folders: no longer than a file name may be
HASH_CHARS = 10  # the hex digits of the hash that ends a run id
DTYPES = ("auto", "float32", "bfloat16", "float16")
ROLLOUT_ROWS = ("none", "cls", "last", "all")  # --rollout: the rows of the attention rollout (atlas.ingestion.rollout)


@dataclass(frozen=True)
class Settings:
    kept_mass: float | None = 0.9
    max_length: int | None = None  # None: the model's max_position_embeddings
    pack: str = "none"
    chunk_examples: int = CHUNK_EXAMPLES
    max_edges: int | None = MAX_EDGES  # sparse setting: at most this many edges per attention row (None: no cap)
    device: str = "auto"  # where the model and the work per attention weight run (not part of the run id)
    text: str = "written"  # what the model reads of a sentence: as written, or its words joined by spaces
    word_rows: str = "mean"  # a word's row of the word-level map: the mean of its pieces' rows, or its first's
    dtype: str = "float32"  # the weights' dtype, resolved (never 'auto': see atlas.ingestion.device.resolve_dtype)
    norms: bool = False  # attn_rows's norm-based columns (atlas.ingestion.norm_rows)
    rollout: str = "none"  # the rows of the attention rollout kept (ROLLOUT_ROWS)


def number_text(value: float) -> str:
    """A number as a message shows it: a whole float without its '.0' (the CLI reads '--kept-mass 2' as 2.0)."""
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def check_device_name(name: str) -> None:
    """Refuse a ``--device`` that is none of ``DEVICES`` (whether torch sees it is ``atlas.ingestion.device``'s
    question)."""
    if name not in DEVICES:
        raise AtlasError(f"{arg('device', repr(name))}: expected one of {', '.join(DEVICES)}")


def check_dtype_name(name: str) -> None:
    """Refuse a ``--dtype`` that is none of ``DTYPES``."""
    if name not in DTYPES:
        raise AtlasError(f"{arg('dtype', repr(name))}: expected one of {', '.join(DTYPES)}")


def check_settings(settings: Settings) -> None:
    """Refuse numbers out of range, before any model is loaded (the model's own longest input is checked once
    it is loaded)."""
    if settings.pack not in PACK_MODES:
        raise AtlasError(f"{arg('pack', repr(settings.pack))}: expected one of {', '.join(PACK_MODES)}")
    if settings.kept_mass is not None and not 0 < settings.kept_mass <= 1:
        raise AtlasError(f"{arg('kept_mass', number_text(settings.kept_mass))}: expected a share above 0 and at most 1")
    if settings.max_length is not None and settings.max_length < 3:
        shown = arg("max_length", settings.max_length)
        raise AtlasError(f"{shown}: expected 3 or more (the special tokens and a word)")
    if settings.max_edges is not None and not 1 <= settings.max_edges <= MAX_EDGES_MOST:
        raise AtlasError(f"{arg('max_edges', settings.max_edges)}: expected 1 to {MAX_EDGES_MOST:,}")
    check_device_name(settings.device)
    if settings.text not in TEXTS:
        raise AtlasError(f"{arg('text', repr(settings.text))}: expected one of {', '.join(TEXTS)}")
    if settings.word_rows not in WORD_ROWS:
        raise AtlasError(f"{arg('word_rows', repr(settings.word_rows))}: expected one of {', '.join(WORD_ROWS)}")
    if settings.rollout not in ROLLOUT_ROWS:
        raise AtlasError(f"{arg('rollout', repr(settings.rollout))}: expected one of {', '.join(ROLLOUT_ROWS)}")
    if settings.dtype == "auto":  # the run id takes the dtype the weights are loaded in
        raise AtlasError(
            f"{arg('dtype', repr('auto'))}: resolved with the device first (atlas.ingestion.device.resolve_dtype)"
        )
    check_dtype_name(settings.dtype)


class ModelKey(Protocol):
    """What a run id takes of a model: a ``LoadedModel`` or a ``ModelIdentity``."""

    name: str
    model_hash: str
    random_init: bool
    seed: int


def run_id_for(corpus: CorpusInfo, lm: ModelKey, settings: Settings) -> str:
    """The id of a run: a readable start and a hash of the corpus, the model and the settings. The text, word-row,
    dtype, norm and rollout settings are hashed only where they are not the ones every earlier run had (words joined
    by spaces, the mean of the pieces' rows, float32 weights, no norms, no rollout), so that those runs keep their
    ids; a drawn corpus (repeated)
    has no text. What else of the corpus is hashed is its reader's (``Reader.run_key``: a GLUE run's says its
    examples are whole). A loaded model (``LoadedModel.dtype``) must be in the settings' dtype."""
    loaded = getattr(lm, "dtype", settings.dtype)
    if loaded != settings.dtype:
        raise ValueError(f"the model is loaded in {loaded}, the settings say {settings.dtype}")
    read = reader(corpus.fmt)
    texts = settings.text != "words" and read.has_text
    key = json.dumps(
        [
            corpus.sha256,
            *read.run_key(corpus),
            lm.model_hash,
            lm.random_init,
            lm.seed,
            settings.kept_mass,
            settings.max_length,
            settings.pack,
            settings.chunk_examples,
            *([settings.max_edges, STORED_WEIGHTS, SPARSE_ROWS] if settings.kept_mass is not None else []),
            *([["text", settings.text]] if texts else []),
            *([["word_rows", settings.word_rows]] if settings.word_rows != "mean" else []),
            *([["dtype", settings.dtype]] if settings.dtype != "float32" else []),
            *([["norms", True]] if settings.norms else []),
            *([["rollout", settings.rollout]] if settings.rollout != "none" else []),
        ],
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:HASH_CHARS]
    return _readable_part(corpus, lm.name, lm.random_init, lm.seed) + digest


def _readable_part(corpus: CorpusInfo, name: str, random_init: bool, seed: int) -> str:
    """The start of a run id: the corpus file, the model's name and the random init's seed."""
    model = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(name.rstrip("/")).name)
    suffix = f"-random{seed}" if random_init else ""
    stem = reader(corpus.fmt).run_stem(corpus)
    if len(f"{stem}__{model}{suffix}__".encode()) + HASH_CHARS > ID_BYTES:  # ids that fit are as they always were
        stem, model = _cut(stem, ID_BYTES // 2 - 28), _cut(model, ID_BYTES // 2 - 28)
    return f"{stem}__{model}{suffix}__"


def _cut(text: str, size: int) -> str:
    """``text`` in at most ``size`` bytes of UTF-8, whole characters."""
    return text.encode()[:size].decode(errors="ignore")


def ingested_run(
    data: Path,
    corpus: Path,
    fmt: str,
    task: str | None,
    sample: int | None,
    sample_seed: int,
    model: str | None,
    random_init: bool,
    seed: int,
    settings: Settings,
    config: Mapping[str, object] | None = None,
) -> str | None:
    """The id of the run under ``data`` (the store's data folder) that ingesting ``corpus`` with ``model`` and
    ``settings`` would give, when it is there; None when it is not, or when telling takes loading the model.
    ``config``: overrides of a random init's config (``load_model``'s ``config_overrides``); ``settings.dtype``
    is the resolved dtype (``atlas.ingestion.device.resolve_dtype``).

    The id is ``run_id_for``'s over the corpus's sha256 and the model's identity (``model_identity``), as the
    ingest computes it; the corpus is not read further, since a run holds only a corpus that passed its check.
    Neither is hashed when no run of the store starts as this one's id would.
    """
    read = reader(fmt)  # a drawn corpus has no file: ``corpus`` is its name, its sha256 that of the name
    if not data.is_dir() or read.takes_file and not corpus.is_file() and not corpus.is_dir() or read.generates:
        return None  # a needle probe's settings are not in its name: its run is found once the model is loaded
    try:
        check_options(read, CorpusOptions(task=task, sample=sample))
        info = read.info(corpus, CorpusOptions(task=task, sample=sample, sample_seed=sample_seed))
    except AtlasError:
        return None  # refused by the corpus check (an option of another format, a GLUE file without its task)
    start = _readable_part(info, model or DEFAULT_MODEL, random_init, seed)
    ids = run_ids_in(data)
    if not any(run_id.startswith(start) for run_id in ids):
        return None  # no run of this corpus and model: neither is hashed
    lm = model_identity(model, random_init, seed, config)
    if lm is None or (not settings.max_length and lm.max_positions is None):
        return None
    max_length = settings.max_length or lm.max_positions
    info = read.with_sha256(info)
    run_id = run_id_for(info, lm, replace(settings, max_length=max_length))
    return run_id if run_id in ids else None
