"""The docs' notebook (docs/explore.ipynb) runs top to bottom in a Jupyter kernel and shows its views: a head view
of a stored run and of ``atlas.look``, with their tokens and lines."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="the notebook extra: pip install 'attention-atlas[notebook]'")
nbclient = pytest.importorskip("nbclient", reason="the notebook extra: pip install 'attention-atlas[notebook]'")

NOTEBOOK = Path(__file__).resolve().parents[1] / "docs" / "explore.ipynb"


def html_of(cell) -> str:
    return "".join(o.get("data", {}).get("text/html", "") for o in cell.outputs if o.output_type == "execute_result")


def test_the_notebook_shows_head_views():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not c.get("outputs") for c in notebook.cells if c.cell_type == "code")  # kept without outputs
    nbclient.NotebookClient(notebook, timeout=600, resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    code = [c for c in notebook.cells if c.cell_type == "code"]
    stored, model_view, looked = (html_of(code[i]) for i in (1, 2, 3))
    for view in (stored, looked):
        assert view.count('class="aa-head"') == 1 and view.count("<line") > 10
    assert "sparse run: each row keeps" in stored and "sparse run" not in looked
    for token in ("[CLS]", "keys", "cabinet", "table", "[SEP]"):
        assert f">{token}</text>" in looked
    tokens = re.findall(r">([^<>]+)</text>", stored)
    assert tokens[0] == "[CLS]" and "[SEP]" in tokens
    assert model_view.count("<svg") == 2 * 12 and "layer 2, head 12" in model_view
    assert "entropy" in html_of(code[4]) and "dot_comma" in html_of(code[5])
