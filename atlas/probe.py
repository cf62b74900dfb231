"""Attention probes (Clark et al. 2019, Section 5): train on one run, score UAS on another, store results.

Both runs must come from the same model (the probe reads attention maps of that model). Training as the
released ``run_training`` (Syntax_Analysis.ipynb, cell 14): one sentence per step in the run's order,
the loss summed over the sentence's words (softmax cross-entropy over each word's candidate heads,
every word trained on, punctuation included), TensorFlow 1's Adam at learning rate 0.002, one epoch;
the initial weights are seeded. UAS counts every word but punctuation, each word's head the argmax over its
candidates (the word itself included; no tree decoding). Results go into ``probes`` (on the eval run)
and the attn-only probe's per-head weights into ``head_scores`` (on the train run).

``Settings.glove_shift`` trains the GloVe probes on the released code's shifted vectors (see
``probe_data``); their rows are stored apart, with the shift named in the ``glove`` column.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from atlas.errors import AtlasError, arg
from atlas.probe_data import GLOVE_NAME, Batch, Glove, Sentence, batches, load_sentences, padded
from atlas.probe_models import AttnGlove, AttnOnly, DistancesGlove, branching
from atlas.recompute import run_model
from atlas.store import Store

ANALYSIS = "attention probe"
SHIFTED = " shifted one word (released code)"


@dataclass
class Settings:
    epochs: int = 1
    seed: int = 0  # of the initial weights
    learning_rate: float = 0.002
    glove_shift: bool = False  # only the GloVe probes, on the released code's shifted vectors
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


def score(predict, sentences: list[Sentence], shift: bool) -> Score:
    """UAS of ``predict(batch) -> [B, n]`` candidate indexes over the scored words."""
    correct = total = 0
    with torch.no_grad():
        for batch in batches(sentences, shift):
            hit = (predict(batch) == batch.heads) & batch.scored
            correct += int(hit.sum())
            total += int(batch.scored.sum())
    return Score(correct, total)


class TfAdam(torch.optim.Optimizer):
    """TensorFlow 1's ``AdamOptimizer`` (beta 0.9 and 0.999, epsilon 1e-8), the released probe's:
    p -= lr_t m / (sqrt(v) + epsilon) with lr_t = lr sqrt(1 - beta2^t) / (1 - beta1^t). (PyTorch's Adam
    adds epsilon after the bias correction, which moves parameters of tiny gradients differently.)"""

    def __init__(self, params, lr: float, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps})

    @torch.no_grad()
    def step(self, closure=None) -> None:
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self.state[param]
                if not state:
                    state.update(t=0, m=torch.zeros_like(param), v=torch.zeros_like(param))
                state["t"] += 1
                state["m"].mul_(beta1).add_(param.grad, alpha=1 - beta1)
                state["v"].mul_(beta2).addcmul_(param.grad, param.grad, value=1 - beta2)
                lr_t = group["lr"] * math.sqrt(1 - beta2 ** state["t"]) / (1 - beta1 ** state["t"])
                param.addcdiv_(state["m"], state["v"].sqrt().add_(group["eps"]), value=-lr_t)


def train(model: nn.Module, sentences: list[Sentence], settings: Settings, name: str, progress: bool) -> None:
    """The released training loop: each sentence in order is one Adam step on its summed loss."""
    optimiser = TfAdam(model.parameters(), lr=settings.learning_rate)
    steps = tqdm(total=settings.epochs * len(sentences), desc=f"train {name}", unit="sentence", disable=not progress)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a one-sentence step is too small to gain from threads, and loses much to them
    try:
        for _ in range(settings.epochs):
            for sentence in sentences:
                one = padded([sentence], settings.glove_shift)
                logits = model(one)[one.words]  # [words, n + 1]
                loss = nn.functional.cross_entropy(logits, one.heads[one.words], reduction="sum")
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
                steps.update()
    finally:
        torch.set_num_threads(threads)
        steps.close()


def _argmax(model: nn.Module):
    return lambda batch: _masked(model(batch), batch).argmax(dim=-1)


def run(
    store: Store, train_run: str, eval_run: str, settings: Settings, progress: bool = True, model: str | None = None
) -> list[dict]:
    """Train every probe on ``train_run``, score them and the baselines on ``eval_run``, store the results
    (``model``: see ``run_model``)."""
    lm = run_model(store, train_run, "train_run", model)
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
        raise AtlasError(
            f"probe: run '{packed[0][0]}' packs several sentences per input; ingest with {arg('pack', repr('none'))}"
        )
    given = arg("eval_run", repr(eval_run))
    if eval_run not in hashes:
        raise AtlasError(f"{given}: no such run in {store.root} (see 'atlas runs')")
    if hashes[eval_run] != hashes[train_run]:
        raise AtlasError(f"{given}: made with another model than {arg('train_run', repr(train_run))}")
    glove = Glove()
    train_sents = load_sentences(store, train_run, lm, glove, settings.train_limit, progress, "train maps")
    eval_sents = load_sentences(store, eval_run, lm, glove, settings.eval_limit, progress, "eval maps")
    channels, dim = train_sents[0].pair.shape[-1], train_sents[0].glove.shape[-1]

    results = []

    def add(name: str, predict, epochs: int, uses_glove: bool) -> None:
        on_eval = score(predict, eval_sents, settings.glove_shift)
        on_train = score(predict, train_sents, settings.glove_shift)
        results.append(
            {
                "probe": name,
                "uas": on_eval.uas,
                "n_correct": on_eval.correct,
                "n_words": on_eval.total,
                "train_uas": on_train.uas,
                "epochs": epochs,
                "glove": (GLOVE_NAME + (SHIFTED if settings.glove_shift else "")) if uses_glove else None,
            }
        )

    if not settings.glove_shift:
        for direction in ("right", "left"):
            add(f"{direction}-branching", lambda one, d=direction: branching(one, d), 0, False)
    factories = {
        "distances+glove": (lambda: DistancesGlove(dim), True),
        "attn-only": (lambda: AttnOnly(channels), False),
        "attn+glove": (lambda: AttnGlove(channels, dim), True),
    }
    trained = {}
    for name, (factory, uses_glove) in factories.items():
        if settings.glove_shift and not uses_glove:
            continue
        torch.manual_seed(settings.seed)
        trained[name] = model = factory()
        train(model, train_sents, settings, name, progress)
        add(name, _argmax(model), settings.epochs, uses_glove)
    _write(store, train_run, eval_run, results, len(train_sents), settings)
    if not settings.glove_shift:
        attn_only = trained["attn-only"]
        assert isinstance(attn_only, AttnOnly)
        _write_weights(store, train_run, attn_only, lm.n_layers, lm.n_heads)
    return results


def _write(store: Store, train_run: str, eval_run: str, results: list[dict], n_train: int, settings: Settings) -> None:
    columns = {key: [r[key] for r in results] for key in results[0]}
    columns |= {"run_id": eval_run, "train_run_id": train_run, "n_train_sentences": n_train, "seed": settings.seed}
    name = f"{train_run}__glove_shift" if settings.glove_shift else train_run
    store.put(eval_run, "probes", name, columns, len(results))


def _write_weights(store: Store, train_run: str, attn_only: AttnOnly, n_layers: int, n_heads: int) -> None:
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
