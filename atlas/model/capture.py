"""Attention capture: the project's own attention function, registered with transformers'
``AttentionInterface``. It computes each family's eager softmax attention, applies any head intervention
and records the probabilities of every layer while ``recording()`` is active, and the norms of what each head passes
on (``atlas.model.value_norms``) while ``norming()`` is.

DeBERTa-v2/v3 computes its disentangled attention inside its own module, not through the interface: there
the probabilities the model computed are read (and intervened on) where they pass into its attention dropout.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Protocol

import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, eager_mask, sdpa_mask
from transformers.models.deberta_v2.modeling_deberta_v2 import DisentangledSelfAttention
from transformers.models.distilbert.modeling_distilbert import DistilBertSelfAttention

from atlas.errors import AtlasError
from atlas.model import intervene
from atlas.model.families import family
from atlas.model.value_norms import know_parents, value_norms

CAPTURE = "atlas_capture"
_sink: Callable[[torch.Tensor], None] | None = None  # while recording: where each layer's probabilities go


class RowSink(Protocol):
    """What takes a layer's attention in blocks of rows (``reading_rows``): ``bounds(n)`` is called as each layer
    starts (``n``: its queries), gives the blocks of rows ``[start, stop)`` in order, covering them all; ``rows`` then
    takes each block's float32 probabilities ``[batch, heads, stop - start, keys]``, in that order."""

    def bounds(self, n: int) -> Iterable[tuple[int, int]]: ...

    def rows(self, start: int, probs: torch.Tensor) -> None: ...


_rows: RowSink | None = None  # while reading rows: what takes them
_norms: Callable[[torch.Tensor], None] | None = None  # while norming: where each layer's value norms go


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
    built (padding, causal, sliding window) added, softmax in float32. Records the float32 probabilities
    ``[batch, heads, q, k]`` after any intervention and before dropout. Other keyword arguments (``sliding_window``
    and the like) only steer other kernels: in eager attention the mask already holds the window."""
    groups = query.shape[1] // key.shape[1]
    key, value = _repeat_kv(key, groups), _repeat_kv(value, groups)
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    if _rows is not None:
        return _by_rows(_rows, module, query, key, value, attention_mask, scaling, softcap), None
    if _norms is not None:
        _norms(value_norms(module, value))
    # softmax in float32, recorded so (a half-precision model's too); the weighted values in the model's dtype
    probs = _settle(module, _probabilities(module, query, key, attention_mask, scaling, softcap), attention_mask)
    probs = torch.nn.functional.dropout(probs.to(value.dtype), p=dropout, training=module.training)
    output = intervene.gate(module, torch.matmul(probs, value))
    return output.transpose(1, 2).contiguous(), probs


def _probabilities(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    mask: torch.Tensor | None,
    scaling: float,
    softcap: float | None,
    causal_from: int | None = None,
) -> torch.Tensor:
    """float32 softmax of the scaled (and soft-capped) scores of ``query`` against ``key``, ``mask`` applied: a
    boolean one (True: attend) or one added to the scores; ``causal_from``: the queries are the rows from there on of
    a causal layer whose mask the model left out (no key after a query's own position)."""
    scores = _scores(module, query, key, scaling)
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    if mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + mask
    elif causal_from is not None:
        rows, keys = scores.shape[-2:]
        future = torch.ones(rows, keys, dtype=torch.bool, device=scores.device).triu(causal_from + 1)
        scores = scores.masked_fill(future, torch.finfo(scores.dtype).min)
    return torch.softmax(scores.float(), dim=-1)


def _by_rows(
    sink: RowSink,
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    scaling: float,
    softcap: float | None,
) -> torch.Tensor:
    """Eager attention in blocks of rows (``reading_rows``): each block's probabilities as ``_capture_attention``
    computes them, handed to ``sink``, then its weighted values; no layer's whole ``[heads, q, k]`` map is held. The
    mask is sdpa's (``_mask``): boolean, or None where the model needs none (no padding; a causal layer then masks
    the future itself)."""
    if intervene.active():
        raise AtlasError("attention read in blocks of rows takes no intervention")
    n = query.shape[2]
    causal = mask is None and getattr(module, "is_causal", False) and n == key.shape[2]
    output = query.new_empty((*query.shape[:3], value.shape[-1]))
    blocks = sink.bounds(n)
    if _norms is not None:  # after the layer has begun, before its rows
        _norms(value_norms(module, value))
    for start, stop in blocks:
        rows = None if mask is None else mask if mask.shape[2] == 1 else mask[:, :, start:stop]
        probs = _probabilities(module, query[:, :, start:stop], key, rows, scaling, softcap, start if causal else None)
        sink.rows(start, probs)
        output[:, :, start:stop] = torch.matmul(probs.to(value.dtype), value)
    return intervene.gate(module, output).transpose(1, 2).contiguous()


def _mask(*args: object, **kwargs: object) -> torch.Tensor | None:
    """The mask the model builds for this attention: eager's (added to the scores), or sdpa's while rows are read in
    blocks (boolean, or None where nothing is masked but a causal layer's future: no ``[q, k]`` float mask)."""
    return sdpa_mask(*args, **kwargs) if _rows is not None else eager_mask(*args, **kwargs)


AttentionInterface.register(CAPTURE, _capture_attention)
AttentionMaskInterface.register(CAPTURE, _mask)


class _DisentangledProbs(torch.nn.Module):
    """Stands in for the attention dropout of DeBERTa-v2's ``DisentangledSelfAttention``: its softmax output
    passes here, is intervened on, recorded and gated (a head's gate times its probabilities gives the gate
    times its output), then goes through the model's own dropout."""

    def __init__(self, attention: DisentangledSelfAttention) -> None:
        super().__init__()
        self.dropout = attention.dropout
        self.attention = [attention]  # not a submodule: the attention module owns this one
        self.mask: torch.Tensor | None = None  # [batch, 1, q, k] bool, set before each call of the attention
        self.hidden: torch.Tensor | None = None  # [batch, n, hidden]: its input, kept while norming
        attention.register_forward_pre_hook(self._keep_mask)

    def _keep_mask(self, _module: torch.nn.Module, args: tuple) -> None:
        self.mask = args[1].bool()
        self.hidden = args[0] if _norms is not None else None

    def forward(self, probs: torch.Tensor) -> torch.Tensor:
        attention = self.attention[0]
        if _norms is not None and self.hidden is not None:  # its values, as the module makes them
            batch, n, _ = self.hidden.shape
            value = attention.value_proj(self.hidden).view(batch, n, attention.num_attention_heads, -1)
            _norms(value_norms(attention, value.transpose(1, 2)))
            self.hidden = None
        probs = intervene.gate(attention, _settle(attention, probs, self.mask))
        return self.dropout(probs)


def prepare(model: torch.nn.Module) -> None:
    """Make a model of a family of ``families.FAMILIES`` loaded with ``attn_implementation=CAPTURE`` ready to record
    its attention.

    Attention modules without a ``layer_idx`` (DistilBERT, DeBERTa-v2) are numbered in layer order, so that
    interventions find their layer; ALBERT's one shared module has none (interventions refuse it). Each module's parent
    is remembered, where an attention module's output projection is found (``value_norms.output_projection``).
    """
    know_parents(model)
    for kind in (DistilBertSelfAttention, DisentangledSelfAttention):
        for layer, module in enumerate(m for m in model.modules() if isinstance(m, kind)):
            module.layer_idx = layer
            if kind is DisentangledSelfAttention and not isinstance(module.dropout, _DisentangledProbs):
                module.dropout = _DisentangledProbs(module)


def reads_rows(model: torch.nn.Module) -> bool:
    """Whether the model's attention can be read in blocks of rows (``reading_rows``): that of a family whose attention
    goes through the interface (``Family.interface``: every family's but DeBERTa-v2's, computed inside its own
    module)."""
    return family(model.config).interface


@contextmanager
def reading_rows(sink: RowSink) -> Iterator[None]:
    """While active, every attention layer the model runs is computed in blocks of rows, each handed to ``sink``
    (``RowSink``), and nothing is recorded."""
    global _rows
    _rows = sink
    try:
        yield
    finally:
        _rows = None


@contextmanager
def norming(sink: Callable[[torch.Tensor], None]) -> Iterator[None]:
    """While active, each attention layer the model runs hands ``sink`` its value norms ``[batch, heads, n]``
    (``value_norms.value_norms``) before its probabilities (before its first block of rows, read in blocks)."""
    global _norms
    _norms = sink
    try:
        yield
    finally:
        _norms = None


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
