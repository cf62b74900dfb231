"""Read + align + group benchmark: the ingest's stage before the model, one sentence per input against windows.

    python bench/bench_align.py CORPUS.conllu [CORPUS.conllu ...] [--max-length 512] [--text written|words]
        [--repeat 7] [--no-freeze]

Times ``atlas.ingestion.pipeline.chunks`` over each corpus (read the CoNLL-U file, tokenize and align each sentence to
the model's pieces, group the sentences into inputs), nothing else (no model, no store), with the embedded default
model's tokenizer (``load_model(None)``: all-MiniLM-L6-v2, BERT's WordPiece), for ``--pack none`` against
``--pack window`` at the same ``--max-length``. The two run by turns, ``--repeat`` times each (the first of each
after one untimed warm-up run), and the medians of wall and process CPU seconds are printed with their ratio
window / none (wall seconds on a shared machine move with its load; CPU seconds are steadier). Each line also
gives the inputs made and their pieces, so that runs of other code can be checked to group alike. As in an ingest
(``atlas.ingestion.pipeline``), the objects alive before the timed runs (the model, the modules) are kept out of the
cyclic garbage collector's full collections (``gc.freeze``); ``--no-freeze`` leaves them in.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from atlas.ingestion.corpus import CorpusInfo, check_corpus  # noqa: E402
from atlas.ingestion.examples import Inputs  # noqa: E402
from atlas.ingestion.pipeline import Settings, chunks  # noqa: E402
from atlas.model.load import LoadedModel, load_model  # noqa: E402

PACKS = ("none", "window")


def run_once(lm: LoadedModel, corpus: CorpusInfo, settings: Settings) -> tuple[float, float, int, int]:
    """Wall and CPU seconds of reading, aligning and grouping the whole corpus; the inputs and their pieces."""
    inputs = Inputs.of(lm.tokenizer, lm.decoder, corpus.path)
    wall, cpu = time.perf_counter(), time.process_time()
    n_inputs = n_tokens = 0
    for block in chunks(corpus, lm, settings, inputs):
        n_inputs += len(block)
        n_tokens += sum(e.n_tokens for e in block)
    return time.perf_counter() - wall, time.process_time() - cpu, n_inputs, n_tokens


def bench(lm: LoadedModel, path: Path, max_length: int, text: str, repeat: int) -> None:
    corpus = check_corpus(path)
    settings = {p: Settings(max_length=max_length, pack=p, text=text) for p in PACKS}
    times: dict[str, list[tuple[float, float]]] = {p: [] for p in PACKS}
    counts: dict[str, tuple[int, int]] = {}
    for p in PACKS:  # warm-up: the tokenizer's caches, the file in the page cache
        run_once(lm, corpus, settings[p])
    for r in range(repeat):
        for p in PACKS if r % 2 == 0 else PACKS[::-1]:
            wall, cpu, n_inputs, n_tokens = run_once(lm, corpus, settings[p])
            times[p].append((wall, cpu))
            counts[p] = (n_inputs, n_tokens)
    print(f"{path.name}: {corpus.n_sentences} sentences, --text {text}, --max-length {max_length}, {repeat} repeats")
    median = {p: tuple(statistics.median(t[k] for t in times[p]) for k in (0, 1)) for p in PACKS}
    for p in PACKS:
        wall, cpu = median[p]
        n_inputs, n_tokens = counts[p]
        print(f"  --pack {p:6s}  wall {wall:7.3f} s  cpu {cpu:7.3f} s  ({n_inputs} inputs, {n_tokens} tokens)")
    ratio_wall = median["window"][0] / median["none"][0]
    ratio_cpu = median["window"][1] / median["none"][1]
    print(f"  window / none: wall {ratio_wall:.2f}x  cpu {ratio_cpu:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", nargs="+", type=Path, help="CoNLL-U files")
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--text", choices=("written", "words"), default="written")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--no-freeze", action="store_true", help="leave the model's objects to full collections")
    args = parser.parse_args()
    lm = load_model(None)
    if not args.no_freeze:
        gc.collect()
        gc.freeze()
    for path in args.corpus:
        bench(lm, path, args.max_length, args.text, args.repeat)


if __name__ == "__main__":
    main()
