"""The attention-distance profile of an ingest (table attn_distance): per input, layer and head, the share of the
attention of the input's rows (the mean over them) by query-key distance |i - j| in powers of two, bucket 0 for
distance 0 and bucket b for distances 2^(b-1) to 2^b - 1 (1, 2-3, 4-7, ...), up to the input's longest distance:
(n-1).bit_length() + 1 rows for an input of n tokens, however long. Beside each bucket's mass, the mass times the
distance (the mean attention distance is exact from it, their sum: Dosovitskiy et al. 2021, Figure 7) and the part
of the mass that goes to the input's first token and first 4 tokens (a BOS; StreamingLLM's 4 attention sinks: a
cache of the first S tokens and the last W keeps, for W = 2^k, the buckets 0 to k and the sink part of the others,
exactly).

Computed where the maps are (on the device) from each layer's maps or each block of rows, in one pass over them: a
float32 matrix product of the rows with a 0/1 matrix of each weight's bucket (and its distance), at most 2^15
weights of a row at a time (the products' relative error in practice 1e-7), summed in float64 (float32 on MPS); the
same for every row engine and for an input read by rows (bench/RESULTS.md: 1 % of an ingest's time). Stored in
float32 on a dense run; on a sparse one the shares as the row masses are, to 2^-11, and the distances to 11
significant bits (``sparsify``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from atlas.ingestion.device import exact_dtype
from atlas.ingestion.host_copy import to_host
from atlas.ingestion.row_batch import LAYER_TYPE

SINKS = (1, 4)  # the first tokens whose part of each bucket's mass is kept (attn_distance.sink_<S>)
COLUMNS = ("mass", "distance", *(f"sink_{s}" for s in SINKS))
BUCKET_TYPE = np.int8  # attn_distance.bucket: TINYINT
TERMS = 2**15  # weights whose products a float32 product sums at once (then float64): a whole map up to 181 tokens
KEPT = 512  # a whole map's weights are made once for every layer up to this many tokens (42 MB at 512)
DIAGONAL = 2**21  # past KEPT tokens, weights summed along the diagonals at once (their index: 16 MB)


def n_buckets(n: int) -> int:
    """The buckets of an input of ``n`` tokens: distances 0 to n - 1."""
    return max(n - 1, 0).bit_length() + 1


def bucket_of(distance: torch.Tensor) -> torch.Tensor:
    """Each distance's bucket (its bit length: 0 -> 0, 1 -> 1, 2-3 -> 2, 4-7 -> 3, ...), exact below 2^24 (float32:
    MPS has no float64)."""
    return torch.frexp(distance.to(torch.float32)).exponent.long()


def weights(rows: torch.Tensor, keys: int, buckets: int, sinks: bool = False) -> torch.Tensor:
    """What each weight of rows ``rows`` (their positions) over keys 0 to ``keys`` - 1 adds to the profile's
    columns, flat ``[rows * keys, 2 * buckets]``: to its bucket's mass 1 and to its bucket's distance the distance;
    ``sinks``: to its bucket's part of each sink (``SINKS``) 1 where the key is among the sink's first tokens,
    ``[rows * keys, len(SINKS) * buckets]``."""
    key = torch.arange(keys, device=rows.device)
    distance = (rows[:, None] - key).abs().reshape(-1)
    bucket = bucket_of(distance)
    k = torch.arange(distance.numel(), device=rows.device)
    if not sinks:
        out = torch.zeros(distance.numel(), 2, buckets, device=rows.device)
        out[k, 0, bucket] = 1
        out[k, 1, bucket] = distance.float()
        return out.view(distance.numel(), -1)
    out = torch.zeros(distance.numel(), len(SINKS), buckets, device=rows.device)
    key = key.repeat(len(rows))
    for column, sink in enumerate(SINKS):
        near = key < sink
        out[k[near], column, bucket[near]] = 1
    return out.view(distance.numel(), -1)


class DistanceRows:
    """A forward batch's distance profiles, fed each layer's maps (``layer``) or its blocks of rows (``block``)."""

    def __init__(self, n_layers: int, lengths: Sequence[int]) -> None:
        self.lengths = list(lengths)
        self.n_buckets = n_buckets(max(self.lengths))
        self.sums: list[torch.Tensor | None] = [None] * n_layers  # [batch, heads, columns, buckets] per layer
        # the weights of a whole map's rows (every layer's): from each bound (``_weights``), and the sinks'
        self._whole: dict[int | str, torch.Tensor] = {}
        self._lengths: torch.Tensor | None = None  # the lengths on the maps' device (made with the first block)

    def layer(self, layer: int, attn: torch.Tensor) -> None:
        """Layer ``layer``'s maps ``[batch, heads, n, n]`` (float32)."""
        self.block(layer, 0, attn)

    def block(self, layer: int, start: int, probs: torch.Tensor) -> None:
        """A block of layer ``layer``'s rows ``[batch, heads, rows, n]``, from row ``start`` on: with n up to
        ``KEPT`` its weights times ``weights`` (``TERMS`` at a time in float32), past it the sums of its diagonals
        (``DIAGONAL`` weights at a time in float32, then gathered into buckets: a 0/1 matrix of a long row's would be
        dozens of times the row), summed in float64 (float32 on MPS); the rows from the shortest input's end on, where
        some are padding, through a copy without them (a batch of inputs of similar lengths: a small part of its
        rows)."""
        batch, heads, r, n = probs.shape
        device, exact = probs.device, exact_dtype(probs.device)
        if self._lengths is None:
            self._lengths = torch.tensor(self.lengths, device=device)
        lengths = self._lengths
        whole = min(max(min(self.lengths) - start, 0), r)  # rows that are no input's padding (no wait for a device)
        step = max((TERMS if n <= KEPT else DIAGONAL) // n, 1)
        bounds = [(lo, min(lo + step, whole)) for lo in range(0, whole, step)]
        bounds += [(lo, min(lo + step, r)) for lo in range(whole, r, step)]
        sums = torch.zeros(batch * heads, 2 * self.n_buckets if n <= KEPT else n + r - 1, dtype=exact, device=device)
        keys = torch.arange(n, device=device)
        for lo, hi in bounds:
            rows = probs[:, :, lo:hi]
            if lo >= whole:
                own = torch.arange(start + lo, start + hi, device=device) < lengths[:, None]  # [batch, rows]
                rows = torch.where(own[:, None, :, None], rows, 0)
            rows = rows.reshape(batch * heads, -1)
            if n <= KEPT:
                sums += rows @ self._weights(start, lo, hi, probs)
            else:  # column c: query - key = start - n + 1 + c
                diagonal = (torch.arange(lo, hi, device=device)[:, None] - keys + n - 1).reshape(-1)
                sums += torch.zeros(batch * heads, n + r - 1, device=device).index_add_(1, diagonal, rows)
        if n > KEPT:
            distance = (start - n + 1 + torch.arange(n + r - 1, device=device)).abs()
            bucket = bucket_of(distance).clamp(max=self.n_buckets - 1)  # a diagonal past every input's end holds 0
            gathered = torch.zeros(batch * heads, 2, self.n_buckets, dtype=exact, device=device)
            gathered[:, 0].index_add_(1, bucket, sums)
            gathered[:, 1].index_add_(1, bucket, sums * distance.to(exact))
            sums = gathered.view(batch * heads, -1)
        # the sinks' parts from their keys alone (the first SINKS[-1] tokens)
        own = torch.arange(start, start + r, device=device) < lengths[:, None]
        first = torch.where(own[:, None, :, None], probs[..., : SINKS[-1]], 0).reshape(batch * heads, -1)
        sinks = first.to(exact) @ self._sink_weights(start, r, n, exact, device)
        out = torch.cat([sums, sinks], dim=1).view(batch, heads, len(COLUMNS), self.n_buckets)
        self.sums[layer] = out if start == 0 else self.sums[layer] + out

    def _sink_weights(self, start: int, r: int, n: int, exact: torch.dtype, device: torch.device) -> torch.Tensor:
        """``weights`` of the sinks of a block's ``r`` rows from row ``start`` on, in ``exact``; a whole map's kept for
        the next layers (made for each layer, a batch's profile took 1.16 to 1.34 times as long on a CPU: 35 inputs of
        41 tokens, 64 of 20, 8 of 128, 6 layers of 12 heads)."""

        def made() -> torch.Tensor:
            positions = torch.arange(start, start + r, device=device)
            return weights(positions, min(n, SINKS[-1]), self.n_buckets, sinks=True).to(exact)

        return self._kept("sinks", start == 0 and r == n, made)

    def _weights(self, start: int, lo: int, hi: int, probs: torch.Tensor) -> torch.Tensor:
        """``weights`` of a block's rows ``lo`` to ``hi``; a whole map's of up to ``KEPT`` tokens kept for the next
        layers."""
        r, n = probs.shape[-2:]

        def made() -> torch.Tensor:
            return weights(torch.arange(start + lo, start + hi, device=probs.device), n, self.n_buckets)

        return self._kept(lo, start == 0 and r == n <= KEPT, made)

    def _kept(self, key: int | str, whole: bool, make: Callable[[], torch.Tensor]) -> torch.Tensor:
        """``make()``; where it is of a ``whole`` map's rows, made once and kept under ``key`` for the next layers."""
        if not whole:
            return make()
        if key not in self._whole:
            self._whole[key] = make()
        return self._whole[key]

    def columns(self) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """attn_distance's rows (layer, head, bucket and ``COLUMNS``: the means over each input's rows, float32),
        input after input, each in (layer, head, bucket) order, and each input's number of them."""
        sums = torch.stack(self.sums, dim=1)  # [batch, layers, heads, columns, buckets]
        self.sums = [None] * len(self.sums)
        rows = torch.tensor(self.lengths, dtype=sums.dtype, device=sums.device)
        host = to_host({"means": (sums / rows[:, None, None, None, None]).float()})["means"]
        batch, layers, heads = host.shape[:3]
        columns: dict[str, list[np.ndarray]] = {name: [] for name in ("layer", "head", "bucket", *COLUMNS)}
        kept = np.array([n_buckets(n) for n in self.lengths])
        counts = (layers * heads * kept).astype(np.int64)
        # inputs in runs of the same number of buckets (a batch's inputs are of about one length), each run at once
        cuts = [0, *(np.flatnonzero(np.diff(kept)) + 1).tolist(), batch]
        for start, stop in zip(cuts[:-1], cuts[1:], strict=True):
            k, g = int(kept[start]), stop - start
            grid = np.indices((layers, heads, k)).reshape(3, -1)
            for name, keys, kind in zip(("layer", "head", "bucket"), grid, KEY_TYPES, strict=True):
                columns[name].append(np.tile(keys.astype(kind), g))
            values = host[start:stop, ..., :k].transpose(3, 0, 1, 2, 4).reshape(len(COLUMNS), -1)  # [columns, rows]
            for name, value in zip(COLUMNS, values, strict=True):
                columns[name].append(value)
        return {name: np.concatenate(parts) for name, parts in columns.items()}, counts


KEY_TYPES = (LAYER_TYPE, LAYER_TYPE, BUCKET_TYPE)  # of the layer, head and bucket columns


def empty_columns() -> dict[str, np.ndarray]:
    """attn_distance's columns without a row."""
    keys = {"layer": np.zeros(0, LAYER_TYPE), "head": np.zeros(0, LAYER_TYPE), "bucket": np.zeros(0, BUCKET_TYPE)}
    return keys | {name: np.zeros(0, np.float32) for name in COLUMNS}
