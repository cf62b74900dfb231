"""Ablation sweep benchmark: reusing the baseline's lower layers vs recomputing every layer.

    python bench/bench_ablation.py --model CKPT --task SST-2 --data DIR [--dev-limit N] [--repeats 2]

Runs the full single-head and whole-layer sweep (uniform disabling) both ways, alternating, in one
process, and prints each time, the ratio reused / recomputed, and whether every metric agreed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from atlas.ingestion.readers.glue_tsv import load_split, task_spec  # noqa: E402
from atlas.tasks.ablate import sweep  # noqa: E402
from atlas.tasks.classifier import encode, load_task_model  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--task", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--dev-limit", type=int, default=None)
    parser.add_argument("--method", default="uniform", choices=["uniform", "mask"])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    spec = task_spec(args.task)
    tm = load_task_model(args.model, spec)
    dev = load_split(spec, args.data, "dev").head(args.dev_limit)
    batches = encode(tm, dev)
    times: dict[bool, list[float]] = {True: [], False: []}
    results = {}
    for _ in range(args.repeats):
        for reuse in (True, False):
            start = time.perf_counter()
            results[reuse] = sweep(tm, batches, args.method, reuse=reuse)
            times[reuse].append(time.perf_counter() - start)
    n_ablations = len(results[True][1])
    same = results[True][0] == results[False][0] and [r["metrics"] for r in results[True][1]] == [
        r["metrics"] for r in results[False][1]
    ]
    reused, full = statistics.median(times[True]), statistics.median(times[False])
    print(f"{spec.name}: {len(dev)} dev examples, {n_ablations} ablations + baseline, {tm.lm.n_layers} layers")
    print(f"  reused lower layers : {reused:8.1f} s (median of {args.repeats})")
    print(f"  every layer         : {full:8.1f} s")
    print(f"  ratio reused/full   : {reused / full:8.2f}")
    print(f"  same metrics        : {same}")


if __name__ == "__main__":
    main()
