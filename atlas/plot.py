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
- ``hbars``: columns label, value, baseline, and a tag of each: a pair of horizontal bars per label, the value
  above its baseline, each tagged (Clark et al.'s Table 1: per relation the best head's accuracy, tagged
  layer-head, beside the best fixed offset's).
- ``shares``: a kind column and share columns: a panel per share column, in it per layer a bar stacked by kind
  (Kobayashi et al.'s Figure 2: attention by weight beside attention by norm).
- ``lines``: an x column and value columns: a line over x per value column (the per-layer rows).
- ``tokens``: columns position, its label and a value: a layer x token heat map of one input (Abnar & Zuidema's
  rollout figures).

A figure names its columns as the entry's ``labels:`` header says (else by the column's name, '_' read as a
space), what its values measure as its ``axis:`` says (else by the value column's label), draws the columns of
its ``percent:`` in percent. Its title is short, the entry and its paper (``entropy (Clark et al. 2019)``), or the
caller's; the runs that answered (the rest of the answer's title line) are its caption, in small type at its foot;
both are wrapped to the figure's width. Reference lines (a baseline, the 0 of a difference) are drawn under the data.

Two or more runs compared (the answer of ``Atlas.answer(NAME, runs=[A, B, ...])``: ``col@run`` and
``col_diff@run`` columns): a heat map per run side by side, the runs sharing one colour scale and one colour
bar, and a difference panel per other run (B - A, a diverging map centred at 0 on its own symmetric scale);
``layers`` and ``bars`` overlay the runs in one panel and draw the differences below, the caption saying which run
each letter of the legends is; ``mds`` draws each run's map beside the other (two runs' MDS coordinates are not
comparable: no difference).
"""

from __future__ import annotations

import string
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import polars as pl
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.image import AxesImage
from matplotlib.text import Text

from atlas.catalogue import Entry
from atlas.compare import letter
from atlas.errors import AtlasError, arg
from atlas.files import check_writable, replacing

PANELS_PER_ROW = 3
VALUES_MAP = "viridis"
DIFFERENCE_MAP = "RdBu_r"  # B - A: red where B is higher, blue where lower, white at 0
TITLE_SIZE = 9
CAPTION_SIZE = 7
REFERENCE_Z = 0.5  # reference lines under every data artist (bars and points at zorder 1, lines at 2)
_DASHED = {"linestyle": "--", "linewidth": 1, "zorder": REFERENCE_Z}  # a baseline's line

Label = Callable[[str], str]  # words of a column: how a figure names it (Entry.label), or what its values measure


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


def _heatmap(
    ax: Axes,
    grid: np.ndarray,
    layers: list[int],
    title: str,
    limits: tuple[float, float] | None = None,
    cmap: str = VALUES_MAP,
) -> AxesImage:
    """A layer x head heat map (``limits``: the colour scale, default the grid's range), the values printed in
    the cells, dark text on light cells and light text on dark ones; its colour bar is the caller's."""
    vmin, vmax = limits or (None, None)
    image = ax.imshow(grid, cmap=cmap, aspect="auto", vmin=vmin, vmax=vmax)
    n_layers, n_heads = grid.shape
    ax.set_xticks(range(n_heads), [str(h + 1) for h in range(n_heads)], fontsize=7)
    ax.set_yticks(range(n_layers), [str(layer) for layer in layers], fontsize=7)
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_title(title, fontsize=8 if "\n" in title else None)
    if n_heads <= 16 and n_layers <= 24:
        for (layer, head), value in np.ndenumerate(grid):
            if not np.isnan(value):
                red, green, blue, _ = image.cmap(image.norm(value))
                color = "black" if 0.299 * red + 0.587 * green + 0.114 * blue > 0.5 else "white"
                ax.text(head, layer, f"{value:.2f}", ha="center", va="center", fontsize=6, color=color)
    return image


def _colour_bar(image: AxesImage, axes: Axes | list[Axes], label: str) -> None:
    image.figure.colorbar(image, ax=axes, fraction=0.046, pad=0.02).set_label(label, fontsize=7)


def _layer_points(
    ax: Axes, grid: np.ndarray, layers: list[int], colour: str, mean_colour: str, label: str, spread: float = 0.15
) -> None:
    """Every head as a point over its layer (jittered within ``spread``), the layer mean as a line."""
    rng = np.random.default_rng(0)
    for i, layer in enumerate(layers):
        x = layer + rng.uniform(-spread, spread, grid.shape[1])
        ax.scatter(x, grid[i], s=12, alpha=0.6, color=colour)
    known = (~np.isnan(grid)).sum(axis=1)  # a layer without a value (every head's NaN) has no mean, and no warning
    means = np.where(known > 0, np.nansum(grid, axis=1) / np.maximum(known, 1), np.nan)
    ax.plot(layers, means, color=mean_colour, label=label)


def _layers(
    ax: Axes, grid: np.ndarray, layers: list[int], title: str, axis: str, baseline: float | None = None
) -> None:
    """Every head as a point over its layer, the layer mean as a line; ``baseline`` (e.g. the entropy of
    uniform attention, Clark et al.'s Figure 4) as a dashed line; ``axis``: what the values measure."""
    _layer_points(ax, grid, layers, "tab:blue", "tab:red", "layer mean")
    if baseline is not None:
        ax.axhline(baseline, **_DASHED, color="black", label="uniform attention")
    _layer_axes(ax, layers, title, axis)
    ax.legend(loc="best", fontsize=7)


def _layer_axes(ax: Axes, layers: list[int], title: str, axis: str) -> None:
    ax.set_xticks(layers)
    ax.set_xlabel("layer")
    ax.set_ylabel(axis)
    ax.set_title(title)


def _new(size: tuple[float, float]) -> Figure:
    """A figure of its own (not pyplot's: no backend is chosen, none is left open), its layout made to hold
    every title, label, legend and colour bar."""
    fig = Figure(figsize=size, layout="constrained")
    FigureCanvasAgg(fig)  # the canvas that measures the title's lines
    return fig


def _axes(size: tuple[float, float]) -> tuple[Figure, Axes]:
    """A figure of one panel."""
    fig = _new(size)
    return fig, fig.subplots()


def _mds_panel(ax: Axes, heads: pl.DataFrame, x: str, y: str, cluster: str, title: str, legend: str = "") -> None:
    """Every head as a point at (x, y), coloured by its cluster (``legend``: the legend's title, default the
    cluster column's name)."""
    points = ax.scatter(heads[x], heads[y], c=heads[cluster].to_numpy(), cmap="tab10", s=40)
    for row in heads.iter_rows(named=True):
        ax.annotate(
            f"{row['layer']}-{row['head']}", (row[x], row[y]), fontsize=6, xytext=(2, 2), textcoords="offset points"
        )
    ax.legend(*points.legend_elements(), title=legend or cluster.split("@")[0], fontsize=7, loc="best")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(title, fontsize=TITLE_SIZE)


def _mds(heads: pl.DataFrame, axis: str, x: str, y: str, cluster: str) -> Figure:
    """Every head as a point at (x, y), coloured by ``cluster``; ``axis``: what the colours tell."""
    fig, ax = _axes((7, 6))
    _mds_panel(ax, heads, x, y, cluster, "", axis)
    return fig


def _bars(df: pl.DataFrame, label: Label, axis: str, x: str, y: str, baseline: str) -> Figure:
    """One bar per ``x`` (e.g. a disabled layer) with the baseline as a line (Kovaleva et al. Figure 9);
    ``axis``: what ``y`` measures."""
    fig, ax = _axes((6, 4))
    ax.bar(df[x].cast(pl.Utf8), df[y], color="tab:blue")
    ax.axhline(df[baseline][0], color="tab:orange", label=label(baseline), zorder=REFERENCE_Z)
    low = min(df[y].min(), df[baseline][0])
    high = max(df[y].max(), df[baseline][0])
    ax.set_ylim(low - 0.1 * (high - low + 1), high + 0.1 * (high - low + 1))
    ax.set_xlabel(label(x))
    ax.set_ylabel(axis)
    ax.legend(fontsize=7)
    return fig


def _curve(df: pl.DataFrame, label: Label, axis: str, x: str, y: str, group: str) -> Figure:
    """``y`` over ``x``, one line per ``group`` (e.g. Michel et al.'s pruning curves per task); ``axis``: what
    ``y`` measures."""
    fig, ax = _axes((6, 4))
    points = df.filter(pl.col(x).is_not_null()).sort(x)
    for (name,), part in points.group_by(group, maintain_order=True):
        ax.plot(part[x], part[y], marker="o", markersize=3, label=name)
    ax.set_xlabel(label(x))
    ax.set_ylabel(axis)
    ax.legend(fontsize=7, title=label(group), title_fontsize=7)
    return fig


def _stacked(df: pl.DataFrame, label: Label, axis: str, x: str, *columns: str) -> Figure:
    """One bar per ``x`` value, stacked by ``columns`` (rows with a layer are left out; Kovaleva Figure 2);
    ``axis``: what the stacks measure."""
    rows = df.filter(pl.col("layer").is_null()) if "layer" in df.columns else df
    fig, ax = _axes((max(6.0, 1.2 * len(rows) + 2.5), 4.5))
    bottom = np.zeros(len(rows))
    names = [_wrap(str(v), 24) for v in rows[x]]
    for column in columns:
        values = rows[column].fill_null(0).to_numpy()
        ax.bar(names, values, bottom=bottom, label=label(column))
        bottom += values
    ax.set_ylabel(axis)
    ax.tick_params(axis="x", labelsize=7)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1, 1))
    return fig


def _per_layer(df: pl.DataFrame) -> pl.DataFrame:
    """The rows of a whole layer (head NULL), where the answer has heads."""
    return df.filter(pl.col("head").is_null()) if "head" in df.columns else df


def _shares(df: pl.DataFrame, label: Label, axis: str, kind: str, *columns: str) -> Figure:
    """A panel per column of ``columns``: per layer a bar of the column's values stacked by ``kind``."""
    rows = _per_layer(df)
    layers = sorted({int(v) for v in rows["layer"]})
    fig = _new((3.8 * len(columns) + 1.2, 3.6))
    axes = fig.subplots(1, len(columns), squeeze=False, sharey=True)[0]
    for ax, column in zip(axes, columns, strict=True):
        bottom = np.zeros(len(layers))
        for name in dict.fromkeys(rows[kind]):
            part = rows.filter(pl.col(kind) == name).sort("layer")
            values = part[column].cast(pl.Float64).fill_null(0.0).to_numpy()
            ax.bar(layers, values, bottom=bottom, label=str(name))
            bottom += values
        _layer_axes(ax, layers, label(column), axis)
    axes[-1].legend(title=label(kind), fontsize=7, title_fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    return fig


def _lines(df: pl.DataFrame, label: Label, axis: str, x: str, *columns: str) -> Figure:
    """A line of each of ``columns`` over ``x``."""
    rows = _per_layer(df).filter(pl.col(x).is_not_null()).sort(x)
    fig, ax = _axes((6, 4))
    for column in columns:
        ax.plot(rows[x], rows[column], marker="o", markersize=3, label=label(column))
    ax.set_xlabel(label(x))
    ax.set_ylabel(axis)
    ax.legend(fontsize=7)
    return fig


def _tokens(df: pl.DataFrame, label: Label, axis: str, position: str, name: str, value: str) -> Figure:
    """One input's ``value`` per layer (rows) and token (columns, at ``position``, named by ``name``)."""
    layers = sorted({int(v) for v in df["layer"]})
    tokens = df.select(position, name).unique(position).sort(position)
    grid = np.zeros((len(layers), len(tokens)))
    at = {int(p): i for i, p in enumerate(tokens[position])}
    for row in df.iter_rows(named=True):
        grid[layers.index(row["layer"]), at[row[position]]] = row[value]
    fig, ax = _axes((max(5.0, 0.32 * len(tokens) + 2.0), 0.3 * len(layers) + 2.0))
    image = ax.imshow(grid, cmap=VALUES_MAP, aspect="auto", origin="lower")
    ax.set_xticks(range(len(tokens)), [str(t) for t in tokens[name]], rotation=90, fontsize=7)
    ax.set_yticks(range(len(layers)), [str(v) for v in layers])
    ax.set_ylabel("layer")
    _colour_bar(image, ax, axis)
    return fig


def _hbars(df: pl.DataFrame, label: Label, axis: str, y: str, value: str, baseline: str, *tags: str) -> Figure:
    """Per ``y`` (e.g. a dependency relation), top to bottom in the answer's order, a bar of ``value`` (the best
    head's accuracy) above one of ``baseline`` (the best fixed offset's), each tagged with its row's text in
    ``tags`` (the head as layer-head, the offset); the legend names the bars by their tags' labels; ``axis``:
    what the bars measure."""
    fig, ax = _axes((7.0, 0.42 * len(df) + 1.4))
    positions = np.arange(len(df))
    height = 0.4
    high = 0.0
    for i, (column, tag) in enumerate(zip((value, baseline), (*tags, "", "")[:2], strict=True)):
        widths = df[column].cast(pl.Float64).fill_null(0.0).to_numpy()
        high = max(high, float(widths.max(initial=0.0)))
        bars = ax.barh(positions + (i - 0.5) * height, widths, height, color=f"C{i}", label=label(tag or column))
        if tag:
            ax.bar_label(bars, ["" if v is None else str(v) for v in df[tag]], padding=2, fontsize=7)
    ax.set_yticks(positions, [str(v) for v in df[y]], fontsize=8)
    ax.margins(y=0.01)
    ax.invert_yaxis()  # the answer's first row on top
    ax.set_xlim(0, 1.15 * high or 1.0)  # room for the tags
    ax.set_xlabel(axis)
    ax.legend(fontsize=7, loc="lower left", bbox_to_anchor=(0, 1), ncols=2, frameon=False)
    return fig


# comparisons of runs: panels name the runs A, B, C, ... in the order given, the first the reference


def _limits(grids: Sequence[np.ndarray], symmetric: bool = False) -> tuple[float, float] | None:
    """One colour scale over ``grids``: their range, or [-m, m] with m the largest |value| (``symmetric``)."""
    values = np.concatenate([g[np.isfinite(g)] for g in grids])
    if values.size == 0:
        return None
    if symmetric:
        bound = float(np.abs(values).max()) or 1.0  # all equal: a scale around 0 all the same
        return -bound, bound
    return float(values.min()), float(values.max())


def _compare_heatmaps(heads: pl.DataFrame, columns: Sequence[str], runs: Sequence[str]) -> Figure:
    """Per column a row: one heat map per run on one shared colour scale (one colour bar), then the difference
    of each other run to the first on a symmetric diverging scale centred at 0 (one colour bar)."""
    first, others = runs[0], runs[1:]
    n_layers, n_heads = _grid(heads, f"{columns[0]}@{first}")[0].shape
    width = float(np.clip(0.4 * n_heads + 1.0, 3.5, 7.0))
    height = float(np.clip(0.32 * n_layers + 1.6, 2.2, 6.0))
    n_panels = len(runs) + len(others)
    fig = Figure(figsize=(width * n_panels + 1.2, height * len(columns) + 1.0), layout="constrained")
    axes = fig.subplots(len(columns), n_panels, squeeze=False)
    for row, column in zip(axes, columns, strict=True):
        values = [_grid(heads, f"{column}@{run}") for run in runs]
        layers = values[0][1]
        limits = _limits([grid for grid, _ in values])
        for i, (ax, run, (grid, _)) in enumerate(zip(row, runs, values, strict=False)):
            image = _heatmap(ax, grid, layers, f"{column}: {letter(i)}\n{run}", limits)
        _colour_bar(image, list(row[: len(runs)]), column)
        differences = [_grid(heads, f"{column}_diff@{run}")[0] for run in others]
        limits = _limits(differences, symmetric=True)
        for i, (ax, run, grid) in enumerate(zip(row[len(runs) :], others, differences, strict=True), 1):
            name = f"{letter(i)} - A"
            image = _heatmap(ax, grid, layers, f"{column}: {name}\n{run}\nminus {first}", limits, DIFFERENCE_MAP)
        _colour_bar(image, list(row[len(runs) :]), f"{column}: difference to A")
    return fig


def _compare_layers(
    heads: pl.DataFrame, columns: Sequence[str], runs: Sequence[str], baselines: dict[str, float], axis: Label
) -> Figure:
    """Per column, the runs overlaid in one panel (each run's heads as points in its colour, its layer mean as a
    line; ``baselines``: each run's uniform-attention line, one when they are the same) and below it each other
    run's difference to the first, per head and as the layer mean, around 0; ``axis``: what a column's values
    measure."""
    fig = Figure(figsize=(4.2 * len(columns), 7.6), layout="constrained")
    axes = fig.subplots(2, len(columns), squeeze=False)
    for (top, bottom), column in zip(axes.T, columns, strict=True):
        for i, run in enumerate(runs):
            grid, layers = _grid(heads, f"{column}@{run}")
            _layer_points(top, grid, layers, f"C{i}", f"C{i}", f"{letter(i)}: layer mean", spread=0.25)
        if baselines and np.allclose(list(baselines.values()), baselines[runs[0]], rtol=1e-9, atol=0):
            top.axhline(baselines[runs[0]], **_DASHED, color="black", label="uniform attention")
        else:
            for run, baseline in baselines.items():
                i = runs.index(run)
                top.axhline(baseline, **_DASHED, color=f"C{i}", label=f"{letter(i)}: uniform")
        _layer_axes(top, layers, column, axis(column))
        top.legend(loc="best", fontsize=7)
        for i, run in enumerate(runs[1:], 1):
            grid, layers = _grid(heads, f"{column}_diff@{run}")
            _layer_points(bottom, grid, layers, f"C{i}", f"C{i}", f"{letter(i)} - A: layer mean", spread=0.25)
        bottom.axhline(0, color="black", linewidth=0.8, zorder=REFERENCE_Z)
        title = f"{column}: " + ", ".join(f"{letter(i)} - A" for i in range(1, len(runs)))
        _layer_axes(bottom, layers, title, f"difference in {axis(column)}")
        bottom.legend(loc="best", fontsize=7)
    return fig


def _wrap(text: str, width: int) -> str:
    """Each line of ``text`` in lines of at most ``width`` characters, run ids left whole."""
    wrap = textwrap.TextWrapper(width, break_long_words=False, break_on_hyphens=False)
    return "\n".join("\n".join(wrap.wrap(line)) for line in text.splitlines())


def _compare_bars(df: pl.DataFrame, x: str, y: str, baseline: str, runs: Sequence[str]) -> Figure:
    """The runs' bars side by side per ``x``, each run's baseline as a line in its colour; below, each other
    run's difference to the first per ``x``."""
    fig = Figure(figsize=(max(6.0, 0.5 * len(df) * len(runs)), 7.0), layout="constrained")
    top, bottom = fig.subplots(2, 1)
    labels = [str(v) for v in df[x]]
    positions = np.arange(len(df))
    width = 0.8 / len(runs)
    for i, run in enumerate(runs):
        top.bar(positions + (i - (len(runs) - 1) / 2) * width, df[f"{y}@{run}"], width, color=f"C{i}", label=letter(i))
        top.axhline(df[f"{baseline}@{run}"][0], **_DASHED, color=f"C{i}")
    others = runs[1:]
    width = 0.8 / len(others)
    for i, run in enumerate(others, 1):
        offset = (i - 1 - (len(others) - 1) / 2) * width
        bottom.bar(positions + offset, df[f"{y}_diff@{run}"], width, color=f"C{i}", label=f"{letter(i)} - A")
    bottom.axhline(0, color="black", linewidth=0.8, zorder=REFERENCE_Z)
    for ax, ylabel in ((top, y), (bottom, f"difference in {y}")):
        ax.set_xticks(positions, labels)
        ax.set_xlabel(x)
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=7)
    top.set_title(f"{y} (dashed: each run's {baseline})", fontsize=9)
    return fig


def _compare_mds(heads: pl.DataFrame, x: str, y: str, cluster: str, runs: Sequence[str]) -> Figure:
    """Each run's map beside the other's: two runs' MDS coordinates and cluster numbers are not comparable, so
    there is no difference panel."""
    fig = Figure(figsize=(6.0 * len(runs), 5.6), layout="constrained")
    for i, (ax, run) in enumerate(zip(fig.subplots(1, len(runs), squeeze=False)[0], runs, strict=True)):
        rows = heads.filter(pl.col(f"{x}@{run}").is_not_null())
        _mds_panel(ax, rows, f"{x}@{run}", f"{y}@{run}", f"{cluster}@{run}", f"{letter(i)}: {run}")
    return fig


def _comparison(entry: Entry, df: pl.DataFrame, heads: pl.DataFrame, runs: Sequence[str]) -> Figure:
    kind, *columns = entry.plot
    if kind == "heatmap":
        return _compare_heatmaps(heads, columns, runs)
    if kind == "layers":
        column = entry.baseline  # the header's reference line, each run's own
        baselines = {}
        if column is not None and f"{column}@{runs[0]}" in df.columns:
            baselines = {run: float(df[f"{column}@{run}"][0]) for run in runs if df[f"{column}@{run}"][0] is not None}
        return _compare_layers(heads, columns, runs, baselines, lambda column: _axis(entry, df, column, runs))
    if kind == "bars":
        return _compare_bars(heads, *columns, runs=runs)
    if kind == "mds":
        return _compare_mds(heads, *columns, runs=runs)
    raise AtlasError(f"'{entry.name}': its figure ({kind}) has no comparison of runs; see 'atlas query --compare'")


FIGURE_FORMATS = (".png", ".pdf", ".svg")


def check_out(out: Path) -> None:
    """Refuse a figure file atlas cannot write, before any work."""
    if out.suffix.lower() not in FIGURE_FORMATS:
        raise AtlasError(f"{_given(out)}: a figure is written as {', '.join(FIGURE_FORMATS)}; name the file so")
    check_writable(out, _given(out))


def _given(out: Path) -> str:
    """The figure's file as the user named it: the API's ``figure``, the command line's ``--out``."""
    return arg("figure", repr(str(out)))


def plot(
    entry: Entry,
    df: pl.DataFrame,
    out: Path,
    source: str | None = None,
    runs: Sequence[str] = (),
    title: str | None = None,
) -> None:
    """Draw ``entry``'s figure of ``df`` into ``out`` (see ``figure``)."""
    check_out(out)
    save(figure(entry, df, source, runs, title), out)


def figure(
    entry: Entry, df: pl.DataFrame, source: str | None = None, runs: Sequence[str] = (), title: str | None = None
) -> Figure:
    """``entry``'s figure of ``df``: titled ``title``, by default the entry and its paper ('entropy (Clark et al.
    2019)'; '': no title), and captioned at its foot with what ``source`` (the answer's title line) says beyond them,
    the runs that answered; ``runs``: the runs ``df`` compares (its ``col@run`` and ``col_diff@run`` columns), the
    first the reference."""
    if not entry.plot:
        raise AtlasError(f"'{entry.name}' has no figure")
    kind, *columns = entry.plot
    df = _in_percent(entry, df, runs)
    heads = df.filter(pl.col("head").is_not_null()) if "head" in df.columns else df
    if heads.is_empty():
        raise AtlasError(f"'{entry.name}': no rows to plot")
    fig = _comparison(entry, df, heads, runs) if runs else DRAWN[kind](entry, df, heads, columns)
    if title is None:
        title = f"{entry.name} ({entry.cited})"
    if title:
        _fit(fig, fig.suptitle(title, fontsize=TITLE_SIZE))
    if caption := _caption(entry, source, runs if kind in ("layers", "bars") else ()):
        _fit(fig, fig.supxlabel(caption, fontsize=CAPTION_SIZE))
    return fig


def _caption(entry: Entry, source: str | None, lettered: Sequence[str]) -> str:
    """Which run each letter of the legends is (the runs ``lettered``, where the legends name runs by letter), then
    what the answer's title line ``source`` says beyond the entry and its paper: the runs that answered (all of it
    where it does not begin with them)."""
    named = f"{entry.name} ({entry.paper})"
    said = source.removeprefix(named).removeprefix(";").strip() if source else ""
    letters = "; ".join(f"{letter(i)}: {run}" for i, run in enumerate(lettered))
    return "\n".join(line for line in (letters, said) if line)


# each kind of figure a header's 'plot:' names (atlas.catalogue.PLOT_KINDS) -> how it is drawn, of the entry, its
# answer, the answer's rows of a head, and the columns the header names
DRAWN: dict[str, Callable[[Entry, pl.DataFrame, pl.DataFrame, Sequence[str]], Figure]] = {
    "heatmap": lambda e, df, heads, columns: _panels("heatmap", e, df, heads, columns),
    "layers": lambda e, df, heads, columns: _panels("layers", e, df, heads, columns),
    "mds": lambda e, df, heads, columns: _mds(heads, _axis(e, heads, columns[2]), *columns),
    "bars": lambda e, df, heads, columns: _bars(heads, e.label, _axis(e, heads, columns[1]), *columns),
    "curve": lambda e, df, heads, columns: _curve(heads, e.label, _axis(e, heads, columns[1]), *columns),
    "stacked": lambda e, df, heads, columns: _stacked(df, e.label, _axis(e, df, None), *columns),
    "hbars": lambda e, df, heads, columns: _hbars(df, e.label, _axis(e, df, columns[1]), *columns),
    "shares": lambda e, df, heads, columns: _shares(df, e.label, _axis(e, df, None), *columns),
    "lines": lambda e, df, heads, columns: _lines(df, e.label, _axis(e, df, None), *columns),
    "tokens": lambda e, df, heads, columns: _tokens(df, e.label, _axis(e, df, columns[2]), *columns),
}


def _axis(entry: Entry, df: pl.DataFrame, column: str | None, runs: Sequence[str] = ()) -> str:
    """What ``column``'s values measure, as the header's ``axis:`` says, each ``{name}`` in it the value of the
    column ``name`` (of the first run's, where ``df`` compares ``runs``) in ``df``'s first row; without an
    ``axis:``, the column's label (none where no one column holds the values)."""
    if not entry.axis:
        return "" if column is None else entry.label(column)
    values: dict[str, object] = {}
    for name in (name for _, name, _, _ in string.Formatter().parse(entry.axis) if name is not None):
        found = [c for c in (name, *(f"{name}@{run}" for run in runs[:1])) if c in df.columns]
        if not found:
            raise AtlasError(f"'{entry.name}': its axis names {{{name}}}, not a column of the answer")
        values[name] = df[found[0]][0]
    return entry.axis.format(**values)


def _in_percent(entry: Entry, df: pl.DataFrame, runs: Sequence[str]) -> pl.DataFrame:
    """``df`` with the header's ``percent:`` columns (where runs are compared, each run's and each difference)
    times 100."""
    named = [f"{c}@{run}" for c in entry.percent for run in runs]
    named += [f"{c}_diff@{run}" for c in entry.percent for run in runs[1:]]
    return df.with_columns(pl.col(c) * 100 for c in (*entry.percent, *named) if c in df.columns)


def _panels(kind: str, entry: Entry, df: pl.DataFrame, heads: pl.DataFrame, columns: Sequence[str]) -> Figure:
    """A heat map or a layers panel per column, in rows of at most PANELS_PER_ROW, so that a figure of many
    columns stays readable; a layers panel draws the header's ``baseline:`` column as a dashed line."""
    n_cols = min(len(columns), PANELS_PER_ROW)
    n_rows = -(-len(columns) // n_cols)
    width, height = (5.0, 4.0) if kind == "heatmap" else (3.6, 3.2)
    fig = _new((width * n_cols, height * n_rows + 0.6))
    axes = fig.subplots(n_rows, n_cols, squeeze=False)
    value = df[entry.baseline][0] if entry.baseline in df.columns else None
    baseline = None if value is None else float(value)
    for ax, column in zip(axes.flat, columns, strict=False):
        grid, layers = _grid(heads, column)
        if kind == "heatmap":
            _colour_bar(_heatmap(ax, grid, layers, entry.label(column)), ax, _axis(entry, df, column))
        else:
            _layers(ax, grid, layers, entry.label(column), _axis(entry, df, column), baseline)
    for ax in list(axes.flat)[len(columns) :]:
        ax.set_visible(False)
    return fig


def _fit(fig: Figure, shown: Text) -> None:
    """A title or caption of the figure in as few lines as fit its width (a run id is never cut)."""
    if not isinstance(fig.canvas, FigureCanvasAgg):
        FigureCanvasAgg(fig)
    renderer = fig.canvas.get_renderer()
    text = shown.get_text()
    room = 0.97 * fig.bbox.width
    width = max(len(line) for line in text.splitlines())
    while (wide := shown.get_window_extent(renderer).width) > room and width > 20:
        width = max(20, min(width - 1, int(width * room / wide)))
        shown.set_text(_wrap(text, width))


def save(fig: Figure, out: Path, dpi: int = 150) -> None:
    """Write a figure atomically, in the format the file's suffix names."""
    with replacing(out, _given(out)) as tmp:
        fig.savefig(tmp, dpi=dpi, format=out.suffix.lower()[1:])
