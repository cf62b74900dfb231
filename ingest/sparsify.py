"""Stage 4: turn a forward batch's attention into store rows, for the whole batch at once.

The maps come as one tensor ``[batch, heads, n, n]`` per layer (padded to the batch's longest input). The work per
weight runs where the maps are: on a CPU in one compiled pass over each row (``atlas.ingestion.cpu_rows``), on an
accelerator as tensor operations over the batch (``atlas.ingestion.tensor_rows``); both give the same rows (tested on
the same maps). Rounding to the stored precision and the batch's store columns (input after input) are here.

- edges: per attention row, the largest weights until their kept mass reaches the target, at most
  ``max_edges`` of them; the argmax is always kept. Weights are ranked as stored (ties: the earlier token) and
  the mass is the stored mass. ``kept_mass=None`` is the dense setting: every weight kept, no cap.
- rows: per-row statistics from the dense row: entropy (nats, of Clark et al.'s smoothed row
  0.9999 a + 1e-4 / n, as their released General_Analysis computes it), argmax, the mass given to chosen
  tokens (itself, previous, next, the input's first token, the targets: [CLS]/BOS, [SEP]/EOS, '.' and ','),
  and the attention the row's token receives (the column sum of the dense map over every row of the input).
  What a row's edges give is not stored again: its kept mass, number of edges and largest weight (the argmax
  edge's) are the sum, count and max of its edges; nor is the mass to the first token where that token is the
  input's only [CLS]/BOS (the mass to [CLS]/BOS then; to_first is NULL in the file, the store's view fills it).
- word rows: Clark et al.'s word-level map (attention TO a word = sum over its pieces, FROM a word = mean over
  its pieces, special tokens as units of their own; ``first_piece``: FROM a word = its first piece's row, the
  released code's ``get_word_word_attention`` default); for every word, the other word it attends to most (never
  itself or a special token) and that weight, and the other word attending to it most (the transposed map:
  Clark et al.'s head -> dependent predictor) and that weight. Exact whatever the edge sparsity. A word without
  pieces of its own (text as written: "not" of "cannot", one piece; ``atlas.ingestion.align``) has no row and is never
  a prediction; an input with fewer than two words with pieces has no word rows.

Precision. The dense setting stores everything exact (float32). The sparse setting stores weights in fixed
point: edge and word-level weights as multiples of 1/256 (``WEIGHT_STEP``, error at most 1/512; a weight below
1/512 rounds to 0 and is never an edge, except an argmax, stored as 1/256), the row masses ``to_*`` as
multiples of 1/2048 (``MASS_STEP``, error at most 1/4096, what float16 gives a mass of 0.5 to 1), the received
attention at float16 precision (relative error at most 2**-11), the entropy to 17 significant bits (relative
error at most 2**-17, 0.0001 nats at most: a twentieth of what the smoothing adds). Argmax and all word-level
predictions are exact.
The word-level map is summed in float32 in token order (the same sums on every device: its argmaxes are exact);
the entropy, the masses and the received attention in float64 on a CPU (float32, and float64 for the received
attention, with tensor operations: within a relative 3.4e-7 of float64 on samples of EWT and GUM).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numba as nb
import numpy as np
import torch

from atlas.ingestion.block_rows import BlockRows
from atlas.ingestion.cpu_rows import CpuBlockRows, CpuRows
from atlas.ingestion.distance_rows import SINKS, DistanceRows
from atlas.ingestion.norm_rows import NormRows
from atlas.ingestion.rollout import Rollout, empty_columns
from atlas.ingestion.row_batch import LAYER_TYPE, POSITION_TYPE, RowBatch
from atlas.ingestion.run_id import MAX_EDGES
from atlas.ingestion.tensor_rows import TensorRows

Columns = dict[str, np.ndarray]


class Table(NamedTuple):
    """A forward batch's rows of one table, input after input: the columns and each input's number of rows."""

    columns: Columns
    counts: np.ndarray

    def split(self) -> list[Columns]:
        """Each input's columns."""
        bounds = np.concatenate([[0], np.cumsum(self.counts)])
        cuts = [slice(start, stop) for start, stop in zip(bounds[:-1], bounds[1:], strict=True)]
        return [{name: c[cut] for name, c in self.columns.items()} for cut in cuts]


ENTROPY_SMOOTHING = 1e-4  # Clark et al.: entropy of (1 - s) a + s / n, "to avoid NaNs"
WEIGHT_STEP = 2**-8  # sparse setting: edge and word-level weights are multiples of this
MASS_STEP = 2**-11  # sparse setting: the row masses to_* are multiples of this
ENTROPY_ROUND = 2**7  # sparse setting: entropy keeps 23 - 7 of float32's mantissa bits (17 significant bits)
NORM_ROUND = 2**13  # sparse setting: the value norms keep 11 significant bits (float16's precision)
MASSES = ("to_self", "to_prev", "to_next", "to_first")  # then to_<target> for each target
WORD_COLUMNS = {"dst_word": POSITION_TYPE, "weight": np.float32, "from_word": POSITION_TYPE, "from_weight": np.float32}


def _fixed(x: np.ndarray, step: float) -> np.ndarray:
    return np.round(x / step) * step


class BatchRows:
    """A forward batch's store rows, fed one layer's maps at a time as the forward pass computes them (``layer``),
    collected per input once every layer is in (``rows``).

    ``lengths``: each input's number of tokens; ``token_words``: each input's word of each token (None: a special
    token); ``targets``: per input, a boolean mask over its tokens for each target token kind, e.g. cls, sep,
    dot_comma (None: no ``to_<target>`` columns); ``causal``: a decoder's maps, where no edge to a later token is ever
    stored (not even a dense one of weight 0). ``norms``: the rows' norm-based statistics too
    (``atlas.ingestion.norm_rows``; each layer's value norms come before its maps: ``norms``); ``rollout``: which
    rows of the attention rollout to keep (``atlas.ingestion.rollout``; none for an input read by rows)."""

    def __init__(
        self,
        device: torch.device,
        n_layers: int,
        n_heads: int,
        lengths: Sequence[int],
        token_words: Sequence[Sequence[int | None]],
        targets: Sequence[dict[str, np.ndarray]] | None,
        kept_mass: float | None,
        max_edges: int | None = MAX_EDGES,
        causal: bool = False,
        first_piece: bool = False,
        block_weights: int | None = None,
        work_weights: int | None = None,
        norms: bool = False,
        rollout: str = "none",
    ) -> None:
        n_max = max(lengths)
        self.names = list(targets[0]) if targets else []
        masks = np.zeros((len(lengths), n_max, len(self.names)), dtype=np.bool_)
        for b, t in enumerate(targets or []):
            if self.names:
                masks[b, : lengths[b]] = np.stack([t[name] for name in self.names], axis=1)
        self.n_words = [1 + max((w for w in tw if w is not None), default=-1) for tw in token_words]
        self.lengths, self.sparse, self.n_layers, self.n_heads = lengths, kept_mass is not None, n_layers, n_heads
        self.first_is_cls = [bool(t["cls"][0]) and t["cls"].sum() == 1 for t in targets or []]
        batch = RowBatch(n_layers, n_heads, n_max, lengths, token_words, self.n_words, masks, kept_mass, max_edges,
                         causal, ENTROPY_SMOOTHING, WEIGHT_STEP, first_piece)  # fmt: skip
        self.word_kept = _words_with_pieces(token_words, batch.word_rows)
        # the rows' layer, head and position (and the word rows'), known before the maps
        self.row_keys = _keys(np.asarray(lengths, dtype=np.int64), n_layers, n_heads)
        self.word_keys = _keys(np.asarray(batch.word_rows, dtype=np.int64), n_layers, n_heads)
        # block_weights: an input too long for its whole maps, read in blocks of rows of that many weights
        # work_weights: on an accelerator, the weights of the inputs whose rows are computed at once
        self.by_rows: CpuBlockRows | BlockRows | None = None
        if block_weights is not None:
            self.arrays = self.by_rows = (CpuBlockRows if device.type == "cpu" else BlockRows)(batch, block_weights)
        elif device.type == "cpu":
            self.arrays = CpuRows(batch)
        else:
            self.arrays = TensorRows(batch) if work_weights is None else TensorRows(batch, work_weights)
        self.norm_rows = NormRows(n_layers, lengths, masks) if norms else None
        self.distances = DistanceRows(n_layers, lengths)
        self.rollout = None
        if rollout != "none" and block_weights is None:
            cls = [_first(t["cls"]) if t else None for t in targets or [None] * len(lengths)]
            self.rollout = Rollout(rollout, lengths, cls, kept_mass, max_edges, causal, WEIGHT_STEP)

    def norms(self, layer: int, norms: torch.Tensor) -> None:
        """Layer ``layer``'s value norms ``[batch, heads, n]`` (``atlas.model.value_norms``), before its maps."""
        self.norm_rows.norms(layer, norms)

    def layer(self, layer: int, attn: torch.Tensor) -> None:
        """Layer ``layer``'s maps ``[batch, heads, n, n]`` (float32; padded to the batch's longest input)."""
        if self.norm_rows is not None:
            self.norm_rows.layer(layer, attn)
        self.distances.layer(layer, attn)
        if self.rollout is not None:
            self.rollout.layer(layer, attn)
        self.arrays.layer(layer, attn)

    def block(self, layer: int, start: int, probs: torch.Tensor) -> None:
        """A block of layer ``layer``'s rows ``[batch, heads, rows, n]`` from row ``start`` on (an input read by
        rows)."""
        if self.norm_rows is not None:
            self.norm_rows.block(layer, start, probs)
        self.distances.block(layer, start, probs)
        self.by_rows.rows(layer, start, probs)

    def tables(self) -> tuple[Table, Table, Table, Table, Table, Table]:
        """The batch's edges, rows, word rows, rollout rows, head norms and distance profiles (every input's, input
        after input), once every layer is in."""
        stats, words, edges, counts = self.arrays.result()
        heads = Table(*_no_head_norms(len(self.lengths)))
        if self.norm_rows is not None:
            stats["value_norm"] = self.norm_rows.value_norms()
            heads = Table(*self.norm_rows.heads(self.names))
        _round(stats, words, self.sparse)
        mass_names = [*MASSES, *(f"to_{name}" for name in self.names)]
        rollout = Table(*self.rollout.columns()) if self.rollout is not None else _no_rollout(len(self.lengths))
        return (
            Table(edges, counts),
            _rows(stats, self.row_keys, mass_names, self.first_is_cls),
            _kept_rows(_word_rows(words, self.word_keys), self.word_kept, self.n_layers * self.n_heads),
            rollout,
            heads,
            _distances(self.distances.columns(), self.sparse),
        )


def batch_rows(
    maps: Sequence[torch.Tensor],
    lengths: Sequence[int],
    token_words: Sequence[Sequence[int | None]],
    targets: Sequence[dict[str, np.ndarray]] | None,
    kept_mass: float | None,
    max_edges: int | None = MAX_EDGES,
    causal: bool = False,
    first_piece: bool = False,
) -> list[tuple[Columns, Columns, Columns]]:
    """``BatchRows`` of a batch whose maps (one tensor ``[batch, heads, n, n]`` per layer) are all at hand."""
    batch = BatchRows(maps[0].device, len(maps), maps[0].shape[1], lengths, token_words, targets, kept_mass,
                      max_edges, causal, first_piece)  # fmt: skip
    for layer, attn in enumerate(maps):
        batch.layer(layer, attn)
    edges, rows, words, *_ = (table.split() for table in batch.tables())
    return list(zip(edges, rows, words, strict=True))


def _round(stats: dict[str, np.ndarray], words: dict[str, np.ndarray], sparse: bool) -> None:
    """To the stored precision (see above), in place: the sparse setting's fixed point, float16 and entropy bits;
    float32 in the dense setting. The masses become ``[masses, rows]``."""
    entropy, received = stats["entropy"].astype(np.float32), stats["received"].astype(np.float32)
    # a row per mass, so that each mass column is contiguous (taken by Arrow without a copy: ChunkRows.add_attention)
    masses = np.ascontiguousarray(stats["masses"].T, dtype=np.float32)
    if sparse:  # to 17 significant bits (relative error at most 2**-17): the lower bits cost a byte a row on disk
        entropy = ((entropy.view(np.int32) + ENTROPY_ROUND // 2) & -ENTROPY_ROUND).view(np.float32)
        received = received.astype(np.float16).astype(np.float32)
        masses /= MASS_STEP
        np.round(masses, out=masses)
        masses *= MASS_STEP
        for name in ("weight", "from_weight"):
            if name in words:
                words[name] = _fixed(words[name], WEIGHT_STEP)
    stats["entropy"], stats["received"], stats["masses"] = entropy, received, masses
    if "value_norm" in stats:
        norm = stats["value_norm"].astype(np.float32)
        if sparse:
            norm = ((norm.view(np.int32) + NORM_ROUND // 2) & -NORM_ROUND).view(np.float32)
        stats["value_norm"] = norm


def _distances(table: tuple[Columns, np.ndarray], sparse: bool) -> Table:
    """attn_distance's rows at the stored precision: float32 in the dense setting; in the sparse one the shares as the
    row masses are (multiples of MASS_STEP) and the mean distance to 11 significant bits (as the value norms)."""
    columns, counts = table
    if sparse:
        for name in ("mass", *(f"sink_{s}" for s in SINKS)):
            columns[name] = _fixed(columns[name], MASS_STEP).astype(np.float32)
        columns["distance"] = ((columns["distance"].view(np.int32) + NORM_ROUND // 2) & -NORM_ROUND).view(np.float32)
    return Table(columns, counts)


def _first(mask: np.ndarray) -> int | None:
    """The first token of a mask, None where it has none."""
    where = np.flatnonzero(mask)
    return int(where[0]) if where.size else None


def _no_rollout(n_inputs: int) -> Table:
    return Table(empty_columns(), np.zeros(n_inputs, dtype=np.int64))


def _no_head_norms(n_inputs: int) -> tuple[Columns, np.ndarray]:
    return {"layer": np.zeros(0, LAYER_TYPE), "head": np.zeros(0, LAYER_TYPE)}, np.zeros(n_inputs, dtype=np.int64)


def _keys(lengths: np.ndarray, n_layers: int, n_heads: int) -> Table:
    """Layer, head and position of each row of the inputs' ``[layers * heads, length]`` grids, input after input, and
    each input's number of rows."""
    counts = lengths * n_layers * n_heads
    n = int(counts.sum())
    keys = {"layer": np.empty(n, LAYER_TYPE), "head": np.empty(n, LAYER_TYPE), "position": np.empty(n, POSITION_TYPE)}
    _fill_keys(lengths, n_layers, n_heads, keys["layer"], keys["head"], keys["position"])
    return Table(keys, counts)


@nb.njit(nogil=True, cache=True)
def _fill_keys(lengths, n_layers, n_heads, layer, head, position):
    """``_keys``'s columns, written in one pass (input by input with NumPy's repeat and tile: 4 times the time over
    UD EWT dev's batches)."""
    at = 0
    for n in lengths:
        for lay in range(n_layers):
            for h in range(n_heads):
                for i in range(n):
                    layer[at], head[at], position[at] = lay, h, i
                    at += 1


def _rows(stats: dict[str, np.ndarray], keys: Table, mass_names: list[str], first_is_cls: list[bool]) -> Table:
    """attn_rows of the batch from its statistics (input after input, each input's in (layer, head, position) order)."""
    columns = {"layer": keys.columns["layer"], "head": keys.columns["head"], "src_tok": keys.columns["position"]}
    columns.update({name: a for name, a in stats.items() if name != "masses"})
    columns.update(zip(mass_names, stats["masses"], strict=True))
    if any(first_is_cls):  # NULL where position 0 is the input's only cls/bos token: the store reads to_cls there
        columns["to_first"] = np.ma.array(columns["to_first"], mask=np.repeat(first_is_cls, keys.counts))
    return Table(columns, keys.counts)


def _word_rows(words: dict[str, np.ndarray], keys: Table) -> Table:
    """word_rows of the batch (input after input, each input's in (layer, head, word) order)."""
    columns = {"layer": keys.columns["layer"], "head": keys.columns["head"], "src_word": keys.columns["position"]}
    n = len(columns["src_word"])
    columns.update({name: words[name] if n else np.zeros(0, dtype) for name, dtype in WORD_COLUMNS.items()})
    return Table(columns, keys.counts)


def _words_with_pieces(token_words: Sequence[Sequence[int | None]], n_words: Sequence[int]) -> list[np.ndarray] | None:
    """Of each input's words that have word rows, those that keep them: the words with pieces, where two or more
    have them; None where every word keeps its rows."""
    kept = []
    for tw, n in zip(token_words, n_words, strict=True):
        has = np.zeros(n, dtype=np.bool_)
        has[[w for w in tw if w is not None and w < n]] = True
        kept.append(has if has.sum() >= 2 else np.zeros(n, dtype=np.bool_))
    return None if all(k.all() for k in kept) else kept


def _kept_rows(table: Table, kept: list[np.ndarray] | None, n_rows: int) -> Table:
    """The word rows of the words ``kept`` (``_words_with_pieces``; ``n_rows``: layers times heads)."""
    if kept is None:
        return table
    mask = np.concatenate([np.tile(k, n_rows) for k in kept])
    counts = np.array([n_rows * int(k.sum()) for k in kept], dtype=table.counts.dtype)
    return Table({name: c[mask] for name, c in table.columns.items()}, counts)


def _single(attn: np.ndarray) -> list[torch.Tensor]:
    return [torch.from_numpy(np.ascontiguousarray(attn[layer]))[None] for layer in range(attn.shape[0])]


def sparsify(
    attn: np.ndarray,
    kept_mass: float | None,
    targets: dict[str, np.ndarray] | None = None,
    max_edges: int | None = MAX_EDGES,
) -> tuple[Columns, Columns]:
    """(edges, rows) of one input's attention ``[layers, heads, n, n]`` (``batch_rows`` on a batch of one)."""
    n = attn.shape[-1]
    edges, rows, _ = batch_rows(_single(attn), [n], [[None] * n], None if targets is None else [targets],
                                kept_mass, max_edges)[0]  # fmt: skip
    return edges, rows


def word_rows(
    attn: np.ndarray, token_word: list[int | None], kept_mass: float | None, first_piece: bool = False
) -> Columns:
    """Word-level rows of one input's attention (``batch_rows`` on a batch of one)."""
    return batch_rows(_single(attn), [attn.shape[-1]], [token_word], None, kept_mass, first_piece=first_piece)[0][2]
