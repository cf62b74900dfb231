"""The forward pass that reads attention: one padded batch through the model on its device, each layer's attention
handed on as the model computes it, on the device (the ingest turns it into store rows there and then), or kept for
every layer, or each input's maps as arrays on the host."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager, ExitStack, nullcontext

import numpy as np
import torch

from atlas.errors import AtlasError, arg
from atlas.model.capture import norming, reading_rows, recording
from atlas.model.load import LoadedModel


class _AllCaptured(Exception):
    """Raised once the last layer's attention is handed on: nothing after it in the model is needed."""


def model_inputs(lm: LoadedModel, inputs: list[tuple[list[int], list[int]]], device: torch.device) -> dict:
    """One padded batch of ``(input ids, token type ids)``: the model's keyword arguments, on ``device``."""
    longest = max(len(ids) for ids, _ in inputs)
    pad = lm.tokenizer.pad_token_id or 0
    input_ids = torch.full((len(inputs), longest), pad, dtype=torch.long)
    types = torch.zeros((len(inputs), longest), dtype=torch.long)
    mask = torch.zeros((len(inputs), longest), dtype=torch.long)
    for row, (ids, type_ids) in enumerate(inputs):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        types[row, : len(type_ids)] = torch.tensor(type_ids)
        mask[row, : len(ids)] = 1
    kwargs = {"input_ids": input_ids.to(device), "attention_mask": mask.to(device)}
    if getattr(lm.model.config, "type_vocab_size", 0) > 1:
        kwargs["token_type_ids"] = types.to(device)
    return kwargs


def stream_attention(
    lm: LoadedModel,
    inputs: list[tuple[list[int], list[int]]],
    device: torch.device,
    each_layer: Callable[[int, torch.Tensor], None],
    each_norms: Callable[[int, torch.Tensor], None] | None = None,
) -> None:
    """Run one padded batch of ``(input ids, token type ids)`` through ``lm`` (its model already on ``device``) and
    hand each layer's attention to ``each_layer(layer, maps)`` as the model computes it, in layer order: a float32
    tensor ``[batch, heads, longest, longest]`` on ``device`` (read it there and then: the model may reuse it).
    Positions past an input's length are padding: its rows there are not its attention, its columns there hold
    exactly 0. The model stops at the last layer's attention probabilities: what it computes after them (that
    layer's weighted values, feed-forward block, any pooler or head) is not needed (on the embedded model 13 %
    of the forward pass's CPU time). ``each_norms(layer, norms)``: each layer's value norms ``[batch, heads, longest]``
    (``atlas.model.value_norms``), handed on before its attention."""
    kwargs = model_inputs(lm, inputs, device)
    future = None  # checked on the first layer: every layer's mask is the model's causal mask (or a window of it)
    if lm.decoder:  # an input's own rows (a padding token's row may attend anywhere)
        longest = kwargs["input_ids"].shape[1]
        rows = torch.arange(longest, device=device) < kwargs["attention_mask"].sum(dim=1)[:, None]
        future = torch.ones(longest, longest, dtype=torch.bool, device=device).triu(1) & rows[:, None, :, None]
    captured = 0

    def take(probs: torch.Tensor) -> None:
        nonlocal captured
        probs = probs.float()
        if future is not None and captured == 0 and probs.masked_select(future).any():
            raise _looked_ahead(lm)
        each_layer(captured, probs)
        captured += 1
        if captured == lm.n_layers:
            raise _AllCaptured

    def norms(values: torch.Tensor) -> None:
        each_norms(captured, values)

    taking = (recording(take), norming(norms) if each_norms else nullcontext())
    _to_the_last_layer(lm, kwargs, taking, lambda: captured)


class _Layers:
    """A ``RowSink`` that hands each block to ``sink`` with its layer, and stops the model once the last layer's
    last block is in."""

    def __init__(self, sink: Callable[[int, int, torch.Tensor], None], bounds: Callable, n_layers: int) -> None:
        self.sink, self._bounds, self.n_layers = sink, bounds, n_layers
        self.layer, self.last = -1, 0

    def bounds(self, n: int) -> Iterable[tuple[int, int]]:
        self.layer += 1
        self.last = n
        return self._bounds(n)

    def rows(self, start: int, probs: torch.Tensor) -> None:
        self.sink(self.layer, start, probs)
        if self.layer == self.n_layers - 1 and start + probs.shape[-2] == self.last:
            raise _AllCaptured


def stream_rows(
    lm: LoadedModel,
    inputs: list[tuple[list[int], list[int]]],
    device: torch.device,
    bounds: Callable[[int], Iterable[tuple[int, int]]],
    each_block: Callable[[int, int, torch.Tensor], None],
    each_norms: Callable[[int, torch.Tensor], None] | None = None,
) -> None:
    """``stream_attention`` without whole maps, for inputs too long for them: each layer's attention is computed in
    the blocks of rows ``bounds(n)`` gives (``n``: the batch's longest input) and handed on as
    ``each_block(layer, start, probs)``, ``probs`` float32 ``[batch, heads, rows, n]``: the rows from ``start`` on
    (for a batch of one, no padding). A decoder's rows are checked to put no weight on a later token.
    ``each_norms(layer, norms)``: as ``stream_attention``'s, before the layer's first block."""
    kwargs = model_inputs(lm, inputs, device)

    def take(layer: int, start: int, probs: torch.Tensor) -> None:
        if lm.decoder and layer == 0 and probs.triu(start + 1).any():
            raise _looked_ahead(lm)
        each_block(layer, start, probs)

    layers = _Layers(take, bounds, lm.n_layers)

    def norms(values: torch.Tensor) -> None:
        each_norms(layers.layer, values)

    taking = (reading_rows(layers), norming(norms) if each_norms else nullcontext())
    _to_the_last_layer(lm, kwargs, taking, lambda: layers.layer + 1)


def _looked_ahead(lm: LoadedModel) -> AtlasError:
    return AtlasError(
        f"{arg('model', repr(lm.name))}: a decoder gave weight to a future token (causal mask not applied)"
    )


def _to_the_last_layer(
    lm: LoadedModel, kwargs: dict, taking: Sequence[AbstractContextManager], taken: Callable[[], int]
) -> None:
    """Run the model while ``taking`` hand its attention on, until the last layer's is in (``_AllCaptured``);
    refuse a model that ends first (``taken``: the layers handed on)."""
    try:
        with torch.inference_mode(), ExitStack() as stack:
            for context in taking:
                stack.enter_context(context)
            lm.model(**kwargs)
    except _AllCaptured:
        return
    raise AtlasError(
        f"{arg('model', repr(lm.name))}: attention captured for {taken()} of {lm.n_layers} layers; "
        "this architecture does not route attention through transformers' AttentionInterface"
    )


def attention_maps(
    lm: LoadedModel, inputs: list[tuple[list[int], list[int]]], device: torch.device
) -> list[torch.Tensor]:
    """``stream_attention``'s maps of every layer, kept: one float32 tensor ``[batch, heads, longest, longest]`` per
    layer, on ``device``."""
    maps: list[torch.Tensor] = []
    stream_attention(lm, inputs, device, lambda _layer, attn: maps.append(attn))
    return maps


def attention(lm: LoadedModel, inputs: list[tuple[list[int], list[int]]]) -> list[np.ndarray]:
    """Run one padded batch on the model's device; return each input's attention ``[layers, heads, n, n]``
    (float32 arrays on the host)."""
    maps = attention_maps(lm, inputs, lm.model.device)
    stacked = torch.stack(maps, dim=1).cpu().numpy()  # [batch, layers, heads, q, k]
    return [stacked[row, :, :, : len(ids), : len(ids)] for row, (ids, _) in enumerate(inputs)]
