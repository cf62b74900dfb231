"""Ingest benchmark against the model's own forward passes, measured side by side in one run, on any device.

    python bench/bench_device.py CORPUS [--format conllu|repeated] [--length N --count K]
        [--pack window --max-length N] [--model FOLDER] [--random-init] [--config KEY=VALUE ...]
        [--dtype auto|float32|bfloat16|float16] [--device auto|cpu|cuda|mps] [--repeat N] [--passes N]
        [--no-warm-up] [--no-stages] [--same] [--profile]
    python bench/bench_device.py --memory 1023 4095 [--count K] --model FOLDER --random-init --config ...

For CORPUS with ``--format repeated`` give ``-`` (the tokens are drawn). With --random-init the weights are made on
the device, in the run's dtype, under the seed 0 (``bench/shapes.py`` makes a published model's shape: Llama-3.1-8B's
never passes through the host). Prints:
1. the inputs: read, aligned and grouped into the ingest's forward batches beforehand, their seconds;
2. on the device alone, over those prepared batches (the median of --passes passes each): (a) the model's eager
   forward pass with every layer's attention captured, in the run's dtype (an input read by rows: its attention
   computed block by block, as the ingest computes it), and (b) the model's forward pass with PyTorch's SDPA
   attention in bfloat16, which gives no attention weights: what the model costs a user who wants none;
3. the ingest (a fresh store each time; the median of --repeat), its ratios to (a) and (b), the tokens per second
   of the ingest, (a) and (b): the run's tokens as the ingest stores them (runs.n_tokens, the inputs' lengths
   summed, padding not counted) over each one's median seconds, and the device's peak memory during the ingest;
   with --same, whether each ingest's store is the first one's, table by table (rows, the sum of the rows' hashes
   and each column's); with --profile, one more ingest under torch's profiler: the operators and
   kernels by the device's time;
4. ``## stages``: one more ingest with each stage timed (atlas.ingestion.stages: the device waited for at each stage's
   end, so this ingest is slower than the ones above; stages in different threads overlap, so their seconds can add up
   to more than its wall time): reading and aligning, the model, the row work on the device, the copies to the
   host, the tables, the writing, the main thread waiting for the writers, and the device waiting for the host
   (the gaps between the model's forward batches); each also per token and per attention row; then the host's
   own stages (reading, tables, writing) spread over every core: a floor to the ingest, against (a);
5. with --memory L1 L2 ...: for repeated random tokens of each length (inputs of 2 L + 1 tokens with a BOS), the
   memory an ingest adds to the loaded model's, each ingest in a process of its own: on a CPU the peak resident
   memory less the resident memory before the ingest, on CUDA the peak allocated device memory less that before;
   and each length's ratio to the first's.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from atlas.ingestion.corpus import CorpusInfo, check_corpus  # noqa: E402
from atlas.ingestion.device import resolve_device, resolve_dtype  # noqa: E402
from atlas.ingestion.examples import Inputs  # noqa: E402
from atlas.ingestion.pipeline import _budget, _prepare_chunk, chunks, ingest  # noqa: E402
from atlas.ingestion.readers import reader  # noqa: E402
from atlas.ingestion.readers.base import CorpusOptions  # noqa: E402
from atlas.ingestion.run_id import Settings  # noqa: E402
from atlas.ingestion.stages import WAITING, timing  # noqa: E402
from atlas.model.capture import reading_rows, recording  # noqa: E402
from atlas.model.forward import model_inputs  # noqa: E402
from atlas.model.identity import config_overrides  # noqa: E402
from atlas.model.load import LoadedModel, load_model  # noqa: E402
from atlas.store import Store  # noqa: E402

STAGES = (
    "reading and aligning", "model", "row work", "to the host", "tables", "writing", "waiting for the writers", WAITING,
)  # fmt: skip
# the work on the host whatever the device: a floor to the ingest where the model's is milliseconds
HOST_STAGES = ("reading and aligning", "tables", "writing")
# the tables an ingest writes, compared column by column by --same
INGESTED = ("examples", "tokens", "words", "attn_rows", "attn_edges", "word_rows")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


class _Blocks:
    """A row sink that computes nothing from the blocks: the forward pass of an input read by rows, alone."""

    def __init__(self, bounds) -> None:
        self._bounds = bounds

    def bounds(self, n: int):
        return self._bounds(n)

    def rows(self, start: int, probs: torch.Tensor) -> None:
        pass


def prepared(lm: LoadedModel, corpus: CorpusInfo, settings: Settings) -> tuple[list[tuple[dict, object]], float, int]:
    """The ingest's forward batches, read, aligned and grouped, as the model's keyword arguments on the device (and,
    for an input read by rows, its blocks' bounds); the seconds that took; the inputs' attention weights."""
    device = resolve_device(settings.device)
    start = time.perf_counter()
    inputs = Inputs.of(lm.tokenizer, lm.decoder, corpus.path)
    budget = _budget(lm, settings)
    batches, weights = [], 0
    for block in chunks(corpus, lm, settings, inputs):
        chunk = _prepare_chunk(lm, inputs, block, settings, budget)
        for batch in chunk.batches:
            ids = [(lay.input_ids, lay.type_ids) for lay in batch.layouts]
            weights += lm.n_layers * lm.n_heads * sum(len(i) ** 2 for i, _ in ids)
            by_rows = batch.rows.by_rows
            batches.append((model_inputs(lm, ids, device), None if by_rows is None else by_rows.bounds))
    _sync(device)
    return batches, time.perf_counter() - start, weights


def timed(run, device: torch.device, repeats: int) -> float:
    """The median seconds of ``run()`` (the device's work waited for), run ``repeats`` times."""
    seconds = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        run()
        _sync(device)
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def eager_with_capture(lm: LoadedModel, batches: list, device: torch.device, passes: int) -> float:
    def run() -> None:
        with torch.inference_mode():
            for kwargs, bounds in batches:
                if bounds is None:
                    with recording(lambda _probs: None):
                        lm.model(**kwargs)
                else:
                    with reading_rows(_Blocks(bounds)):
                        lm.model(**kwargs)

    return timed(run, device, passes)


def sdpa_bfloat16(lm: LoadedModel, batches: list, device: torch.device, passes: int) -> float:
    model = copy.deepcopy(lm.model).to(torch.bfloat16)
    model.set_attn_implementation("sdpa")

    def run() -> None:
        with torch.inference_mode():
            for kwargs, _bounds in batches:
                model(**kwargs)

    return timed(run, device, passes)


def corpus_of(args: argparse.Namespace) -> CorpusInfo:
    chosen = reader(args.format)
    if chosen.takes_file:
        return check_corpus(args.corpus, args.format)
    drawn = CorpusOptions(length=args.length, count=args.count, sample_seed=args.sample_seed)
    return check_corpus(chosen.corpus_path(None, drawn), args.format)


def checksums(store: Store) -> dict[str, tuple]:
    """Each ingested table's rows, the sum of its rows' hashes (DuckDB's ``hash`` of every column: in any order
    of the rows, the same rows) and, to say where they differ, each column's sum of hashes."""
    con = store.connect()
    try:
        sums = {}
        for table in INGESTED:
            columns = [f'"{row[0]}"' for row in con.execute(f"DESCRIBE {table}").fetchall()]
            hashes = ", ".join(f"sum(hash({c}))" for c in columns)
            values = con.execute(f"SELECT count(*), sum(hash({', '.join(columns)})), {hashes} FROM {table}").fetchone()
            sums[table] = (values[0], values[1], dict(zip(columns, values[2:], strict=True)))
        return sums
    finally:
        con.close()


def same_store(first: dict[str, tuple], other: dict[str, tuple]) -> str:
    """Where a store differs from the first one: its tables' rows, and the columns whose hashes differ (or, where
    each column's are the same, that its rows are not)."""
    differences = []
    for table, (rows, row_hashes, columns) in first.items():
        rows_other, row_hashes_other, columns_other = other[table]
        changed = [c.strip('"') for c in columns if columns[c] != columns_other[c]]
        if rows != rows_other:
            differences.append(f"{table}: {rows_other:,} rows, not {rows:,}")
        elif changed or row_hashes != row_hashes_other:
            differences.append(f"{table}: {', '.join(changed) or 'values moved between rows'}")
    return "; ".join(differences) or "the same"


def profiled(corpus: CorpusInfo, store: Store, lm: LoadedModel, settings: Settings, device: torch.device) -> None:
    """One ingest under torch's profiler: the operators and kernels taking the device's time (else the CPU's), each
    its own time summed over the ingest (an operator's includes the kernels it launches, listed too)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        ingest(corpus, store, lm, settings, progress=False)
    key = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    print(f"\n## profile (one more ingest; by {key})")
    print(prof.key_averages().table(sort_by=key, row_limit=30, max_name_column_width=60))


def model_of(args: argparse.Namespace, dtype: str, device: torch.device) -> LoadedModel:
    """The model on ``device``; with --random-init its weights are made there, in ``dtype``, under the seed 0 (the
    device's own generator: on a CPU the weights of before, on CUDA others, the same run after run), so a large
    shape (Llama-3.1-8B's 14 GiB in bfloat16) is never whole on the host."""
    overrides = config_overrides(args.config)
    with torch.device(device) if args.random_init else contextlib.nullcontext():
        lm = load_model(args.model, random_init=args.random_init, seed=0, dtype=dtype, **overrides)
    lm.model.to(device)
    return lm


def rss_mb() -> float:
    """This process's resident memory now (MB)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def memory_child(args: argparse.Namespace) -> None:
    """One ingest of repeated tokens of length ``args.length``; prints what it adds to the memory, as JSON."""
    settings = settings_of(args)
    device = resolve_device(settings.device)
    lm = model_of(args, settings.dtype, device)
    corpus = corpus_of(args)
    before = rss_mb()
    device_before = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    with tempfile.TemporaryDirectory() as work:
        ingest(corpus, Store(Path(work) / "store"), lm, settings, progress=False)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    added = {"host_mb": peak - before, "device_mb": 0.0}
    if device.type == "cuda":
        added["device_mb"] = (torch.cuda.max_memory_allocated(device) - device_before) / 2**20
    print(json.dumps(added))


def memory(args: argparse.Namespace) -> None:
    print(f"## memory an ingest adds to the loaded model's ({args.count} inputs of repeated random tokens each)")
    print(f"{'length':>7} {'tokens':>7} {'host MB':>9} {'ratio':>6} {'device MB':>10} {'ratio':>6}")
    first = None
    for length in args.memory:
        passed = [a for a in sys.argv[1:] if a not in map(str, args.memory) and a != "--memory"]
        command = [sys.executable, __file__, *passed, "--memory-child", "--length", str(length)]
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
        added = json.loads(out)
        first = first or added
        host = added["host_mb"] / first["host_mb"]
        dev = added["device_mb"] / first["device_mb"] if first["device_mb"] else float("nan")
        tokens = 2 * length + 1
        print(f"{length:>7} {tokens:>7} {added['host_mb']:>9.0f} {host:>6.2f} {added['device_mb']:>10.0f} {dev:>6.2f}")


def settings_of(args: argparse.Namespace) -> Settings:
    dtype = resolve_dtype(args.dtype, args.device)
    return Settings(
        kept_mass=args.kept_mass, max_length=args.max_length, pack=args.pack, device=args.device, dtype=dtype
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", type=Path, nargs="?", default=Path("-"))
    parser.add_argument("--format", choices=["conllu", "repeated"], default="conllu")
    parser.add_argument("--length", type=int, default=50)
    parser.add_argument("--count", type=int, default=10)
    parser.add_argument("--sample-seed", type=int, default=0)
    parser.add_argument("--kept-mass", type=float, default=Settings().kept_mass)
    parser.add_argument("--pack", choices=["none", "pair", "window"], default="none")
    parser.add_argument("--max-length", type=int, default=None)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--model", default=None, help="HF id or folder (default: the embedded model)")
    parser.add_argument("--random-init", action="store_true")
    parser.add_argument("--config", action="append", default=[], help="KEY=VALUE (JSON) for the model's config")
    parser.add_argument("--repeat", type=int, default=3, help="ingests timed (the median is reported)")
    parser.add_argument("--passes", type=int, default=3, help="forward passes (a) and (b) timed (the median)")
    parser.add_argument("--no-warm-up", action="store_true", help="no ingest before the timed ones")
    parser.add_argument("--no-stages", action="store_true", help="no ingest with its stages timed")
    parser.add_argument("--same", action="store_true", help="compare each timed ingest's store with the first's")
    parser.add_argument("--profile", action="store_true", help="one more ingest under torch's profiler")
    parser.add_argument("--memory", type=int, nargs="+", default=None, help="lengths of repeated random tokens")
    parser.add_argument("--memory-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.same and args.repeat < 2:
        parser.error("--same compares the timed ingests' stores: give --repeat 2 or more")
    if args.memory_child:
        args.format = "repeated"
        memory_child(args)
        return
    if args.memory:
        args.format = "repeated"
        memory(args)
        return
    settings = settings_of(args)
    device = resolve_device(settings.device)
    lm = model_of(args, settings.dtype, device)
    settings = replace(settings, max_length=settings.max_length or lm.max_positions)
    corpus = corpus_of(args)
    print(
        f"# {corpus.name}: {corpus.n_sentences:,} sentences; model {lm.name}{' random init' if lm.random_init else ''} "
        f"({lm.n_layers} x {lm.n_heads} heads, hidden {lm.model.config.hidden_size}); {settings.dtype}; device "
        f"{device}{' ' + torch.cuda.get_device_name(device) if device.type == 'cuda' else ''}; "
        f"{os.cpu_count()} CPU cores; pack {args.pack}, max length {args.max_length or lm.max_positions}"
    )
    work = Path(tempfile.mkdtemp(prefix="atlas-bench-"))
    try:
        if not args.no_warm_up:  # compiles the CPU's pass, warms the device's kernels
            ingest(corpus, Store(work / "warm-up"), lm, settings, progress=False)
        batches, prepare_s, weights = prepared(lm, corpus, settings)
        longest = max(kwargs["input_ids"].shape[1] for kwargs, _ in batches)
        print(f"inputs: {len(batches)} forward batches, longest input {longest:,} tokens, {weights:,} attention "
              f"weights; read, aligned and grouped beforehand in {prepare_s:.2f} s")  # fmt: skip
        eager = eager_with_capture(lm, batches, device, args.passes)
        sdpa = sdpa_bfloat16(lm, batches, device, args.passes)
        del batches
        ingests, peaks, sameness = [], [], []
        first = None
        for k in range(args.repeat):
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            start = time.perf_counter()
            ingest(corpus, Store(work / f"store{k}"), lm, settings, progress=False)
            ingests.append(time.perf_counter() - start)
            peaks.append(torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else 0.0)
            if not k:  # the tokens as the ingest stores them: its inputs' lengths summed (padding not counted)
                con = Store(work / f"store{k}").connect()
                tokens = con.execute("SELECT n_tokens FROM runs").fetchone()[0]
                con.close()
            if args.same:
                sums = checksums(Store(work / f"store{k}"))
                first = first or sums
                if k:
                    sameness.append(same_store(first, sums))
            shutil.rmtree(work / f"store{k}")
        seconds = statistics.median(ingests)
        print("\n## time, s")
        print(f"(a) eager forward with capture, {settings.dtype}, device alone   {eager:9.3f}")
        print(f"(b) SDPA forward, bfloat16, device alone                  {sdpa:9.3f}")
        print(f"ingest (median of {args.repeat}: {', '.join(f'{s:.2f}' for s in ingests)})"
              f"{' ' * max(0, 22 - 6 * args.repeat)} {seconds:9.3f}")  # fmt: skip
        print(f"ingest / (a)                                              {seconds / eager:9.2f}")
        print(f"ingest / (b)                                              {seconds / sdpa:9.2f}")
        print(f"tokens per second ({tokens:,} tokens: the run's n_tokens, its inputs' lengths summed)")
        for label, s in (("ingest", seconds), ("(a) eager forward with capture", eager), ("(b) SDPA forward", sdpa)):
            print(f"  {label:<56}{tokens / s:9,.0f}")
        if device.type == "cuda":
            print(f"peak GPU memory during an ingest: {max(peaks):.1f} GiB")
        for k, verdict in enumerate(sameness, start=2):
            print(f"store of ingest {k} against the first's (its rows' and each column's hashes): {verdict}")
        if args.profile:
            profiled(corpus, Store(work / "profiled"), lm, settings, device)
        if args.no_stages:
            return
        with timing() as clock:
            start = time.perf_counter()
            ingest(corpus, Store(work / "staged"), lm, settings, progress=False)
            wall = time.perf_counter() - start
        con = Store(work / "staged").connect()
        tokens, edges = con.execute("SELECT n_tokens, n_edges FROM runs").fetchone()
        con.close()
        rows = tokens * lm.n_layers * lm.n_heads  # attention rows: one per token, layer and head
        print(f"\n## stages (one more ingest, each stage waited for: {wall:.2f} s; {tokens:,} tokens, {rows:,} "
              f"attention rows, {edges:,} edges)")  # fmt: skip
        print("| stage | s | share of the ingest | µs per token | ns per attention row |\n|---|---|---|---|---|")
        for stage in STAGES:
            s = clock.get(stage, 0.0)
            print(f"| {stage} | {s:.3f} | {s / wall:.0%} | {s / tokens * 1e6:.2f} | {s / rows * 1e9:.0f} |")
        host = sum(clock.get(stage, 0.0) for stage in HOST_STAGES)
        cores = os.cpu_count() or 1
        print(f"the host's stages ({', '.join(HOST_STAGES)}): {host:.2f} thread seconds; on {cores} cores at best "
              f"{host / cores:.3f} s, {host / cores / eager:.2f} times (a)")  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
