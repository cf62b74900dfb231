"""Ingest benchmark, measured side by side in one run on one UD file.

    python bench/bench_ingest.py CORPUS.conllu [--pack window --max-length 128] [--device auto|cpu|cuda|mps]
        [--model NAME] [--random-init] [--config KEY=VALUE ...] [--repeat N] [--rss] [--no-reference]
        [--sweep-sentences N]

Prints:
0. the seconds of a warm-up ingest of the first sentences (a first run compiles the ingest's pass there);
1. the bare forward pass (the ingest's own reading, grouping and batching, then the model's whole forward pass
   with every layer's attention captured and left on the device, nothing else) against the full ingest: wall
   seconds and process CPU seconds (all threads; steadier than wall time on a loaded machine), their ratios, and
   the ingest's seconds beyond the forward pass per million attention weights; the forward pass is timed before
   and after the ingest and averaged; with --repeat N, N ingests by turns with N + 1 forward passes, each ratio
   printed, the median's figures reported (a shared machine's load shifts single runs by 0.1 or more); and, timed
   once, the ingest's own forward pass, which stops at the last layer's attention;
2. store bytes per table against Clark et al.'s dense float16 [L, H, n, n] format for the same inputs;
3. with --rss: the peak resident memory of an ingest of the corpus and of the corpus five times over, each in a
   process of its own (memory must not grow with the corpus);
4. unless --no-reference: 'best head per dependency relation' in SQL over the store against a plain numpy loop
   over the dense maps (kept as float16: memory grows with the corpus), and whether both give the same heads;
5. with --sweep-sentences N: on the first N sentences, for several kept-mass targets and caps, the share of edges
   kept, store bytes against dense float16, and the largest error of per-head mean attention to
   [CLS] / [SEP] / punctuation / previous / next token computed from the sparse edges against exact.

A BERT-base-shaped random model: --random-init --config hidden_size=768 --config num_hidden_layers=12
--config intermediate_size=3072 (the embedded model's config otherwise: 12 heads, its vocabulary).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from atlas.catalogue import resolve, run_entry  # noqa: E402
from atlas.errors import AtlasError  # noqa: E402
from atlas.ingestion.align import is_punct  # noqa: E402
from atlas.ingestion.budget import budget_for  # noqa: E402
from atlas.ingestion.corpus import CorpusInfo, check_corpus  # noqa: E402
from atlas.ingestion.device import resolve_device  # noqa: E402
from atlas.ingestion.examples import Inputs  # noqa: E402
from atlas.ingestion.pipeline import Settings, _batches, chunks, ingest  # noqa: E402
from atlas.ingestion.readers.conllu import write_first_sentences  # noqa: E402
from atlas.model.capture import recording  # noqa: E402
from atlas.model.forward import attention_maps, model_inputs  # noqa: E402
from atlas.model.identity import config_overrides  # noqa: E402
from atlas.model.load import LoadedModel, load_model  # noqa: E402
from atlas.store import Store  # noqa: E402

WARM_UP = 64  # sentences ingested before anything is timed (see warm_up)
# --sweep-sentences: (kept mass, max edges) settings, dense last
SWEEP = (
    (0.8, 10), (0.9, 4), (0.9, 5), (0.9, 6), (0.9, 8), (0.9, 10), (0.9, None), (0.95, 10), (0.99, None), (None, None)
)  # fmt: skip


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()
    elif device.type == "mps":
        torch.mps.synchronize()


def forward_pass(
    lm: LoadedModel, corpus: CorpusInfo, settings: Settings, keep: bool, whole: bool = True
) -> tuple[float, float, list[int], list[dict]]:
    """The ingest's reading, grouping, batching and forward pass on its device, nothing else: the model's whole
    forward pass (``whole``) or the ingest's own, which stops at the last layer's attention. Returns the wall
    and CPU seconds (less the time spent keeping float16 copies for the numpy reference), every input's
    length, and the kept inputs (``keep``)."""
    device = resolve_device(settings.device)
    lm.model.to(device)
    budget = budget_for(device)
    kept: list[dict] = []
    lengths: list[int] = []
    copy_wall = copy_cpu = 0.0
    wall, cpu = time.perf_counter(), time.process_time()
    inputs = Inputs.of(lm.tokenizer, lm.decoder, corpus.path)
    for block in chunks(corpus, lm, settings, inputs):
        for batch in _batches([e for e in block if not e.skipped], lm.n_layers * lm.n_heads, budget.batch_weights):
            layouts = [inputs.layout(e) for e in batch]
            maps = (whole_maps if whole else attention_maps)(
                lm, [(lay.input_ids, lay.type_ids) for lay in layouts], device
            )
            _synchronize(device)
            lengths.extend(len(lay.input_ids) for lay in layouts)
            if keep:
                w0, c0 = time.perf_counter(), time.process_time()
                for b, (ex, lay) in enumerate(zip(batch, layouts, strict=True)):
                    n = len(lay.input_ids)
                    offsets = ex.word_offsets()
                    kept.append(
                        {
                            "example_id": ex.example_id,
                            "attn": torch.stack([m[b, :, :n, :n] for m in maps]).half().cpu().numpy(),
                            "token_word": lay.token_word,
                            "special": lay.special,
                            "text": lay.text,
                            "govs": [offsets[s.index] + w.head - 1 if w.head else None for s, w in ex.words],
                            "deprels": [w.deprel for _, w in ex.words],
                            "forms": [w.form for _, w in ex.words],
                        }
                    )
                copy_wall += time.perf_counter() - w0
                copy_cpu += time.process_time() - c0
            del maps
    wall, cpu = time.perf_counter() - wall - copy_wall, time.process_time() - cpu - copy_cpu
    return wall, cpu, lengths, sorted(kept, key=lambda k: k["example_id"])


def whole_maps(lm: LoadedModel, inputs: list[tuple[list[int], list[int]]], device: torch.device) -> list[torch.Tensor]:
    """``attention_maps`` of the model's whole forward pass: every layer's attention captured, the model run to its
    end."""
    with torch.inference_mode(), recording() as maps:
        lm.model(**model_inputs(lm, inputs, device))
    if len(maps) != lm.n_layers:
        raise RuntimeError(f"attention captured for {len(maps)} of {lm.n_layers} layers")
    return [m.float() for m in maps]


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


def warm_up(lm: LoadedModel, corpus: Path, settings: Settings, work: Path) -> float:
    """Ingest the corpus's first WARM_UP sentences once, before anything is timed, and return its seconds: the first
    ingest after installing or changing the compiled pass compiles it (about 14 s on 2 cores), which would otherwise
    fall into the first timed ingest."""
    subset = check_corpus(write_first_sentences(corpus, WARM_UP, work / "warm-up.conllu"))
    wall = time.perf_counter()
    ingest(subset, Store(work / "warm-up"), lm, settings, progress=False)
    wall = time.perf_counter() - wall
    shutil.rmtree(work / "warm-up")
    return wall


def sweep(lm: LoadedModel, corpus: Path, n_sentences: int, base: Settings, work: Path) -> None:
    subset = write_first_sentences(corpus, n_sentences, work / f"{corpus.stem}-first{n_sentences}.conllu")
    _, _, _, inputs = forward_pass(lm, check_corpus(subset), base, keep=True)
    dense_bytes = sum(i["attn"].nbytes for i in inputs)
    dense_weights = sum(i["attn"].size for i in inputs)
    exact = exact_surface(inputs, lm)
    print(f"\n## sparsity sweep on the first {n_sentences} sentences ({len(inputs)} inputs)")
    print(
        f"{'kept mass':>10} {'max edges':>9} {'edges kept':>11} {'store/dense':>12} {'edges/dense':>12} {'ingest s':>9}"
        f" {'max err cls':>12} {'sep':>7} {'punct':>7} {'prev':>7} {'next':>7}"
    )
    for target, cap in SWEEP:
        root = work / f"sweep-{target}-{cap}"
        t0 = time.perf_counter()
        settings = replace(base, kept_mass=target, max_edges=cap)
        result = ingest(check_corpus(subset), Store(root), lm, settings, progress=False)
        seconds = time.perf_counter() - t0
        store = Store(root)
        con = store.connect()
        got = np.array(con.execute(SURFACE_SQL, {"run": result.run_id}).fetchall(), dtype=np.float64)[:, 2:]
        err = np.abs(got.reshape(exact.shape) - exact).max(axis=(0, 1))
        con.close()
        run_dir = store.run_folder(result.run_id)
        print(
            f"{'dense' if target is None else target:>10} {cap or '-':>9} {result.n_edges / dense_weights:>11.1%} "
            f"{dir_bytes(run_dir) / dense_bytes:>12.3f} {dir_bytes(run_dir / 'attn_edges') / dense_bytes:>12.3f} "
            f"{seconds:>9.1f} " + " ".join(f"{e:>7.4f}" for e in err)
        )
        shutil.rmtree(root)


def peak_rss(args: argparse.Namespace, corpus: Path, store: Path) -> float:
    """Peak resident memory (MB) of an ingest of ``corpus`` in a process of its own."""
    command = [sys.executable, __file__, str(corpus), "--ingest-only", str(store), *args.passed]
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    if status:
        raise SystemExit(f"the ingest of {corpus} failed (status {status})")
    return usage.ru_maxrss / 1024  # KiB on Linux


def model_of(args: argparse.Namespace) -> LoadedModel:
    try:  # KEY=VALUE as atlas ingest --config reads it
        return load_model(args.model, random_init=args.random_init, seed=args.seed, **config_overrides(args.config))
    except AtlasError as exc:
        raise SystemExit(exc.cli_text()) from None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--kept-mass", type=float, default=Settings().kept_mass)
    parser.add_argument("--max-edges", type=int, default=Settings().max_edges)
    parser.add_argument("--pack", choices=["none", "pair", "window"], default="none")
    parser.add_argument("--max-length", type=int, default=None)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--model", default=None, help="HF id or path (default: the embedded model)")
    parser.add_argument("--random-init", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--config", action="append", default=[], help="KEY=VALUE (JSON, else a string): model config")
    parser.add_argument("--repeat", type=int, default=1, help="ingests, each between two forward passes (median)")
    parser.add_argument("--rss", action="store_true", help="peak memory of an ingest of 1x and 5x the corpus")
    parser.add_argument("--no-reference", action="store_true", help="skip the numpy reference of Table 1")
    parser.add_argument("--min-count", type=int, default=100)
    parser.add_argument("--sweep-sentences", type=int, default=0)
    parser.add_argument("--ingest-only", type=Path, default=None, help=argparse.SUPPRESS)  # --rss's child: the store
    args = parser.parse_args()
    args.passed = [a for a in sys.argv[2:] if a != "--rss"]
    settings = Settings(
        kept_mass=args.kept_mass,
        max_length=args.max_length,
        pack=args.pack,
        max_edges=args.max_edges,
        device=args.device,
    )
    lm = model_of(args)
    settings = replace(settings, max_length=settings.max_length or lm.max_positions)
    corpus = check_corpus(args.corpus)
    if args.ingest_only:
        ingest(corpus, Store(args.ingest_only), lm, settings, progress=False)
        return
    device = resolve_device(args.device)
    print(
        f"# {args.corpus.name}: {corpus.n_sentences:,} sentences; model {lm.name}"
        f"{' random init' if lm.random_init else ''}"
        f" ({lm.n_layers} x {lm.n_heads} heads, hidden {lm.model.config.hidden_size}); device {device}; "
        f"{os.cpu_count()} CPU cores, {torch.get_num_threads()} torch threads; pack {args.pack}, max length "
        f"{settings.max_length}; kept mass {args.kept_mass}, max edges {args.max_edges}"
    )
    work = Path(tempfile.mkdtemp(prefix="atlas-bench-"))
    try:
        reference = not args.no_reference
        warm = warm_up(lm, args.corpus, settings, work)
        print(f"warm-up: the first {WARM_UP} sentences ingested before anything is timed, {warm:.1f} s")
        forward_wall, forward_cpu, lengths, inputs = forward_pass(lm, corpus, settings, keep=reference)
        own_wall, own_cpu = forward_pass(lm, corpus, settings, keep=False, whole=False)[:2]
        forwards, ingests = [(forward_wall, forward_cpu)], []
        for _ in range(args.repeat):  # ingest and forward pass by turns; each ingest against the passes either side
            shutil.rmtree(work / "store", ignore_errors=True)
            wall, cpu = time.perf_counter(), time.process_time()
            result = ingest(corpus, Store(work / "store"), lm, settings, progress=False)
            ingests.append((time.perf_counter() - wall, time.process_time() - cpu))
            forwards.append(forward_pass(lm, corpus, settings, keep=False)[:2])
        ratios = [
            [ingests[i][k] / ((forwards[i][k] + forwards[i + 1][k]) / 2) for i in range(args.repeat)] for k in (0, 1)
        ]
        pick = sorted(range(args.repeat), key=lambda i: ratios[0][i])[args.repeat // 2]  # median (of 2: the higher)
        ingest_wall, ingest_cpu = ingests[pick]
        forward_wall, forward_cpu = ((forwards[pick][k] + forwards[pick + 1][k]) / 2 for k in (0, 1))
        store = Store(work / "store")
        run_dir = store.run_folder(result.run_id)
        n_weights = lm.n_layers * lm.n_heads * sum(n * n for n in lengths)
        dense_bytes = 2 * n_weights
        print(
            f"inputs: {len(lengths):,}; word pieces: {sum(lengths):,}; attention weights: {n_weights:,}; "
            f"edges kept: {result.n_edges:,} ({result.n_edges / n_weights:.1%})"
        )
        print("\n## time                                        wall s    CPU s")
        if args.repeat > 1:
            for kind, each in zip(("wall", "CPU"), ratios, strict=True):
                print(f"ingest / forward, each ingest ({kind}): " + " ".join(f"{r:.2f}" for r in each))
            print("the median ingest (by wall time):")
        print(f"forward pass only (mean of the runs before and after) {forward_wall:8.1f} {forward_cpu:8.1f}")
        print(f"full ingest                                           {ingest_wall:8.1f} {ingest_cpu:8.1f}")
        beyond_wall = (ingest_wall - forward_wall) / n_weights * 1e6
        beyond_cpu = (ingest_cpu - forward_cpu) / n_weights * 1e6
        print(f"ingest / forward                                      {ingest_wall / forward_wall:8.2f} "
              f"{ingest_cpu / forward_cpu:8.2f}")  # fmt: skip
        print(f"ingest beyond the forward pass, s per million weights {beyond_wall:8.3f} {beyond_cpu:8.3f}")
        print(f"the ingest's own forward pass, to the last attention {own_wall:8.1f} {own_cpu:8.1f}")
        print(f"ingest / the ingest's own forward pass                {ingest_wall / own_wall:8.2f} "
              f"{ingest_cpu / own_cpu:8.2f}")  # fmt: skip
        print("\n## bytes")
        print(f"Clark et al. dense float16 [L, H, n, n]: {dense_bytes / 1e6:10.1f} MB")
        total = dir_bytes(run_dir)
        for table in sorted(p.name for p in run_dir.iterdir()):
            size = dir_bytes(run_dir / table)
            print(f"  {table:<12} {size / 1e6:10.1f} MB {size / dense_bytes:8.3f}")
        print(f"store (all tables):                      {total / 1e6:10.1f} MB")
        print(f"store / dense float16:                   {total / dense_bytes:10.3f}")
        rss = ""
        if args.rss:
            five = work / f"{args.corpus.stem}-x5.conllu"
            five.write_text(args.corpus.read_text(encoding="utf-8") * 5, encoding="utf-8")
            one_mb, five_mb = peak_rss(args, args.corpus, work / "rss1"), peak_rss(args, five, work / "rss5")
            print("\n## peak resident memory of an ingest in a process of its own")
            print(f"1x the corpus: {one_mb:8.0f} MB; 5x: {five_mb:8.0f} MB; 5x / 1x: {five_mb / one_mb:.3f}")
            rss = f" {one_mb:.0f} MB | {five_mb:.0f} MB ({five_mb / one_mb:.2f}) |"
        print(
            f"\n| input | ingest / forward (wall, CPU) | store / dense float16 | s per M weights beyond forward |"
            f"{' peak RSS 1x | 5x |' if rss else ''}\n| {args.corpus.name}, pack {args.pack} | "
            f"{ingest_wall / forward_wall:.2f}, {ingest_cpu / forward_cpu:.2f} | {total / dense_bytes:.3f} | "
            f"{beyond_wall:.3f} |{rss}"
        )
        if reference:
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
