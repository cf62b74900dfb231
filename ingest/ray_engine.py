"""The ingest on Ray Data (``atlas ingest --engine ray``): a run's chunks staged by a pool of actors.

The driver (the process that runs ``atlas ingest``) reads the checked corpus and groups it into the run's
chunks exactly as the single-process ingest does (``pipeline.chunks``), skips the chunks already marked done
(by either engine), and puts each pending chunk's examples into Ray's object store (serialised by Ray), its
number as a one-row block of a Dataset. A class-based ``map_batches`` stage runs on an actor pool: each actor
loads the model once (claiming ``gpus_per_worker`` GPUs, the only ones Ray lets it see) and stages one chunk
per call with ``pipeline.stage_chunk``, the single-process ingest's own code: the same Parquet files, temporary
names and renames, and done markers, in the run's staging folder. The driver counts the finished chunks on one
progress bar and then publishes the run with the same single rename (``pipeline.ingest``). Nothing of the
store depends on the engine.

A cluster's nodes must all see the store at the same absolute path (a shared filesystem): workers write the
staging folder the driver publishes. The driver holds the grouped corpus only in Ray's object store, which
spills to disk when full. This module imports Ray; nothing else imports this module unless asked for it.
"""

from __future__ import annotations

import logging
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import ray
import ray.data
from ray.exceptions import RayError
from tqdm import tqdm

from atlas.errors import AtlasError, arg
from atlas.ingestion.examples import Example, Inputs
from atlas.ingestion.pipeline import chunks, done_marker, read_marker, stage_chunk
from atlas.ingestion.readers.corpus_info import CorpusInfo
from atlas.ingestion.run_id import Settings
from atlas.model.load import LoadedModel, load_model

# Ray schedules actors by the CPUs they claim; an actor claiming a whole CPU starves Ray Data's own tasks on a
# machine with few cores, and the torch threads of a worker do not depend on the claim.
CPUS_PER_WORKER = 0.5
SHARED = "every node must see the store at the same path (a shared filesystem)"


def _first_line(exc: BaseException) -> str:
    """An error in one line: an AtlasError's own (its parameters kept for each surface to name, see
    ``atlas.errors``), another's with its type."""
    text = str(exc).strip()
    if isinstance(exc, AtlasError) and text:
        return Exception.__str__(exc).strip().splitlines()[0]
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


@ray.remote(num_cpus=0)
class Stop:
    """Set by the driver when the ingest fails: the workers then skip the chunks they have not begun."""

    def __init__(self) -> None:
        self.stopped = False

    def set(self) -> None:
        self.stopped = True

    def get(self) -> bool:
        return self.stopped


class ChunkStager:
    """A Ray Data actor: the model loaded once, then every chunk of a batch staged and answered with its counts,
    or with its error (the driver stops the ingest on the first), or with neither once ``stop`` is set. A worker
    that cannot start (the store or the model not at its path on its node) answers each chunk with why. The model
    is loaded as the driver's: in ``settings.dtype``, with the driver's ``config`` overrides."""

    def __init__(
        self,
        source: str,
        random_init: bool,
        seed: int,
        model_hash: str,
        config: dict[str, object],
        corpus: Path,
        settings: Settings,
        staging: Path,
        stop: ray.actor.ActorHandle,
        blocks: dict[int, ray.ObjectRef],
    ) -> None:
        self.settings, self.staging, self.stop, self.blocks = settings, staging, stop, blocks
        self.failed: str | None = None
        try:
            if not (staging / "done").is_dir():  # made by the driver before any worker starts
                raise AtlasError(f"{staging}: not found on Ray node {ray.util.get_node_ip_address()}; {SHARED}")
            self.lm = load_model(source, random_init=random_init, seed=seed, dtype=settings.dtype, **config)
            if self.lm.model_hash != model_hash:
                raise AtlasError(f"{arg('model', repr(source))}: a Ray worker loaded other weights than the driver")
            self.inputs = Inputs.of(self.lm.tokenizer, self.lm.decoder, corpus)
        except Exception as exc:  # noqa: BLE001 (told to the driver with the first chunk)
            self.failed = _first_line(exc)

    def __call__(self, batch: pa.Table) -> pa.Table:
        errors, counts = [], []
        for chunk in batch["chunk"].to_pylist():
            if ray.get(self.stop.get.remote()):
                errors.append(None)
                counts.append(None)
                continue
            try:
                if self.failed is not None:
                    raise AtlasError(self.failed)
                examples: list[Example] = ray.get(self.blocks[chunk])
                done = stage_chunk(self.lm, self.inputs, chunk, examples, self.settings, self.staging)
                errors.append(None)
                counts.append(done)
            except Exception as exc:  # noqa: BLE001 (the driver names the chunk and stops)
                errors.append(_first_line(exc))
                counts.append(None)
        return pa.table({"chunk": batch["chunk"], "error": pa.array(errors, pa.string()), "counts": counts})


@dataclass(frozen=True)
class RayEngine:
    """Stages a run's pending chunks on Ray (``pipeline.ingest(..., stage=RayEngine(...))``): ``address`` of a
    running cluster (None: the instance this process already joined, else a new local one), ``workers`` actors
    with ``gpus_per_worker`` GPUs each (0: none)."""

    address: str | None = None
    workers: int = 2
    gpus_per_worker: float = 0

    def __call__(
        self, corpus: CorpusInfo, lm: LoadedModel, settings: Settings, staging: Path, progress: bool
    ) -> dict[str, int]:
        totals: Counter[str] = Counter()
        refs, blocks, first_lines = [], {}, {}
        started = False
        inputs = Inputs.of(lm.tokenizer, lm.decoder, corpus.path)
        try:
            for chunk, block in enumerate(chunks(corpus, lm, settings, inputs)):
                counts = read_marker(done_marker(staging, chunk))
                if counts is not None:
                    totals.update(counts)
                    continue
                if not refs:  # the first pending chunk
                    started = self._start()
                first_lines[chunk] = (block[0].sentences[0].sentence.line, block[0].example_id, block[-1].example_id)
                blocks[chunk] = ray.put(block)
                refs.append(ray.put(pa.table({"chunk": [chunk]})))
            if refs:
                staging = staging.resolve()
                totals.update(self._stage(refs, blocks, first_lines, corpus, lm, settings, staging, progress))
        finally:
            if started:
                ray.shutdown()
        return totals

    def _start(self) -> bool:
        """Join ``address`` or start a local instance, unless this process has joined one; True if it joined."""
        with warnings.catch_warnings():  # Ray Data's context warns of its own deprecated fields when made
            warnings.simplefilter("ignore", DeprecationWarning)
            ray.data.DataContext.get_current().enable_progress_bars = False  # the driver shows its own bar
        logging.getLogger("ray.data").setLevel(logging.ERROR)  # nor Ray Data's notes on its execution
        if ray.is_initialized():
            return False
        try:
            ray.init(address=self.address, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            where = f"{arg('engine', repr('ray'))}: cannot start Ray"
            if self.address:
                where = f"{arg('ray_address', repr(self.address))}: cannot join Ray"
            raise AtlasError(f"{where} ({_first_line(exc)})") from None
        return True

    def _stage(
        self,
        refs: list,
        blocks: dict[int, ray.ObjectRef],
        first_lines: dict[int, tuple[int, int, int]],
        corpus: CorpusInfo,
        lm: LoadedModel,
        settings: Settings,
        staging: Path,
        progress: bool,
    ) -> Counter[str]:
        """Run the pending chunks (``refs``: their numbers, one-row tables; ``blocks``: their examples) through the
        actor pool; their counts added up."""
        gpus = ray.cluster_resources().get("GPU", 0)
        if self.gpus_per_worker > gpus:  # Ray would wait for them without end
            raise AtlasError(
                f"{arg('gpus_per_worker', self.gpus_per_worker)}: the Ray cluster has {gpus:g} GPUs; a worker "
                "would wait for its GPUs without end"
            )
        stager = {
            "source": lm.source,
            "random_init": lm.random_init,
            "seed": lm.seed,
            "model_hash": lm.model_hash,
            "config": lm.config_overrides,
            "corpus": corpus.path.resolve(),
            "settings": settings,
            "staging": staging,
            "stop": Stop.remote(),
            "blocks": blocks,
        }
        with warnings.catch_warnings():  # max_restarts is passed as the remote argument Ray 2.60 still takes
            warnings.simplefilter("ignore", DeprecationWarning)
            staged = ray.data.from_arrow_refs(refs).map_batches(
                ChunkStager,
                batch_size=1,  # one chunk per call: a chunk is the unit of resumption
                batch_format="pyarrow",
                compute=ray.data.ActorPoolStrategy(size=min(self.workers, len(refs))),  # no idle model copies
                fn_constructor_kwargs=stager,
                num_cpus=CPUS_PER_WORKER,
                num_gpus=self.gpus_per_worker or None,
                # a worker that dies (out of memory) fails the ingest rather than being restarted on the same
                # chunk without end (Ray Data's default); the chunks done by then stay staged for a re-run
                max_restarts=0,
            )
        totals: Counter[str] = Counter()
        failed = None
        with tqdm(total=len(refs), unit="chunk", desc="ingest (ray)", disable=not progress) as bar:
            try:
                for row in staged.iter_rows():  # to the end, even after a failure: no worker is left writing
                    if row["error"] is not None and failed is None:
                        failed = f"{_where(corpus, first_lines, row['chunk'])} failed on a Ray worker: {row['error']}"
                        stager["stop"].set.remote()
                    elif row["counts"] is not None:
                        totals.update(row["counts"])
                        bar.update(1)
            except BaseException as exc:
                stager["stop"].set.remote()  # (interrupted) the workers finish the chunks they hold, no more
                if not isinstance(exc, RayError):
                    raise
                undone = _undone(staging, first_lines)
                where = _where(corpus, first_lines, undone[0]) if undone else "the ingest"
                raise AtlasError(f"{where}: a Ray worker failed ({_first_line(_cause(exc))})") from None
        if failed is not None:
            raise AtlasError(failed)
        if undone := _undone(staging, first_lines):  # written where this process does not look
            where = _where(corpus, first_lines, undone[0])
            raise AtlasError(f"{where}: staged by a Ray worker, but not in {staging}; {SHARED}")
        return totals


def _undone(staging: Path, first_lines: dict[int, tuple[int, int, int]]) -> list[int]:
    """The chunks of ``first_lines`` whose done marker this process does not see."""
    return [chunk for chunk in sorted(first_lines) if read_marker(done_marker(staging, chunk)) is None]


def _where(corpus: CorpusInfo, first_lines: dict[int, tuple[int, int, int]], chunk: int) -> str:
    line, first, last = first_lines[chunk]
    return f"{corpus.path}:{line}: chunk {chunk} (examples {first}-{last})"


def _cause(exc: RayError) -> BaseException:
    """The user code's exception a Ray error wraps, else the Ray error itself."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc
