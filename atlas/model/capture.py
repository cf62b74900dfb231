"""Attention capture: the project's own attention function, registered with transformers'
``AttentionInterface``. It computes each family's eager softmax attention, applies any head intervention
and records the probabilities of every layer while ``recording()`` is active.

DeBERTa-v2/v3 computes its disentangled attention inside its own module, not through the interface: there
the probabilities the model computed are read (and intervened on) where they pass into its attention dropout.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from transformers import AttentionInterface, PretrainedConfig
from transformers.masking_utils import AttentionMaskInterface, eager_mask
from transformers.models.deberta_v2.modeling_deberta_v2 import DisentangledSelfAttention
from transformers.models.distilbert.modeling_distilbert import DistilBertSelfAttention

from atlas.errors import AtlasError
from atlas.model import intervene

CAPTURE = "atlas_capture"
# config.model_type of each family whose attention is captured (and tested against its eager attention)
FAMILIES = (
    "bert", "roberta", "xlm-roberta", "electra", "distilbert", "albert", "deberta-v2", "modernbert",
    "gpt2", "llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "phi", "phi3",
)  # fmt: skip
_sink: Callable[[torch.Tensor], None] | None = None  # while recording: where each layer's probabilities go


def _repeat_kv(states: torch.Tensor, groups: int) -> torch.Tensor:
    """Grouped-query (and multi-query) attention: each key/value head serves ``groups`` query heads, as
    transformers' ``repeat_kv`` lays them out ([kv0, kv0, kv1, kv1] for 4 heads and 2 KV heads)."""
    if groups == 1:
        return states
    batch, heads, length, dim = states.shape
    return states[:, :, None].expand(batch, heads, groups, length, dim).reshape(batch, heads * groups, length, dim)


def _scores(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, scaling: float) -> torch.Tensor:
    if getattr(module, "reorder_and_upcast_attn", False):  # GPT-2's option: float32, scaled inside baddbmm
        batch, heads, q_len, dim = query.shape
        k_len = key.shape[2]
        scores = torch.baddbmm(
            torch.empty(batch * heads, q_len, k_len, dtype=torch.float32, device=query.device),
            query.reshape(-1, q_len, dim).float(),
            key.transpose(-1, -2).reshape(-1, dim, k_len).float(),
            beta=0,
            alpha=scaling,
        )
        return scores.reshape(batch, heads, q_len, k_len)
    return torch.matmul(query, key.transpose(2, 3)) * scaling


def _settle(module: torch.nn.Module, probs: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """The probabilities after any intervention, recorded while ``recording()`` is active."""
    probs = intervene.apply(module, probs, attention_mask)
    if _sink is not None:
        _sink(probs.detach())
    return probs


def _capture_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    softcap: float | None = None,
    **kwargs: object,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eager attention as the families' ``eager_attention_forward`` computes it: key/value heads repeated for
    grouped-query attention, logits soft-capped where the model passes ``softcap`` (Gemma2), the mask the model
    built (padding, causal, sliding window) added, softmax in float32. Records the probabilities
    ``[batch, heads, q, k]`` after any intervention and before dropout. Other keyword arguments (``sliding_window``
    and the like) only steer other kernels: in eager attention the mask already holds the window."""
    groups = query.shape[1] // key.shape[1]
    key, value = _repeat_kv(key, groups), _repeat_kv(value, groups)
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    scores = _scores(module, query, key, scaling)
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + attention_mask
    probs = _settle(module, torch.softmax(scores.float(), dim=-1).to(value.dtype), attention_mask)
    probs = torch.nn.functional.dropout(probs, p=dropout, training=module.training)
    output = intervene.gate(module, torch.matmul(probs, value))
    return output.transpose(1, 2).contiguous(), probs


AttentionInterface.register(CAPTURE, _capture_attention)
AttentionMaskInterface.register(CAPTURE, eager_mask)


class _DisentangledProbs(torch.nn.Module):
    """Stands in for the attention dropout of DeBERTa-v2's ``DisentangledSelfAttention``: its softmax output
    passes here, is intervened on, recorded and gated (a head's gate times its probabilities gives the gate
    times its output), then goes through the model's own dropout."""

    def __init__(self, attention: DisentangledSelfAttention) -> None:
        super().__init__()
        self.dropout = attention.dropout
        self.attention = [attention]  # not a submodule: the attention module owns this one
        self.mask: torch.Tensor | None = None  # [batch, 1, q, k] bool, set before each call of the attention
        attention.register_forward_pre_hook(self._keep_mask)

    def _keep_mask(self, _module: torch.nn.Module, args: tuple) -> None:
        self.mask = args[1].bool()

    def forward(self, probs: torch.Tensor) -> torch.Tensor:
        attention = self.attention[0]
        probs = intervene.gate(attention, _settle(attention, probs, self.mask))
        return self.dropout(probs)


def check_family(config: PretrainedConfig, who: str) -> None:
    """Refuse a model whose architecture is not one of ``FAMILIES`` (its attention would not be captured as
    the model computes it)."""
    if config.model_type not in FAMILIES:
        architecture = (config.architectures or [config.model_type])[0]
        raise AtlasError(
            f"{who}: architecture {architecture} (model_type {config.model_type}) is not supported; "
            f"attention is captured for {', '.join(FAMILIES)}"
        )


def prepare(model: torch.nn.Module) -> None:
    """Make a model of ``FAMILIES`` loaded with ``attn_implementation=CAPTURE`` ready to record its attention.

    Attention modules without a ``layer_idx`` (DistilBERT, DeBERTa-v2) are numbered in layer order, so that
    interventions find their layer; ALBERT's one shared module has none (interventions refuse it).
    """
    for kind in (DistilBertSelfAttention, DisentangledSelfAttention):
        for layer, module in enumerate(m for m in model.modules() if isinstance(m, kind)):
            module.layer_idx = layer
            if kind is DisentangledSelfAttention and not isinstance(module.dropout, _DisentangledProbs):
                module.dropout = _DisentangledProbs(module)


@contextmanager
def recording(sink: Callable[[torch.Tensor], None] | None = None) -> Iterator[list[torch.Tensor]]:
    """Record the attention probabilities of every layer the model runs while active, in layer order: into the list
    yielded, or handed to ``sink`` as each layer computes them (while they are in the cache; the list stays empty)."""
    global _sink
    recorded: list[torch.Tensor] = []
    _sink = sink or recorded.append
    try:
        yield recorded
    finally:
        _sink = None
