"""Printing and writing query results: a terminal table, CSV, JSON or Parquet."""

from __future__ import annotations

import os
from pathlib import Path

import click
import polars as pl

FORMATS = ("table", "csv", "json", "parquet")


def render_table(df: pl.DataFrame) -> str:
    with pl.Config(
        tbl_rows=-1,
        tbl_cols=-1,
        tbl_hide_dataframe_shape=True,
        tbl_hide_column_data_types=True,
        fmt_str_lengths=80,
        tbl_width_chars=200,
        tbl_formatting="UTF8_FULL_CONDENSED",
        float_precision=4,
    ):
        return str(df)


def emit(df: pl.DataFrame, fmt: str, out: Path | None) -> None:
    """Print ``df`` (or write it to ``out``, atomically) in the given format."""
    if fmt == "parquet" and out is None:
        raise click.UsageError("--format parquet needs --out FILE")
    if out is None:
        text = render_table(df) if fmt == "table" else df.write_csv() if fmt == "csv" else df.write_json()
        click.echo(text.rstrip("\n"))
        return
    tmp = out.with_name(f".{out.name}.tmp")
    if fmt == "parquet":
        df.write_parquet(tmp)
    elif fmt == "csv":
        df.write_csv(tmp)
    elif fmt == "json":
        df.write_json(tmp)
    else:
        tmp.write_text(render_table(df) + "\n")
    os.replace(tmp, out)
    click.echo(f"wrote {len(df)} rows to {out}", err=True)
