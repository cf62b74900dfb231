"""What the attention-distance profile (table attn_distance, kept by every ingest) costs an ingest, measured side by
side in one run on one corpus.

    python bench/bench_distance.py CORPUS.conllu [--repeat N] [--device auto|cpu|cuda|mps] [--dense]
                                   [--pack none|window --max-length N]

After a warm-up ingest of the first sentences, ingests the corpus N times (default 3) by turns with the profile (as
the atlas ingests) and without it (its computation replaced by nothing, an empty table written), each into a fresh
store, and prints per setting the median wall and process CPU seconds, their ratios to the ingest without it, and
the store's bytes against that store's (the limit set for it: at most 1.05 in time).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench_norms import timed_ingest  # noqa: E402  (one ingest into a fresh store, timed)

from atlas.ingestion import distance_rows, sparsify  # noqa: E402
from atlas.ingestion.pipeline import Settings  # noqa: E402
from atlas.ingestion.readers.conllu import write_first_sentences  # noqa: E402
from atlas.model.load import load_model  # noqa: E402


class NoProfile(distance_rows.DistanceRows):
    """The ingest without the profile: nothing computed, no row."""

    def block(self, layer: int, start: int, probs: object) -> None:
        return None

    def columns(self) -> tuple[dict[str, np.ndarray], np.ndarray]:
        return distance_rows.empty_columns(), np.zeros(len(self.lengths), dtype=np.int64)


SETTINGS = {"without": NoProfile, "with the profile": distance_rows.DistanceRows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dense", action="store_true", help="every weight kept (default: the sparse setting)")
    parser.add_argument("--pack", default="none", help="none (a sentence per input) or window")
    parser.add_argument("--max-length", type=int, default=None, help="the windows' length in pieces")
    args = parser.parse_args()
    lm = load_model(None)
    kept = None if args.dense else Settings().kept_mass
    settings = Settings(kept, args.max_length, args.pack, device=args.device)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        first = write_first_sentences(args.corpus, 50, work / "warm-up.conllu")
        warm = timed_ingest(lm, first, settings, work)[0]
        print(f"warm-up ingest of 50 sentences: {warm:.1f} s")
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in SETTINGS}
        sizes: dict[str, int] = {}
        for _ in range(args.repeat):  # by turns: a shared machine's load shifts every setting alike
            for name, rows in SETTINGS.items():
                sparsify.DistanceRows = rows
                wall, cpu, size = timed_ingest(lm, args.corpus, settings, work)
                times[name].append((wall, cpu))
                sizes[name] = size
        sparsify.DistanceRows = distance_rows.DistanceRows
    base_wall = statistics.median(w for w, _ in times["without"])
    base_cpu = statistics.median(c for _, c in times["without"])
    print(f"\n{args.corpus.name}, {'dense' if args.dense else 'sparse'}, medians of {args.repeat} by turns")
    print(f"{'setting':<18} {'wall s':>8} {'CPU s':>8} {'wall x':>7} {'CPU x':>7} {'store MB':>9} {'store x':>8}")
    for name in SETTINGS:
        wall = statistics.median(w for w, _ in times[name])
        cpu = statistics.median(c for _, c in times[name])
        print(
            f"{name:<18} {wall:8.2f} {cpu:8.2f} {wall / base_wall:7.3f} {cpu / base_cpu:7.3f} "
            f"{sizes[name] / 1e6:9.2f} {sizes[name] / sizes['without']:8.3f}"
        )


if __name__ == "__main__":
    main()
