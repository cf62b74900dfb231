"""Ray engine benchmark: the same ingest by this process and by Ray Data workers, side by side in one run.

    flock /tmp/atlas-heavy.lock python bench/bench_ray.py CORPUS.conllu [--sentences N] [--workers 2]
        [--repeats R] [--ray-address ADDR] [--gpus-per-worker G]

Ingests the first N sentences of CORPUS (all with --sentences 0) into fresh stores with the embedded model
and the default settings, with the single-process engine and with ``--engine ray`` (a local Ray instance, or
the cluster at --ray-address) in turn, each as ``atlas ingest`` runs it (corpus check, model load, staging,
publish). Prints the wall times (median of --repeats runs each) and their ratio, the machine's load, Ray's
own start-up time, whether both engines wrote the same run with the same rows, and the driver's own serial
share (checking, reading, aligning and grouping the corpus), which bounds what N GPU workers can gain.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import ray  # noqa: E402
import torch  # noqa: E402
from bench_ingest import WARM_UP  # noqa: E402

from atlas import api  # noqa: E402
from atlas.ingestion.corpus import check_corpus  # noqa: E402
from atlas.ingestion.examples import Inputs  # noqa: E402
from atlas.ingestion.pipeline import chunks  # noqa: E402
from atlas.ingestion.readers.conllu import write_first_sentences  # noqa: E402
from atlas.ingestion.run_id import CHUNK_EXAMPLES, Settings  # noqa: E402
from atlas.model.load import load_model  # noqa: E402
from atlas.store import Store, table_schemas  # noqa: E402


def timed_ingest(corpus: Path, store: Path, **engine: object) -> tuple[float, api.Ingested]:
    start = time.perf_counter()
    result = api.ingest(corpus, store=store, progress=False, **engine)
    return time.perf_counter() - start, result


def driver_seconds(corpus: Path) -> float:
    """What the driver does alone, serially, whatever the number of workers: check the whole corpus, then read,
    align and group it into chunks (the model loaded beforehand, not timed)."""
    lm = load_model(None)
    settings = Settings(max_length=lm.max_positions)
    start = time.perf_counter()
    checked = check_corpus(corpus)
    inputs = Inputs.of(lm.tokenizer, lm.decoder, checked.path)
    for _ in chunks(checked, lm, settings, inputs):
        pass
    return time.perf_counter() - start


def row_counts(store: Path, run_id: str) -> dict[str, int]:
    con = Store(store).connect()
    counts = {
        name: con.execute(f"SELECT count(*) FROM {name} WHERE run_id = ?", [run_id]).fetchone()[0]
        for name, schema in table_schemas().items()
        if "run_id" in schema.names
    }
    con.close()
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--sentences", type=int, default=0, help="the first N sentences (0: all)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ray-address", default=None)
    parser.add_argument("--gpus-per-worker", type=float, default=None)
    parser.add_argument("--repeats", type=int, default=1, help="runs of each engine, alternating (ABBA...)")
    args = parser.parse_args()
    engines: dict[str, dict[str, object]] = {
        "single-process": {},
        "ray": {
            "engine": "ray",
            "ray_address": args.ray_address,
            "workers": args.workers,
            "gpus_per_worker": args.gpus_per_worker,
        },
    }
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
        corpus = args.corpus
        if args.sentences:
            corpus = write_first_sentences(args.corpus, args.sentences, Path(tmp) / args.corpus.name)
        n_sentences = sum(1 for line in corpus.open() if line.startswith("# sent_id"))
        load_before = os.getloadavg()[0]
        start = time.perf_counter()
        ray.init(address=args.ray_address, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
        cluster = ray.cluster_resources()
        ray.shutdown()
        ray_start_s = time.perf_counter() - start

        # untimed, as in bench_ingest.py: a first run compiles the ingest's pass
        timed_ingest(write_first_sentences(corpus, WARM_UP, Path(tmp) / "warm-up.conllu"), Path(tmp) / "warm-up")
        shutil.rmtree(Path(tmp) / "warm-up")
        times: dict[str, list[float]] = {name: [] for name in engines}
        rows: dict[str, tuple[str, dict[str, int]]] = {}
        for i in range(args.repeats):
            for name in list(engines)[:: 1 if i % 2 == 0 else -1]:
                store = Path(tmp) / f"{name}-{i}"
                seconds, result = timed_ingest(corpus, store, **engines[name])
                times[name].append(seconds)
                rows[name] = (result.run_id, row_counts(store, result.run_id))
                shutil.rmtree(store)
        single, by_ray = statistics.median(times["single-process"]), statistics.median(times["ray"])
        n_examples = rows["ray"][1]["examples"]
        print(
            f"corpus: {args.corpus} (first {n_sentences} sentences), {n_examples} inputs, "
            f"{-(-n_examples // CHUNK_EXAMPLES)} chunks of {CHUNK_EXAMPLES}"
        )
        print(f"Ray: {args.workers} workers; cluster CPUs {cluster.get('CPU', 0):g}, GPUs {cluster.get('GPU', 0):g}")
        print(f"1-minute load average: {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")
        print(f"torch threads: single-process {torch.get_num_threads()}, each Ray worker 1 (Ray's OMP_NUM_THREADS)")
        for name, runs in times.items():
            shown = ", ".join(f"{t:.1f}" for t in runs)
            print(f"{name + ' ingest':<24} median {statistics.median(runs):8.1f} s  (runs: {shown})")
        print(f"ray / single-process:   {by_ray / single:8.2f}")
        print(f"Ray start-up alone (init + shutdown): {ray_start_s:.1f} s")
        print(f"same run id and rows in every table: {rows['ray'] == rows['single-process']}")
        driver = driver_seconds(corpus)
        print(
            f"driver alone (check, read, align, group; serial): {driver:.1f} s = {driver / single:.1%} of the "
            f"single-process ingest: N GPU workers speed the rest up at most min(N, chunks) times"
        )


if __name__ == "__main__":
    main()
