"""One catalogue entry across runs: the runs' answers aligned on the entry's key columns, one value column per
run and the differences to the first run.

Keys: the columns the entry's header names (``-- keys: relation``, read into ``Entry.keys``), else layer and
head where the answer has them (a NULL head is a layer's row, as in 'special tokens'). Answers per head or
layer align only between runs of the same shape (layers x heads); other runs are refused in one line.

This is the rule; the DuckDB shell's comparison macros (``atlas.macros``) write it in SQL for two runs, from the
same keys, shape check and refusal, and the tests hold their rows equal to ``compare``'s.
"""

from __future__ import annotations

import math
import string
from collections.abc import Callable, Sequence

import polars as pl

from atlas.catalogue import Entry
from atlas.errors import AtlasError, arg

HEAD_KEYS = ("layer", "head")
# a difference of two doubles is given to the digits the larger of its values holds, this many significant ones:
# 10.0 - 45.69 is -35.69, not -35.690000000000005, and 100.1 - 100.0 is 0.1, not 0.0999999999999943 (the shell's
# comparison macros round alike, with printf)
DIFF_DIGITS = 15


def letter(i: int) -> str:
    """The letter of the ``i``-th run compared: A (the reference), B, ..., then R27, R28, ..."""
    return string.ascii_uppercase[i] if i < 26 else f"R{i + 1}"


def lettered(frame: pl.DataFrame, runs: Sequence[str]) -> pl.DataFrame:
    """A comparison (``compare``'s frame) with each run's columns named by its letter, ``col@A``, ``col_diff@B``,
    not by its run id: narrow enough for a terminal's table (the figures name runs so too)."""
    names = {}
    longest_first = sorted(enumerate(runs), key=lambda pair: -len(pair[1]))  # 'x@a@b' is a@b's, not b's
    for column in frame.columns:
        for i, run in longest_first:
            if column.endswith(f"@{run}"):
                names[column] = f"{column.removesuffix(run)}{letter(i)}"
                break
    return frame.rename(names)


def key_columns(entry: Entry, columns: pl.DataFrame | Sequence[str]) -> tuple[str, ...]:
    """The columns naming a row of ``entry``'s answer (``columns``: the answer, or its column names)."""
    keys = entry.keys or tuple(c for c in HEAD_KEYS if c in columns)
    if not keys:
        raise AtlasError(f"'{entry.name}': its rows have no key to align runs on (no relation, layer or head)")
    if missing := [k for k in keys if k not in columns]:
        raise AtlasError(f"'{entry.name}': its header's keys {', '.join(missing)} are not columns of its answer")
    return keys


def aligns_heads(keys: Sequence[str]) -> bool:
    """Whether rows keyed so are heads or layers, which align only between runs of models of one shape."""
    return bool(set(keys) & set(HEAD_KEYS))


def shapes_differ(
    entry: Entry, run: str, shape: tuple[object, object], first: str, first_shape: tuple[object, object]
) -> str:
    """The refusal of ``run`` (as the message names it), whose model's shape (layers, heads) is not that of the
    first run's, for an entry whose rows are heads or layers; the shell's comparison macros say it with
    placeholders for the runs and shapes (``atlas.macros``)."""
    return (
        f"{run}: its model has {shape[0]} layers x {shape[1]} heads, the model of {first} {first_shape[0]} x "
        f"{first_shape[1]}; '{entry.name}' aligns runs on layer and head only where the shapes match"
    )


def check_shapes(
    entry: Entry, keys: Sequence[str], runs: Sequence[str], shape: Callable[[str], tuple[int, int]]
) -> None:
    """Refuse runs whose models differ in layers or heads (``shape``: a run's), for an entry whose rows are heads or
    layers."""
    if not aligns_heads(keys):
        return
    shapes = {run: shape(run) for run in runs}
    for run in runs[1:]:
        if shapes[run] != shapes[runs[0]]:
            raise AtlasError(shapes_differ(entry, arg("runs", repr(run)), shapes[run], runs[0], shapes[runs[0]]))


def compare(entry: Entry, frames: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """The answers of ``frames`` (run id -> answer, the first the reference) side by side: the key columns,
    then per value column one column per run (``col@run``), and for numbers the difference of each other
    run to the first (``col_diff@run``). Rows only in some runs hold NULL for the others."""
    runs = list(frames)
    first = frames[runs[0]]
    keys = key_columns(entry, first)
    values = [c for c in first.columns if c not in keys]
    joined = first.with_row_index("_order").rename({c: f"{c}@{runs[0]}" for c in values})
    for run in runs[1:]:
        other = frames[run].rename({c: f"{c}@{run}" for c in values})
        joined = joined.join(other, on=list(keys), how="full", coalesce=True, nulls_equal=True, maintain_order="left")
    columns: list[pl.Expr] = [pl.col(k) for k in keys]
    for c in values:
        columns += [pl.col(f"{c}@{run}") for run in runs]
        if first.schema[c].is_numeric():
            columns += [_difference(c, run, runs[0], first.schema[c]) for run in runs[1:]]
    return joined.sort("_order", nulls_last=True, maintain_order=True).select(columns)


def _difference(column: str, run: str, reference: str, dtype: pl.DataType) -> pl.Expr:
    """``column``'s value in ``run`` less its value in ``reference``; a double's to ``DIFF_DIGITS`` digits."""
    a, b = pl.col(f"{column}@{reference}"), pl.col(f"{column}@{run}")
    if dtype != pl.Float64:
        return (b - a).alias(f"{column}_diff@{run}")
    pair = pl.struct(a.alias("a"), b.alias("b"))
    return pair.map_elements(lambda v: rounded_difference(v["a"], v["b"]), return_dtype=pl.Float64).alias(
        f"{column}_diff@{run}"
    )


def rounded_difference(a: float | None, b: float | None) -> float | None:
    """``b - a`` to the ``DIFF_DIGITS`` significant digits of the larger of ``a`` and ``b`` (0 below them)."""
    if a is None or b is None:
        return None
    difference = b - a
    if difference == 0 or not math.isfinite(difference):
        return difference
    digits = DIFF_DIGITS + math.floor(math.log10(abs(difference))) - math.floor(math.log10(max(abs(a), abs(b))))
    return float(f"{difference:.{digits}g}") if digits >= 1 else 0.0
