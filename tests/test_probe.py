"""'atlas probe' (Clark et al. Section 5) against loops over eager attention, and its refusals."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from atlas.catalogue import resolve, run_entry
from atlas.probe import Settings, run
from cli import cli
from ingest.model import load_model
from tests.conftest import EWT_SAMPLE, GUM_SAMPLE, cut_conllu, make_store
from tests.reference import attn_only_uas, branching_uas, read_sentences


@pytest.fixture(scope="module")
def probed(tmp_path_factory, model, ewt_small):
    """Trained on the held-in corpus (ATLAS_TEST_CONLLU points it elsewhere), scored on the GUM sample."""
    root = tmp_path_factory.mktemp("probe")
    store, train_run = make_store(root / "s", ewt_small, model)
    _, eval_run = make_store(root / "s", GUM_SAMPLE, model)
    results = run(store, train_run, eval_run, Settings(epochs=20), progress=False)
    return store, train_run, eval_run, {r["probe"]: r for r in results}


def test_attn_only_uas_equals_loops(probed, model):
    store, train_run, _, results = probed
    con = store.connect()
    rows = con.execute(
        "SELECT metric, layer, head, value FROM head_scores WHERE run_id = ? AND analysis = 'attention probe'",
        [train_run],
    ).fetchall()
    weights: dict[str, np.ndarray] = {}
    for metric, layer, head, value in rows:
        weights.setdefault(metric, np.zeros((model.n_layers, model.n_heads)))[layer, head] = value
    assert len(weights) == 6 and all(np.abs(w).sum() > 0 for w in weights.values())
    correct, total = attn_only_uas(model.source, read_sentences(GUM_SAMPLE), weights)
    probe = results["attn-only"]
    assert probe["n_words"] == total
    assert abs(probe["n_correct"] - correct) <= 2  # float32 against float64 sums on near-ties


def test_branching_baselines_equal_loops(probed):
    _, _, _, results = probed
    sentences = read_sentences(GUM_SAMPLE)
    assert (results["right-branching"]["n_correct"], results["right-branching"]["n_words"]) == branching_uas(
        sentences, 1
    )
    assert (results["left-branching"]["n_correct"], results["left-branching"]["n_words"]) == branching_uas(
        sentences, -1
    )


def test_attention_probes_learn(probed):
    _, _, _, results = probed
    for name in ("attn-only", "attn+glove", "distances+glove"):
        assert results[name]["train_uas"] > results["right-branching"]["train_uas"] + 10, name
    assert results["attn+glove"]["uas"] > results["right-branching"]["uas"]


def test_probe_results_query_lists_the_stored_rows(probed):
    store, _, _, results = probed
    entry = resolve("probe results")
    df = run_entry(store.connect(), entry, entry.bind({}))
    assert df["probe"].to_list() == ["right-branching", "left-branching", "distances+glove", "attn-only", "attn+glove"]
    for row in df.iter_rows(named=True):
        assert row["uas"] == pytest.approx(results[row["probe"]]["uas"])
        assert row["eval_corpus"] == GUM_SAMPLE.name


def test_probe_refuses_runs_of_another_model(tmp_path, model):
    corpus = cut_conllu(EWT_SAMPLE, 3, tmp_path / "c.conllu")
    store, real = make_store(tmp_path / "s", corpus, model)
    _, random = make_store(tmp_path / "s", corpus, load_model(None, random_init=True))
    runner = CliRunner()
    for args, message in [
        (["--train", real, "--eval", "nope"], "--eval 'nope': no such run"),
        (["--train", "nope", "--eval", real], "--train 'nope': no such run"),
        (["--train", real, "--eval", random], f"--eval '{random}': made with another model"),
    ]:
        result = runner.invoke(cli, ["probe", "--store", str(store.root), "--quiet", *args])
        assert result.exit_code == 1 and message in result.output, result.output
        assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
    _, paired = make_store(tmp_path / "s", corpus, model, pack="pair")
    result = runner.invoke(cli, ["probe", "--store", str(store.root), "--train", paired, "--eval", real])
    assert result.exit_code == 1 and "packs several sentences per input" in result.output
