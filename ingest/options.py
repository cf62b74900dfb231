"""An ingest's options, checked once, before any model is loaded: ``plan`` turns what ``atlas ingest`` (or
``atlas.ingest``) was given into a ``Plan`` (the corpus's reader and path, the run's settings, the config
overrides) or refuses it in one line; ``stager`` sets up the engine that stages the chunks.

Nothing here imports torch: a run already in the store is found from the plan without loading the model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from atlas import checks
from atlas.errors import AtlasError, arg
from atlas.ingestion.device import resolve_dtype
from atlas.ingestion.readers import check_options, corpus_path, drawn_seed_note, reader
from atlas.ingestion.readers.base import CorpusOptions, Reader
from atlas.ingestion.run_id import Settings, check_settings, number_text
from atlas.model.identity import config_overrides, override_text

if TYPE_CHECKING:
    import os

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


def plan(
    corpus: str | os.PathLike[str] | None,
    format: str,
    options: CorpusOptions,
    *,
    random_init: bool,
    seed: int | None,
    kept_mass: float | None,
    max_edges: int | None,
    dense: bool,
    max_length: int | None,
    pack: str | None,
    text: str,
    word_rows: str,
    device: str,
    dtype: str,
    config: Mapping[str, object] | Sequence[str] | str | None,
    engine: str,
    ray_address: str | None,
    workers: int | None,
    gpus_per_worker: float | None,
) -> Plan:
    """The ingest ``atlas.ingest``'s arguments ask for, or its first refusal: option combinations that would do
    something else than asked (or nothing), values out of range."""
    checks.seed("seed", seed)
    chosen = reader(format)  # first: the other options' checks read it
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
    pack = chosen.pack(pack, options)
    _check_engine_options(engine, ray_address, workers, gpus_per_worker, device)
    overrides = config_overrides(config)
    if overrides and not random_init:
        given = arg("config", override_text(*next(iter(overrides.items()))))
        raise AtlasError(
            f"{given}: the pretrained weights would not match a changed config; add {arg('random_init')} or leave "
            f"{arg('config')} out"
        )
    dtype = resolve_dtype(dtype, device, (gpus_per_worker or 0) if engine == "ray" else None)
    if max_edges is not None and dense:
        raise AtlasError(
            f"{arg('max_edges')}: {arg('dense')} keeps every weight; give one of {arg('dense')} and {arg('max_edges')}"
        )
    kept = None if dense else (Settings().kept_mass if kept_mass is None else kept_mass)
    edges = Settings().max_edges if max_edges is None else max_edges
    settings = Settings(
        kept, max_length, pack, max_edges=edges, device=device, text=text, word_rows=word_rows, dtype=dtype
    )
    check_settings(settings)
    if options.sample is not None and options.sample < 1:
        raise AtlasError(f"{arg('sample', options.sample)}: expected 1 or more")
    resolved = CorpusOptions(options.task, options.sample, options.sample_seed or 0, options.length, options.count)
    return Plan(chosen, path, resolved, settings, overrides)


def _check_engine_options(
    engine: str, ray_address: str | None, workers: int | None, gpus_per_worker: float | None, device: str
) -> None:
    if engine not in ENGINES:
        raise AtlasError(f"{arg('engine', repr(engine))}: expected one of {', '.join(ENGINES)}")
    ray_options = {"ray_address": ray_address, "workers": workers, "gpus_per_worker": gpus_per_worker}
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


def stager(engine: str, ray_address: str | None, workers: int | None, gpus_per_worker: float | None) -> Stager | None:
    """The staging of ``engine='ray'`` (None: this process stages the chunks); Ray is imported here only."""
    if engine != "ray":
        return None
    try:
        from atlas.ingestion.ray_engine import RayEngine
    except ModuleNotFoundError as exc:
        if exc.name != "ray" and not (exc.name or "").startswith("ray."):
            raise
        raise AtlasError(
            f"{arg('engine', repr('ray'))}: Ray is not installed (pip install 'attention-atlas[ray]')"
        ) from None
    return RayEngine(ray_address, workers or 2, gpus_per_worker or 0)
