"""'coreference heads' from the store against plain loops over eager attention on windowed documents."""

from __future__ import annotations

import pytest

from atlas.catalogue import resolve, run_entry
from tests.conftest import GUM_SAMPLE, make_store
from tests.reference import coreference, read_sentences

KINDS = {"all_types": "all", "pronoun": "pronoun", "proper": "proper", "nominal": "nominal"}


@pytest.mark.parametrize("kept_mass", [None, 0.9])
def test_coreference_heads_equal_loops(tmp_path, model, kept_mass):
    store, run_id = make_store(tmp_path / "s", GUM_SAMPLE, model, pack="window", max_length=128, kept_mass=kept_mass)
    entry = resolve("coreference heads")
    df = run_entry(store.connect(), entry, entry.bind({"run": run_id}))
    ref = coreference(model.source, read_sentences(GUM_SAMPLE), 128)
    assert len(df) == 2 + model.n_layers * model.n_heads
    for row in df.iter_rows(named=True):
        name = row["predictor"] if row["layer"] is None else f"{row['layer']}-{row['head']}"
        for column, kind in KINDS.items():
            correct, total = ref[name][kind]
            assert row[f"n_{kind}" if kind != "all" else "n"] == total, (name, kind)
            if total:
                assert row[column] == pytest.approx(100 * correct / total), (name, kind)
    assert df["n"][0] > 50  # mentions with an antecedent in the window


def test_head_selected_on_another_run(tmp_path, model):
    root = tmp_path / "s"
    store, wide = make_store(root, GUM_SAMPLE, model, pack="window", max_length=128)
    _, narrow = make_store(root, GUM_SAMPLE, model, pack="window", max_length=48)
    entry = resolve("coreference heads")
    con = store.connect()
    on_narrow = run_entry(con, entry, entry.bind({"run": narrow}))
    best_narrow = on_narrow.filter(on_narrow["selected"]).select("layer", "head").row(0)
    assert best_narrow == on_narrow.filter(on_narrow["predictor"] == "attention head").select("layer", "head").row(0)
    scored = run_entry(con, entry, entry.bind({"run": wide, "select_run": narrow}))
    heads = scored.filter(scored["predictor"] == "attention head")
    assert heads.select("layer", "head").row(0) == best_narrow and heads["selected"][0]
    assert heads["selected"].sum() == 1
    same = run_entry(con, entry, entry.bind({"run": wide}))
    row = same.filter((same["layer"] == best_narrow[0]) & (same["head"] == best_narrow[1]))
    assert heads["all_types"][0] == row["all_types"][0]  # scored on the wide run, selected on the narrow one
