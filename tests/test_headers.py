"""An entry's header says everything the atlas does with it: which parameters hold run ids, what its figure is and
draws, its reference line; nothing is decided by a parameter's or a column's name. A header that says something
the atlas cannot do is refused in one line naming the file and the line."""

from __future__ import annotations

from pathlib import Path

import pytest

from atlas.catalogue import PLOT_KINDS, parse_entry, resolve
from atlas.errors import AtlasError
from atlas.plot import DRAWN

HEAD = "-- name: tiny\n-- paper: none\n-- description: a test entry\n"


def _entry(tmp_path: Path, header: str) -> object:
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
