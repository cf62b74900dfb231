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
