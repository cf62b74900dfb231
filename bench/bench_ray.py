"""Ray engine benchmark: the same ingest by this process and by Ray Data workers, side by side in one run.

    flock /tmp/atlas-heavy.lock python bench/bench_ray.py CORPUS.conllu [--sentences N] [--workers 2]
        [--ray-address ADDR] [--gpus-per-worker G]

Ingests the first N sentences of CORPUS (all with --sentences 0) into two fresh stores with the embedded
model and the default settings: once with the single-process engine, once with ``--engine ray`` (a local
Ray instance, or the cluster at --ray-address), each as ``atlas ingest`` runs it (corpus check, model load,
staging, publish). Prints both wall times and their ratio, Ray's own start-up time, and checks that both
stores hold the same run with the same rows.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import ray  # noqa: E402

import atlas.model.load  # noqa: E402, F401 (torch and transformers imported before either ingest is timed)
from atlas import api  # noqa: E402
from atlas.store import Store, table_schemas  # noqa: E402
from ingest.conllu import write_first_sentences  # noqa: E402
from ingest.run_id import CHUNK_EXAMPLES  # noqa: E402


def timed_ingest(corpus: Path, store: Path, **engine: object) -> tuple[float, api.Ingested]:
    start = time.perf_counter()
    result = api.ingest(corpus, store=store, progress=False, **engine)
    return time.perf_counter() - start, result


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
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
        corpus = args.corpus
        if args.sentences:
            corpus = write_first_sentences(args.corpus, args.sentences, Path(tmp) / args.corpus.name)
        n_sentences = sum(1 for line in corpus.open() if line.startswith("# sent_id"))
        start = time.perf_counter()
        ray.init(address=args.ray_address, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
        cluster = ray.cluster_resources()
        ray.shutdown()
        ray_start_s = time.perf_counter() - start

        single_s, single = timed_ingest(corpus, Path(tmp) / "single")
        ray_s, by_ray = timed_ingest(
            corpus,
            Path(tmp) / "ray",
            engine="ray",
            ray_address=args.ray_address,
            workers=args.workers,
            gpus_per_worker=args.gpus_per_worker,
        )
        same = by_ray.run_id == single.run_id and row_counts(Path(tmp) / "ray", by_ray.run_id) == row_counts(
            Path(tmp) / "single", single.run_id
        )
        n_chunks = -(-single.n_examples // CHUNK_EXAMPLES)
        print(f"corpus: {args.corpus} (first {n_sentences} sentences), {single.n_examples} inputs, {n_chunks} chunks")
        print(f"Ray: {args.workers} workers; cluster CPUs {cluster.get('CPU', 0):g}, GPUs {cluster.get('GPU', 0):g}")
        print(f"single-process ingest:              {single_s:8.1f} s")
        print(f"ray ingest ({args.workers} workers):             {ray_s:8.1f} s")
        print(f"ray / single-process:               {ray_s / single_s:8.2f}")
        print(f"Ray start-up alone (init+shutdown): {ray_start_s:8.1f} s")
        print(f"same run id and rows in every table: {same}")


if __name__ == "__main__":
    main()
