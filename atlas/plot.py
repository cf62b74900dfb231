"""Paper-style figures of a catalogue entry's result, as PNG.

- ``heatmap``: one layer x head heat map per column, with the values printed in the cells.
- ``layers``: one panel per column: every head as a point over its layer, and the layer mean as a line
  (Clark et al.'s Figure 2).
- ``mds``: columns x, y and a cluster: every head as a labelled point, coloured by its cluster
  (Clark et al.'s Figure 6).
"""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from atlas.catalogue import Entry  # noqa: E402
from atlas.errors import AtlasError  # noqa: E402


def _grid(heads: pl.DataFrame, column: str) -> np.ndarray:
    n_layers, n_heads = int(heads["layer"].max()), int(heads["head"].max())
    grid = np.full((n_layers, n_heads), np.nan)
    for row in heads.iter_rows(named=True):
        if row[column] is not None:
            grid[row["layer"] - 1, row["head"] - 1] = row[column]
    return grid


def _heatmap(ax: plt.Axes, grid: np.ndarray, title: str) -> None:
    image = ax.imshow(grid, cmap="viridis", aspect="auto")
    ax.figure.colorbar(image, ax=ax, fraction=0.046)
    n_layers, n_heads = grid.shape
    ax.set_xticks(range(n_heads), [str(h + 1) for h in range(n_heads)])
    ax.set_yticks(range(n_layers), [str(layer + 1) for layer in range(n_layers)])
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_title(title)
    if n_heads <= 16 and n_layers <= 24:
        middle = np.nanmean(grid)
        for (layer, head), value in np.ndenumerate(grid):
            if not np.isnan(value):
                color = "black" if value > middle else "white"
                ax.text(head, layer, f"{value:.2f}", ha="center", va="center", fontsize=6, color=color)


def _layers(ax: plt.Axes, grid: np.ndarray, title: str) -> None:
    n_layers, n_heads = grid.shape
    rng = np.random.default_rng(0)
    for layer in range(n_layers):
        x = layer + 1 + rng.uniform(-0.15, 0.15, n_heads)
        ax.scatter(x, grid[layer], s=12, alpha=0.6, color="tab:blue")
    ax.plot(range(1, n_layers + 1), np.nanmean(grid, axis=1), color="tab:red", label="layer mean")
    ax.set_xticks(range(1, n_layers + 1))
    ax.set_xlabel("layer")
    ax.set_ylabel("avg. attention")
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize=7)


def _mds(heads: pl.DataFrame, x: str, y: str, cluster: str, title: str) -> plt.Figure:
    fig, ax = plt.subplots(figsize=(7, 6))
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


def plot(entry: Entry, df: pl.DataFrame, out: Path) -> None:
    if not entry.plot:
        raise AtlasError(f"'{entry.name}' has no figure")
    kind, *columns = entry.plot
    heads = df.filter(pl.col("head").is_not_null()) if "head" in df.columns else df
    if heads.is_empty():
        raise AtlasError(f"'{entry.name}': no rows to plot")
    if kind == "mds":
        _save(_mds(heads, *columns, title=f"{entry.name} ({entry.paper})"), out)
        return
    draw = {"heatmap": _heatmap, "layers": _layers}[kind]
    width = 5.5 if kind == "heatmap" else 3.5
    fig, axes = plt.subplots(1, len(columns), figsize=(width * len(columns), 4), squeeze=False)
    for ax, column in zip(axes[0], columns, strict=True):
        draw(ax, _grid(heads, column), column)
    fig.suptitle(f"{entry.name} ({entry.paper})", fontsize=9)
    _save(fig, out)


def _save(fig: plt.Figure, out: Path) -> None:
    fig.tight_layout()
    tmp = out.with_name(f".{out.name}.tmp.png")
    fig.savefig(tmp, dpi=150)
    plt.close(fig)
    os.replace(tmp, out)
