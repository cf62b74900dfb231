"""Attention capture: the project's own attention function, registered with transformers'
``AttentionInterface``. It computes eager softmax attention, applies any head intervention and records
the probabilities of every layer while ``recording()`` is active.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, eager_mask

from atlas.model import intervene

CAPTURE = "atlas_capture"
_recorded: list[torch.Tensor] | None = None


def _capture_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: object,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eager attention that records its probabilities ``[batch, heads, q, k]`` (after any intervention)."""
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + attention_mask
    probs = torch.softmax(scores.float(), dim=-1).to(query.dtype)
    probs = intervene.apply(module, probs, attention_mask)
    if _recorded is not None:
        _recorded.append(probs.detach())
    probs = torch.nn.functional.dropout(probs, p=dropout, training=module.training)
    output = intervene.gate(module, torch.matmul(probs, value))
    return output.transpose(1, 2).contiguous(), probs


AttentionInterface.register(CAPTURE, _capture_attention)
AttentionMaskInterface.register(CAPTURE, eager_mask)


@contextmanager
def recording() -> Iterator[list[torch.Tensor]]:
    global _recorded
    _recorded = []
    try:
        yield _recorded
    finally:
        _recorded = None
