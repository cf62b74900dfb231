"""Ingest benchmark, measured side by side in one run on one UD file.

    python bench/bench_ingest.py CORPUS.conllu [--sweep-sentences N]

Prints:
1. bare forward pass (same grouping and batching, attention captured, nothing written) vs full ingest;
2. store bytes vs Clark et al.'s dense float16 [L, H, n, n] format for the same inputs;
3. 'best head per dependency relation' in SQL over the store vs a plain numpy loop over dense arrays
   (and whether both give the same best heads);
4. with --sweep-sentences N: on the first N sentences, for several kept-mass targets, the share of
   edges kept, store bytes vs dense float16, and the largest error of per-head mean attention to
   [CLS] / [SEP] / punctuation / previous / next token computed from the sparse edges vs exact.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from itertools import islice
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from atlas.catalogue import resolve, run_entry  # noqa: E402
from atlas.model.kinds import is_decoder  # noqa: E402
from atlas.model.load import LoadedModel, attention, load_model  # noqa: E402
from atlas.store import Store  # noqa: E402
from ingest.align import is_punct  # noqa: E402
from ingest.conllu import read_conllu, write_first_sentences  # noqa: E402
from ingest.corpus import check_corpus  # noqa: E402
from ingest.examples import Inputs, group_examples  # noqa: E402
from ingest.pipeline import CHUNK_EXAMPLES, Settings, _aligned, _batches, ingest  # noqa: E402

OFFSETS = (-3, -2, -1, 1, 2)


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def forward_pass(lm: LoadedModel, corpus: Path, settings: Settings, keep: bool) -> tuple[float, list[dict]]:
    """The ingest's reading, grouping and batched forward pass, writing nothing. Returns the time spent
    (less the time spent keeping float16 copies for the numpy baseline) and the kept inputs."""
    kept: list[dict] = []
    copy_time = 0.0
    start = time.perf_counter()
    tok = lm.tokenizer
    inputs = Inputs.of(tok, is_decoder(lm.model.config), corpus)
    sentences = _aligned(lm, read_conllu(corpus), corpus)
    examples = group_examples(sentences, settings.pack, settings.max_length or lm.max_positions, inputs)
    while block := list(islice(examples, CHUNK_EXAMPLES)):
        for batch in _batches([e for e in block if not e.skipped], lm.n_layers * lm.n_heads):
            layouts = [inputs.layout(e) for e in batch]
            maps = attention(lm, [(lay.input_ids, lay.type_ids) for lay in layouts])
            if keep:
                t0 = time.perf_counter()
                for ex, lay, attn in zip(batch, layouts, maps, strict=True):
                    offsets = ex.word_offsets()
                    kept.append(
                        {
                            "example_id": ex.example_id,
                            "attn": attn.astype(np.float16),
                            "token_word": lay.token_word,
                            "special": lay.special,
                            "text": lay.text,
                            "govs": [offsets[s.index] + w.head - 1 if w.head else None for s, w in ex.words],
                            "deprels": [w.deprel for _, w in ex.words],
                            "forms": [w.form for _, w in ex.words],
                        }
                    )
                copy_time += time.perf_counter() - t0
    return time.perf_counter() - start - copy_time, sorted(kept, key=lambda k: k["example_id"])


def numpy_best_heads(inputs: list[dict], min_count: int) -> dict[str, tuple[str, str, float]]:
    """Clark et al. Table 1 the way their released notebook computes it over dense arrays (one sentence
    per input): dependent -> head is each word's most-attended other word, head -> dependent the word
    attending most to it (the transposed map), 'all' counts every word (roots are never right), and the
    possessive rule scores nmod:poss before 's / s' by the next word's prediction."""
    correct: dict = defaultdict(lambda: 0)
    totals: dict = defaultdict(int)
    for item in inputs:
        attn = item["attn"].astype(np.float32)
        tw = item["token_word"]
        n_words = len(item["govs"])
        if n_words < 2:
            continue
        specials = iter(range(n_words, n_words + len(tw)))
        units = [w if w is not None else next(specials) for w in tw]
        n_units = max(units) + 1
        to_unit = np.zeros((len(tw), n_units), dtype=np.float32)
        to_unit[np.arange(len(tw)), units] = 1
        from_unit = to_unit.T / to_unit.sum(0)[:, None]
        wm = (from_unit @ attn @ to_unit)[:, :, :n_words, :n_words]
        idx = np.arange(n_words)
        wm[:, :, idx, idx] = -np.inf
        preds = {"dependent -> head": wm.argmax(-1), "head -> dependent": wm.argmax(-2)}  # [L, H, words]
        forms = item["forms"]
        for dep, (gov, rel) in enumerate(zip(item["govs"], item["deprels"], strict=True)):
            poss = rel == "nmod:poss" and dep + 1 < n_words and forms[dep + 1] in ("'s", "s'")
            for r in (rel, "all"):
                totals[r] += 1
                if gov is None:
                    continue
                for d, pred in preds.items():
                    p = pred[:, :, dep]
                    if poss:
                        p = np.where(p + 1 < n_words, pred[:, :, dep + 1], p)
                    correct[r, d] = correct[r, d] + (p == gov)
    out = {}
    for r, n in totals.items():
        if n < min_count or r in ("root", "punct"):
            continue
        best = max(  # ties: the higher layer, then head, then head -> dependent, as the notebook sorts
            (int(correct[r, d][lh]), lh, d == "head -> dependent", d)
            for d in ("dependent -> head", "head -> dependent")
            for lh in np.ndindex(correct[r, d].shape)
        )
        out[r] = (f"{best[1][0] + 1}-{best[1][1] + 1}", best[3], round(100 * best[0] / n, 2))
    return out


def time_query(store: Store, run_id: str, min_count: int, repeats: int = 3):
    entry = resolve("best head per dependency relation")
    times, df = [], None
    for _ in range(repeats):
        con = store.connect()
        t0 = time.perf_counter()
        df = run_entry(con, entry, entry.bind({"run": run_id, "min_count": str(min_count)}))
        times.append(time.perf_counter() - t0)
        con.close()
    return statistics.median(times), df


SURFACE_SQL = """
WITH r AS (SELECT layer, head, count(*) AS n_rows FROM attn_rows WHERE run_id = $run GROUP BY ALL),
e AS (
    SELECT e.layer, e.head,
           sum(e.weight) FILTER (WHERE t.special = '[CLS]') AS cls,
           sum(e.weight) FILTER (WHERE t.special = '[SEP]') AS sep,
           sum(e.weight) FILTER (WHERE t.is_punct) AS punct,
           sum(e.weight) FILTER (WHERE e.dst_tok = e.src_tok - 1) AS prev,
           sum(e.weight) FILTER (WHERE e.dst_tok = e.src_tok + 1) AS next
    FROM attn_edges e
    JOIN tokens t ON t.run_id = e.run_id AND t.example_id = e.example_id AND t.tok_idx = e.dst_tok
    WHERE e.run_id = $run
    GROUP BY ALL
)
SELECT layer, head, coalesce(cls, 0) / n_rows, coalesce(sep, 0) / n_rows, coalesce(punct, 0) / n_rows,
       coalesce(prev, 0) / n_rows, coalesce(next, 0) / n_rows
FROM r JOIN e USING (layer, head) ORDER BY layer, head
"""


def exact_surface(inputs: list[dict], lm: LoadedModel) -> np.ndarray:
    sums = np.zeros((lm.n_layers, lm.n_heads, 5))
    rows = 0
    for item in inputs:
        a = item["attn"].astype(np.float64)
        n = a.shape[-1]
        special = np.array([s or "" for s in item["special"]])
        punct = np.array([s is None and is_punct(t) for s, t in zip(item["special"], item["text"], strict=True)])
        sums[..., 0] += a[..., special == "[CLS]"].sum(axis=(-1, -2))
        sums[..., 1] += a[..., special == "[SEP]"].sum(axis=(-1, -2))
        sums[..., 2] += a[..., punct].sum(axis=(-1, -2))
        sums[..., 3] += np.diagonal(a, offset=-1, axis1=2, axis2=3).sum(-1)
        sums[..., 4] += np.diagonal(a, offset=1, axis1=2, axis2=3).sum(-1)
        rows += n
    return sums / rows


def sweep(lm: LoadedModel, corpus: Path, n_sentences: int, base: Settings, work: Path) -> None:
    subset = write_first_sentences(corpus, n_sentences, work / f"{corpus.stem}-first{n_sentences}.conllu")
    _, inputs = forward_pass(lm, subset, base, keep=True)
    dense_bytes = sum(i["attn"].nbytes for i in inputs)
    dense_weights = sum(i["attn"].size for i in inputs)
    exact = exact_surface(inputs, lm)
    print(f"\n## kept-mass sweep on the first {n_sentences} sentences ({len(inputs)} inputs)")
    print(
        f"{'kept mass':>10} {'edges kept':>11} {'store/dense':>12} {'edges/dense':>12} {'ingest s':>9}"
        f" {'max err cls':>12} {'sep':>7} {'punct':>7} {'prev':>7} {'next':>7}"
    )
    for target in (0.8, 0.9, 0.95, 0.99, None):
        root = work / f"sweep-{target}"
        t0 = time.perf_counter()
        settings = Settings(kept_mass=target, max_length=base.max_length, pack=base.pack)
        result = ingest(check_corpus(subset), Store(root), lm, settings, progress=False)
        seconds = time.perf_counter() - t0
        store = Store(root)
        con = store.connect()
        got = np.array(con.execute(SURFACE_SQL, {"run": result.run_id}).fetchall(), dtype=np.float64)[:, 2:]
        err = np.abs(got.reshape(exact.shape) - exact).max(axis=(0, 1))
        con.close()
        run_dir = store.data / result.run_id
        print(
            f"{'dense' if target is None else target:>10} {result.n_edges / dense_weights:>11.1%} "
            f"{dir_bytes(run_dir) / dense_bytes:>12.3f} {dir_bytes(run_dir / 'attn_edges') / dense_bytes:>12.3f} "
            f"{seconds:>9.1f} " + " ".join(f"{e:>7.4f}" for e in err)
        )
        shutil.rmtree(root)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--kept-mass", type=float, default=Settings().kept_mass)
    parser.add_argument("--min-count", type=int, default=100)
    parser.add_argument("--sweep-sentences", type=int, default=0)
    parser.add_argument("--pack", choices=["none", "pair", "window"], default="none")
    parser.add_argument("--max-length", type=int, default=None)
    args = parser.parse_args()
    settings = Settings(kept_mass=args.kept_mass, max_length=args.max_length, pack=args.pack)

    lm = load_model(None)
    n_sentences = sum(1 for _ in read_conllu(args.corpus))
    print(
        f"# {args.corpus.name}: {n_sentences:,} sentences; model {lm.name} ({lm.n_layers} x {lm.n_heads} heads);"
        f" {os.cpu_count()} CPU cores; pack {args.pack}, max length {args.max_length or lm.max_positions}"
    )
    work = Path(tempfile.mkdtemp(prefix="atlas-bench-"))
    try:
        forward_s, inputs = forward_pass(lm, args.corpus, settings, keep=True)
        t0 = time.perf_counter()
        result = ingest(check_corpus(args.corpus), Store(work / "store"), lm, settings, progress=False)
        ingest_s = time.perf_counter() - t0
        store = Store(work / "store")
        run_dir = store.data / result.run_id
        dense_bytes = sum(i["attn"].nbytes for i in inputs)
        n_tokens = sum(i["attn"].shape[-1] for i in inputs)
        print(
            f"inputs: {len(inputs):,}; word pieces: {n_tokens:,}; attention weights: "
            f"{sum(i['attn'].size for i in inputs):,}; edges kept at {args.kept_mass}: {result.n_edges:,}"
        )
        print("\n## time")
        print(f"forward pass only (attention captured, nothing written): {forward_s:8.1f} s")
        print(f"full ingest (kept mass {args.kept_mass}):                     {ingest_s:8.1f} s")
        print(f"ingest / forward:                                        {ingest_s / forward_s:8.2f}")
        print("\n## bytes")
        print(f"Clark et al. dense float16 [L, H, n, n]: {dense_bytes / 1e6:10.1f} MB")
        total = dir_bytes(run_dir)
        for table in sorted(p.name for p in run_dir.iterdir()):
            print(f"  {table:<12} {dir_bytes(run_dir / table) / 1e6:10.1f} MB")
        print(f"store (all tables):                      {total / 1e6:10.1f} MB")
        print(f"store / dense float16:                   {total / dense_bytes:10.3f}")
        print("\n## 'best head per dependency relation'")
        sql_s, df = time_query(store, result.run_id, args.min_count)
        t0 = time.perf_counter()
        ref = numpy_best_heads(inputs, args.min_count)
        numpy_s = time.perf_counter() - t0
        sql = {r["relation"]: (r["best_head"], r["direction"], r["accuracy"]) for r in df.iter_rows(named=True)}

        def agrees(r: str, v: tuple) -> bool:
            return r in sql and sql[r][:2] == v[:2] and abs(sql[r][2] - v[2]) <= 0.01

        same = sum(agrees(r, v) for r, v in ref.items())
        print(f"SQL over the store (median of 3):        {sql_s:8.2f} s")
        print(f"numpy loop over dense float16 arrays:    {numpy_s:8.2f} s")
        print(f"SQL / numpy:                             {sql_s / numpy_s:8.3f}")
        print(f"relations with >= {args.min_count}: {len(ref)}; same best head, direction and accuracy: {same}")
        for r, v in ref.items():
            if not agrees(r, v):
                print(f"  differs: {r}: SQL {sql.get(r)} vs numpy {v}")
        del inputs
        if args.sweep_sentences:
            sweep(lm, args.corpus, args.sweep_sentences, settings, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
