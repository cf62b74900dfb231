"""Stage 5: collect the rows of a chunk of examples and write them as Parquet files of the store."""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from itertools import repeat
from operator import attrgetter
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from atlas.ingestion.align import is_punct
from atlas.ingestion.examples import Example, Layout
from atlas.ingestion.sparsify import Table
from atlas.store import to_table, write_parquet

EXAMPLE_TABLES = (
    "examples", "tokens", "words", "mentions", "frames", "attn_edges", "attn_rows", "word_rows", "rollout",
    "head_norms", "attn_distance",
)  # fmt: skip
ATTENTION_TABLES = ("attn_edges", "attn_rows", "word_rows", "rollout", "head_norms", "attn_distance")
WRITERS = 2  # threads writing a chunk's tables (on a CPU, where the model's threads take the other cores)
PART_ROWS = 4_000_000  # beside an accelerator: a table of more rows is written as several files at once (PARTS)
# at most, each by a writer thread of its own: the cores this process may use but two (the model's and the rows'),
# from 8 to 16; beside an H200 with 16 cores, 14 parts took 3 to 18 % less time than 8 over UD GUM dev, by the
# variant taken as the baseline (bench/RESULTS.md, On a GPU); the files of a large table follow from it
_CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
PARTS = min(16, max(8, _CORES - 2))
WRITE_ORDER = (*ATTENTION_TABLES, *(name for name in EXAMPLE_TABLES if name not in ATTENTION_TABLES))  # largest first
SIGNIFICANT_BITS = ("entropy", "value_norm", "distance")  # floats of a sparse run with their own precision
# a sparse run's fixed-point floats written byte-stream split, and those left uncompressed (``encodings``)
SPLIT_FIXED = {"attn_rows": ("to_sep",), "word_rows": ("weight", "from_weight")}
UNCOMPRESSED = {"attn_rows": ("received", "to_cls")}
ATTENTION_KEYS = ("example_id", "layer", "head", "src_tok", "src_word")  # their columns with statistics


# words' columns as their fields in the corpus's Word (``atlas.ingestion.readers.conllu``)
WORD_FIELDS = (
    ("conllu_id", "id"), ("line", "line"), ("form", "form"), ("lemma", "lemma"), ("upos", "upos"), ("xpos", "xpos"),
    ("feats", "feats"), ("deprel", "deprel"),
)  # fmt: skip


def _first_tokens(lay: Layout) -> dict[int, int]:
    """Each word's first token."""
    first: dict[int, int] = {}
    for t, w in enumerate(lay.token_word):
        if w is not None:
            first.setdefault(w, t)
    return first


def _mention_type(upos: str | None) -> str:
    return {"PRON": "pronoun", "PROPN": "proper"}.get(upos or "", "nominal")


class ChunkRows:
    """Column lists for every per-example table of one chunk."""

    def __init__(self, dense: bool) -> None:
        self.dense = dense  # dense: every weight exact (float32), not in fixed point
        self.lists: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
        self.arrays: dict[str, list[_Rows]] = defaultdict(list)
        self.n_tokens = 0
        self.n_edges = 0

    def add_skipped(self, ex: Example) -> None:
        self._example_row(ex, skipped=True)

    def _example_row(self, ex: Example, skipped: bool, lay: Layout | None = None) -> None:
        row = self.lists["examples"]
        row["example_id"].append(ex.example_id)
        row["doc_id"].append(ex.doc_id)
        row["sent_ids"].append([a.sentence.sent_id for a in ex.sentences])
        row["first_line"].append(ex.sentences[0].sentence.line)
        row["n_sentences"].append(len(ex.sentences))
        row["n_tokens"].append(ex.n_tokens)
        row["n_words"].append(sum(len(a.sentence.words) for a in ex.sentences))
        row["skipped"].append(skipped)
        row["label"].append(ex.sentences[0].sentence.label)
        facts = ex.sentences[0].sentence.needle  # a needle probe's input: every input of its run
        if facts is None:
            return
        at = ({} if lay is None else _first_tokens(lay)).get  # a piece's word -> its token (None: not run)
        row["context_length"].append(facts.length)
        row["depth_percent"].append(facts.depth)
        row["needle_start"].append(at(facts.needle_start))
        last = None if facts.needle_end is None else at(facts.needle_end - 1)
        row["needle_end"].append(None if last is None else last + 1)
        row["generated_start"].append(at(facts.generated_start))
        row["n_generated"].append(facts.n_generated)
        row["needle_recall"].append(facts.recall)

    def add(self, ex: Example, lay: Layout, pieces: list[str], dot_comma: np.ndarray) -> None:
        """An input's rows of every table but the attention tables (see ``add_attention``); ``dot_comma``: which of
        its tokens are a '.' or ',' (``is_dot_comma``, as the rows' targets mark them)."""
        self._example_row(ex, skipped=False, lay=lay)
        self.n_tokens += len(lay.input_ids)
        toks = self.lists["tokens"]
        n = len(lay.input_ids)
        assert len(pieces) == n, "a piece for each token"
        toks["example_id"].extend(repeat(ex.example_id, n))
        toks["tok_idx"].extend(range(n))
        toks["piece"].extend(pieces)
        for name, column in (("piece_id", lay.input_ids), ("word_idx", lay.token_word), ("special", lay.special),
                             ("role", lay.role), ("segment", lay.segments)):  # fmt: skip
            toks[name].extend(column)
        toks["is_punct"].extend(s is None and is_punct(t) for s, t in zip(lay.special, lay.text, strict=True))
        toks["dot_comma"].extend(dot_comma.tolist())
        self._words(ex, lay)

    def add_attention(self, example_ids: list[int], tables: dict[str, Table]) -> None:
        """A forward batch's rows of the attention tables: per table its columns, input after input, and each
        input's number of rows (inputs ``example_ids``, in any order: the chunk's tables are in example order).
        The columns become Arrow arrays here, with the batch (beside an accelerator: while the model runs on the next
        batch), so that the chunk's tables are slices of them (``table``)."""
        for name, (columns, counts) in tables.items():
            arrays = {"example_id": pa.array(_repeated(example_ids, counts))}
            arrays.update({key: _arrow(column) for key, column in columns.items()})
            rows = pa.RecordBatch.from_arrays(list(arrays.values()), names=list(arrays))
            self.arrays[name].append(_Rows(rows, np.asarray(example_ids), np.asarray(counts)))
        self.n_edges += int(tables["attn_edges"][1].sum())

    def _words(self, ex: Example, lay: Layout) -> None:
        offsets = ex.word_offsets()
        first_tok = _first_tokens(lay)
        n_toks = Counter(w for w in lay.token_word if w is not None)
        pairs = ex.words
        sentences, found = [s for s, _ in pairs], [w for _, w in pairs]
        n = len(found)
        heads = [None if not w.head else offsets[s.index] + w.head - 1 for s, w in pairs]
        upos = [w.upos for w in found]
        words = self.lists["words"]  # column by column (a word's 15 appends took 3 times as long)
        words["example_id"].extend(repeat(ex.example_id, n))
        words["word_idx"].extend(range(n))
        words["sent_id"].extend([s.sent_id for s in sentences])
        for name, field in WORD_FIELDS:
            words[name].extend(map(attrgetter(field), found))
        words["head_word_idx"].extend(heads)
        words["first_tok"].extend(map(first_tok.get, range(n)))  # None: a word without pieces (atlas.ingestion.align)
        words["n_toks"].extend([n_toks[i] for i in range(n)])
        spans = sorted(
            (offsets[m.start[0]] + m.start[1] - 1, offsets[m.end[0]] + m.end[1] - 1, m.entity_id) for m in ex.mentions()
        )
        frames = self.lists["frames"]
        for sentence in (a.sentence for a in ex.sentences):
            base = offsets[sentence.index] - 1  # word id (1-based in the sentence) -> word_idx
            for fe in sentence.frames:
                frames["example_id"].append(ex.example_id)
                frames["frame"].append(fe.frame)
                frames["lexical_unit"].append(fe.lexical_unit)
                frames["element"].append(fe.name)
                frames["core"].append(fe.core)
                frames["target_first"].append(base + fe.target[0])
                frames["target_last"].append(base + fe.target[1])
                frames["element_first"].append(base + fe.span[0])
                frames["element_last"].append(base + fe.span[1])
        mentions = self.lists["mentions"]
        for mention_id, (first, last, entity) in enumerate(spans):
            inside = range(first, last + 1)
            head = next((w for w in inside if heads[w] is None or heads[w] not in inside), first)
            mentions["example_id"].append(ex.example_id)
            mentions["mention_id"].append(mention_id)
            mentions["doc_id"].append(ex.doc_id)
            mentions["entity_id"].append(entity)
            mentions["first_word"].append(first)
            mentions["last_word"].append(last)
            mentions["head_word"].append(head)
            mentions["mention_type"].append(_mention_type(upos[head]))

    def tables(self) -> dict[str, pa.Table]:
        """Every table of ``EXAMPLE_TABLES`` of the chunk."""
        return {name: self.table(name) for name in EXAMPLE_TABLES}

    def table(self, name: str) -> pa.Table:
        """Table ``name`` (one of ``EXAMPLE_TABLES``) of the chunk, as its run's files hold it (without the run id:
        the run's folder gives it)."""
        arrays = self.arrays.get(name)
        cols: dict[str, object] = _in_example_order(arrays) if arrays else dict(self.lists[name])
        n = len(next(iter(cols.values()))) if cols else 0
        return to_table(name, cols, n, partitioned=True)


class _Rows(NamedTuple):
    """A forward batch's rows of one table: its columns as Arrow arrays, input after input, the inputs' example ids and
    each input's number of rows."""

    arrays: pa.RecordBatch
    example_ids: np.ndarray
    counts: np.ndarray


def _repeated(values: list[int], counts: np.ndarray) -> np.ndarray:
    """Each of ``values`` ``counts`` times, as int32 (np.repeat: 30 times the time, with an input's thousands of
    rows)."""
    out = np.empty(int(np.sum(counts)), dtype=np.int32)
    at = 0
    for value, n in zip(values, np.asarray(counts).tolist(), strict=True):
        out[at : at + n] = value
        at += n
    return out


def _arrow(column: np.ndarray) -> pa.Array:
    """A column as an Arrow array (without a copy where it is contiguous); a masked entry is NULL."""
    if isinstance(column, np.ma.MaskedArray):
        return pa.array(np.ma.getdata(column), mask=np.ma.getmaskarray(column))
    return pa.array(column)


def _in_example_order(batches: list[_Rows]) -> dict[str, pa.ChunkedArray]:
    """The forward batches' columns of a table as one, in example order: each input's rows a slice of its batch's
    arrays, not a copy (a chunk's tables are as fast to encode as contiguous ones; copied to their places, they took
    0.6 of the 0.7 s of building UD GUM dev's tables in 128-piece windows)."""
    blocks = []  # (example id, batch, first row in the batch, rows)
    for b, rows in enumerate(batches):
        starts, counts = (np.cumsum(rows.counts) - rows.counts).tolist(), rows.counts.tolist()
        blocks.extend(zip(rows.example_ids.tolist(), [b] * len(counts), starts, counts, strict=True))
    blocks.sort()
    # sliced as record batches, not column by column: a slice per input, not one per input and column (a tenth of the
    # time on UD EWT dev)
    table = pa.Table.from_batches([batches[b].arrays.slice(start, n) for _, b, start, n in blocks])
    return {key: table.column(key) for key in table.column_names}


def parts(table: pa.Table, n: int) -> list[pa.Table]:
    """``table`` in ``n`` slices of consecutive rows (no copy), each written as a file of its own (``write_table``'s
    ``part``): the rows of a table are the same, in the same order, in one file or in several."""
    size = -(-table.num_rows // n)
    return [table.slice(start, size) for start in range(0, max(table.num_rows, 1), size or 1)]


def clear_chunk(run_dir: Path, chunk: int) -> None:
    """Remove what an interrupted run left of a chunk not marked done (its files may have been cut in other parts)."""
    for pattern in (f"*/part-{chunk:05d}.parquet", f"*/part-{chunk:05d}-*.parquet"):
        for path in run_dir.glob(pattern):
            path.unlink()


def write_table(run_dir: Path, chunk: int, name: str, table: pa.Table, dense: bool, part: int | None = None) -> None:
    """Write table ``name`` of a chunk (one of ``ChunkRows.tables``), encoded as ``encodings`` says. ``part``: the
    chunk's table is cut in files (``parts``), this is one."""
    file = f"part-{chunk:05d}.parquet" if part is None else f"part-{chunk:05d}-{part:02d}.parquet"
    write_parquet(table, run_dir / name / file, **encodings(name, table, dense))


def encodings(name: str, table: pa.Table, dense: bool) -> dict[str, object]:
    """``write_parquet``'s encoding of a chunk's table ``name`` (``atlas.store.parquet_options``); the tables but the
    attention tables: its defaults.

    The attention tables' encodings are known without a pass over their values: in a sparse run every float but the
    entropy, the value norms and the mean distances is fixed point or float16 (a dictionary), in a dense one
    (``dense``) none is; min/max statistics only on the columns a query filters rows by. Of those (sorted runs of
    integers) the edges' source token is delta encoded (4-6 % less CPU time for writing than with a dictionary on UD
    EWT dev and GUM train in windows, files 0.2 % and 4.3 % smaller), at zstd's level 3 (8 and 15 % fewer bytes
    than at 1 on UD EWT dev and UD GUM dev in 128-piece windows, in about as much time: -7 and +4 %); the others are
    left to zstd alone at its fastest level, -1 (the example, layer and head: runs of one value; a row's source token
    or word and a profile's bucket: the sequence 0, 1, ... repeated; the edges' example ids on UD EWT dev in 7.5
    against 11.5 ns of CPU per attention row, the same bytes; the buckets 0.6 against 2.3 with a dictionary). Of a
    sparse run's fixed-point columns (``bench/bench_writing.py``, on those two corpora, each column alone): the
    masses to separators and the word rows' weights byte-stream split (28 to 35 % less time than with a dictionary,
    from 6 % fewer to 3 % more bytes), the received attention and the masses to cls/bos tokens uncompressed (zstd
    took 9 to 23 % of their time for 0.3 to 2.5 % of their bytes). Written so, the four attention tables took 0.94
    and 0.96 of the CPU time, in 1.002 and 0.998 of the bytes."""
    if name not in ATTENTION_TABLES:
        return {}
    floats = [f.name for f in table.schema if pa.types.is_floating(f.type)]
    # in a sparse run the entropy, the value norms and the mean distances keep 17, 11 and 11 significant bits,
    # the head norms all 24
    own = (*SIGNIFICANT_BITS, *SPLIT_FIXED.get(name, ()))
    split = floats if dense or name == "head_norms" else [c for c in floats if c in own]
    statistics = [c for c in table.schema.names if c in ATTENTION_KEYS]
    delta = ["src_tok"] if name == "attn_edges" else []
    plain = [c for c in table.schema.names if c in (*ATTENTION_KEYS, "bucket") and c not in delta]
    return {
        "split": split,
        "statistics": statistics,
        "delta": delta,
        "plain": plain,
        "levels": {c: -1 for c in plain} | {c: 3 for c in delta},
        "uncompressed": [] if dense else list(UNCOMPRESSED.get(name, ())),
    }


def write_chunk(run_dir: Path, chunk: int, tables: dict[str, pa.Table], dense: bool) -> None:
    """Write a chunk's tables (``ChunkRows.tables``), two at a time (pyarrow encodes without the GIL; in
    ``WRITE_ORDER``: the chunk's writing takes about the time of attn_edges alone)."""
    clear_chunk(run_dir, chunk)
    with ThreadPoolExecutor(max_workers=WRITERS) as pool:
        for done in [pool.submit(write_table, run_dir, chunk, name, tables[name], dense) for name in WRITE_ORDER]:
            done.result()
