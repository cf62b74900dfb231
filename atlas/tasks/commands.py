"""``atlas finetune``, ``atlas ablate`` and ``atlas importance``: task models and their ablation scores."""

from __future__ import annotations

from pathlib import Path

import click
import polars as pl

from atlas.cli_options import format_option, quiet_option, store_at, store_option
from atlas.output import emit

task_option = click.option("--task", required=True, help="SST-2, MRPC, RTE, STS-B, QQP, QNLI or MNLI.")
data_option = click.option(
    "--data", required=True, help="Folder with the task's GLUE train.tsv and dev.tsv, or a hub data set (e.g. glue)."
)
limit_option = click.option(
    "--dev-limit", type=click.IntRange(min=1), default=None, help="Only the first N dev examples."
)


def _dev(spec, data: str, limit: int | None):
    from atlas.ingest.glue_tsv import load_split

    return load_split(spec, data, "dev").head(limit)


@click.command()
@task_option
@data_option
@click.option("--model", default=None, help="Encoder: HF id or local path (default: embedded all-MiniLM-L6-v2).")
@click.option("--random-init", is_flag=True, help="Fresh random encoder weights from the config (seeded).")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path), help="Checkpoint folder.")
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
    out: Path,
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
    from atlas.ingest.glue_tsv import load_split, task_spec
    from atlas.tasks.classifier import load_task_model
    from atlas.tasks.finetune import TrainSettings, check_out
    from atlas.tasks.finetune import finetune as run
    from atlas.tasks.record import write_task_model

    spec = task_spec(task)
    check_out(out)
    train_set, dev_set = load_split(spec, data, "train"), _dev(spec, data, dev_limit)
    tm = load_task_model(model, spec, random_init=random_init, seed=seed)
    settings = TrainSettings(epochs, train_limit or None, learning_rate, warmup, batch_size, seed=seed)
    info = run(tm, train_set, dev_set, settings, out, progress=not quiet)
    saved = load_task_model(str(out), spec)
    run_id = write_task_model(store_at(store_path), saved, info, out)
    metrics = ", ".join(f"{k} {v:.2f}" for k, v in info["dev_metrics"].items())
    click.echo(f"{spec.name}: dev {metrics} ({info['n_train']} training examples) -> {out}; run {run_id}")


@click.command()
@click.option("--model", required=True, help="A checkpoint of 'atlas finetune' (or any encoder: a fresh head).")
@task_option
@data_option
@click.option("--method", type=click.Choice(["uniform", "mask"]), default="uniform", show_default=True)
@click.option("--heads/--no-heads", default=True, show_default=True, help="Disable each head alone.")
@click.option("--layers/--no-layers", default=True, show_default=True, help="Disable each whole layer.")
@click.option("--no-reuse", is_flag=True, help="Recompute every layer for every ablation (for comparison).")
@limit_option
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
    store_path: str | None,
    fmt: str,
) -> None:
    """Disable every head and every layer in turn (uniform attention or masked output); store the scores."""
    from atlas.ingest.glue_tsv import task_spec
    from atlas.tasks.ablate import sweep
    from atlas.tasks.classifier import encode, load_task_model
    from atlas.tasks.record import write_ablations

    spec = task_spec(task)
    dev = _dev(spec, data, dev_limit)
    tm = load_task_model(model, spec)
    baseline, rows = sweep(tm, encode(tm, dev), method, heads=heads, layers=layers, reuse=not no_reuse)
    run_id = write_ablations(store_at(store_path), tm, method, method, rows, baseline, len(dev))
    main = spec.metrics[0]
    best = max(rows, key=lambda r: r["metrics"][main])
    emit(
        pl.DataFrame(
            [
                {
                    "run_id": run_id,
                    "baseline": baseline[main],
                    "best": best["metrics"][main],
                    "kind": best["kind"],
                    "layer": best["layer"] + 1,  # 1-based, as the queries show them
                    "head": None if best["head"] is None else best["head"] + 1,
                }
            ]
        ),
        fmt,
        None,
    )


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
@store_option
@format_option
def importance(
    model: str,
    task: str,
    data: str,
    train_limit: int,
    seed: int,
    dev_limit: int | None,
    store_path: str | None,
    fmt: str,
) -> None:
    """Michel et al. head importance (training set), the pruning curve and "all heads but one" (dev set); stored."""
    from atlas.ingest.glue_tsv import load_split, task_spec
    from atlas.tasks.classifier import encode, load_task_model
    from atlas.tasks.finetune import subset
    from atlas.tasks.importance import head_importance, normalise, pruning_and_single_heads
    from atlas.tasks.record import write_ablations, write_importance

    spec = task_spec(task)
    train_set, dev = subset(load_split(spec, data, "train"), train_limit or None, seed), _dev(spec, data, dev_limit)
    tm = load_task_model(model, spec)
    raw, n_train = head_importance(tm, encode(tm, train_set))
    baseline, rows = pruning_and_single_heads(tm, encode(tm, dev), normalise(raw))
    store = store_at(store_path)
    with store.transaction():  # the importance scores and the pruning results appear together
        write_importance(store, tm, raw, normalise(raw), n_train)
        run_id = write_ablations(store, tm, "importance", "mask", rows, baseline, len(dev))
    main = spec.metrics[0]
    curve = [{"pruned_share": r["pruned_share"], main: r["metrics"][main]} for r in rows if r["kind"] == "pruned"]
    emit(pl.DataFrame(curve), fmt, None)
    click.echo(
        f"run {run_id}: importance from {n_train} training examples, scored on {len(dev)} dev examples; "
        "see 'atlas query \"head importance\"' and 'atlas query \"pruning curve\"'",
        err=True,
    )


@click.command()
@click.option("--model", default=None, help="HF id, local path or a checkpoint of 'atlas finetune'.")
@click.option(
    "--corpus",
    type=click.Path(path_type=Path),
    default=None,
    help="CoNLL-U file: the masked-LM loss, Clark et al.'s (a model with an MLM head).",
)
@click.option(
    "--task", default=None, help="With --data: a fine-tuned model's task loss on the dev set, not Clark et al.'s."
)
@click.option("--data", default=None, help="The task's GLUE folder (with --task).")
@click.option("--limit", type=click.IntRange(min=1), default=500, show_default=True, help="Sentences/examples.")
@click.option("--seed", default=0, show_default=True, help="Seed of the MLM masking.")
@store_option
@format_option
def grads(
    model: str | None,
    corpus: Path | None,
    task: str | None,
    data: str | None,
    limit: int,
    seed: int,
    store_path: str | None,
    fmt: str,
) -> None:
    """Gradient importance of attention to [SEP], to '.'/',' and to other tokens, per layer (stored)."""
    from atlas.errors import AtlasError
    from atlas.tasks.grads import TARGETS, loss_label, write

    if (corpus is None) == (task is None) or (task is None) != (data is None):
        raise AtlasError("grads: give --corpus FILE (the masked-LM loss) or --task and --data (a task loss)")
    if corpus is not None:
        run_id, loss, means, counts = _mlm_gradients(model, corpus, limit, seed)
    else:
        run_id, loss, means, counts = _task_gradients(model, task, data, limit)
    write(store_at(store_path), run_id, loss, means, counts)
    rows = [{"layer": layer + 1, **dict(zip(TARGETS, means[layer], strict=True))} for layer in range(len(means))]
    emit(pl.DataFrame(rows), fmt, None)
    click.echo(f"run {run_id}: {loss_label(loss)}; see 'atlas query \"gradient importance\"'", err=True)


def _punct_ids(tokenizer) -> list[int]:
    ids = [tokenizer.convert_tokens_to_ids(p) for p in (".", ",")]
    return [i for i in ids if i is not None and i != tokenizer.unk_token_id]


def _mlm_gradients(model: str | None, corpus: Path, limit: int, seed: int):
    import hashlib

    import torch
    from transformers import AutoModelForMaskedLM

    from atlas.errors import AtlasError
    from atlas.ingest.conllu import read_conllu
    from atlas.ingest.corpus import check_corpus
    from atlas.model.load import load_model
    from atlas.tasks.grads import attention_gradients, has_mlm_head, mlm_batches

    check_corpus(corpus)  # a malformed corpus fails here, with its file and line
    sentences = []
    for sentence in read_conllu(corpus):
        sentences.append([w.form for w in sentence.words])
        if len(sentences) == limit:
            break
    lm = load_model(model, auto_class=AutoModelForMaskedLM)
    if not has_mlm_head(lm.source) or lm.tokenizer.mask_token_id is None:
        raise AtlasError(
            f"--model '{lm.name}': no masked-LM head for Clark et al.'s MLM loss; "
            "for a fine-tuned model's task loss instead, give --task and --data"
        )

    def loss_of(m, inputs, labels):
        logits = m(**inputs).logits
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="sum")

    batches = mlm_batches(lm.tokenizer, sentences, seed)
    means, counts = attention_gradients(
        lm.model, lm.n_layers, batches, loss_of, lm.tokenizer.sep_token_id, _punct_ids(lm.tokenizer)
    )
    digest = hashlib.sha256(f"{lm.model_hash}|{corpus.name}|{limit}|{seed}".encode()).hexdigest()[:10]
    return f"grads__{corpus.stem}__{Path(lm.source).name}__{digest}", "mlm", means, counts


def _task_gradients(model: str | None, task: str, data: str, limit: int):
    from atlas.ingest.glue_tsv import task_spec
    from atlas.tasks.classifier import encode, load_task_model
    from atlas.tasks.grads import attention_gradients
    from atlas.tasks.importance import example_losses
    from atlas.tasks.record import task_run_id

    spec = task_spec(task)
    tm = load_task_model(model, spec)
    batches = [(b.inputs, b.labels) for b in encode(tm, _dev(spec, data, limit))]

    def loss_of(m, inputs, labels):
        return example_losses(tm, m(**inputs).logits, labels).sum()

    tokenizer = tm.lm.tokenizer
    means, counts = attention_gradients(
        tm.lm.model, tm.lm.n_layers, batches, loss_of, tokenizer.sep_token_id, _punct_ids(tokenizer)
    )
    return task_run_id(tm), f"task:{spec.name}", means, counts


TASK_COMMANDS = (finetune, ablate, importance, grads)
