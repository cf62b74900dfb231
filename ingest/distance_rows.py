"""The attention-distance profile of an ingest (table attn_distance): per input, layer and head, the share of the
attention of the input's rows (the mean over them) by query-key distance |i - j| in powers of two, bucket 0 for
distance 0 and bucket b for distances 2^(b-1) to 2^b - 1 (1, 2-3, 4-7, ...), up to the input's longest distance:
(n-1).bit_length() + 1 rows for an input of n tokens, however long. Beside each bucket's mass, the mass times the
distance (the mean attention distance is exact from it, their sum: Dosovitskiy et al. 2021, Figure 7) and the part
of the mass that goes to the input's first token and first 4 tokens (a BOS; StreamingLLM's 4 attention sinks: a
cache of the first S tokens and the last W keeps, for W = 2^k, the buckets 0 to k and the sink part of the others,
exactly).

Computed where the maps are (on the device) from each layer's maps or each block of rows, in one pass over them and
no copy: the sums over rows of each diagonal (query - key), in float32 over at most 128 rows (a relative error of
at most 128 x 2^-24, about 1e-5, and in practice 1e-7), then in float64 (float32 on MPS), then gathered into
buckets; the same for every row engine and for an input read by rows. Stored in float32 on a dense run; on a sparse
one the shares as the row masses are, to 2^-11, and the distances to 11 significant bits (``sparsify``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from atlas.ingestion.device import exact_dtype
from atlas.ingestion.host_copy import to_host
from atlas.ingestion.row_batch import LAYER_TYPE

SINKS = (1, 4)  # the first tokens whose part of each bucket's mass is kept (attn_distance.sink_<S>)
COLUMNS = ("mass", "distance", *(f"sink_{s}" for s in SINKS))
BUCKET_TYPE = np.int8  # attn_distance.bucket: TINYINT
ROWS = 128  # rows whose weights are summed in float32 (each diagonal's at most 128), before the float64 sums


def n_buckets(n: int) -> int:
    """The buckets of an input of ``n`` tokens: distances 0 to n - 1."""
    return max(n - 1, 0).bit_length() + 1


def bucket_of(distance: torch.Tensor) -> torch.Tensor:
    """Each distance's bucket (its bit length: 0 -> 0, 1 -> 1, 2-3 -> 2, 4-7 -> 3, ...), exact below 2^53."""
    return torch.frexp(distance.to(torch.float64)).exponent.long()


def diagonal_sums(probs: torch.Tensor, start: int, lengths: torch.Tensor) -> torch.Tensor:
    """The sums over rows of ``probs`` ``[batch, heads, rows, n]`` (rows ``start`` on; an input's rows past its
    ``lengths`` left out) of each diagonal, ``[batch * heads, n + rows - 1]``: column c holds the weights of the
    block's row i and key j with i - j + n - 1 = c. Summed in the maps' float32 ``ROWS`` rows at a time, then in
    float64 (float32 on MPS); the rows from the shortest input's end on, where some are padding, through a copy
    without them (a batch of inputs of similar lengths: a small part of its rows)."""
    batch, heads, r, n = probs.shape
    device, exact = probs.device, exact_dtype(probs.device)
    keys = torch.arange(n, device=device)
    whole = int(min(max(int(lengths.min()) - start, 0), r))  # rows that are no input's padding
    sums = torch.zeros(batch * heads, n + r - 1, dtype=exact, device=device)
    bounds = [(lo, min(lo + ROWS, whole)) for lo in range(0, whole, ROWS)]
    bounds += [(lo, min(lo + ROWS, r)) for lo in range(whole, r, ROWS)]
    for lo, hi in bounds:
        rows = probs[:, :, lo:hi]
        if lo >= whole:
            own = torch.arange(start + lo, start + hi, device=device) < lengths[:, None]  # [batch, rows]
            rows = torch.where(own[:, None, :, None], rows, 0)
        index = (torch.arange(lo, hi, device=device)[:, None] - keys + n - 1).reshape(-1)
        part = torch.zeros(batch * heads, n + r - 1, dtype=probs.dtype, device=device)
        sums += part.index_add_(1, index, rows.reshape(batch * heads, -1))
    return sums


class DistanceRows:
    """A forward batch's distance profiles, fed each layer's maps (``layer``) or its blocks of rows (``block``)."""

    def __init__(self, n_layers: int, lengths: Sequence[int]) -> None:
        self.lengths = list(lengths)
        self.n_buckets = n_buckets(max(self.lengths))
        self.sums: list[torch.Tensor | None] = [None] * n_layers  # [batch, heads, columns, buckets] per layer

    def layer(self, layer: int, attn: torch.Tensor) -> None:
        """Layer ``layer``'s maps ``[batch, heads, n, n]`` (float32)."""
        self.block(layer, 0, attn)

    def block(self, layer: int, start: int, probs: torch.Tensor) -> None:
        """A block of layer ``layer``'s rows ``[batch, heads, rows, n]``, from row ``start`` on."""
        batch, heads, r, n = probs.shape
        device, exact = probs.device, exact_dtype(probs.device)
        position = torch.arange(start, start + r, device=device)
        lengths = torch.tensor(self.lengths, device=device)
        sums = diagonal_sums(probs, start, lengths)
        signed = start - n + 1 + torch.arange(n + r - 1, device=device)  # query - key of each column
        distance = signed.abs()
        buckets = bucket_of(distance).clamp(max=self.n_buckets - 1)  # a diagonal past every input's end holds 0
        out = torch.zeros(batch * heads, len(COLUMNS), self.n_buckets, dtype=exact, device=device)
        out[:, 0].index_add_(1, buckets, sums)
        out[:, 1].index_add_(1, buckets, sums * distance.to(exact))
        own = position < lengths[:, None]  # [batch, rows]: not padding
        first = torch.where(own[:, None, :, None], probs[..., : SINKS[-1]], 0)  # the keys of the sinks
        k = first.shape[-1]
        first = first.reshape(batch * heads, r, k).to(exact)
        sink_buckets = bucket_of((position[:, None] - torch.arange(k, device=device)).abs())  # [rows, keys]
        for column, sink in enumerate(SINKS, start=2):
            if sink <= k:
                index = sink_buckets[:, :sink].reshape(-1).expand(batch * heads, -1)
                out[:, column].scatter_add_(1, index, first[..., :sink].reshape(batch * heads, -1))
            else:  # every key of a short input is a sink
                out[:, column] = out[:, 0]
        out = out.view(batch, heads, len(COLUMNS), self.n_buckets)
        self.sums[layer] = out if start == 0 else self.sums[layer] + out

    def columns(self) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """attn_distance's rows (layer, head, bucket and ``COLUMNS``: the means over each input's rows, float32),
        input after input, each in (layer, head, bucket) order, and each input's number of them."""
        sums = torch.stack(self.sums, dim=1)  # [batch, layers, heads, columns, buckets]
        self.sums = [None] * len(self.sums)
        rows = torch.tensor(self.lengths, dtype=sums.dtype, device=sums.device)
        host = to_host({"means": (sums / rows[:, None, None, None, None]).float()})["means"]
        batch, layers, heads = host.shape[:3]
        columns: dict[str, list[np.ndarray]] = {name: [] for name in ("layer", "head", "bucket", *COLUMNS)}
        counts = np.zeros(batch, dtype=np.int64)
        for b, n in enumerate(self.lengths):
            kept = n_buckets(n)
            grid = np.indices((layers, heads, kept)).reshape(3, -1)
            columns["layer"].append(grid[0].astype(LAYER_TYPE))
            columns["head"].append(grid[1].astype(LAYER_TYPE))
            columns["bucket"].append(grid[2].astype(BUCKET_TYPE))
            values = host[b, ..., :kept].transpose(2, 0, 1, 3).reshape(len(COLUMNS), -1)  # [columns, rows]
            for name, value in zip(COLUMNS, values, strict=True):
                columns[name].append(value)
            counts[b] = layers * heads * kept
        return {name: np.concatenate(parts) for name, parts in columns.items()}, counts


def empty_columns() -> dict[str, np.ndarray]:
    """attn_distance's columns without a row."""
    keys = {"layer": np.zeros(0, LAYER_TYPE), "head": np.zeros(0, LAYER_TYPE), "bucket": np.zeros(0, BUCKET_TYPE)}
    return keys | {name: np.zeros(0, np.float32) for name in COLUMNS}
