"""Gradient importance of attention (Clark et al. 2019, Section 3.2, Figure 5).

Per layer, the mean over heads and over (query, key) pairs of real tokens of |d loss / d attention
weight|, split by what the key is: [SEP], the pieces '.' and ',', or any other token. The loss is the
one asked for: the masked-language-model loss, the paper's (15 % of the pieces masked, seeded; only for
a model with an MLM head), or, asked for explicitly, a fine-tuned checkpoint's task loss on its dev data,
which the paper does not use. Clark et al.'s code for Figure 5 is not released.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from safetensors import safe_open
from tqdm import tqdm
from transformers.utils import cached_file

from atlas.errors import AtlasError, arg
from atlas.model.intervene import Intervention, intervening
from atlas.store import Store

if TYPE_CHECKING:
    from atlas.tasks.classifier import TaskModel

TARGETS = ("sep", "dot_comma", "other")
MASK_SHARE = 0.15


def _accumulate(
    sums: np.ndarray,
    counts: np.ndarray,
    kept: list[torch.Tensor],
    ids: torch.Tensor,
    mask: torch.Tensor,
    sep_id: int,
    punct_ids: list[int],
) -> None:
    real = mask.bool()
    pair = real[:, None, :, None] & real[:, None, None, :]  # [B, 1, q, k]
    is_sep = (ids == sep_id)[:, None, None, :]
    is_punct = torch.isin(ids, torch.tensor(punct_ids))[:, None, None, :]
    targets = {"sep": is_sep, "dot_comma": is_punct & ~is_sep, "other": ~is_sep & ~is_punct}
    for layer, probs in enumerate(kept):
        if probs.grad is None:
            raise AtlasError("grads: the loss does not depend on the attention of every layer")
        grad = probs.grad.abs()
        for t, name in enumerate(TARGETS):
            where = (pair & targets[name]).expand_as(grad)
            sums[layer, t] += float(grad[where].double().sum())
            counts[layer, t] += int(where.sum())


def attention_gradients(
    model: torch.nn.Module,
    n_layers: int,
    batches: list[tuple[dict[str, torch.Tensor], torch.Tensor]],
    loss_of,
    sep_id: int,
    punct_ids: list[int],
    progress: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """``(mean |grad| [layers, 3], weights counted [layers, 3])`` over ``(inputs, labels)`` batches;
    ``loss_of(model, inputs, labels)`` gives the summed loss of a batch; ``progress``: a bar over the batches."""
    sums = np.zeros((n_layers, len(TARGETS)))
    counts = np.zeros((n_layers, len(TARGETS)), dtype=np.int64)
    model.eval()
    with tqdm(batches, desc="grads", unit="batch", disable=not progress) as bar:
        for inputs, labels in bar:
            with intervening(Intervention(keep=True)) as seen:
                loss = loss_of(model, inputs, labels)
            if len(seen.kept) != n_layers:
                raise AtlasError(f"grads: attention captured for {len(seen.kept)} of {n_layers} layers")
            loss.backward()
            ids = inputs["input_ids"]
            if labels.shape == ids.shape:  # MLM: a masked piece is classed by its original id
                ids = torch.where(labels >= 0, labels, ids)
            _accumulate(sums, counts, seen.kept, ids, inputs["attention_mask"], sep_id, punct_ids)
            model.zero_grad(set_to_none=True)
    return sums / np.maximum(counts, 1), counts


def mlm_batches(tokenizer, sentences: list[list[str]], seed: int, batch_size: int = 16):
    """Word-split sentences as MLM batches: 15 % of the real pieces masked (at least one per input)."""
    rng = np.random.default_rng(seed)
    for start in range(0, len(sentences), batch_size):
        enc = tokenizer(
            sentences[start : start + batch_size],
            is_split_into_words=True,
            padding=True,
            truncation=True,
            max_length=128,
            return_tensors="pt",
        )
        ids = enc["input_ids"]
        special = torch.tensor(
            [tokenizer.get_special_tokens_mask(row, already_has_special_tokens=True) for row in ids.tolist()]
        ).bool() | (enc["attention_mask"] == 0)
        chosen = torch.from_numpy(rng.random(ids.shape) < MASK_SHARE) & ~special
        for row in range(ids.shape[0]):
            if not chosen[row].any():
                candidates = (~special[row]).nonzero().flatten()
                chosen[row, candidates[rng.integers(len(candidates))]] = True
        labels = torch.where(chosen, ids, torch.full_like(ids, -100))
        masked = dict(enc)
        masked["input_ids"] = torch.where(chosen, torch.full_like(ids, tokenizer.mask_token_id), ids)
        yield masked, labels


def has_mlm_head(source: str) -> bool:
    """Whether the checkpoint's safetensors weights hold a masked-language-model head."""
    folder = Path(source)
    files = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
    if not files:
        try:
            files = [Path(cached_file(source, "model.safetensors"))]
        except OSError:
            return False
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            if any("predictions" in key or "lm_head" in key for key in handle.keys()):
                return True
    return False


def loss_label(loss: str) -> str:
    """How a stored loss (``mlm`` or ``task:<TASK>``) reads in the output."""
    if loss == "mlm":
        return "gradients of the masked-LM loss, as Clark et al."
    return f"gradients of the {loss.removeprefix('task:')} task loss, not Clark et al.'s masked-LM loss"


def write(store: Store, run_id: str, loss: str, means: np.ndarray, counts: np.ndarray) -> None:
    n_layers = means.shape[0]
    columns = {
        "run_id": run_id,
        "loss": loss,
        "layer": np.repeat(np.arange(n_layers), len(TARGETS)),
        "target": np.tile(list(TARGETS), n_layers),
        "mean_abs_grad": means.reshape(-1),
        "n_weights": counts.reshape(-1),
    }
    store.create()
    store.put(run_id, "attention_gradients", "grads", columns, means.size)


def _punct_ids(tokenizer) -> list[int]:
    ids = [tokenizer.convert_tokens_to_ids(p) for p in (".", ",")]
    return [i for i in ids if i is not None and i != tokenizer.unk_token_id]


def mlm_gradients(
    model: str | None, corpus: Path, limit: int, seed: int, progress: bool = False
) -> tuple[str, str, np.ndarray, np.ndarray]:
    """Clark et al.'s gradients: the masked-LM loss over the first ``limit`` sentences of a CoNLL-U corpus;
    returns the run id, the loss's name, and per layer and target the mean |gradient| and the weights counted;
    ``progress``: a bar over the batches."""
    from transformers import AutoModelForMaskedLM

    from atlas.ingestion.corpus import check_corpus
    from atlas.ingestion.readers.conllu import read_conllu
    from atlas.model.load import load_model

    check_corpus(corpus)  # a malformed corpus fails here, with its file and line
    sentences = []
    for sentence in read_conllu(corpus):
        sentences.append([w.form for w in sentence.words])
        if len(sentences) == limit:
            break
    lm = load_model(model, auto_class=AutoModelForMaskedLM)
    if not has_mlm_head(lm.source) or lm.tokenizer.mask_token_id is None:
        raise AtlasError(
            f"{arg('model', repr(lm.name))}: no masked-LM head for Clark et al.'s MLM loss; "
            f"for a fine-tuned model's task loss instead, give {arg('task')} and {arg('data')}"
        )

    def loss_of(m, inputs, labels):
        logits = m(**inputs).logits
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="sum")

    batches = list(mlm_batches(lm.tokenizer, sentences, seed))
    means, counts = attention_gradients(
        lm.model, lm.n_layers, batches, loss_of, lm.tokenizer.sep_token_id, _punct_ids(lm.tokenizer), progress
    )
    digest = hashlib.sha256(f"{lm.model_hash}|{corpus.name}|{limit}|{seed}".encode()).hexdigest()[:10]
    return f"grads__{corpus.stem}__{Path(lm.source).name}__{digest}", "mlm", means, counts


def task_gradients(
    tm: TaskModel, data: str | os.PathLike[str], limit: int, progress: bool = False
) -> tuple[str, str, np.ndarray, np.ndarray]:
    """A fine-tuned task model's loss over the first ``limit`` dev examples of its task in ``data`` (not Clark et
    al.'s); as ``mlm_gradients``."""
    from atlas.ingestion.readers.glue_tsv import load_split
    from atlas.tasks.classifier import encode
    from atlas.tasks.importance import example_losses
    from atlas.tasks.record import task_run_id

    spec = tm.spec
    batches = [(b.inputs, b.labels) for b in encode(tm, load_split(spec, data, "dev").head(limit))]

    def loss_of(m, inputs, labels):
        return example_losses(tm, m(**inputs).logits, labels).sum()

    tokenizer = tm.lm.tokenizer
    means, counts = attention_gradients(
        tm.lm.model, tm.lm.n_layers, batches, loss_of, tokenizer.sep_token_id, _punct_ids(tokenizer), progress
    )
    return task_run_id(tm), f"task:{spec.name}", means, counts
