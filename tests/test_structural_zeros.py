"""A column that is 0 in every head because nothing in the run can be attended to there is said to be so, with a
note naming the column and why: a decoder's next token ('relative position' next: causal attention), special tokens
its tokenizer does not add ('special tokens' cls and sep of GPT-2, sep of a decoder that adds a BOS), a corpus
without '.' or ',' (dot_comma of repeated tokens); an encoder's run over text gets none of these notes."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

import atlas
from atlas.cli import cli
from tests.conftest import EWT_SAMPLE, ROOT, cut_conllu
from tests.test_decoder_heads import tiny_gpt2

DECODER = ROOT / "samples" / "models" / "induction-2l"  # its tokenizer adds a <bos>, no separator
NEXT = "next is 0 in every head, a structural zero: no token of run {run} attends to a later one, as in a decoder"
CLS = "cls is 0 in every head, a structural zero: run {run}'s inputs hold no special token of role cls or bos"
SEP = "sep is 0 in every head, a structural zero: run {run}'s inputs hold no special token of role sep or eos"
DOT_COMMA = "dot_comma is 0 in every head, a structural zero: run {run}'s inputs hold no piece '.' or ','"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("zeros")
    text = cut_conllu(EWT_SAMPLE, 3, root / "three.conllu")
    store = root / "store"
    plan = {
        "decoder repeated": (None, str(DECODER), {"format": "repeated", "length": 5, "count": 2}),
        "gpt2 text": (text, str(tiny_gpt2(root / "gpt2")), {}),  # no special token in its inputs
        "encoder text": (text, None, {}),
    }
    ids = {name: atlas.ingest(c, m, store, progress=False, **o).run_id for name, (c, m, o) in plan.items()}
    return store, ids


def _notes(store: Path, entry: str, run: str) -> tuple[pl.DataFrame, list[str]]:
    """The entry's per-head answer for ``run`` and its notes on structural zeros."""
    with atlas.open(store) as st:
        answer = st.answer(entry, run=run)
    heads = answer.frame.filter(pl.col("head").is_not_null())
    return heads, [note.removeprefix("note: ") for note in answer.notes if "structural zero" in note]


@pytest.mark.parametrize(
    ("name", "zeros"),
    [
        ("decoder repeated", {"relative position": [NEXT], "special tokens": [SEP, DOT_COMMA]}),
        ("gpt2 text", {"relative position": [NEXT], "special tokens": [CLS, SEP]}),
        ("encoder text", {"relative position": [], "special tokens": []}),
    ],
)
def test_structural_zeros_are_said_with_the_column_and_why(runs, name, zeros):
    store, ids = runs
    run = ids[name]
    for entry, said in zeros.items():
        heads, notes = _notes(store, entry, run)
        assert len(notes) == len(said), notes
        assert all(n.startswith(s.format(run=run)) for n, s in zip(notes, said, strict=True)), notes
        noted = {n.split(" ")[0] for n in notes}  # the column each note names
        columns = ("prev", "next", "self") if entry == "relative position" else ("cls", "sep", "dot_comma")
        for column in columns:  # a column noted is 0 in every head; one not noted is not
            assert (heads[column].max() == 0) == (column in noted), (entry, column)


def test_the_command_line_prints_the_note(runs):
    store, ids = runs
    run = ids["decoder repeated"]
    args = ["query", "relative position", "--store", str(store), "--run", run, "--format", "csv"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0 and f"note: {NEXT.format(run=run)} (causal attention:" in result.stderr
