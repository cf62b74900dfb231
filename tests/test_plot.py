"""Figures stay readable: many panels wrap into rows, an entry about some layers draws only those, colour
bars say what they show, the entropy figure has the uniform baseline; PNG, PDF or SVG by the suffix. Figures
comparing runs: bars side by side with their differences, MDS maps side by side; other kinds refused."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import polars as pl
import pytest
from PIL import Image

from atlas.catalogue import Entry
from atlas.compare import compare
from atlas.errors import AtlasError
from atlas.plot import _grid, _layers, figure, plot


def _entry(plot_spec: str) -> Entry:
    return Entry("demo", (), "Paper 2019", "a demo", (), tuple(plot_spec.split()), "SELECT 1", Path("demo.sql"))


def _heads(n_layers: int, n_heads: int, columns: list[str], layers: list[int] | None = None) -> pl.DataFrame:
    rng = np.random.default_rng(0)
    rows = [(layer, head) for layer in (layers or range(1, n_layers + 1)) for head in range(1, n_heads + 1)]
    return pl.DataFrame(
        {"layer": [r[0] for r in rows], "head": [r[1] for r in rows], **{c: rng.random(len(rows)) for c in columns}}
    )


def test_many_heatmap_panels_wrap_into_rows(tmp_path):
    columns = ["cls", "sep", "noun", "verb", "pronoun", "subject", "object", "negation", "punct"]
    out = tmp_path / "f.png"
    plot(_entry("heatmap " + " ".join(columns)), _heads(12, 12, columns), out, "demo; run r (model m, corpus c)")
    width, height = Image.open(out).size
    assert width <= 2400 and height <= 2400 and width / height < 2, (width, height)  # was 7425 x 600 in one row


def test_only_the_layers_the_rows_hold():
    grid, layers = _grid(_heads(12, 4, ["x"], layers=[12]), "x")
    assert grid.shape == (1, 4) and layers == [12] and not np.isnan(grid).any()


def test_colour_bars_are_labelled_and_entropy_has_the_uniform_baseline():
    fig = figure(_entry("heatmap prev"), _heads(3, 4, ["prev"]))
    assert [ax.get_ylabel() for ax in fig.axes if ax.get_label() == "<colorbar>"] == ["prev"]
    fig, b = plt.subplots()
    grid, layers = _grid(_heads(3, 4, ["prev"]), "prev")
    _layers(b, grid, layers, "entropy", baseline=1.25)
    baseline = [line for line in b.get_lines() if line.get_label() == "uniform attention"]
    assert len(baseline) == 1 and baseline[0].get_ydata()[0] == 1.25
    plt.close(fig)


def test_figure_formats(tmp_path):
    df = _heads(2, 2, ["x"])
    for suffix, magic in ((".png", b"\x89PNG"), (".pdf", b"%PDF"), (".svg", b"<?xml")):
        plot(_entry("heatmap x"), df, tmp_path / f"f{suffix}")
        assert (tmp_path / f"f{suffix}").read_bytes().startswith(magic)
    with pytest.raises(AtlasError, match="a figure is written as .png, .pdf, .svg"):
        plot(_entry("heatmap x"), df, tmp_path / "f.jpg")
    with pytest.raises(AtlasError, match="does not exist"):
        plot(_entry("heatmap x"), df, tmp_path / "missing" / "f.png")
    assert not list(tmp_path.glob(".*"))


def test_compared_bars_stand_side_by_side_with_their_differences():
    entry = _entry("bars layer value baseline")
    frames = {
        run: pl.DataFrame({"layer": [1, 2, 3], "value": values, "baseline": [base] * 3})
        for run, values, base in (("a", [0.5, 0.7, 0.6], 0.8), ("b", [0.4, 0.9, 0.65], 0.75))
    }
    fig = figure(entry, compare(entry, frames), "demo", runs=["a", "b"])
    top, bottom = (ax for ax in fig.axes if ax.patches)
    heights = [[p.get_height() for p in c] for c in top.containers]
    assert heights == [[0.5, 0.7, 0.6], [0.4, 0.9, 0.65]]
    assert [line.get_ydata()[0] for line in top.get_lines()] == [0.8, 0.75]  # each run's baseline
    assert [p.get_height() for p in bottom.patches] == pytest.approx([-0.1, 0.2, 0.05])
    assert [t.get_text() for t in top.get_legend().get_texts()] == ["A", "B"]
    assert fig.get_supxlabel() == "A: a; B: b"


def test_compared_mds_maps_stand_side_by_side_without_a_difference():
    entry = _entry("mds mds_x mds_y cluster")
    frames = {run: _heads(2, 3, ["mds_x", "mds_y"]).with_columns(cluster=pl.lit(i)) for i, run in enumerate("ab")}
    frames["b"] = frames["b"].with_columns(mds_x=-pl.col("mds_x"))
    fig = figure(entry, compare(entry, frames), "demo", runs=["a", "b"])
    panels = [ax for ax in fig.axes if ax.collections]
    assert [ax.get_title() for ax in panels] == ["A: a", "B: b"]
    for ax, run in zip(panels, "ab", strict=True):
        want = frames[run].select("mds_x", "mds_y").to_numpy()
        np.testing.assert_array_equal(ax.collections[0].get_offsets(), want)


def test_comparisons_of_other_figure_kinds_are_refused():
    entry = _entry("curve layer value head")
    frames = {run: _heads(2, 2, ["value"]) for run in "ab"}
    with pytest.raises(AtlasError, match=r"its figure \(curve\) has no comparison of runs"):
        figure(entry, compare(entry, frames), "demo", runs=["a", "b"])
