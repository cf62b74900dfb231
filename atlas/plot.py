"""Paper-style figures of a catalogue entry's result, as PNG, PDF or SVG (by the file's suffix).

- ``heatmap``: one layer x head heat map per column, with the values printed in the cells.
- ``layers``: one panel per column: every head as a point over its layer, and the layer mean as a line
  (Clark et al.'s Figure 2).
- ``mds``: columns x, y and a cluster: every head as a labelled point, coloured by its cluster
  (Clark et al.'s Figure 6).
- ``bars``: columns x, y and a baseline: one bar per x and the baseline as a line (Kovaleva et al.'s
  Figure 9).
- ``curve``: columns x, y and a group: one line per group (Michel et al.'s pruning curves).
- ``stacked``: a label column and share columns: one stacked bar per label (Kovaleva et al.'s Figure 2).
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import numpy as np
import polars as pl
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from atlas.catalogue import Entry
from atlas.errors import AtlasError

PANELS_PER_ROW = 3


def _grid(heads: pl.DataFrame, column: str) -> tuple[np.ndarray, list[int]]:
    """Layer x head values of ``column`` (1-based layers and heads), over the layers the rows hold (an entry
    about the last layer draws one row, not empty rows for the others); and those layers."""
    layers = sorted({int(v) for v in heads["layer"].drop_nulls()})
    n_heads = int(heads["head"].max())
    grid = np.full((len(layers), n_heads), np.nan)
    for row in heads.iter_rows(named=True):
        if row[column] is not None and row["layer"] is not None:
            grid[layers.index(row["layer"]), row["head"] - 1] = row[column]
    return grid, layers


def _heatmap(ax: Axes, grid: np.ndarray, layers: list[int], title: str) -> None:
    image = ax.imshow(grid, cmap="viridis", aspect="auto")
    ax.figure.colorbar(image, ax=ax, fraction=0.046).set_label(title, fontsize=7)
    n_layers, n_heads = grid.shape
    ax.set_xticks(range(n_heads), [str(h + 1) for h in range(n_heads)], fontsize=7)
    ax.set_yticks(range(n_layers), [str(layer) for layer in layers], fontsize=7)
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_title(title)
    if n_heads <= 16 and n_layers <= 24:
        middle = np.nanmean(grid)
        for (layer, head), value in np.ndenumerate(grid):
            if not np.isnan(value):
                color = "black" if value > middle else "white"
                ax.text(head, layer, f"{value:.2f}", ha="center", va="center", fontsize=6, color=color)


def _layers(ax: Axes, grid: np.ndarray, layers: list[int], title: str, baseline: float | None = None) -> None:
    """Every head as a point over its layer, the layer mean as a line; ``baseline`` (e.g. the entropy of
    uniform attention, Clark et al.'s Figure 4) as a dashed line."""
    n_heads = grid.shape[1]
    rng = np.random.default_rng(0)
    for i, layer in enumerate(layers):
        x = layer + rng.uniform(-0.15, 0.15, n_heads)
        ax.scatter(x, grid[i], s=12, alpha=0.6, color="tab:blue")
    ax.plot(layers, np.nanmean(grid, axis=1), color="tab:red", label="layer mean")
    if baseline is not None:
        ax.axhline(baseline, color="black", linestyle="--", linewidth=1, label="uniform attention")
    ax.set_xticks(layers)
    ax.set_xlabel("layer")
    ax.set_ylabel("entropy (nats)" if "entropy" in title else "avg. attention")
    ax.set_title(title)
    ax.legend(loc="best", fontsize=7)


def _axes(size: tuple[float, float]) -> tuple[Figure, Axes]:
    """A figure of one panel (a Figure of its own, not pyplot's: no backend is chosen, none is left open)."""
    fig = Figure(figsize=size)
    return fig, fig.subplots()


def _mds(heads: pl.DataFrame, x: str, y: str, cluster: str, title: str) -> Figure:
    fig, ax = _axes((7, 6))
    groups = heads[cluster].to_numpy()
    points = ax.scatter(heads[x], heads[y], c=groups, cmap="tab10", s=40)
    for row in heads.iter_rows(named=True):
        ax.annotate(
            f"{row['layer']}-{row['head']}", (row[x], row[y]), fontsize=6, xytext=(2, 2), textcoords="offset points"
        )
    ax.legend(*points.legend_elements(), title=cluster, fontsize=7, loc="best")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(title, fontsize=9)
    return fig


def _bars(df: pl.DataFrame, x: str, y: str, baseline: str, title: str) -> Figure:
    """One bar per ``x`` (e.g. a disabled layer) with the baseline as a line (Kovaleva et al. Figure 9)."""
    fig, ax = _axes((6, 4))
    ax.bar(df[x].cast(pl.Utf8), df[y], color="tab:blue")
    ax.axhline(df[baseline][0], color="tab:orange", label="baseline")
    low = min(df[y].min(), df[baseline][0])
    high = max(df[y].max(), df[baseline][0])
    ax.set_ylim(low - 0.1 * (high - low + 1), high + 0.1 * (high - low + 1))
    ax.set_xlabel(x)
    ax.set_ylabel(df["metric"][0] if "metric" in df.columns else y)
    ax.legend(fontsize=7)
    ax.set_title(title, fontsize=9)
    return fig


def _curve(df: pl.DataFrame, x: str, y: str, group: str, title: str) -> Figure:
    """``y`` over ``x``, one line per ``group`` (e.g. Michel et al.'s pruning curves per task)."""
    fig, ax = _axes((6, 4))
    points = df.filter(pl.col(x).is_not_null()).sort(x)
    for (name,), part in points.group_by(group, maintain_order=True):
        ax.plot(part[x] * 100 if x.endswith("share") else part[x], part[y], marker="o", markersize=3, label=name)
    ax.set_xlabel(f"{x} (%)" if x.endswith("share") else x)
    ax.set_ylabel(y)
    ax.legend(fontsize=7)
    ax.set_title(title, fontsize=9)
    return fig


def _stacked(df: pl.DataFrame, x: str, *columns: str, title: str) -> Figure:
    """One bar per ``x`` value, stacked by ``columns`` (rows with a layer are left out; Kovaleva Figure 2)."""
    rows = df.filter(pl.col("layer").is_null()) if "layer" in df.columns else df
    fig, ax = _axes((max(5, 1.2 * len(rows)), 4))
    bottom = np.zeros(len(rows))
    labels = [str(v) for v in rows[x]]
    for column in columns:
        values = rows[column].fill_null(0).to_numpy()
        ax.bar(labels, values, bottom=bottom, label=column)
        bottom += values
    ax.set_ylabel("share (%)")
    ax.tick_params(axis="x", labelrotation=20, labelsize=7)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1, 1))
    ax.set_title(title, fontsize=9)
    return fig


FIGURE_FORMATS = (".png", ".pdf", ".svg")


def check_out(out: Path) -> None:
    """Refuse a figure file atlas cannot write, before any work."""
    if out.suffix.lower() not in FIGURE_FORMATS:
        raise AtlasError(f"--out '{out}': a figure is written as {', '.join(FIGURE_FORMATS)}; name the file so")
    if not out.parent.is_dir():
        raise AtlasError(f"--out '{out}': the folder '{out.parent}' does not exist")


def plot(entry: Entry, df: pl.DataFrame, out: Path, source: str | None = None) -> None:
    """Draw ``entry``'s figure of ``df`` into ``out``; ``source`` (the entry and the runs that answered) is
    its title."""
    check_out(out)
    save(figure(entry, df, source), out)


def figure(entry: Entry, df: pl.DataFrame, source: str | None = None) -> Figure:
    """``entry``'s figure of ``df``, titled ``source`` (the entry and the runs that answered)."""
    if not entry.plot:
        raise AtlasError(f"'{entry.name}' has no figure")
    kind, *columns = entry.plot
    heads = df.filter(pl.col("head").is_not_null()) if "head" in df.columns else df
    if heads.is_empty():
        raise AtlasError(f"'{entry.name}': no rows to plot")
    title = "\n".join(textwrap.wrap(source or f"{entry.name} ({entry.paper})", 90))
    if kind == "stacked":
        return _tight(_stacked(df, *columns, title=title))
    if kind in ("mds", "bars", "curve"):
        return _tight({"mds": _mds, "bars": _bars, "curve": _curve}[kind](heads, *columns, title=title))
    # panels in rows of at most PANELS_PER_ROW, so that a figure of many columns stays readable
    n_cols = min(len(columns), PANELS_PER_ROW)
    n_rows = -(-len(columns) // n_cols)
    width, height = (5.0, 4.0) if kind == "heatmap" else (3.5, 3.2)
    fig = Figure(figsize=(width * n_cols, height * n_rows + 0.6))
    axes = fig.subplots(n_rows, n_cols, squeeze=False)
    baseline = next((float(df[c][0]) for c in df.columns if c.startswith("uniform") and df[c][0] is not None), None)
    for ax, column in zip(axes.flat, columns, strict=False):
        grid, layers = _grid(heads, column)
        if kind == "heatmap":
            _heatmap(ax, grid, layers, column)
        else:
            _layers(ax, grid, layers, column, baseline)
    for ax in list(axes.flat)[len(columns) :]:
        ax.set_visible(False)
    fig.suptitle(title, fontsize=9)
    return _tight(fig)


def _tight(fig: Figure) -> Figure:
    fig.tight_layout()
    return fig


def save(fig: Figure, out: Path, dpi: int = 150) -> None:
    """Write a figure atomically, in the format the file's suffix names."""
    tmp = out.with_name(f".{out.stem}.tmp{out.suffix}")
    try:
        fig.savefig(tmp, dpi=dpi, format=out.suffix.lower()[1:])
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
