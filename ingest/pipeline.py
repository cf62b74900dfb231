"""The ingest flow: read corpus -> align word pieces -> group inputs -> run model -> sparsify -> write.

Streams in chunks of examples, so memory does not grow with the corpus. Each finished chunk is
written to the run's staging folder and marked done; a re-run with the same inputs and settings
skips the finished chunks (resume). The run is published by one atomic rename at the end.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import shutil
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import torch
import transformers
from tqdm import tqdm

from atlas.errors import AtlasError, arg
from atlas.ingestion.ahead import read_ahead
from atlas.ingestion.align import is_dot_comma
from atlas.ingestion.budget import Budget, budget_for
from atlas.ingestion.corpus import CorpusInfo, changed, read_aligned
from atlas.ingestion.device import resolve_device
from atlas.ingestion.examples import Example, Inputs, Layout, group_examples
from atlas.ingestion.readers import reader
from atlas.ingestion.run_id import STORED_WEIGHTS, Settings, run_id_for
from atlas.ingestion.sparsify import BatchRows
from atlas.ingestion.stages import stage, staged
from atlas.ingestion.write import (
    ATTENTION_TABLES,
    EXAMPLE_TABLES,
    PART_ROWS,
    PARTS,
    WRITE_ORDER,
    WRITERS,
    ChunkRows,
    clear_chunk,
    parts,
    write_chunk,
    write_table,
)
from atlas.model.capture import reads_rows
from atlas.model.continuation import greedy_continuation
from atlas.model.families import kv_heads
from atlas.model.forward import stream_attention, stream_rows
from atlas.model.kinds import END_ROLES, START_ROLES
from atlas.model.load import LoadedModel
from atlas.store import Store
from atlas.version import __version__

# oneDNN (torch's CPU kernels) keeps the code it compiles for each shape of a forward batch, 1,024 shapes by
# default: as an ingest meets new batch shapes its memory grew with the corpus (1.14x at 5x the corpus); 8 keep it
# flat (1.06x) at no measured cost in time. Read when the first forward pass runs; a value the user set stays.
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "8")

PADDING = 1.25  # a forward batch's padded attention weights: at most this many times its examples' own, ...
MIN_BATCH = 8  # ... past this many examples (a batch of one computes some maps a bit differently on 1 or 2 threads)
WRITER_NICENESS = 10  # the Parquet writer threads', above the model's (see _yield_to_the_model)
YOUNG = (50_000, 20, 100)  # the garbage collector's thresholds during an ingest (see _frozen_heap)


@dataclass(frozen=True)
class IngestResult:
    run_id: str
    already_present: bool
    n_examples: int
    n_skipped: int
    n_edges: int
    n_by_rows: int = 0  # inputs too long for their whole maps, read in blocks of rows (no rollout)


def _batches(examples: list[Example], n_attn: int, budget: int) -> Iterator[list[Example]]:
    """Group examples of similar length so that each forward batch stays within the attention budget (``budget``
    weights, ``n_attn``: layers x heads) and, past its first MIN_BATCH examples, its padding adds at most a quarter
    to their attention weights (the work per weight is on all of them, padding included). An example over the
    budget alone is a batch of its own."""
    ordered = sorted(examples, key=lambda e: e.n_tokens)
    batch: list[Example] = []
    weights = 0  # of the batch's examples, without padding
    for ex in ordered:
        longest = ex.n_tokens
        padded = (len(batch) + 1) * longest * longest
        wasteful = len(batch) >= MIN_BATCH and padded > PADDING * (weights + longest * longest)
        if batch and (padded * n_attn > budget or wasteful):
            yield batch
            batch, weights = [], 0
        batch.append(ex)
        weights += longest * longest
    if batch:
        yield batch


def _targets(lay: Layout) -> dict[str, np.ndarray]:
    """Masks of the tokens whose received attention every row records (see ``sparsify``): the special
    tokens of role cls or bos, of role sep or eos (none: all false), and the pieces of the text '.' or ','."""
    return {
        "cls": np.array([r in START_ROLES for r in lay.role]),
        "sep": np.array([r in END_ROLES for r in lay.role]),
        "dot_comma": np.array([is_dot_comma(r, t) for r, t in zip(lay.role, lay.text, strict=True)]),
    }


class _Progress:
    """The ingest's bar: it counts the sentences through the model and moves with each forward batch (by the
    sentences of its inputs), so that it shows a rate and an ETA; beside it, ``written N``: the sentences whose
    chunk is on disk and marked done (all of them only when the last chunk is)."""

    def __init__(self, bar: tqdm) -> None:
        self.bar = bar
        self.written = 0  # sentences in the chunks marked done
        self._lock = threading.Lock()  # ``wrote`` runs in the thread that marks chunks done
        bar.set_postfix_str("written 0", refresh=False)

    def ran(self, n: int) -> None:
        """``n`` more sentences through the model (or found in a chunk done before, on a resumed ingest)."""
        if n:
            self.bar.update(n)

    def wrote(self, n: int) -> None:
        """``n`` more sentences on disk, their chunk marked done."""
        with self._lock:
            self.written += n
            self.bar.set_postfix_str(f"written {self.written}")


class _Batch(NamedTuple):
    """A forward batch of a chunk: its examples, their layouts and what turns the maps into their rows."""

    examples: list[Example]
    layouts: list[Layout]
    rows: BatchRows


@dataclass
class _Chunk:
    """A chunk of examples made ready for the model: the rows that need no model (examples, tokens, words, ...)
    and its forward batches, in the order they run."""

    rows: ChunkRows
    batches: deque[_Batch]
    n_skipped: int  # sentences of the skipped examples


def _prepare_chunk(
    lm: LoadedModel, inputs: Inputs, examples: list[Example], settings: Settings, budget: Budget
) -> _Chunk:
    """The work of a chunk before its forward passes (on a CPU, done while the last chunk is written). An input
    whose maps exceed the budget is read in blocks of rows, where the model allows (``capture.reads_rows``)."""
    rows = ChunkRows(dense=settings.kept_mass is None)
    device = resolve_device(settings.device)
    n_attn = lm.n_layers * lm.n_heads
    by_rows = reads_rows(lm.model)
    laid: dict[int, Layout] = {}
    targets: dict[int, dict[str, np.ndarray]] = {}
    for ex in examples:  # corpus order
        if ex.skipped:
            rows.add_skipped(ex)
            continue
        laid[ex.example_id] = lay = inputs.layout(ex)
        targets[ex.example_id] = marked = _targets(lay)
        rows.add(ex, lay, lm.tokenizer.convert_ids_to_tokens(lay.input_ids), marked["dot_comma"])
    batches: deque[_Batch] = deque()
    for batch in _batches([e for e in examples if not e.skipped], n_attn, budget.batch_weights):
        layouts = [laid[e.example_id] for e in batch]
        long = by_rows and len(batch) == 1 and n_attn * batch[0].n_tokens ** 2 > budget.batch_weights
        rows_of = BatchRows(
            device,
            lm.n_layers,
            lm.n_heads,
            [len(lay.input_ids) for lay in layouts],
            [lay.token_word for lay in layouts],
            [targets[e.example_id] for e in batch],
            settings.kept_mass,
            settings.max_edges,
            lm.decoder,
            first_piece=settings.word_rows == "first",
            block_weights=budget.block_weights if long else None,
            work_weights=budget.work_weights,
            norms=settings.norms,
            rollout=settings.rollout,
        )
        batches.append(_Batch(batch, layouts, rows_of))
    return _Chunk(rows, batches, sum(e.skipped for e in examples))


def _run_chunk(lm: LoadedModel, chunk: _Chunk, settings: Settings, progress: _Progress) -> ChunkRows:
    """Run the model over a prepared chunk (batched by length) on ``settings.device`` and add its attention rows;
    the attention maps stay on the device, where ``BatchRows`` turns each layer's maps into rows as the forward
    pass computes them. Each batch is let go once its rows are in, and moves ``progress`` by its sentences. On an
    accelerator a batch's rows are taken to the host and into tables in a second thread while the model runs on the
    next batch (at most one batch behind: two batches' maps at most are on the device)."""
    device = resolve_device(settings.device)
    lm.model.to(device)
    with ThreadPoolExecutor(max_workers=1) as collecting:
        behind: Future | None = None
        while chunk.batches:
            batch = chunk.batches.popleft()
            ids = [(lay.input_ids, lay.type_ids) for lay in batch.layouts]
            with stage("model", device, gaps=True):
                norms = _timed(batch.rows.norms, device) if settings.norms else None
                if batch.rows.by_rows is not None:
                    stream_rows(lm, ids, device, batch.rows.by_rows.bounds, _timed(batch.rows.block, device), norms)
                else:
                    stream_attention(lm, ids, device, _timed(batch.rows.layer, device), norms)
            if not _pipelined(settings):
                _collect(chunk.rows, batch, progress)
                continue
            if behind is not None:
                behind.result()
            behind = collecting.submit(_collect, chunk.rows, batch, progress)
        if behind is not None:
            behind.result()
    progress.ran(chunk.n_skipped)
    return chunk.rows


def _pipelined(settings: Settings) -> bool:
    """Whether the ingest runs as a pipeline of threads: beside an accelerator, whose forward passes leave the host's
    cores free (on a CPU the model's threads take them all)."""
    return resolve_device(settings.device).type != "cpu"


def _timed(take: Callable, device: torch.device) -> Callable:
    """``take`` (what turns a layer's maps, or a block of rows, into rows), its time counted as the row work."""

    def timed(*args: object) -> None:
        with stage("row work", device):
            take(*args)

    return timed


def _collect(rows: ChunkRows, batch: _Batch, progress: _Progress) -> None:
    """A batch's rows, computed, taken to the host and added to its chunk's tables."""
    with stage("tables"):
        tables = dict(zip(ATTENTION_TABLES, batch.rows.tables(), strict=True))
        rows.add_attention([ex.example_id for ex in batch.examples], tables)
    progress.ran(sum(len(ex.sentences) for ex in batch.examples))


def _budget(lm: LoadedModel, settings: Settings) -> Budget:
    """The attention budget of the ingest's device, with the model on it."""
    device = resolve_device(settings.device)
    lm.model.to(device)
    return budget_for(device)


def _release_freed_memory() -> None:
    """Hand the memory freed during an ingest back to the system at its end (glibc keeps it otherwise); a no-op
    without glibc. Not after each chunk: the next chunk reuses what the last one freed, where after a trim it faulted
    every page in again (UD EWT train: 781,000 page faults and 4.5 s of system time, 142,000 and 2.2 s without; the
    peak at 5x UD EWT dev 1.06x the peak at 1x, as with a trim after each chunk)."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _write_chunk(
    staging: Path, chunk: int, tables: dict[str, pa.Table], dense: bool, counts: dict, marker: Path
) -> None:
    """Write a chunk's tables, then mark it done (the marker is what a resumed ingest trusts)."""
    write_chunk(staging, chunk, tables, dense)
    _mark_done(counts, marker)


def _write(staging: Path, chunk: int, name: str, table: pa.Table, dense: bool, part: int | None) -> None:
    with stage("writing"):
        write_table(staging, chunk, name, table, dense, part)


def _mark_done(
    counts: dict, marker: Path, writes: Iterable[Future] = (), then: Callable[[], None] = lambda: None
) -> None:
    """Once ``writes`` (a chunk's tables being written) are done, mark the chunk done with its counts, then call
    ``then`` (the progress bar's count of the sentences written)."""
    for write in writes:
        write.result()
    tmp = marker.with_name(f".{marker.name}.tmp")
    tmp.write_text(json.dumps(counts))
    tmp.replace(marker)
    then()


def read_marker(marker: Path) -> dict | None:
    """The counts of a finished chunk, or None when the chunk is not (completely) done."""
    try:
        return json.loads(marker.read_text())
    except (OSError, ValueError):
        return None


def done_marker(staging: Path, chunk: int) -> Path:
    return staging / "done" / f"{chunk:05d}.json"


def chunks(corpus: CorpusInfo, lm: LoadedModel, settings: Settings, inputs: Inputs) -> Iterator[list[Example]]:
    """The run's examples in chunks of ``settings.chunk_examples``, in corpus order: the unit of resumption,
    the same for every engine (chunk i is staged as part-i files and marked done by ``done_marker``)."""
    continuing = _continuation(lm, inputs, settings) if reader(corpus.fmt).generates else None
    sentences = read_aligned(corpus, lm.tokenizer, settings.max_length, text=settings.text, continue_with=continuing)
    inputs = replace(inputs, mode=settings.text)  # windows are tokenized as the sentences are
    examples = group_examples(sentences, settings.pack, settings.max_length, inputs, whole=reader(corpus.fmt).whole)
    while block := list(islice(examples, settings.chunk_examples)):
        yield block


def _continuation(lm: LoadedModel, inputs: Inputs, settings: Settings) -> Callable:
    """The model's greedy continuation of a text's pieces, laid out as the ingest lays them out (the template's
    special tokens before the text first), on the ingest's device."""
    form = inputs.template.form(1)
    lead = [slot.token_id for slot in form[: next(i for i, slot in enumerate(form) if slot.text is not None)]]
    device = resolve_device(settings.device)
    return lambda pieces, new_tokens, stop: greedy_continuation(lm, lead, pieces, new_tokens, stop, device)


def _counts(examples: list[Example], rows: ChunkRows, by_rows: int) -> dict[str, int]:
    return {
        "examples": sum(not e.skipped for e in examples),
        "skipped": sum(e.skipped for e in examples),
        "tokens": rows.n_tokens,
        "edges": rows.n_edges,
        "by_rows": by_rows,
    }


def _by_rows(chunk: _Chunk) -> int:
    """The chunk's inputs read in blocks of rows (each alone in its batch)."""
    return sum(batch.rows.by_rows is not None for batch in chunk.batches)


def stage_chunk(
    lm: LoadedModel, inputs: Inputs, chunk: int, examples: list[Example], settings: Settings, staging: Path
) -> dict[str, int]:
    """Stage chunk ``chunk`` of ``chunks`` as ``_stage_chunks`` does (rows through the model, Parquet files, done
    marker) and return its counts: the unit of work of an engine that runs chunks elsewhere
    (``atlas.ingestion.ray_engine``)."""
    with tqdm(disable=True) as bar:
        ready = _prepare_chunk(lm, inputs, examples, settings, _budget(lm, settings))
        by_rows = _by_rows(ready)
        rows = _run_chunk(lm, ready, settings, _Progress(bar))
    counts = _counts(examples, rows, by_rows)
    _write_chunk(staging, chunk, rows.tables(), rows.dense, counts, done_marker(staging, chunk))
    return counts


@contextmanager
def _frozen_heap() -> Iterator[Callable[[], None]]:
    """Keep the objects alive now (the model, the modules: some 430,000) out of the cyclic garbage collector's full
    collections until the block ends, and those alive when the function given is first called (what the first chunk
    imported and compiled): each full collection went over all of them, 0.25 s (UD EWT train: 2.4 s in the 7 full
    collections of a 57 s ingest, 0.5 s in 13 without them). A no-op where the caller froze objects itself (the end
    of the block would unfreeze them). Meanwhile the young objects are collected every 50,000 allocations, not 700
    (``YOUNG``): the reading makes a corpus word's objects and keeps most (UD EWT dev and UD GUM dev in windows, by
    turns, 4 ingests each, medians: reading and aligning 120 against 130 and 135 against 146 ns of a core per
    attention row, the host's stages 620 against 633 and 573 against 605)."""
    thresholds = gc.get_threshold()
    gc.set_threshold(*YOUNG)
    try:
        if gc.get_freeze_count():
            yield lambda: None
            return
        gc.freeze()
        done = False

        def freeze_once() -> None:
            nonlocal done
            if not done:
                gc.freeze()
                done = True

        try:
            yield freeze_once
        finally:
            gc.unfreeze()
    finally:
        gc.set_threshold(*thresholds)


def _yield_to_the_model() -> None:
    """Lower a writer thread's priority (Linux: per thread): its Parquet encoding then runs on what the model's
    host threads leave idle instead of preempting them. Elsewhere a no-op."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), WRITER_NICENESS)
    except (AttributeError, OSError):
        pass


def _stage_chunks(
    corpus: CorpusInfo, lm: LoadedModel, settings: Settings, staging: Path, progress: bool
) -> dict[str, int]:
    """Run every chunk not yet marked done into the staging folder; return the run's totals."""
    totals = {"examples": 0, "skipped": 0, "tokens": 0, "edges": 0, "by_rows": 0}
    inputs = Inputs.of(lm.tokenizer, lm.decoder, corpus.path)
    # A chunk's tables are written in a second thread. On a CPU the model's threads keep every core busy and anything
    # beside them stalls them: the writing overlaps only the reading and preparing of the next chunk (what needs no
    # model: layouts, token and word rows) and the model waits for it (UD EWT dev, medians of 3-4 runs by turns in
    # one process: ingest / forward 1.28 with the writing after each chunk against 1.35 beside the model; overlapping
    # the reading against after each chunk: 1.30 and 1.30 on EWT dev, 1.30 and 1.26 against 1.34 and 1.39 on UD GUM
    # dev in windows). On an accelerator the forward passes leave the host's cores free: the writing goes on while
    # the model runs on the next chunk. The tables are built here first: built in the writer, they waited for the
    # interpreter's lock while the main thread read the next chunk (UD EWT train, by turns: 40.9 and 40.5 s against
    # 43.1 and 41.3). A writer in the idle scheduling class beside the model's forward passes gained more on an
    # otherwise idle machine (1.24 against 1.30, EWT train) but starved beside other busy processes (600 sentences of
    # EWT dev beside two busy loops: 84 and 103 s, 8.5 s alone; written before the forward passes 18 to 33 s).
    # Each table is handed to the writers as soon as it is built, the attention tables first: the writing of one
    # overlaps the building of the next (the first 4,000 sentences of UD EWT train, by turns: 13.2, 13.2, 13.3 and
    # 13.7 s against 13.7, 13.8, 13.9 and 13.9 s built all before the writing).
    background = _pipelined(settings)
    budget = _budget(lm, settings)

    def read() -> Iterator[tuple[int, list[Example], dict | None, _Chunk | None]]:
        """Each chunk, with its counts where it is done, else made ready for the model."""
        for chunk, block in enumerate(staged("reading and aligning", chunks(corpus, lm, settings, inputs))):
            counts = read_marker(done_marker(staging, chunk))
            with stage("reading and aligning"):
                ready = None if counts is not None else _prepare_chunk(lm, inputs, block, settings, budget)
            yield chunk, block, counts, ready

    with (
        _frozen_heap() as freeze,
        ThreadPoolExecutor(max_workers=PARTS if background else WRITERS, initializer=_yield_to_the_model) as writers,
        ThreadPoolExecutor(max_workers=1) as marking,
        tqdm(total=corpus.n_sentences, unit="sent", desc="ingest", disable=not progress) as bar,
    ):
        progress = _Progress(bar)
        pending: Future | None = None
        # on an accelerator the next chunk is read and prepared while the model runs on this one
        # the reading runs the model where the inputs end with its continuation: never beside its forward passes
        ahead = background and not reader(corpus.fmt).generates
        for chunk, block, counts, ready in read_ahead(read()) if ahead else read():
            marker = done_marker(staging, chunk)
            n_sent = sum(len(e.sentences) for e in block)
            if ready is None:  # done before: a resumed ingest's bar starts past it
                progress.ran(n_sent)
                progress.wrote(n_sent)
            else:
                if pending is not None and not background:  # read and prepared beside the last chunk's writing
                    with stage("waiting for the writers"):
                        pending.result()
                by_rows = _by_rows(ready)
                rows = _run_chunk(lm, ready, settings, progress)
                counts = _counts(block, rows, by_rows)
                if pending is not None:
                    with stage("waiting for the writers"):
                        pending.result()
                clear_chunk(staging, chunk)
                writes = []
                for name in WRITE_ORDER:
                    with stage("tables"):
                        table = rows.table(name)
                    cut = min(PARTS, -(-table.num_rows // PART_ROWS)) if background else 1
                    for part, piece in enumerate(parts(table, cut) if cut > 1 else [table]):
                        write = (staging, chunk, name, piece, rows.dense, part if cut > 1 else None)
                        writes.append(writers.submit(_write, *write))
                # the chunk's rows are now the tables' alone: freed as they are written, not after the next chunk's
                # forward passes
                del rows, table, piece, write
                freeze()
                pending = marking.submit(_mark_done, counts, marker, writes, lambda n=n_sent: progress.wrote(n))
            for key in totals:
                totals[key] += counts.get(key, 0)  # by_rows: not in a chunk done before it was counted
        if pending is not None:
            with stage("waiting for the writers"):
                pending.result()
    _release_freed_memory()
    return totals


# stages a run's pending chunks: (corpus, lm, settings, staging, progress) -> the run's totals
Stager = Callable[[CorpusInfo, LoadedModel, Settings, Path, bool], dict[str, int]]


def ingest(
    corpus: CorpusInfo,
    store: Store,
    lm: LoadedModel,
    settings: Settings,
    progress: bool = True,
    stage: Stager | None = None,
) -> IngestResult:
    """Add a run of ``lm`` over a checked corpus (see ``check_corpus``) to the store, with ``settings`` as
    ``check_settings`` passes them (``atlas.ingestion.options.plan`` checks them before the model loads); ``stage``:
    another engine's staging of the chunks (``atlas.ingestion.ray_engine``) instead of this process's."""
    max_length = lm.max_positions if settings.max_length is None else settings.max_length
    if max_length > lm.max_positions:
        raise AtlasError(f"{arg('max_length', max_length)}: the model takes inputs of 3 to {lm.max_positions} pieces")
    model_limit = lm.name if settings.max_length is None else ""  # before the staging and the progress bar
    reader(corpus.fmt).check_fits(corpus, lm.tokenizer, max_length, model_limit)
    settings = replace(settings, max_length=max_length)
    run_id = run_id_for(corpus, lm, settings)
    if store.run_folder(run_id).is_dir():
        return IngestResult(run_id, True, 0, 0, 0)
    with store.writing():  # one writer per store for the whole ingest; a second one is refused at once
        return _stage_and_publish(corpus, store, lm, settings, run_id, progress, stage or _stage_chunks)


def _stage_and_publish(
    corpus: CorpusInfo, store: Store, lm: LoadedModel, settings: Settings, run_id: str, progress: bool, stage: Stager
) -> IngestResult:
    max_length = settings.max_length
    final = store.run_folder(run_id)
    if final.is_dir():  # published by another process before this one took the lock
        return IngestResult(run_id, True, 0, 0, 0)
    created = not store.exists()
    store.check_database()
    store.make_folders()
    staging = store.staging / run_id
    try:
        (staging / "done").mkdir(parents=True, exist_ok=True)
        for tmp in staging.rglob(".*.tmp"):
            tmp.unlink()
        if progress and (kept := sum(1 for _ in (staging / "done").glob("*.json"))):
            print(f"resuming run {run_id}: {kept:,} chunk(s) written before are kept", file=sys.stderr)
        with ThreadPoolExecutor(max_workers=1) as side:  # the database beside the first chunk's reading
            database = side.submit(store.write_database)
            try:
                totals = stage(corpus, lm, settings, staging, progress)
            finally:
                database.result()
        if changed(corpus):  # a drawn corpus (--format repeated) has no file
            shutil.rmtree(staging)
            raise AtlasError(f"{corpus.path}: the file changed during the ingest; run it again")
        if totals["examples"] == 0:  # a run without an input answers nothing
            shutil.rmtree(staging)
            raise AtlasError(
                f"{corpus.path}: every input is longer than {arg('max_length', max_length)} pieces "
                f"({totals['skipped']:,} skipped); nothing was stored"
            )
    except KeyboardInterrupt:
        raise  # the finished chunks stay staged: the same ingest resumes from them
    except BaseException:
        if not any((staging / "done").glob("*.json")):  # nothing to resume: leave the store as it was
            shutil.rmtree(staging, ignore_errors=True)
            if created:
                store.remove_if_empty()
        raise

    run_row = {
        "run_id": run_id,
        "model": lm.name,
        "model_source": lm.source,
        "model_hash": lm.model_hash,
        "random_init": lm.random_init,
        "seed": lm.seed,
        "n_layers": lm.n_layers,
        "n_heads": lm.n_heads,
        "n_kv_heads": kv_heads(lm.model.config, lm.n_heads),
        "corpus": corpus.name,
        "corpus_sha256": corpus.sha256,
        "pack": settings.pack,
        "text": settings.text,
        "word_rows": settings.word_rows,
        "value_norms": settings.norms,
        "rollout": settings.rollout,
        "dtype": settings.dtype,
        "config": json.dumps(lm.config_overrides, sort_keys=True) if lm.config_overrides else None,
        "max_length": max_length,
        "kept_mass": settings.kept_mass,
        "max_edges": None if settings.kept_mass is None else settings.max_edges,
        "weight_precision": "float32" if settings.kept_mass is None else STORED_WEIGHTS,
        "n_sentences": corpus.n_sentences,
        "n_examples": totals["examples"],
        "n_skipped": totals["skipped"],
        "n_tokens": totals["tokens"],
        "n_edges": totals["edges"],
        "created_at": [datetime.now(UTC).replace(tzinfo=None)],
        "atlas_version": __version__,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
    }
    shutil.rmtree(staging / "done")
    store.publish(run_id, run_row, EXAMPLE_TABLES)  # the run is visible from here on
    by_rows = totals.get("by_rows", 0)
    return IngestResult(run_id, False, totals["examples"], totals["skipped"], totals["edges"], by_rows)
