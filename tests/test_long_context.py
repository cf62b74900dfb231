"""Long-context analyses: the needle probe (``--format needle``) and its 'retrieval heads' entry (Wu et al. 2024), the
attention-distance profile (table attn_distance) with its 'attention distance' and 'streaming heads' entries, checked
against ``long_reference`` (written from the released code and the papers) run on transformers' own eager attention
of the stored token ids, never on the store's values: the sample decoder ``samples/models/induction-2l`` on a random
haystack, the embedded encoder on a few UD sentences, and a random decoder over one input of 4,097 tokens."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
from click.testing import CliRunner
from long_reference import (
    distance_profile,
    greedy_decode,
    head_scores,
    mean_distance,
    retrieval_scores,
    rouge1_recall,
    streaming_share,
)
from polars.testing import assert_frame_equal
from transformers import AutoModel, AutoModelForCausalLM

import atlas
from atlas.cli import cli
from atlas.errors import AtlasError
from atlas.model.identity import default_model_path
from tests.conftest import EWT_SAMPLE, ROOT, cut_conllu, make_store, rewrite_as_before

INDUCTION = ROOT / "samples" / "models" / "induction-2l"
NEW_ENTRIES = ("retrieval heads", "attention distance", "streaming heads")


# ---------------------------------------------------------------------------------------------------------------
# stores, each ingested once
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def decoder_store(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """The sample decoder's dense needle probe on a random haystack, and a repeated-token run of it."""
    root = tmp_path_factory.mktemp("long-decoder") / "store"
    needle = atlas.api.ingest(None, str(INDUCTION), root, format="needle", haystack="random", lengths=[64, 128],
                              depths=[0, 50, 100], dense=True, progress=False)  # fmt: skip
    repeated = atlas.api.ingest(None, str(INDUCTION), root, format="repeated", length=20, count=3, dense=True,
                                progress=False)  # fmt: skip
    return root, {"needle": needle.run_id, "repeated": repeated.run_id}


@pytest.fixture(scope="module")
def encoder_store(tmp_path_factory) -> tuple[Path, str]:
    """The embedded encoder's dense run over the first 12 sentences of the EWT sample."""
    folder = tmp_path_factory.mktemp("long-encoder")
    corpus = cut_conllu(EWT_SAMPLE, 12, folder / "ewt-12.conllu")
    return folder / "store", atlas.api.ingest(corpus, None, folder / "store", dense=True, progress=False).run_id


@pytest.fixture(scope="module")
def long_store(tmp_path_factory) -> tuple[Path, atlas.api.Ingested]:
    """A random decoder of the sample's shape with a long context, over one repeated sequence of 2 x 2,048 ids (the
    tokenizer's BOS before them: 4,097 tokens); with a rollout asked, so that the ingest says whether the input was
    read in blocks of rows (no rollout then)."""
    root = tmp_path_factory.mktemp("long-input") / "store"
    result = atlas.api.ingest(None, str(INDUCTION), root, format="repeated", length=2048, count=1, random_init=True,
                              config=["n_positions=4200"], rollout="last", progress=False)  # fmt: skip
    return root, result


@pytest.fixture(scope="module")
def causal() -> torch.nn.Module:
    return AutoModelForCausalLM.from_pretrained(INDUCTION, attn_implementation="eager", dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def encoder() -> torch.nn.Module:
    return AutoModel.from_pretrained(default_model_path(), attn_implementation="eager", dtype=torch.float32).eval()


# ---------------------------------------------------------------------------------------------------------------
# reading the store and the references
# ---------------------------------------------------------------------------------------------------------------


def sql(root: Path, text: str) -> pl.DataFrame:
    with atlas.open(root) as st:
        return st.sql(text)


def query(root: Path, name: str, run: str, **params: object) -> pl.DataFrame:
    with atlas.open(root) as st:
        return st.query(name, run=run, **params)


def inputs(root: Path, run: str) -> list[dict]:
    """Each input of the run (example order): its stored ids and its examples row."""
    ids = sql(root, f"SELECT example_id, list(piece_id ORDER BY tok_idx) AS ids FROM tokens WHERE run_id = '{run}' "
                    "GROUP BY example_id ORDER BY example_id")  # fmt: skip
    facts = sql(root, f"SELECT * FROM examples WHERE run_id = '{run}' ORDER BY example_id")
    assert ids["example_id"].to_list() == facts["example_id"].to_list()
    return [{"ids": i, **row} for i, row in zip(ids["ids"].to_list(), facts.iter_rows(named=True), strict=True)]


def eager_maps(model: torch.nn.Module, ids: list[int], encoder: bool = False) -> np.ndarray:
    """transformers' eager maps of one input, [layers, heads, n, n] in float64 (an encoder's single segment)."""
    given = torch.tensor([ids])
    extra = {"token_type_ids": torch.zeros_like(given)} if encoder else {}
    with torch.inference_mode():
        out = model(input_ids=given, output_attentions=True, **extra)
    return torch.stack([a[0] for a in out.attentions]).double().numpy()


def grid(frame: pl.DataFrame, column: str) -> np.ndarray:
    """An entry's per-head column as [layers, heads], in layer and head order, whatever the first number is."""
    heads = frame.sort("layer", "head")
    layers, per_layer = heads["layer"].unique().sort(), heads["head"].unique().sort()
    assert layers.to_list() == list(range(layers[0], layers[0] + len(layers)))
    assert per_layer.to_list() == list(range(per_layer[0], per_layer[0] + len(per_layer)))
    assert heads.height == len(layers) * len(per_layer)
    return heads[column].to_numpy().reshape(len(layers), len(per_layer))


def stored_profile(root: Path, run: str, example: int, n_layers: int, n_heads: int) -> dict[str, np.ndarray]:
    """attn_distance of one input, each column [layers, heads, buckets]."""
    frame = sql(root, f"SELECT * FROM attn_distance WHERE run_id = '{run}' AND example_id = {example}")
    n_buckets = int(frame["bucket"].max()) + 1
    assert frame.height == n_layers * n_heads * n_buckets  # every bucket of every head, once
    out = {}
    for column in ("mass", "distance"):
        values = np.full((n_layers, n_heads, n_buckets), np.nan)
        values[frame["layer"].to_numpy(), frame["head"].to_numpy(), frame["bucket"].to_numpy()] = frame[column]
        out[column] = values
    return out


@pytest.fixture(scope="module")
def needle_inputs(decoder_store) -> list[dict]:
    root, runs = decoder_store
    return inputs(root, runs["needle"])


@pytest.fixture(scope="module")
def decoded(needle_inputs, causal) -> list[dict]:
    """Per input of the needle probe: the released step-by-step greedy decoding of its stored prompt, as long as the
    answer (a random haystack's continuation: no stop token)."""
    out = []
    for row in needle_inputs:
        prompt = row["ids"][: row["generated_start"]]
        answer = prompt[row["needle_start"] : row["needle_end"]]
        generated, rows = greedy_decode(causal, prompt, len(answer), set())
        out.append({"prompt": prompt, "answer": answer, "generated": generated, "rows": rows})
    return out


@pytest.fixture(scope="module")
def decoder_maps(needle_inputs, causal) -> list[np.ndarray]:
    return [eager_maps(causal, row["ids"]) for row in needle_inputs]


@pytest.fixture(scope="module")
def encoder_maps(encoder_store, encoder) -> tuple[list[dict], list[np.ndarray]]:
    root, run = encoder_store
    rows = inputs(root, run)
    return rows, [eager_maps(encoder, row["ids"], encoder=True) for row in rows]


# ---------------------------------------------------------------------------------------------------------------
# retrieval heads
# ---------------------------------------------------------------------------------------------------------------


def test_needle_probe_facts(needle_inputs, decoded):
    """Each input is prompt + the model's greedy answer: the one-pass continuation the ingest stored is the released
    step-by-step decoding, token for token; the span is the answer's, inside the prompt; the recall is ROUGE-1's
    of the answer's ids by the generated ids."""
    assert len(needle_inputs) == 6
    assert sorted((r["context_length"], r["depth_percent"]) for r in needle_inputs) == sorted(
        (n, d) for n in (64, 128) for d in (0, 50, 100)
    )
    for row, ref in zip(needle_inputs, decoded, strict=True):
        where = f"input {row['example_id']}"
        assert row["n_tokens"] == len(row["ids"]) <= row["context_length"], where
        assert row["generated_start"] + row["n_generated"] == row["n_tokens"], where
        assert 0 <= row["needle_start"] < row["needle_end"] <= row["generated_start"], where
        assert row["n_generated"] == len(ref["answer"]), where  # as long as the answer, no stop
        assert row["ids"][row["generated_start"] :] == ref["generated"], where
        assert len(set(ref["answer"])) == len(ref["answer"]), where  # the needle's ids all different
        response = " ".join(map(str, ref["generated"]))
        want = rouge1_recall(" ".join(map(str, ref["answer"])), response)
        assert row["needle_recall"] == pytest.approx(want, abs=1e-9), where
    assert any(r["needle_recall"] > 50 for r in needle_inputs)  # else the entry is refused


def test_retrieval_heads_equal_the_released_score(decoder_store, needle_inputs, decoded):
    root, runs = decoder_store
    per_input = [
        retrieval_scores(ref["prompt"], ref["generated"], ref["rows"], row["needle_start"], row["needle_end"])
        for row, ref in zip(needle_inputs, decoded, strict=True)
    ]
    recalls = [row["needle_recall"] for row in needle_inputs]
    want = head_scores(per_input, recalls)
    frame = query(root, "retrieval heads", runs["needle"])
    assert frame["retrieval_score"].to_list() == sorted(frame["retrieval_score"].to_list(), reverse=True)
    assert set(frame["n_inputs"].to_list()) == {sum(r > 50 for r in recalls)}
    got = grid(frame, "retrieval_score")
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)
    assert want.max() > 0  # a score that can be told from none


def test_top_retrieval_head_is_a_second_layer_induction_head(decoder_store):
    root, runs = decoder_store
    retrieval = grid(query(root, "retrieval heads", runs["needle"]), "retrieval_score")
    induction = grid(query(root, "induction heads", runs["repeated"]), "score")
    assert retrieval.shape == induction.shape == (2, 4)
    layer, head = np.unravel_index(np.argmax(retrieval), retrieval.shape)
    top = retrieval[layer, head]
    assert layer == 1, retrieval  # the model's second layer
    assert top > 0
    assert (retrieval[0] <= top / 10).all(), retrieval
    best = induction.max()
    assert induction[layer, head] == best or induction[layer, head] >= best / 2, (induction, (layer, head))


# ---------------------------------------------------------------------------------------------------------------
# attention distance
# ---------------------------------------------------------------------------------------------------------------


def _check_profiles(root: Path, run: str, rows: list[dict], maps: list[np.ndarray]) -> None:
    """Per input, attn_distance's mass per bucket is the reference's profile of the dense maps over the input's rows
    (a share of its attention), and its distances sum to the mean attention distance."""
    for row, m in zip(rows, maps, strict=True):
        n_layers, n_heads, n, _ = m.shape
        assert n == row["n_tokens"]
        got = stored_profile(root, run, row["example_id"], n_layers, n_heads)
        want = distance_profile(m)
        assert got["mass"].shape == want.shape == (n_layers, n_heads, (n - 1).bit_length() + 1)
        where = f"input {row['example_id']}"
        np.testing.assert_allclose(got["mass"], want / n, rtol=1e-6, atol=1e-7, err_msg=where)
        np.testing.assert_allclose(got["distance"].sum(axis=-1), mean_distance(m), rtol=1e-6, atol=1e-6,
                                   err_msg=where)  # fmt: skip


def _sums_are_token_counts(root: Path, run: str) -> None:
    """Each input's head's masses, times its rows, sum to its rows (each row sums to 1) on a dense run."""
    frame = sql(root, f"SELECT d.example_id, d.layer, d.head, sum(d.mass::DOUBLE * e.n_tokens) AS mass, "
                      "any_value(e.n_tokens) AS n FROM attn_distance d JOIN examples e USING (run_id, example_id) "
                      f"WHERE d.run_id = '{run}' GROUP BY ALL")  # fmt: skip
    n_heads = sql(root, f"SELECT n_layers * n_heads AS k FROM runs WHERE run_id = '{run}'")["k"][0]
    n_inputs = sql(root, f"SELECT count(*) AS k FROM examples WHERE run_id = '{run}'")["k"][0]
    assert frame.height == n_heads * n_inputs
    np.testing.assert_allclose(frame["mass"].to_numpy(), frame["n"].to_numpy(), rtol=1e-6)


def test_masses_sum_to_the_tokens(encoder_store, decoder_store):
    _sums_are_token_counts(*encoder_store)
    root, runs = decoder_store
    _sums_are_token_counts(root, runs["needle"])


def test_encoder_profile_and_mean_distance(encoder_store, encoder_maps):
    root, run = encoder_store
    rows, maps = encoder_maps
    assert len(rows) == 12
    _check_profiles(root, run, rows, maps)
    want = np.mean([mean_distance(m) for m in maps], axis=0)
    got = grid(query(root, "attention distance", run), "mean_distance")
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


def test_decoder_profile_and_mean_distance(decoder_store, needle_inputs, decoder_maps):
    root, runs = decoder_store
    _check_profiles(root, runs["needle"], needle_inputs, decoder_maps)
    want = np.mean([mean_distance(m) for m in decoder_maps], axis=0)
    got = grid(query(root, "attention distance", runs["needle"]), "mean_distance")
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


def test_attention_distance_median_and_local(encoder_store, encoder_maps):
    """median_from/median_to: the bucket where the pooled mass passes half; local: the share within distance 1."""
    root, run = encoder_store
    _, maps = encoder_maps
    profiles = [distance_profile(m) for m in maps]
    width = max(p.shape[-1] for p in profiles)
    pooled = sum(np.pad(p, [(0, 0), (0, 0), (0, width - p.shape[-1])]) for p in profiles)
    below = np.cumsum(pooled, axis=-1)
    bucket = (below >= below[..., -1:] / 2).argmax(axis=-1)
    frame = query(root, "attention distance", run)
    np.testing.assert_array_equal(grid(frame, "median_to"), 2**bucket - 1)
    np.testing.assert_array_equal(grid(frame, "median_from"), np.where(bucket == 0, 0, 2 ** np.maximum(bucket - 1, 0)))
    np.testing.assert_allclose(grid(frame, "local"), pooled[..., :2].sum(-1) / pooled.sum(-1), rtol=1e-6)


# ---------------------------------------------------------------------------------------------------------------
# streaming heads
# ---------------------------------------------------------------------------------------------------------------


def test_a_window_as_long_as_the_inputs_keeps_everything(encoder_store, decoder_store, encoder_maps, needle_inputs):
    root, runs = decoder_store
    for at, run, longest in (
        (encoder_store[0], encoder_store[1], max(row["n_tokens"] for row in encoder_maps[0])),
        (root, runs["needle"], max(row["n_tokens"] for row in needle_inputs)),
    ):
        window = 1 << (longest - 1).bit_length()
        assert window >= longest
        for sink in (0, 4):
            frame = query(at, "streaming heads", run, sink=sink, window_size=window)
            np.testing.assert_allclose(frame["kept_share"].to_numpy(), 1.0, rtol=0, atol=1e-6, err_msg=run)
            assert frame["streaming"].all()
        if window > 1:  # one bucket less: some head keeps less
            frame = query(at, "streaming heads", run, sink=0, window_size=window // 2)
            assert frame["kept_share"].min() < 1 - 1e-6


@pytest.mark.parametrize("sink, window", [(4, 8), (1, 4), (0, 16), (4, 2)])
def test_streaming_share_is_the_reference(decoder_store, decoder_maps, encoder_store, encoder_maps, sink, window):
    root, runs = decoder_store
    for at, run, maps in ((root, runs["needle"], decoder_maps), (*encoder_store, encoder_maps[1])):
        want = np.mean([streaming_share(m, sink, window) for m in maps], axis=0)
        frame = query(at, "streaming heads", run, sink=sink, window_size=window)
        np.testing.assert_allclose(grid(frame, "kept_share"), want, rtol=0, atol=1e-6, err_msg=f"{run} {sink} {window}")
        np.testing.assert_array_equal(grid(frame, "streaming"), want >= 0.95)


@pytest.mark.parametrize("params, word", [({"window_size": 3}, "window_size"), ({"sink": 2}, "sink"),
                                          ({"window_size": 0}, "window_size")])  # fmt: skip
def test_streaming_heads_refuses_bad_parameters(decoder_store, params, word):
    root, runs = decoder_store
    with pytest.raises(AtlasError) as refused:
        query(root, "streaming heads", runs["needle"], **params)
    message = str(refused.value)
    assert "\n" not in message and word in message, message


def test_retrieval_heads_refuses_a_run_without_a_needle(decoder_store):
    root, runs = decoder_store
    with pytest.raises(AtlasError) as refused:
        query(root, "retrieval heads", runs["repeated"])
    assert "\n" not in str(refused.value) and "needle" in str(refused.value)


# ---------------------------------------------------------------------------------------------------------------
# a long input
# ---------------------------------------------------------------------------------------------------------------


def test_a_long_input_profile_is_a_few_rows(long_store):
    root, result = long_store
    n = 2 * 2048 + 1
    assert result.n_tokens == n
    assert result.n_no_rollout == 1  # read in blocks of rows
    run = result.run_id
    assert sql(root, f"SELECT n_tokens FROM examples WHERE run_id = '{run}'")["n_tokens"].to_list() == [n]
    shape = sql(root, f"SELECT n_layers, n_heads FROM runs WHERE run_id = '{run}'").row(0)
    assert shape == (2, 4)
    frame = sql(root, "SELECT layer, head, count(*) AS n_rows, count(DISTINCT bucket) AS n_buckets, min(bucket) AS lo, "
                      "max(bucket) AS hi, sum(mass::DOUBLE) AS mass FROM attn_distance "
                      f"WHERE run_id = '{run}' GROUP BY layer, head ORDER BY layer, head")  # fmt: skip
    buckets = (n - 1).bit_length() + 1
    assert buckets == 14
    assert frame.height == 2 * 4
    assert frame["n_rows"].to_list() == [buckets] * 8 and frame["n_buckets"].to_list() == [buckets] * 8
    assert frame["lo"].to_list() == [0] * 8 and frame["hi"].to_list() == [buckets - 1] * 8
    sparse = buckets * 2**-12  # a sparse run: each bucket's share to 2^-11
    np.testing.assert_allclose(frame["mass"].to_numpy(), 1.0, rtol=0, atol=sparse)
    kept = query(root, "streaming heads", run, window_size=1 << (n - 1).bit_length())
    np.testing.assert_allclose(kept["kept_share"].to_numpy(), 1.0, rtol=0, atol=sparse)


# ---------------------------------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------------------------------


def _refused(root: Path, corpus: Path | None, model: str | None, **options: object) -> str:
    with pytest.raises(AtlasError) as refused:
        atlas.api.ingest(corpus, model, root, progress=False, **options)
    message = str(refused.value)
    assert "\n" not in message, message
    assert not root.exists(), list(root.rglob("*"))  # no store left behind
    return message


def test_needle_refuses_an_encoder(tmp_path):
    message = _refused(tmp_path / "store", None, None, format="needle", haystack="random", lengths=[64])
    assert "encoder" in message


def test_needle_refuses_missing_lengths_and_a_corpus(tmp_path):
    assert "lengths" in _refused(tmp_path / "a", None, str(INDUCTION), format="needle", haystack="random")
    message = _refused(tmp_path / "b", EWT_SAMPLE, str(INDUCTION), format="needle", haystack="random", lengths=[64])
    assert "corpus" in message


def test_cli_refuses_bad_lengths(tmp_path):
    store = tmp_path / "store"
    args = ["ingest", "--format", "needle", "--model", str(INDUCTION), "--haystack", "random", "--lengths", "64,x",
            "--store", str(store), "--quiet"]  # fmt: skip
    result = CliRunner().invoke(cli, args)
    assert result.exit_code != 0
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "--lengths" in lines[0], result.output
    assert "Traceback" not in result.output
    assert not store.exists()


# ---------------------------------------------------------------------------------------------------------------
# the catalogue's numbering (docs/glossary.md, docs/python-api.md, `atlas sql --help`: answers show layers and heads
# 1-based, as the papers write them, the store holds them 0-based)
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NEW_ENTRIES)
def test_new_entries_show_layers_and_heads_from_1(decoder_store, name):
    root, runs = decoder_store
    frame = query(root, name, runs["needle"])
    induction = query(root, "induction heads", runs["repeated"])
    assert (induction["layer"].min(), induction["head"].min()) == (1, 1)  # as every older entry shows them
    assert (frame["layer"].min(), frame["head"].min()) == (1, 1), frame.select("layer", "head").unique()


# ---------------------------------------------------------------------------------------------------------------
# a store written before the profile and the probe
# ---------------------------------------------------------------------------------------------------------------


def _before_long_context(root: Path, run_id: str) -> None:
    """Rewrite a run as the atlas wrote it before: no attn_distance table, no needle columns in examples, no
    runs.n_kv_heads, views of another schema."""
    dropped = {
        "examples": ["context_length", "depth_percent", "needle_start", "needle_end", "generated_start",
                     "n_generated", "needle_recall"],
        "runs": ["n_kv_heads"],
    }  # fmt: skip
    rewrite_as_before(root, run_id, ("attn_distance",), dropped)


def test_a_store_written_before_them_answers_refuses_them_exports_and_compares(tmp_path, model):
    root = tmp_path / "store"
    corpus = cut_conllu(EWT_SAMPLE, 6, tmp_path / "ewt6.conllu")
    _, old = make_store(root, corpus, model)
    before = {name: atlas.open(root).query(name) for name in ("special tokens", "entropy")}
    _before_long_context(root, old)
    st = atlas.open(root)
    for name, answer in before.items():
        assert_frame_equal(st.query(name), answer, check_exact=False, rel_tol=1e-12, abs_tol=1e-12)
    for name in ("attention distance", "streaming heads"):
        with pytest.raises(AtlasError, match=f"^run {old} holds no attention-distance profile") as refused:
            st.query(name, run=old)
        assert "\n" not in str(refused.value)
    with pytest.raises(AtlasError, match=f"^run {old} is no needle probe"):
        st.query("retrieval heads", run=old)
    _, new = make_store(root, corpus, model, kept_mass=None)
    st = atlas.open(root)
    assert st.query("attention distance", run=new).height == 6 * 12
    compared = st.query("special tokens", runs=[old, new])
    assert compared.height == before["special tokens"].height
    counts = st.export(tmp_path / "export", run=old, progress=False)
    assert counts["attn_distance"] == 0 and counts["attn_rows"] > 0
