"""An ingest's options, checked once, before any model is loaded: ``plan`` turns what ``atlas ingest`` (or
``atlas.ingest``) was given into a ``Plan`` (the corpus's reader and path, the run's settings, the config
overrides) or refuses it in one line; ``stager`` sets up the engine that stages the chunks.

Nothing here imports torch: a run already in the store is found from the plan without loading the model.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from atlas import checks
from atlas.errors import AtlasError, arg
from atlas.ingestion.device import resolve_dtype
from atlas.ingestion.readers import DEFAULT, check_options, corpus_path, drawn_seed_note, reader
from atlas.ingestion.readers.base import CorpusOptions, Reader
from atlas.ingestion.run_id import Settings, check_settings, number_text
from atlas.model.identity import config_overrides, override_text

if TYPE_CHECKING:
    from atlas.ingestion.pipeline import Stager

ENGINES = ("local", "ray")  # --engine: this process runs the model, or Ray Data actors do


@dataclass(frozen=True)
class Plan:
    """An ingest as checked: what it reads and how."""

    reader: Reader
    corpus: Path  # the corpus file (a drawn corpus: its name)
    options: CorpusOptions  # the corpus options, --sample-seed resolved (0 where not given)
    settings: Settings
    overrides: dict[str, object]  # --random-init's config overrides


@dataclass(frozen=True)
class Asked:
    """What an ingest was asked for, as ``atlas.ingest`` takes it (None: not given; the defaults are the API's)."""

    corpus: str | os.PathLike[str] | None = None
    format: str = DEFAULT
    options: CorpusOptions = CorpusOptions()
    random_init: bool = False
    seed: int | None = None
    kept_mass: float | None = None
    max_edges: int | None = None
    dense: bool = False
    max_length: int | None = None
    pack: str | None = None
    text: str = "written"
    word_rows: str = "mean"
    norms: bool = False
    rollout: str = "none"
    device: str = "auto"
    dtype: str = "auto"
    config: Mapping[str, object] | Sequence[str] | str | None = None
    engine: str = ENGINES[0]
    ray_address: str | None = None
    workers: int | None = None
    gpus_per_worker: float | None = None


def plan(asked: Asked) -> Plan:
    """The ingest ``asked`` asks for, or its first refusal: option combinations that would do something else than
    asked (or nothing), values out of range."""
    corpus, options, seed, dense, device = asked.corpus, asked.options, asked.seed, asked.dense, asked.device
    random_init, kept_mass, max_edges, engine = asked.random_init, asked.kept_mass, asked.max_edges, asked.engine
    checks.seed("seed", seed)
    chosen = reader(asked.format)  # first: the other options' checks read it
    if options.sample_seed is not None:
        checks.seed("sample_seed", options.sample_seed)
    check_options(chosen, options)
    checks.named("corpus", corpus)
    path = corpus_path(chosen, None if corpus is None else Path(corpus), options)
    if seed is not None and not random_init:
        raise AtlasError(
            f"{arg('seed')}: seeds {arg('random_init')}'s weights; without {arg('random_init')} the model is the same"
            + drawn_seed_note(chosen)
        )
    if kept_mass is not None and dense:
        raise AtlasError(
            f"{arg('kept_mass')}: {arg('dense')} keeps every weight; give one of {arg('dense')} and {arg('kept_mass')}"
        )
    pack = chosen.pack(asked.pack, options)
    _check_engine_options(asked)
    overrides = config_overrides(asked.config)
    if overrides and not random_init:
        given = arg("config", override_text(*next(iter(overrides.items()))))
        raise AtlasError(
            f"{given}: the pretrained weights would not match a changed config; add {arg('random_init')} or leave "
            f"{arg('config')} out"
        )
    dtype = resolve_dtype(asked.dtype, device, (asked.gpus_per_worker or 0) if engine == "ray" else None)
    if max_edges is not None and dense:
        raise AtlasError(
            f"{arg('max_edges')}: {arg('dense')} keeps every weight; give one of {arg('dense')} and {arg('max_edges')}"
        )
    kept = None if dense else (Settings().kept_mass if kept_mass is None else kept_mass)
    edges = Settings().max_edges if max_edges is None else max_edges
    settings = Settings(
        kept, asked.max_length, pack, max_edges=edges, device=device, text=asked.text, word_rows=asked.word_rows,
        dtype=dtype, norms=asked.norms, rollout=asked.rollout,
    )  # fmt: skip
    check_settings(settings)
    if options.sample is not None and options.sample < 1:
        raise AtlasError(f"{arg('sample', options.sample)}: expected 1 or more")
    resolved = replace(options, sample_seed=options.sample_seed or 0)
    return Plan(chosen, path, resolved, settings, overrides)


def _check_engine_options(asked: Asked) -> None:
    engine, workers, gpus_per_worker, device = asked.engine, asked.workers, asked.gpus_per_worker, asked.device
    if engine not in ENGINES:
        raise AtlasError(f"{arg('engine', repr(engine))}: expected one of {', '.join(ENGINES)}")
    ray_options = {"ray_address": asked.ray_address, "workers": workers, "gpus_per_worker": gpus_per_worker}
    given = [name for name, value in ray_options.items() if value is not None]
    if engine != "ray" and given:
        raise AtlasError(
            f"{arg(given[0])}: sets up the Ray workers; add {arg('engine', repr('ray'))} or leave {arg(given[0])} out"
        )
    if workers is not None and workers < 1:
        raise AtlasError(f"{arg('workers', workers)}: expected 1 or more")
    if gpus_per_worker is not None and not 0 <= gpus_per_worker < math.inf:  # nan fails too
        raise AtlasError(f"{arg('gpus_per_worker', number_text(gpus_per_worker))}: expected 0 or more")
    if engine == "ray" and device == "cuda" and not gpus_per_worker:
        raise AtlasError(
            f"{arg('device', repr('cuda'))}: a Ray worker sees only the GPUs it claims; add {arg('gpus_per_worker', 1)}"
        )
    if engine == "ray" and device == "cpu" and gpus_per_worker:
        claims = arg("gpus_per_worker", number_text(gpus_per_worker))
        raise AtlasError(f"{claims}: claims GPUs that {arg('device', repr('cpu'))} leaves idle")


def stager(asked: Asked) -> Stager | None:
    """The staging of ``engine='ray'`` (None: this process stages the chunks); Ray is imported here only."""
    if asked.engine != "ray":
        return None
    try:
        from atlas.ingestion.ray_engine import RayEngine
    except ModuleNotFoundError as exc:
        if exc.name != "ray" and not (exc.name or "").startswith("ray."):
            raise
        raise AtlasError(
            f"{arg('engine', repr('ray'))}: Ray is not installed (pip install 'attention-atlas[ray]')"
        ) from None
    return RayEngine(asked.ray_address, asked.workers or 2, asked.gpus_per_worker or 0)
