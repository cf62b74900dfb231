"""Gradient importance of attention (Clark et al. 2019, Section 3.2, Figure 5).

Per layer, the mean over heads and over (query, key) pairs of real tokens of |d loss / d attention
weight|, split by what the key is: [SEP], the pieces '.' and ',', or any other token. The loss is the
one asked for: the masked-language-model loss, the paper's (15 % of the pieces masked, seeded; only for
a model with an MLM head), or, asked for explicitly, a fine-tuned checkpoint's task loss on its dev data,
which the paper does not use. Clark et al.'s code for Figure 5 is not released.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open
from transformers.utils import cached_file

from atlas.errors import AtlasError
from atlas.model.intervene import Intervention, intervening
from atlas.store import Store

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
    batches: Iterable[tuple[dict[str, torch.Tensor], torch.Tensor]],
    loss_of,
    sep_id: int,
    punct_ids: list[int],
) -> tuple[np.ndarray, np.ndarray]:
    """``(mean |grad| [layers, 3], weights counted [layers, 3])`` over ``(inputs, labels)`` batches;
    ``loss_of(model, inputs, labels)`` gives the summed loss of a batch."""
    sums = np.zeros((n_layers, len(TARGETS)))
    counts = np.zeros((n_layers, len(TARGETS)), dtype=np.int64)
    model.eval()
    for inputs, labels in batches:
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
