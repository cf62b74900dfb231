"""Interventions on attention heads, applied inside the project's attention function.

- uniform (Kovaleva et al. 2019): a disabled head's attention is 1/L over the real (non-padding) tokens.
- gates (Michel et al. 2019): each head's output is multiplied by a gate xi_h before the output
  projection (0 masks the head); gates may require grad, so d loss / d xi_h comes from autograd.
- keep: the attention probabilities of every layer are kept with their autograd graph, so that
  d loss / d attention can be read after a backward pass (Clark et al. Figure 5).

All three work on transformers v5, which has no ``head_mask``: the attention function reads the active
intervention and the attention module's ``layer_idx``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from atlas.errors import AtlasError


@dataclass
class Intervention:
    uniform: dict[int, list[int]] = field(default_factory=dict)  # layer -> heads made uniform
    gates: torch.Tensor | None = None  # [layers, heads], or [batch, layers, heads, q] (one per example and token)
    keep: bool = False
    kept: list[torch.Tensor] = field(default_factory=list)  # per layer when keep: [batch, heads, q, k]


_active: Intervention | None = None


@contextmanager
def intervening(intervention: Intervention) -> Iterator[Intervention]:
    global _active
    previous, _active = _active, intervention
    try:
        yield intervention
    finally:
        _active = previous


def active() -> bool:
    """Whether an intervention is active."""
    return _active is not None


def apply(module: torch.nn.Module, probs: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """The attention probabilities ``[batch, heads, q, k]`` after the active intervention."""
    if _active is None:
        return probs
    layer = _layer(module)
    heads = _active.uniform.get(layer)
    if heads:
        if attention_mask is None:
            real = torch.ones_like(probs[:, :1], dtype=torch.bool)
        elif attention_mask.dtype == torch.bool:
            real = attention_mask.expand(-1, 1, probs.shape[2], -1)
        else:
            real = (attention_mask == 0).expand(-1, 1, probs.shape[2], -1)
        uniform = real.to(probs.dtype) / real.sum(dim=-1, keepdim=True).clamp(min=1).to(probs.dtype)
        chosen = torch.zeros(probs.shape[1], dtype=torch.bool, device=probs.device)
        chosen[heads] = True
        probs = torch.where(chosen[None, :, None, None], uniform, probs)
    if _active.keep:
        if probs.requires_grad:
            probs.retain_grad()
        _active.kept.append(probs)
    return probs


def gate(module: torch.nn.Module, output: torch.Tensor) -> torch.Tensor:
    """Per-head output ``[batch, heads, q, d]`` times the active gates of its layer."""
    if _active is None or _active.gates is None:
        return output
    gates = _active.gates
    if gates.dim() == 4:  # [batch, layers, heads, q]
        return output * gates[:, _layer(module), :, :, None].to(output.dtype)
    return output * gates[_layer(module)][None, :, None, None].to(output.dtype)


def _layer(module: torch.nn.Module) -> int:
    layer = getattr(module, "layer_idx", None)
    if layer is None:
        raise AtlasError(
            f"{type(module).__name__} has no layer index (one module shared by every layer, as in ALBERT): "
            "its heads cannot be intervened on per layer"
        )
    return layer
