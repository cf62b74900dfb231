"""The API's operations on task models (``atlas finetune``, ``ablate``, ``importance``, ``grads``).

Each fine-tunes, ablates or differentiates a model on a GLUE task (or, for ``grads``, a CoNLL-U corpus)
and records its results in a store (``store``, else $ATLAS_STORE, else ./atlas-store), created if need be;
the catalogue's entries 'head ablation', 'layer ablation', 'head importance', 'pruning curve', 'glue
baselines' and 'gradient importance' read them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from atlas import checks
from atlas.api import store_at, warn_notes
from atlas.errors import AtlasError, arg
from atlas.store import Store

if TYPE_CHECKING:
    from atlas.tasks.classifier import TaskModel

ABLATION_METHODS = ("uniform", "mask")


@dataclass(frozen=True)
class FineTuned:
    """What ``finetune`` did."""

    run_id: str  # the task model's results in the store
    out: Path  # the checkpoint folder
    task: str
    dev_metrics: dict[str, float]
    n_train: int  # examples trained on (0 when not fine-tuned)
    notes: tuple[str, ...] = ()  # also issued as AtlasNote warnings


@dataclass(frozen=True)
class Importance:
    """What ``importance`` did: the run, the pruning curve (share pruned, main metric) and the examples used."""

    run_id: str
    curve: pl.DataFrame
    n_train: int
    n_dev: int
    notes: tuple[str, ...] = ()  # also issued as AtlasNote warnings


@dataclass(frozen=True)
class Gradients:
    """What ``grads`` did: the run, the loss differentiated and its mean |gradient| per layer and target."""

    run_id: str
    loss: str  # 'mlm' or 'task:<TASK>'
    described: str  # the loss in words, and whether it is Clark et al.'s
    frame: pl.DataFrame  # layer (1-based), then one column per target (sep, dot_comma, other)
    notes: tuple[str, ...] = ()  # also issued as AtlasNote warnings


def _untrained(tm: TaskModel, what: str) -> tuple[str, ...]:
    """The note a result of ``tm`` (``what``) gets where its classification head is untrained."""
    from atlas.tasks.classifier import untrained_head, untrained_head_note

    why = untrained_head(tm)
    return () if why is None else (untrained_head_note(why, what),)


def _target(store: str | os.PathLike[str] | None) -> Store:
    """The store results go to, refused before any work where its folder holds another program's database."""
    target = store_at(store)
    target.check_database()
    return target


def _dev(spec, data: str | os.PathLike[str], limit: int | None):
    from atlas.ingestion.readers.glue_tsv import load_split

    checks.at_least("dev_limit", limit, 1)
    dev = load_split(spec, data, "dev").head(limit)
    if spec.labels is None and len(dev) < 2:  # a correlation of one pair is undefined
        raise AtlasError(f"{arg('dev_limit', limit)}: {spec.name}'s correlations need 2 or more dev examples")
    return dev


@checks.typed
def finetune(
    task: str,
    data: str | os.PathLike[str],
    out: str | os.PathLike[str],
    model: str | os.PathLike[str] | None = None,
    *,
    random_init: bool = False,
    epochs: int = 3,
    train_limit: int | None = None,
    learning_rate: float = 2e-5,
    warmup: float = 0.1,
    batch_size: int = 32,
    seed: int = 0,
    dev_limit: int | None = None,
    progress: bool = True,
    store: str | os.PathLike[str] | None = None,
) -> FineTuned:
    """Fine-tune ``model`` (default: the embedded all-MiniLM-L6-v2) on a GLUE task (``data``: a folder with
    its train.tsv and dev.tsv, or a hub data set), save the checkpoint to ``out`` and record its dev
    metrics in the store. ``epochs=0`` saves without training; ``train_limit``: the first N training
    examples after a seeded shuffle; ``dev_limit``: the first N dev examples."""
    from atlas.ingestion.readers.glue_tsv import load_split, task_spec
    from atlas.tasks.classifier import load_task_model
    from atlas.tasks.finetune import TrainSettings, check_out, one_update_note, saved_as_loaded
    from atlas.tasks.finetune import finetune as train
    from atlas.tasks.record import write_task_model

    checks.at_least("epochs", epochs, 0)
    checks.at_least("train_limit", train_limit, 1)
    checks.at_least("batch_size", batch_size, 1)
    checks.step_size("learning_rate", learning_rate)
    checks.seed("seed", seed)
    if not 0 <= warmup < 1:
        raise AtlasError(f"{arg('warmup', warmup)}: expected a share of the steps, at least 0 and below 1")
    spec = task_spec(task)
    checks.named("out", out, "name the checkpoint folder")
    out = Path(out)
    check_out(out)
    target = _target(store)
    train_set, dev_set = load_split(spec, data, "train"), _dev(spec, data, dev_limit)
    tm = load_task_model(model, spec, random_init=random_init, seed=seed)
    settings = TrainSettings(epochs, train_limit, learning_rate, warmup, batch_size, seed=seed)
    info = train(tm, train_set, dev_set, settings, out, progress=progress)
    run_id = write_task_model(target, load_task_model(str(out), spec), info, out)
    notes = (one_update_note(),) if saved_as_loaded(info["n_train"], settings) else ()
    warn_notes(notes)
    return FineTuned(run_id, out, spec.name, info["dev_metrics"], info["n_train"], notes)


@checks.typed
def ablate(
    model: str | os.PathLike[str],
    task: str,
    data: str | os.PathLike[str],
    *,
    method: str = "uniform",
    heads: bool = True,
    layers: bool = True,
    reuse: bool = True,
    dev_limit: int | None = None,
    progress: bool = True,
    store: str | os.PathLike[str] | None = None,
) -> pl.DataFrame:
    """Disable every head and every layer of ``model`` (a checkpoint of ``finetune``) in turn, by ``method``
    ('uniform' attention or 'mask'ed output), score the dev set, and store the scores; returns one row:
    the run, the baseline, the best score and what was disabled for it (layer and head 1-based).
    ``reuse=False`` recomputes every layer for every ablation (for comparison); ``progress``: a progress bar
    over the evaluations."""
    from atlas.ingestion.readers.glue_tsv import task_spec
    from atlas.tasks.ablate import sweep
    from atlas.tasks.classifier import encode, load_task_model
    from atlas.tasks.record import write_ablations

    if method not in ABLATION_METHODS:
        raise AtlasError(f"{arg('method', repr(method))}: expected one of {', '.join(ABLATION_METHODS)}")
    spec = task_spec(task)
    target = _target(store)
    dev = _dev(spec, data, dev_limit)
    tm = load_task_model(model, spec)
    notes = _untrained(tm, "the scores are")
    baseline, rows = sweep(tm, encode(tm, dev), method, heads=heads, layers=layers, reuse=reuse, progress=progress)
    run_id = write_ablations(target, tm, method, method, rows, baseline, len(dev))
    main = spec.metrics[0]
    best = max(rows, key=lambda r: r["metrics"][main])
    head = None if best["head"] is None else best["head"] + 1
    summary = {"baseline": baseline[main], "best": best["metrics"][main], "kind": best["kind"]}
    warn_notes(notes)
    return pl.DataFrame([{"run_id": run_id, **summary, "layer": best["layer"] + 1, "head": head}])


@checks.typed
def importance(
    model: str | os.PathLike[str],
    task: str,
    data: str | os.PathLike[str],
    *,
    train_limit: int | None = None,
    seed: int = 0,
    dev_limit: int | None = None,
    progress: bool = True,
    store: str | os.PathLike[str] | None = None,
) -> Importance:
    """Michel et al.'s head importance of ``model`` (a checkpoint of ``finetune``) from the training set
    (``train_limit``: the first N examples after a shuffle seeded by ``seed``), then the pruning curve and
    "all heads but one" on the dev set; the scores and results are stored together. ``progress``: progress
    bars over the training batches and the evaluations."""
    from atlas.ingestion.readers.glue_tsv import load_split, task_spec
    from atlas.tasks.classifier import encode, load_task_model
    from atlas.tasks.finetune import subset
    from atlas.tasks.importance import head_importance, normalise, pruning_and_single_heads
    from atlas.tasks.record import write_ablations, write_importance

    checks.at_least("train_limit", train_limit, 1)
    checks.seed("seed", seed)
    spec = task_spec(task)
    target = _target(store)
    train_set, dev = subset(load_split(spec, data, "train"), train_limit, seed), _dev(spec, data, dev_limit)
    tm = load_task_model(model, spec)
    notes = _untrained(tm, "the importance scores and the pruning curve are")
    raw, n_train = head_importance(tm, encode(tm, train_set), progress)
    baseline, rows = pruning_and_single_heads(tm, encode(tm, dev), normalise(raw), progress)
    with target.transaction():  # the importance scores and the pruning results appear together
        write_importance(target, tm, raw, normalise(raw), n_train)
        run_id = write_ablations(target, tm, "importance", "mask", rows, baseline, len(dev))
    main = spec.metrics[0]
    curve = [{"pruned_share": r["pruned_share"], main: r["metrics"][main]} for r in rows if r["kind"] == "pruned"]
    warn_notes(notes)
    return Importance(run_id, pl.DataFrame(curve), n_train, len(dev), notes)


@checks.typed
def grads(
    model: str | os.PathLike[str] | None = None,
    *,
    corpus: str | os.PathLike[str] | None = None,
    task: str | None = None,
    data: str | os.PathLike[str] | None = None,
    limit: int = 500,
    seed: int = 0,
    progress: bool = True,
    store: str | os.PathLike[str] | None = None,
) -> Gradients:
    """Gradient importance of attention to [SEP], to '.'/',' and to other tokens, per layer, stored: of the
    masked-LM loss over a CoNLL-U ``corpus`` (Clark et al.'s; ``seed`` seeds the masking), or of a fine-tuned
    model's loss on its ``task``'s dev set in ``data``; ``limit`` sentences or examples; ``progress``: a
    progress bar over the batches."""
    from atlas.tasks.grads import TARGETS, loss_label, mlm_gradients, task_gradients, write

    if (corpus is None) == (task is None) or (task is None) != (data is None):
        raise AtlasError(
            f"grads: give {arg('corpus')} (the masked-LM loss) or {arg('task')} and {arg('data')} (a task loss)"
        )
    checks.at_least("limit", limit, 1)
    checks.seed("seed", seed)
    checks.named("corpus", corpus)
    target = _target(store)
    notes: tuple[str, ...] = ()
    if corpus is not None:
        run_id, loss, means, counts = mlm_gradients(model, Path(corpus), limit, seed, progress)
    else:
        from atlas.ingestion.readers.glue_tsv import task_spec
        from atlas.tasks.classifier import load_task_model

        tm = load_task_model(model, task_spec(task))
        notes = _untrained(tm, "the task loss is")
        run_id, loss, means, counts = task_gradients(tm, data, limit, progress)
    write(target, run_id, loss, means, counts)
    rows = [{"layer": layer + 1, **dict(zip(TARGETS, means[layer], strict=True))} for layer in range(len(means))]
    warn_notes(notes)
    return Gradients(run_id, loss, loss_label(loss), pl.DataFrame(rows), notes)
