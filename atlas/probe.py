"""Attention probes (Clark et al. 2019, Section 5): train on one run, score UAS on another, store results.

Both runs must come from the same model (the probe reads attention maps of that model). Training is
seeded: Adam (learning rate 0.01; the authors' 0.002 was for batches of one sentence), softmax
cross-entropy over each word's candidate heads, every word trained on; UAS counts every word but
punctuation, each word's head picked independently (no tree decoding), as in the paper. Results go
into ``probes`` (on the eval run) and the attn-only probe's per-head weights into ``head_scores`` (on
the train run).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from atlas.errors import AtlasError
from atlas.probe_data import GLOVE_NAME, Batch, Glove, batches, load_sentences
from atlas.probe_models import AttnGlove, AttnOnly, DistancesGlove, branching
from atlas.recompute import run_model
from atlas.store import Store

ANALYSIS = "attention probe"
LEARNING_RATE = 0.01


@dataclass
class Settings:
    epochs: int = 5
    seed: int = 0
    train_limit: int | None = None  # first inputs of the train run (None: all)
    eval_limit: int | None = None


@dataclass
class Score:
    correct: int
    total: int

    @property
    def uas(self) -> float:
        return 100.0 * self.correct / max(self.total, 1)


def _masked(scores: torch.Tensor, batch: Batch) -> torch.Tensor:
    return scores.masked_fill(~batch.allowed, float("-inf"))


def score(predict, data: list[Batch]) -> Score:
    """UAS of ``predict(batch) -> [B, n]`` candidate indexes over the scored words."""
    correct = total = 0
    with torch.no_grad():
        for batch in data:
            hit = (predict(batch) == batch.heads) & batch.scored
            correct += int(hit.sum())
            total += int(batch.scored.sum())
    return Score(correct, total)


def train(model: nn.Module, data: list[Batch], settings: Settings, name: str, progress: bool) -> None:
    order = random.Random(settings.seed)
    optimiser = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    steps = tqdm(total=settings.epochs * len(data), desc=f"train {name}", unit="batch", disable=not progress)
    for _ in range(settings.epochs):
        for batch in order.sample(data, len(data)):
            logits = _masked(model(batch), batch)[batch.words]  # [words, n + 1]
            loss = nn.functional.cross_entropy(logits, batch.heads[batch.words])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            steps.update()
    steps.close()


def _argmax(model: nn.Module):
    return lambda batch: _masked(model(batch), batch).argmax(dim=-1)


def run(store: Store, train_run: str, eval_run: str, settings: Settings, progress: bool = True) -> list[dict]:
    """Train every probe on ``train_run``, score them and the baselines on ``eval_run``, store the results."""
    lm = run_model(store, train_run, "--train")
    con = store.connect()
    hashes = dict(
        con.execute("SELECT run_id, model_hash FROM runs WHERE run_id IN (?, ?)", [train_run, eval_run]).fetchall()
    )
    con.close()
    con = store.connect()
    packed = con.execute(
        "SELECT run_id FROM runs WHERE run_id IN (?, ?) AND pack <> 'none'", [train_run, eval_run]
    ).fetchall()
    con.close()
    if packed:
        raise AtlasError(f"probe: run '{packed[0][0]}' packs several sentences per input; ingest with --pack none")
    if eval_run not in hashes:
        raise AtlasError(f"--eval '{eval_run}': no such run in {store.root} (see 'atlas runs')")
    if hashes[eval_run] != hashes[train_run]:
        raise AtlasError(f"--eval '{eval_run}': made with another model than --train '{train_run}'")
    glove = Glove()
    train_sents = load_sentences(store, train_run, lm, glove, settings.train_limit, progress, "train maps")
    eval_sents = load_sentences(store, eval_run, lm, glove, settings.eval_limit, progress, "eval maps")
    train_data, eval_data = batches(train_sents), batches(eval_sents)
    channels, dim = train_sents[0].pair.shape[-1], train_sents[0].glove.shape[-1]

    results = []

    def add(name: str, predict, epochs: int, uses_glove: bool) -> None:
        on_eval, on_train = score(predict, eval_data), score(predict, train_data)
        results.append(
            {
                "probe": name,
                "uas": on_eval.uas,
                "n_correct": on_eval.correct,
                "n_words": on_eval.total,
                "train_uas": on_train.uas,
                "epochs": epochs,
                "glove": GLOVE_NAME if uses_glove else None,
            }
        )

    for direction in ("right", "left"):
        add(f"{direction}-branching", lambda batch, d=direction: branching(batch, d), 0, False)
    factories = {
        "distances+glove": (lambda: DistancesGlove(dim), True),
        "attn-only": (lambda: AttnOnly(channels), False),
        "attn+glove": (lambda: AttnGlove(channels, dim), True),
    }
    trained = {}
    for name, (factory, uses_glove) in factories.items():
        torch.manual_seed(settings.seed)
        trained[name] = model = factory()
        train(model, train_data, settings, name, progress)
        add(name, _argmax(model), settings.epochs, uses_glove)
    attn_only = trained["attn-only"]
    assert isinstance(attn_only, AttnOnly)
    _write(store, train_run, eval_run, results, len(train_sents), settings, attn_only, lm.n_layers, lm.n_heads)
    return results


def _write(
    store: Store,
    train_run: str,
    eval_run: str,
    results: list[dict],
    n_train: int,
    settings: Settings,
    attn_only: AttnOnly,
    n_layers: int,
    n_heads: int,
) -> None:
    columns = {key: [r[key] for r in results] for key in results[0]}
    columns |= {"run_id": eval_run, "train_run_id": train_run, "n_train_sentences": n_train, "seed": settings.seed}
    store.put(eval_run, "probes", train_run, columns, len(results))

    k = n_layers * n_heads
    weight = attn_only.weight.detach().double().numpy()
    mix = attn_only.root_mix.detach().double().numpy()
    metrics = {
        "weight_dep_to_head": weight[:k],  # w_k: attention from the dependent to the candidate
        "weight_head_to_dep": weight[k:],  # u_k: attention from the candidate to the dependent
        "root_cls_dep_to_head": weight[:k] * mix[0],  # ROOT: attention between the word and [CLS]
        "root_cls_head_to_dep": weight[k:] * mix[0],
        "root_sep_dep_to_head": weight[:k] * mix[1],  # ROOT: attention between the word and [SEP]
        "root_sep_head_to_dep": weight[k:] * mix[1],
    }
    heads = np.arange(k)
    scores = {
        "run_id": train_run,
        "analysis": ANALYSIS,
        "layer": np.tile(heads // n_heads, len(metrics)),
        "head": np.tile(heads % n_heads, len(metrics)),
        "metric": np.repeat(list(metrics), k),
        "value": np.concatenate(list(metrics.values())),
    }
    store.put(train_run, "head_scores", "probe", scores, len(metrics) * k)
