"""Catalogue benchmark: how long every entry takes to answer over the run of a large corpus.

    python bench/bench_catalogue.py CORPUS.conllu [--store DIR] [--repeat 3] [--pack none|window]
        [--max-length N]

Ingests CORPUS with the embedded model and the default settings into DIR (a fresh temporary store unless
--store names one; a run already there is found by its id and not ingested again), then asks every catalogue
entry with its defaults (the latest run, the run ingested here), as ``atlas query`` does (``Atlas.answer``: the
parameters bound, the needs checked, the SQL run, the answer collected as a Polars frame). Per entry: the
seconds of its first answer on a freshly opened store (DuckDB's caches empty) and the median of --repeat
answers after it, and its rows; an entry the run cannot answer (it needs another command's results, a dense
run or another kind of corpus) is listed with the one line it is refused with, after the time it took to say
so. Then the largest and the median answer over the entries that answered, against the corpus's sentences.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import duckdb  # noqa: E402

import atlas  # noqa: E402
from atlas.catalogue import entries  # noqa: E402
from atlas.errors import AtlasError  # noqa: E402


def timed(store: Path, name: str) -> tuple[float, int | str]:
    """Seconds of one answer on an open store, and its rows (or the line it was refused with)."""
    with atlas.open(store) as st, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        try:
            rows: int | str = len(st.answer(name).frame)
        except AtlasError as exc:
            rows = str(exc)
        return time.perf_counter() - start, rows


def timed_warm(store: Path, name: str, repeat: int) -> list[float]:
    """Seconds of ``repeat`` answers after a first one, on one open store."""
    with atlas.open(store) as st, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        st.answer(name)
        seconds = []
        for _ in range(repeat):
            start = time.perf_counter()
            st.answer(name)
            seconds.append(time.perf_counter() - start)
        return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--store", type=Path, default=None)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--pack", default=None)
    parser.add_argument("--max-length", type=int, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        store = args.store or Path(work) / "store"
        start = time.perf_counter()
        done = atlas.ingest(args.corpus, store=store, pack=args.pack, max_length=args.max_length, progress=False)
        how = "found in the store" if done.already_present else f"ingested in {time.perf_counter() - start:.0f} s"
        with atlas.open(store) as st:
            sql = "SELECT n_sentences, n_examples, n_tokens, n_edges FROM runs WHERE run_id = ?"
            values = st.connection.execute(sql, [done.run_id]).fetchone()
        run = dict(zip(("n_sentences", "n_examples", "n_tokens", "n_edges"), values, strict=True))
        print(
            f"# {args.corpus.name}: {run['n_sentences']:,} sentences, {run['n_examples']:,} inputs, "
            f"{run['n_tokens']:,} tokens, {run['n_edges']:,} edges; run {done.run_id} ({how}); "
            f"{os.cpu_count()} CPU cores; DuckDB {duckdb.__version__}"
        )
        print(f"| entry | first answer, s | then (median of {args.repeat}), s | rows |")
        print("|---|---|---|---|")
        answered: list[float] = []
        for entry in entries():
            first, rows = timed(store, entry.name)
            if isinstance(rows, str):
                print(f"| {entry.name} | {first:.3f} | | refused: {rows} |")
                continue
            then = statistics.median(timed_warm(store, entry.name, args.repeat))
            answered += [first, then]
            print(f"| {entry.name} | {first:.3f} | {then:.3f} | {rows:,} |")
        if answered:
            print(
                f"{len(answered) // 2} entries answered: the slowest answer {max(answered):.2f} s, the median "
                f"{statistics.median(answered):.2f} s, over {run['n_sentences']:,} sentences"
            )


if __name__ == "__main__":
    main()
