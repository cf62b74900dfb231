"""The norm-based statistics of an ingest (``--norms``; Kobayashi et al. 2020): per attention row the norm of what the
head passes on from the row's token, ``||f_h(x_i)||`` (``atlas.model.value_norms``; attn_rows.value_norm), and per
input, layer and head the sums over the input's rows of what each row draws through the head in norm,
``Σ_j α_ij ||f_h(x_j)||``, over the keys of each target kind and over every key, and of each row's share of it per
kind (table head_norms).

Per row, each mass would be another float column of attn_rows as large as value_norm (UD EWT dev, sparse: 1.74
bytes a row at 11 significant bits, 7.5 % of the store); their sums per input and head are what the norm-based
analyses read (the mean over an input's rows), exact, in one row per input and head (UD EWT dev: 144,072 rows
against attn_rows' 2,438,784; bench/RESULTS.md). An edge's norm-weighted value is its weight times its destination's
value_norm, and a row's norm-weighted mass to itself its to_self times its value_norm.

Computed where the maps are (on the device), from each layer's maps or each block of rows and the layer's value norms,
with tensor operations in float32 (one product of the rows with the keys' norms per target), the sums over rows in
float64 (float32 on MPS): on every row engine the same, and for every input, whole or read by rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from atlas.ingestion.device import exact_dtype
from atlas.ingestion.host_copy import to_host
from atlas.ingestion.row_batch import LAYER_TYPE


def head_columns(targets: Sequence[str]) -> list[str]:
    """head_norms's columns of ``NormRows.heads``, for targets ``targets`` (cls, sep, dot_comma)."""
    return [*(f"norm_{name}" for name in targets), "norm_total", *(f"share_{name}" for name in targets)]


class NormRows:
    """A forward batch's norm-based statistics, fed each layer's value norms (``norms``) then its maps (``layer``) or
    its blocks of rows (``block``)."""

    def __init__(self, n_layers: int, lengths: Sequence[int], masks: np.ndarray) -> None:
        """``masks``: ``[batch, n_max, targets]``, each input's tokens of each target kind."""
        self.lengths = list(lengths)
        self.masks = masks
        self._masks: torch.Tensor | None = None  # [batch, n_max, targets] float32, on the maps' device
        self.values: list[torch.Tensor | None] = [None] * n_layers  # [batch, heads, n] per layer, as they come
        self.sums: list[torch.Tensor | None] = [None] * n_layers  # [batch, heads, 2 * targets + 1] per layer

    def norms(self, layer: int, norms: torch.Tensor) -> None:
        """Layer ``layer``'s value norms ``[batch, heads, n]``."""
        self.values[layer] = norms.float()

    def layer(self, layer: int, attn: torch.Tensor) -> None:
        """Layer ``layer``'s maps ``[batch, heads, n, n]`` (float32)."""
        self.block(layer, 0, attn)

    def block(self, layer: int, start: int, probs: torch.Tensor) -> None:
        """A block of layer ``layer``'s rows ``[batch, heads, rows, n]``, from row ``start`` on."""
        norms = self.values[layer]
        assert norms is not None, "a layer's value norms come before its rows"
        n, r = probs.shape[-1], probs.shape[-2]
        if self._masks is None:
            self._masks = torch.from_numpy(self.masks.astype(np.float32)).to(probs.device)
        keys = torch.cat([self._masks[:, None, :n] * norms[..., None], norms[..., None]], dim=-1)
        weighted = probs @ keys  # [batch, heads, rows, targets + 1]: each target's, then every key's
        shares = weighted[..., :-1] / weighted[..., -1:]
        position = torch.arange(start, start + r, device=probs.device)
        own = position < torch.tensor(self.lengths, device=probs.device)[:, None]  # [batch, rows]: not padding
        rows = torch.cat([weighted, shares], dim=-1).to(exact_dtype(probs.device))
        sums = torch.where(own[:, None, :, None], rows, 0).sum(dim=2)
        self.sums[layer] = sums if start == 0 else self.sums[layer] + sums

    def value_norms(self) -> np.ndarray:
        """Each row's token's value norm, input after input, each in (layer, head, position) order (attn_rows's)."""
        values = torch.stack(self.values, dim=1)  # [batch, layers, heads, n]
        flat = torch.cat([values[b, ..., :n].reshape(-1) for b, n in enumerate(self.lengths)])
        self.values = [None] * len(self.values)
        return to_host({"value_norm": flat})["value_norm"]

    def heads(self, targets: Sequence[str]) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """head_norms's rows (``layer``, ``head`` and ``head_columns``), input after input, each in (layer, head)
        order, and each input's number of them."""
        sums = torch.stack(self.sums, dim=1)  # [batch, layers, heads, columns]
        self.sums = [None] * len(self.sums)
        batch, layers, heads, _ = sums.shape
        host = to_host({"sums": sums.reshape(batch * layers * heads, -1).T.contiguous()})["sums"]
        index = np.arange(layers * heads)
        columns = {
            "layer": np.tile((index // heads).astype(LAYER_TYPE), batch),
            "head": np.tile((index % heads).astype(LAYER_TYPE), batch),
        }
        columns.update(zip(head_columns(targets), host, strict=True))
        return columns, np.full(batch, layers * heads, dtype=np.int64)
