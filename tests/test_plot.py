"""Figures stay readable: many panels wrap into rows, an entry about some layers draws only those, colour
bars say what they show, the entropy figure has the uniform baseline; PNG, PDF or SVG by the suffix."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import polars as pl
import pytest
from PIL import Image

from atlas.catalogue import Entry
from atlas.errors import AtlasError
from atlas.plot import _grid, _heatmap, _layers, plot


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
    fig, (a, b) = plt.subplots(1, 2)
    grid, layers = _grid(_heads(3, 4, ["prev"]), "prev")
    _heatmap(a, grid, layers, "prev")
    assert fig.axes[-1].get_ylabel() == "prev"  # the colour bar's axis
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
