"""Figures stay readable: many panels wrap into rows, an entry about some layers draws only those, colour
bars say what they show, the entropy figure has the uniform baseline; PNG, PDF or SVG by the suffix. Figures
comparing runs: bars side by side with their differences, MDS maps side by side, reference lines under the data;
other kinds refused. Every entry's figure keeps its texts inside it and names its columns in words, not as
snake_case names; its title is the entry and its paper (or the caller's), the runs a small caption at its foot; the
headline entry draws each relation's best head beside its best fixed offset."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import polars as pl
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text
from PIL import Image

from atlas.catalogue import Entry, entries, resolve
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
    _layers(b, grid, layers, "entropy", "entropy (nats)", baseline=1.25)
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
    assert fig.get_supxlabel() == "A: a; B: b\ndemo"  # the caption: which run each letter is, then the source


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


# every entry's figure: words a reader of the papers knows, nothing cut at the figure's edges

HEADLINE = "best head per dependency relation"
RUN = "en_ewt-ud-dev__all-MiniLM-L6-v2__2e92dcd994"
RELATIONS = ["all", "all (non-root)", "nsubj", "obj", "det", "case", "amod", "advmod", "nmod:poss", "compound:prt"]


def _answer(entry: Entry) -> pl.DataFrame:
    """A made-up answer with the columns the entry's figure draws."""
    kind, *columns = entry.plot
    rng = np.random.default_rng(1)
    if kind in ("heatmap", "layers"):
        return _heads(6, 12, columns).with_columns(uniform_entropy=pl.lit(3.2))
    if kind == "mds":
        x, y, cluster = columns
        return _heads(6, 12, [x, y]).with_columns(pl.Series(cluster, rng.integers(0, 6, 72)))
    if kind == "bars":
        x, y, baseline = columns
        return pl.DataFrame({x: range(1, 13), y: rng.random(12), baseline: [0.8] * 12, "metric": ["accuracy"] * 12})
    if kind == "curve":
        x, y, group = columns
        xs = [5 * i / 100 if x in entry.percent else i for i in range(1, 21)]
        return pl.DataFrame({x: xs * 2, y: rng.random(40), group: ["SST-2"] * 20 + ["MRPC"] * 20})
    if kind == "stacked":
        label, *shares = columns
        labels = [f"en_ewt-ud-dev.conllu all-MiniLM-L6-v2 rule {i}" for i in range(3)]
        return pl.DataFrame({label: labels, "layer": [None] * 3, **{s: rng.random(3) * 20 for s in shares}})
    if kind == "hbars":
        label, value, baseline, *tags = columns
        n = len(RELATIONS)
        frame = {label: RELATIONS, value: rng.random(n) * 100, baseline: rng.random(n) * 100}
        return pl.DataFrame({**frame, **dict(zip(tags, (["8-11"] * n, ["+1"] * n), strict=False))})
    if kind == "shares":
        kind_column, *values = columns
        kinds = ["cls", "sep", "dot_comma", "other"]
        rows = [(layer, head, k) for layer in range(1, 7) for head in [*range(1, 13), None] for k in kinds]
        shares = {v: rng.dirichlet(np.ones(4), len(rows) // 4).ravel() for v in values}
        return pl.DataFrame({"layer": [r[0] for r in rows], "head": [r[1] for r in rows],
                             kind_column: [r[2] for r in rows], **shares})  # fmt: skip
    if kind == "lines":
        x, *values = columns
        return pl.DataFrame({x: [*range(1, 7), None], **{v: rng.random(7) for v in values}})
    if kind == "tokens":
        position, name, value = columns
        pieces = ["[CLS]", "read", "the", "entire", "article", ";", "there", "'", "s", "a", "punch", "##line", "[SEP]"]
        rows = [(layer, i, piece) for layer in range(1, 7) for i, piece in enumerate(pieces)]
        return pl.DataFrame({"layer": [r[0] for r in rows], position: [r[1] for r in rows],
                             name: [r[2] for r in rows], value: rng.random(len(rows))})  # fmt: skip
    raise AssertionError(f"no made-up answer for a '{kind}' figure")


def _drawn_outside(fig: Figure) -> list[str]:
    """The texts of the figure drawn wholly or partly outside it (tick labels included)."""
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    box = fig.bbox
    ticks = {id(t) for ax in fig.axes for axis in (ax.xaxis, ax.yaxis) for t in axis.get_ticklabels(which="both")}
    outside = []
    for text in fig.findobj(Text):
        if not (text.get_visible() and text.get_text()) or (text.axes is not None and not text.axes.get_visible()):
            continue
        if id(text) in ticks:
            continue  # a tick label: in the figure's tight box below, which holds only the ticks drawn
        extent = text.get_window_extent(renderer)
        if extent.x0 < box.x0 - 1 or extent.x1 > box.x1 + 1 or extent.y0 < box.y0 - 1 or extent.y1 > box.y1 + 1:
            outside.append(text.get_text())
    tight = fig.get_tightbbox(renderer)  # inches
    width, height = fig.get_size_inches()
    if tight.x0 < -0.01 or tight.y0 < -0.01 or tight.x1 > width + 0.01 or tight.y1 > height + 0.01:
        outside.append(f"the figure's content spans {tight.bounds}, the figure {width} x {height}")
    return outside


def _words(fig: Figure) -> list[str]:
    """The titles, axis labels, colour bar labels and legend texts of a figure."""
    words = [fig.get_suptitle(), fig.get_supxlabel()]
    for ax in fig.axes:
        words += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()]
        if (legend := ax.get_legend()) is not None:
            words += [legend.get_title().get_text(), *(t.get_text() for t in legend.get_texts())]
    return [w for w in words if w]


@pytest.mark.parametrize("name", [e.name for e in entries() if e.plot])
def test_every_figure_fits_and_speaks_words(name):
    entry = resolve(name)
    df = _answer(entry)
    source = f"{entry.name} ({entry.paper}); run {RUN} (model sentence-transformers/all-MiniLM-L6-v2, corpus c.conllu)"
    fig = figure(entry, df, source)
    assert _drawn_outside(fig) == [], name
    raw = {c for c in df.columns if "_" in c}
    assert not raw & set(_words(fig)), (name, raw & set(_words(fig)))
    assert fig.get_suptitle() == f"{entry.name} ({entry.cited})" and RUN in fig.get_supxlabel()  # never cut


def test_shares_lines_and_tokens_draw_the_layer_rows():
    """A shares figure stacks each layer's kinds (the rows with head empty), one panel per value column; a lines
    figure draws a line per column over the layers (not the all-layers row); a tokens figure a layer x token map."""
    entry = _entry("shares kind weight share")
    df = _answer(entry)
    fig = figure(entry, df)
    for ax, column in zip(fig.axes, ("weight", "share"), strict=True):
        tops = np.zeros(6)
        for container in ax.containers:
            tops += [bar.get_height() for bar in container]
        want = df.filter(pl.col("head").is_null()).group_by("layer").agg(pl.col(column).sum()).sort("layer")
        np.testing.assert_allclose(tops, want[column].to_numpy())
    entry = _entry("lines layer a b")
    df = _answer(entry)
    lines = figure(entry, df).axes[0].get_lines()
    assert [list(line.get_xdata()) for line in lines] == [list(range(1, 7))] * 2
    np.testing.assert_array_equal(lines[1].get_ydata(), df["b"][:6].to_numpy())
    entry = _entry("tokens tok_idx piece weight")
    df = _answer(entry)
    ax = figure(entry, df).axes[0]
    grid = ax.get_images()[0].get_array()
    assert grid.shape == (6, 13) and grid[2, 4] == df.filter(layer=3, tok_idx=4)["weight"][0]
    assert [t.get_text() for t in ax.get_xticklabels()][:2] == ["[CLS]", "read"]


def test_pattern_shares_caption_is_whole():
    entry = resolve("pattern shares")
    source = f"{entry.name} ({entry.paper}); every run in the store"
    fig = figure(entry, _answer(entry), source)
    assert fig.get_suptitle() == "pattern shares (Kovaleva et al. 2019)" and _drawn_outside(fig) == []
    assert fig.get_supxlabel() == "every run in the store"
    legend = fig.axes[0].get_legend()
    assert "vertical + diagonal" in [t.get_text() for t in legend.get_texts()]


def test_the_title_is_the_entry_and_its_paper_the_runs_a_small_caption():
    entry = resolve("induction heads")
    ran = f"run {RUN} (model sentence-transformers/all-MiniLM-L6-v2, corpus c.conllu)"
    fig = figure(entry, _answer(entry), f"{entry.name} ({entry.paper}); {ran}")
    assert fig.get_suptitle() == "induction heads (Olsson et al. 2022)"  # one line, not six
    caption = next(t for t in fig.texts if t.get_text() == fig.get_supxlabel())
    assert caption.get_text().replace("\n", " ") == ran and caption.get_fontsize() < fig._suptitle.get_fontsize()
    assert _drawn_outside(fig) == []
    fig = figure(entry, _answer(entry), f"{entry.name} ({entry.paper}); {ran}", title="Heads of a tiny decoder")
    assert fig.get_suptitle() == "Heads of a tiny decoder" and fig.get_supxlabel().replace("\n", " ") == ran
    assert figure(entry, _answer(entry), title="").get_suptitle() == ""  # none
    assert figure(entry, _answer(entry)).get_supxlabel() == ""  # no source, no caption


def test_reference_lines_lie_under_the_data_of_a_comparison():
    entry = resolve("entropy")
    frames = {run: _answer(entry).with_columns(uniform_entropy=pl.lit(base)) for run, base in (("a", 3.2), ("b", 3.0))}
    fig = figure(entry, compare(entry, frames), "t", runs=["a", "b"])
    panels = [ax for ax in fig.axes if ax.get_lines()]
    assert len(panels) == 4  # per column, the runs overlaid and their difference below
    for ax in panels:
        references = [line for line in ax.get_lines() if "layer mean" not in line.get_label()]
        data = [*(line for line in ax.get_lines() if "layer mean" in line.get_label()), *ax.collections]
        assert references and data, ax.get_title()
        assert min(d.get_zorder() for d in data) > max(r.get_zorder() for r in references), ax.get_title()
    drawn = sorted(panels[0].get_children(), key=lambda artist: artist.get_zorder())  # the order matplotlib draws
    assert drawn.index(panels[0].get_lines()[-1]) < drawn.index(panels[0].get_lines()[1])  # B's uniform under B's mean


def test_the_headline_entry_draws_each_relation_beside_its_baseline(tmp_path):
    entry = resolve(HEADLINE)
    df = _answer(entry).with_columns(best_head=pl.Series([f"{i % 6 + 1}-{i + 1}" for i in range(len(RELATIONS))]))
    fig = figure(entry, df, f"{HEADLINE} ({entry.paper})")
    (ax,) = fig.axes
    heads, baselines = ax.containers
    assert [p.get_width() for p in heads] == pytest.approx(df["accuracy"].to_list())
    assert [p.get_width() for p in baselines] == pytest.approx(df["baseline_accuracy"].to_list())
    assert all(p.get_height() < 0.5 for p in (*heads, *baselines))  # two bars side by side per relation
    assert [t.get_text() for t in ax.get_yticklabels()] == RELATIONS
    tags = {t.get_text() for t in ax.texts}
    assert set(df["best_head"]) | {"+1"} <= tags  # the best head as layer-head, the offset as +1
    assert ax.get_ylim()[0] > ax.get_ylim()[1]  # 'all' on top, as the table lists it
    assert {t.get_text() for t in ax.get_legend().get_texts()} == {"best head (layer-head)", "best fixed offset"}
    assert "accuracy" in ax.get_xlabel() and _drawn_outside(fig) == []
    plot(entry, df, tmp_path / "best.png")
    assert Image.open(tmp_path / "best.png").size[1] > Image.open(tmp_path / "best.png").size[0] / 2


def test_each_figure_says_what_its_values_measure_as_its_header_does():
    def ylabels(name: str, runs: tuple[str, ...] = ()) -> list[str]:
        entry = resolve(name)
        if runs:
            df = compare(entry, {run: _answer(entry) for run in runs})
            return [ax.get_ylabel() for ax in figure(entry, df, "t", runs=runs).axes]
        return [ax.get_ylabel() for ax in figure(entry, _answer(entry), "t").axes if ax.get_visible()]

    assert ylabels("entropy") == ["entropy (nats)"] * 2
    assert ylabels("entropy", ("a", "b")) == ["entropy (nats)"] * 2 + ["difference in entropy (nats)"] * 2
    assert ylabels("special tokens") == ["avg. attention"] * 3
    assert ylabels("layer ablation") == ["accuracy"]  # axis: {metric}, the answer's metric
    assert ylabels("pattern shares") == ["share of maps (%)"]
    entry = resolve("pruning curve")
    (ax,) = figure(entry, _answer(entry), "t").axes
    assert ax.get_lines()[0].get_xdata().tolist() == pytest.approx([5.0 * i for i in range(1, 21)])  # percent
