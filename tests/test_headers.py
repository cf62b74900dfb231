"""An entry's header says everything the atlas does with it: which parameters hold run ids, what its figure is and
draws, its reference line, what its values measure, which columns it draws in percent; nothing is decided by a
parameter's or a column's name. A header that says something the atlas cannot do is refused in one line naming the
file and the line."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from atlas.catalogue import PLOT_KINDS, Entry, parse_entry, resolve
from atlas.errors import AtlasError
from atlas.plot import DRAWN, figure

HEAD = "-- name: tiny\n-- paper: none\n-- description: a test entry\n"


def _entry(tmp_path: Path, header: str) -> Entry:
    path = tmp_path / "tiny.sql"
    path.write_text(HEAD + header + "SELECT 1 AS layer, 1 AS head, 0.5 AS value\n")
    return parse_entry(path)


def test_plot_draws_every_kind_a_header_may_name() -> None:
    assert set(DRAWN) == set(PLOT_KINDS)


def test_an_unknown_figure_kind_is_refused_naming_its_line(tmp_path: Path) -> None:
    with pytest.raises(AtlasError, match=r"tiny\.sql:4: unknown figure kind 'pie' \(kinds: heatmap, layers,"):
        _entry(tmp_path, "-- plot: pie value\n-- figure: a pie\n")
    assert _entry(tmp_path, "-- plot: heatmap value\n-- figure: a heat map of `value`\n").plot == ("heatmap", "value")


def test_a_figure_is_said_in_its_header(tmp_path: Path) -> None:
    with pytest.raises(AtlasError, match=r"tiny\.sql:4: a 'plot:' line takes a 'figure:' line"):
        _entry(tmp_path, "-- plot: heatmap value\n")
    with pytest.raises(AtlasError, match=r"tiny\.sql:4: 'baseline:' without a 'plot:' line"):
        _entry(tmp_path, "-- baseline: value\n")
    with pytest.raises(AtlasError, match=r"tiny\.sql:6: 'baseline:' is drawn by a layers figure only, not heatmap"):
        _entry(tmp_path, "-- plot: heatmap value\n-- figure: a heat map of `value`\n-- baseline: value\n")
    said = "a layer x head heat map of each of `all_types`, `pronoun`, `proper`, `nominal`"
    assert resolve("coreference heads").figure == said
    assert resolve("entropy").baseline == "uniform_entropy"
    assert {e.baseline for e in map(resolve, ("special tokens", "head ablation"))} == {None}


def test_run_parameters_are_declared_not_named(tmp_path: Path) -> None:
    assert resolve("coreference heads").run_parameters == {"run": "runs", "select_run": "runs"}
    assert resolve("fine-tuning change").run_parameters == {"base": "runs", "tuned": "runs"}
    assert resolve("head ablation").run_parameters == {"model_run": "any"}
    declared = _entry(tmp_path, "-- parameters:\n--   baseline_run [run]: a run\n--   other: not a run (default: x)\n")
    assert declared.run_parameters == {"baseline_run": "runs"}
    assert _entry(tmp_path, "-- parameters:\n--   tuned: a name (default: x)\n").run_parameters == {}
    with pytest.raises(AtlasError, match=r"tiny\.sql:5: 'run' is the run the entry answers for"):
        _entry(tmp_path, "-- parameters:\n--   run: run id (default: the latest run)\n")


def test_what_a_figure_measures_and_draws_in_percent_is_said_in_its_header(tmp_path: Path) -> None:
    for header, line, why in (
        ("-- axis: value\n", 4, "'axis:' without a 'plot:' line"),
        ("-- percent: value\n", 4, "'percent:' without a 'plot:' line"),
        ("-- plot: curve x value g\n-- figure: f\n-- percent: share\n", 6, "'share' is drawn in percent but not a"),
        ("-- plot: curve x value g\n-- figure: f\n-- percent: ,\n", 6, "'percent:' names no column"),
        ("-- plot: bars x value b\n-- figure: f\n-- axis: {metric\n", 6, "the axis: .*'}'"),
        ("-- plot: bars x value b\n-- figure: f\n-- axis: {}\n", 6, "the axis: '{}' is not a column's name"),
    ):
        with pytest.raises(AtlasError, match=rf"tiny\.sql:{line}: {why}"):
            _entry(tmp_path, header)
    declared = _entry(tmp_path, "-- plot: curve x value g\n-- figure: f\n-- axis: {metric} (%)\n-- percent: x\n")
    assert (declared.axis, declared.percent) == ("{metric} (%)", ("x",))
    assert resolve("layer ablation").axis == "{metric}" and resolve("pruning curve").percent == ("pruned_share",)


def test_no_column_name_decides_what_a_figure_says(tmp_path: Path) -> None:
    """Columns named as entropy's, layer ablation's and the pruning curve's are drawn as any others, unless the
    header says otherwise."""
    layers = _entry(tmp_path, "-- plot: layers entropy\n-- figure: f\n")
    heads = pl.DataFrame({"layer": [1, 1, 2, 2], "head": [1, 2, 1, 2], "entropy": [0.1, 0.2, 0.3, 0.4]})
    assert [ax.get_ylabel() for ax in figure(layers, heads).axes] == ["entropy"]  # no 'entropy (nats)' by name
    bars = _entry(tmp_path, "-- plot: bars layer value baseline\n-- figure: f\n")
    rows = pl.DataFrame({"layer": [1, 2], "value": [0.5, 0.6], "baseline": [0.7] * 2, "metric": ["accuracy"] * 2})
    assert [ax.get_ylabel() for ax in figure(bars, rows).axes] == ["value"]  # no metric by the column's name
    curve = _entry(tmp_path, "-- plot: curve pruned_share value task\n-- figure: f\n")
    points = pl.DataFrame({"pruned_share": [0.1, 0.2], "value": [0.5, 0.4], "task": ["SST-2"] * 2})
    (ax,) = figure(curve, points).axes
    assert ax.get_lines()[0].get_xdata().tolist() == [0.1, 0.2]  # a share in percent only where the header says
    with pytest.raises(AtlasError, match=r"^'tiny': its axis names \{task\}, not a column of the answer$"):
        figure(_entry(tmp_path, "-- plot: bars layer value baseline\n-- figure: f\n-- axis: {task}\n"), rows)
