"""What writing an attention row costs, column by column, and what other Parquet encodings would trade for it.

    python bench/bench_writing.py CORPUS [--pack window --max-length 128] [--repeat 3]

Ingests ``CORPUS`` (CoNLL-U) with the embedded model on the CPU into a temporary store, then writes its run's
attention tables again (attn_edges, attn_rows, word_rows, attn_distance), one column at a time and chunk by chunk as
the ingest wrote them: with the ingest's own encodings (``encodings``), and with each pairing of an encoding (a
dictionary; plain; delta for integers, byte-stream split for floats) and a codec (zstd at levels -1, 1 and 3; lz4;
none). Each is timed by the thread's CPU time (the fastest of ``--repeat``) per attention row of the run (one per
token, layer and head) and weighed in bytes written.

Prints, per column, the ingest's encoding and each alternative; then the frontier: for each weight ``mu`` of time
against size, each column's option minimising MB + mu x ns, and the time and size that choice adds up to against
the ingest's; and the fastest choice that writes no more bytes than the ingest does. Columns written alone: their sum
is within a few percent of the tables written whole (printed too), which the ingest does beside its other threads.
"""

from __future__ import annotations

import argparse
import io
import itertools
import os
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

TABLES = ("attn_edges", "attn_rows", "word_rows", "attn_distance")
CODECS = {"zstd -1": ("zstd", -1), "zstd 1": ("zstd", 1), "zstd 3": ("zstd", 3), "lz4": ("lz4", None),
          "none": ("none", None)}  # fmt: skip
MUS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5)
KEYS = ("example_id", "layer", "head", "src_tok", "src_word", "bucket")  # what the attention tables' rows are keyed by
Option = tuple[float, float]  # ns per attention row, MB


def ingest_run(corpus: Path, pack: str, max_length: int | None, into: Path) -> tuple[Path, int, bool]:
    """The run's folder, its attention rows and whether it is dense, of an ingest of ``corpus`` into ``into``."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from atlas.ingestion.corpus import check_corpus
    from atlas.ingestion.pipeline import Settings, ingest
    from atlas.model.load import load_model
    from atlas.store import Store

    lm = load_model(None)
    settings = Settings(pack=pack, max_length=max_length or lm.max_positions, device="cpu", dtype="float32")
    store = Store(into)
    result = ingest(check_corpus(corpus, "conllu"), store, lm, settings, progress=False)
    con = store.connect()
    (tokens, kept) = con.execute("SELECT n_tokens, kept_mass FROM runs WHERE run_id = ?", [result.run_id]).fetchone()
    con.close()
    return store.run_folder(result.run_id), tokens * lm.n_layers * lm.n_heads, kept is None


def timed(write, tables: list[pa.Table], repeat: int, rows: int) -> Option:
    """The fastest of ``repeat`` writes of ``tables`` (one call of ``write(table, sink)`` each), thread CPU ns per
    attention row, and the MB written."""
    best, size = float("inf"), 0
    for _ in range(repeat):
        sinks = [io.BytesIO() for _ in tables]
        start = time.thread_time()
        for table, sink in zip(tables, sinks, strict=True):
            write(table, sink)
        best = min(best, time.thread_time() - start)
        size = sum(sink.tell() for sink in sinks)
    return best / rows * 1e9, size / 1e6


def alternatives(column: str, kind: pa.DataType) -> dict[str, dict]:
    """``pq.write_table``'s arguments for each encoding and codec of a column."""
    encodings = {"dictionary": None, "plain": "PLAIN"}
    encodings.update({"delta": "DELTA_BINARY_PACKED"} if pa.types.is_integer(kind) else {"split": "BYTE_STREAM_SPLIT"})
    out = {}
    for (encoding, name), (codec, (compression, level)) in itertools.product(encodings.items(), CODECS.items()):
        args: dict = {"compression": compression, "write_statistics": False, "use_dictionary": name is None}
        args.update({"column_encoding": {column: name}} if name not in (None, "PLAIN") else {})
        args.update({"compression_level": level} if level is not None else {})
        out[f"{encoding}, {codec}"] = args
    return out


def ingest_options(name: str, table: pa.Table, dense: bool) -> dict:
    """``pq.write_table``'s arguments for a chunk's table ``name`` as the ingest writes it."""
    from atlas.ingestion.write import encodings
    from atlas.store import parquet_options

    return parquet_options(table, **encodings(name, table, dense))


def as_ingested(name: str, dense: bool):
    """Writing a table ``name`` with the ingest's encodings, into a sink."""

    def write(table: pa.Table, sink: io.BytesIO) -> None:
        pq.write_table(table, sink, **ingest_options(name, table, dense))

    return write


def ingest_label(name: str, table: pa.Table, column: str, dense: bool) -> str:
    """The alternative that is the ingest's own encoding of a column."""
    options = ingest_options(name, table, dense)
    encoding = (options["column_encoding"] or {}).get(column)
    label = {"BYTE_STREAM_SPLIT": "split", "DELTA_BINARY_PACKED": "delta", "PLAIN": "plain"}.get(encoding, "dictionary")
    level = (options["compression_level"] or {}).get(column, 1)
    return f"{label}, {'none' if options['compression'][column] == 'none' else f'zstd {level}'}"


def measure(run: Path, rows: int, dense: bool, repeat: int) -> tuple[dict[tuple[str, str], dict[str, Option]], dict]:
    """Per (table, column): the ingest's encoding ('ingest') and each alternative; and each table written whole."""
    found: dict[tuple[str, str], dict[str, Option]] = {}
    whole = {}
    for name in TABLES:
        tables = [pq.read_table(part) for part in sorted((run / name).glob("*.parquet"))]
        if not tables or not sum(t.num_rows for t in tables):
            continue
        whole[name] = timed(as_ingested(name, dense), tables, repeat, rows)
        for column in tables[0].column_names:
            if all(t[column].null_count == t.num_rows for t in tables):
                continue  # a column of NULLs (value_norm without --norms): written as nothing
            alone = [t.select([column]) for t in tables]
            options = {"ingest": timed(as_ingested(name, dense), alone, repeat, rows)}
            same = ingest_label(name, tables[0], column, dense)
            for label, args in alternatives(column, tables[0].schema.field(column).type).items():
                if label != same:
                    options[label] = timed(lambda t, sink, a=args: pq.write_table(t, sink, **a), alone, repeat, rows)
            found[(name, column)] = options
            print(f"measured {name}.{column}", file=sys.stderr)
    return found, whole


def choose(found: dict[tuple[str, str], dict[str, Option]], cost) -> tuple[dict, float, float]:
    """Each column's option of least ``cost(ns, MB)``, and the time and size of that choice."""
    pick = {key: min(options, key=lambda o, opts=options: cost(*opts[o])) for key, options in found.items()}
    return pick, sum(found[k][o][0] for k, o in pick.items()), sum(found[k][o][1] for k, o in pick.items())


def report(found: dict[tuple[str, str], dict[str, Option]], whole: dict, rows: int) -> None:
    ingest_ns = sum(options["ingest"][0] for options in found.values())
    ingest_mb = sum(options["ingest"][1] for options in found.values())
    print(f"# writing the attention tables again: {rows:,} attention rows; ns of a thread's CPU per attention row, MB")
    print("\n| table written whole | ns | MB |\n|---|---|---|")
    for name, (ns, mb) in whole.items():
        print(f"| {name} | {ns:.1f} | {mb:.2f} |")
    print(f"| all | {sum(v[0] for v in whole.values()):.1f} | {sum(v[1] for v in whole.values()):.2f} |")
    print(f"\ncolumns written alone, with the ingest's encodings: {ingest_ns:.1f} ns, {ingest_mb:.2f} MB")
    print("\n| column | the ingest's | fastest | smallest |\n|---|---|---|---|")
    for (name, column), options in found.items():
        fast = min(options, key=lambda o: options[o][0])
        small = min(options, key=lambda o: options[o][1])
        cells = [f"{o}: {options[o][0]:.1f} ns, {options[o][1]:.2f} MB" for o in ("ingest", fast, small)]
        print(f"| {name}.{column} | {' | '.join(cells).removeprefix('ingest: ')} |")
    print("\n## the frontier: each column's option of least MB + mu x ns\n")
    print("| mu | ns | MB | ns / the ingest's | MB / the ingest's |\n|---|---|---|---|---|")
    for mu in MUS:
        _, ns, mb = choose(found, lambda t, s, m=mu: s + m * t)
        print(f"| {mu} | {ns:.1f} | {mb:.2f} | {ns / ingest_ns:.2f} | {mb / ingest_mb:.3f} |")
    for lam in (x / 2 for x in range(1000)):  # the least weight of size that keeps the ingest's bytes
        pick, ns, mb = choose(found, lambda t, s, m=lam: t + m * s)
        if mb <= ingest_mb:
            break
    print(f"\nfastest within the ingest's size: {ns:.1f} ns ({ns / ingest_ns:.2f}), {mb:.2f} MB; the columns changed:")
    for key, option in pick.items():
        if option != "ingest":
            print(f"  {'.'.join(key)}: {option} ({found[key][option][0]:.1f} ns, {found[key][option][1]:.2f} MB)")
    print("\n## what the rows are keyed by, and what they hold\n")
    print("| columns | the ingest's: ns, MB | fastest within the ingest's size: ns, MB |\n|---|---|---|")
    for label, keyed in (("keys (example, layer, head, source token or word, bucket)", True), ("values", False)):
        part = [k for k in found if (k[1] in KEYS) == keyed]
        cells = [[found[k][option(k)] for k in part] for option in (lambda k: "ingest", pick.get)]
        print(f"| {label} | {' | '.join(f'{sum(t for t, _ in c):.1f}, {sum(m for _, m in c):.2f}' for c in cells)} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--pack", default="none")
    parser.add_argument("--max-length", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="atlas-bench-writing-") as work:
        run, rows, dense = ingest_run(args.corpus, args.pack, args.max_length, Path(work) / "store")
        found, whole = measure(run, rows, dense, args.repeat)
    report(found, whole, rows)


if __name__ == "__main__":
    main()
