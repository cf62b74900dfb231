"""``atlas finetune``, ``ablate``, ``importance`` and ``grads``: task models and their ablation scores. Each command
parses its options, makes one call of the API (``atlas.api_tasks``) and prints."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import click

from atlas import api_tasks
from atlas.api import AtlasNote
from atlas.cli_options import FilePath, format_option, quiet_option, store_option
from atlas.errors import note_cli_text
from atlas.output import emit

Done = TypeVar("Done")


def _noted(call: Callable[..., Done], *args: object, **kwargs: object) -> Done:
    """``call``'s result, its notes (the API's ``AtlasNote`` warnings) said once on stderr in the command line's
    words; other warnings go on as they came."""
    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", AtlasNote)
            return call(*args, **kwargs)
    finally:  # said also where the call fails, after the recording ends (a warning passed on is shown)
        for said in caught:
            if isinstance(said.message, AtlasNote):
                click.echo(note_cli_text(said.message.note), err=True)
            else:
                warnings.warn_explicit(said.message, said.category, said.filename, said.lineno, source=said.source)


task_option = click.option("--task", required=True, help="SST-2, MRPC, RTE, STS-B, QQP, QNLI or MNLI.")
data_option = click.option(
    "--data", required=True, help="Folder with the task's GLUE train.tsv and dev.tsv, or a hub data set (e.g. glue)."
)
limit_option = click.option(
    "--dev-limit", type=click.IntRange(min=1), default=None, help="Only the first N dev examples."
)


@click.command()
@task_option
@data_option
@click.option("--model", default=None, help="Encoder: HF id or local path (default: embedded all-MiniLM-L6-v2).")
@click.option("--random-init", is_flag=True, help="Fresh random encoder weights from the config (seeded).")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Checkpoint folder.")
@click.option("--epochs", default=3, show_default=True, type=click.IntRange(min=0), help="0: save without training.")
@click.option(
    "--train-limit",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    help="Train on the first N examples after a seeded shuffle (0: the whole training set).",
)
@click.option("--learning-rate", default=2e-5, show_default=True, type=float)
@click.option("--warmup", default=0.1, show_default=True, type=click.FloatRange(0, 1, max_open=True))
@click.option("--batch-size", default=32, show_default=True, type=click.IntRange(min=1))
@click.option("--seed", default=0, show_default=True)
@limit_option
@quiet_option
@store_option
def finetune(
    task: str,
    data: str,
    model: str | None,
    random_init: bool,
    out: str,
    epochs: int,
    train_limit: int,
    learning_rate: float,
    warmup: float,
    batch_size: int,
    seed: int,
    dev_limit: int | None,
    quiet: bool,
    store_path: str | None,
) -> None:
    """Fine-tune an encoder on a GLUE task (CPU), save it, and record its dev metrics in the store."""
    done = _noted(
        api_tasks.finetune,
        task,
        data,
        out,
        model,
        random_init=random_init,
        epochs=epochs,
        train_limit=train_limit or None,
        learning_rate=learning_rate,
        warmup=warmup,
        batch_size=batch_size,
        seed=seed,
        dev_limit=dev_limit,
        progress=not quiet,
        store=store_path,
    )
    metrics = ", ".join(f"{k} {v:.2f}" for k, v in done.dev_metrics.items())
    click.echo(f"{done.task}: dev {metrics} ({done.n_train} training examples) -> {done.out}; run {done.run_id}")


@click.command()
@click.option("--model", required=True, help="A checkpoint of 'atlas finetune' (or any encoder: a fresh head).")
@task_option
@data_option
@click.option("--method", type=click.Choice(["uniform", "mask"]), default="uniform", show_default=True)
@click.option("--heads/--no-heads", default=True, show_default=True, help="Disable each head alone.")
@click.option("--layers/--no-layers", default=True, show_default=True, help="Disable each whole layer.")
@click.option("--no-reuse", is_flag=True, help="Recompute every layer for every ablation (for comparison).")
@limit_option
@quiet_option
@store_option
@format_option
def ablate(
    model: str,
    task: str,
    data: str,
    method: str,
    heads: bool,
    layers: bool,
    no_reuse: bool,
    dev_limit: int | None,
    quiet: bool,
    store_path: str | None,
    fmt: str,
) -> None:
    """Disable every head and every layer in turn (uniform attention or masked output); store the scores."""
    summary = _noted(
        api_tasks.ablate,
        model,
        task,
        data,
        method=method,
        heads=heads,
        layers=layers,
        reuse=not no_reuse,
        dev_limit=dev_limit,
        progress=not quiet,
        store=store_path,
    )
    emit(summary, fmt, None)


@click.command()
@click.option("--model", required=True, help="A checkpoint of 'atlas finetune'.")
@task_option
@data_option
@click.option(
    "--train-limit",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    help="Importance from the first N training examples after a seeded shuffle (0: the whole training set).",
)
@click.option("--seed", default=0, show_default=True, help="Seed of the training examples' shuffle.")
@limit_option
@quiet_option
@store_option
@format_option
def importance(
    model: str,
    task: str,
    data: str,
    train_limit: int,
    seed: int,
    dev_limit: int | None,
    quiet: bool,
    store_path: str | None,
    fmt: str,
) -> None:
    """Michel et al. head importance (training set), the pruning curve and "all heads but one" (dev set); stored."""
    done = _noted(
        api_tasks.importance,
        model,
        task,
        data,
        train_limit=train_limit or None,
        seed=seed,
        dev_limit=dev_limit,
        progress=not quiet,
        store=store_path,
    )
    emit(done.curve, fmt, None)
    click.echo(
        f"run {done.run_id}: importance from {done.n_train} training examples, scored on {done.n_dev} dev "
        "examples; see 'atlas query \"head importance\"' and 'atlas query \"pruning curve\"'",
        err=True,
    )


@click.command()
@click.option("--model", default=None, help="HF id, local path or a checkpoint of 'atlas finetune'.")
@click.option(
    "--corpus",
    type=FilePath(),
    default=None,
    help="CoNLL-U file: the masked-LM loss, Clark et al.'s (a model with an MLM head).",
)
@click.option(
    "--task", default=None, help="With --data: a fine-tuned model's task loss on the dev set, not Clark et al.'s."
)
@click.option("--data", default=None, help="The task's GLUE folder (with --task).")
@click.option("--limit", type=click.IntRange(min=1), default=500, show_default=True, help="Sentences/examples.")
@click.option("--seed", default=0, show_default=True, help="Seed of the MLM masking.")
@quiet_option
@store_option
@format_option
def grads(
    model: str | None,
    corpus: Path | None,
    task: str | None,
    data: str | None,
    limit: int,
    seed: int,
    quiet: bool,
    store_path: str | None,
    fmt: str,
) -> None:
    """Gradient importance of attention to [SEP], to '.'/',' and to other tokens, per layer (stored)."""
    done = _noted(
        api_tasks.grads, model, corpus=corpus, task=task, data=data, limit=limit, seed=seed, progress=not quiet,
        store=store_path,
    )  # fmt: skip
    emit(done.frame, fmt, None)
    click.echo(f"run {done.run_id}: {done.described}; see 'atlas query \"gradient importance\"'", err=True)


TASK_COMMANDS = (finetune, ablate, importance, grads)
