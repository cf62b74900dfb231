"""Stage 4 on an accelerator: the work per attention weight of ``atlas.ingestion.sparsify`` as tensor operations over a
whole batch on the model's device, in blocks of a few inputs with all their layers, the padding masked; only the rows
that are stored cross to the host. (On a CPU ``atlas.ingestion.cpu_rows`` does the same work in one compiled pass; the
tests run both on the same maps.)

Arithmetic is float32, except the received attention, summed in float64 (float32 on MPS, which has no float64);
the values come as computed, before ``atlas.ingestion.sparsify`` rounds them to the stored precision.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch

from atlas.ingestion.device import exact_dtype
from atlas.ingestion.host_copy import to_host
from atlas.ingestion.row_batch import LAYER_TYPE, POSITION_TYPE, RowBatch
from atlas.ingestion.stages import stage

Arrays = dict[str, np.ndarray]

FLOAT_KEY_BITS = 13  # inputs up to 2**13 tokens rank by float32 keys (exact up to 2**24), longer by int64
BLOCK_WEIGHTS = 1 << 20  # attention weights per block of work by default (4 MiB of float32; the ingest's: budget.py)
# the store's integer types (atlas.ingestion.row_batch) as torch's, made on the device before the columns cross to
# the host
LAYER = torch.from_numpy(np.zeros(0, dtype=LAYER_TYPE)).dtype
POSITION = torch.from_numpy(np.zeros(0, dtype=POSITION_TYPE)).dtype


def _blocks(n_examples: int, per_example: int, work_weights: int) -> Iterator[tuple[int, int]]:
    step = max(1, work_weights // per_example)
    for start in range(0, n_examples, step):
        yield start, min(start + step, n_examples)


def word_pieces(
    token_words: Sequence[Sequence[int | None]], w_max: int
) -> tuple[np.ndarray, np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:
    """Each input's words' first pieces ``[inputs, w_max]`` (-1: a word without pieces of its own) and numbers of
    pieces; and the pieces after a word's first, by rank: for the second pieces, then the third, ..., the tokens
    ``[inputs, k]`` and their words ``[inputs, k]`` (padded with token 0 and the spare unit ``w_max``). A word is at
    most once in a rank, so that adding a rank's pieces to their words (``scatter_add_``) adds to each word one
    piece: each word's sum is made in one order, its pieces' (on CUDA, additions to one place come in no fixed
    order, and a word of three pieces or more summed otherwise from one ingest to the next)."""
    first = np.full((len(token_words), w_max), -1, dtype=np.int64)
    pieces = np.zeros((len(token_words), w_max), dtype=np.int64)
    ranks: list[list[list[tuple[int, int]]]] = []  # rank -> input -> (token, word)
    for b, tw in enumerate(token_words):
        seen: dict[int, int] = {}
        for t, w in enumerate(tw):
            if w is None:
                continue
            k = seen.get(w, 0)
            if not k:
                first[b, w] = t
            else:
                if len(ranks) < k:
                    ranks.append([[] for _ in token_words])
                ranks[k - 1][b].append((t, w))
            seen[w] = k + 1
        if seen:
            pieces[b, list(seen)] = list(seen.values())
    out = []
    for rank in ranks:
        width = max(map(len, rank))
        tok = np.zeros((len(token_words), width), dtype=np.int64)
        word = np.full((len(token_words), width), w_max, dtype=np.int64)
        for b, pairs in enumerate(rank):
            if pairs:
                tok[b, : len(pairs)], word[b, : len(pairs)] = zip(*pairs, strict=True)
        out.append((tok, word))
    return first, pieces, out


class _Batch:
    """Per-example facts of a batch as device tensors: lengths, the pieces of each word, target masks."""

    def __init__(
        self, device: torch.device, n_max: int, lengths: Sequence[int], token_words: Sequence[Sequence[int | None]],
        n_words: Sequence[int], masks: np.ndarray, first_piece: bool = False, whole: bool = True,
    ) -> None:  # fmt: skip
        self.lengths = list(lengths)
        self.w_max = w_max = max(n_words)
        self.n = torch.tensor(self.lengths, device=device)
        self.valid = torch.arange(n_max, device=device) < self.n[:, None]  # [batch, n]: a real token, not padding
        # each word's first piece (column w_max: a spare unit taking whatever belongs to no word), and every other
        # piece of a word (a "continuation") with its word, by rank (``word_pieces``; padded with the spare unit)
        starts, counts, ranks = word_pieces(token_words, w_max)
        first = np.zeros((len(lengths), w_max + 1), dtype=np.int64)
        first[:, :w_max] = np.maximum(starts, 0)
        pieces = counts.astype(np.float64)
        real = np.arange(w_max) < np.array(n_words)[:, None]
        pieceless = real & (pieces == 0)  # a word of the input without pieces of its own
        pieces[pieces == 0] = 1  # those, and words past an input's own
        self.first_piece = first_piece
        self.first = torch.from_numpy(first).to(device)
        # per rank: the tokens and words on the device, and each input's number of them (a block of inputs takes
        # the ranks and the columns its own inputs have: a word of many pieces in one input costs the others nothing)
        self.continuations = [
            (torch.from_numpy(tok).to(device), torch.from_numpy(word).to(device), (word < w_max).sum(axis=1))
            for tok, word in ranks
        ]
        # FROM a word the mean over its pieces (or its first piece's row): each word's row scaled by this, 0 past the
        # input's own words, and each column by ``real`` (1 for the input's own words, else 0); with ``whole``, the
        # product [batch, words, words] (an input read by rows takes a block's rows of it: atlas.ingestion.block_rows)
        row_scale = real / (1 if first_piece else pieces)
        self.row_scale, self.real = (torch.from_numpy(a).to(device, torch.float32) for a in (row_scale, real))
        self.pieceless = torch.from_numpy(pieceless).to(device)
        # -inf from and to a word without pieces: never a prediction (its own rows are filler, dropped later)
        self.word_scale = self.word_mask = None
        if whole:
            self.word_scale = torch.from_numpy(row_scale[:, :, None] * real[:, None, :]).to(device, torch.float32)
            if pieceless.any():
                never = pieceless[:, :, None] | pieceless[:, None, :]
                self.word_mask = torch.from_numpy(np.where(never, -np.inf, 0.0)).to(device, torch.float32)
        self.masks = torch.from_numpy(masks.astype(np.float32)).to(device)


class TensorRows:
    """What ``atlas.ingestion.cpu_rows.CpuRows`` computes, with tensor operations on the maps' device: ``layer`` keeps
    each layer's maps there (tensor operations over the whole batch need all of them), ``result`` computes the rows."""

    def __init__(self, batch: RowBatch, work_weights: int = BLOCK_WEIGHTS) -> None:
        self.batch, self.work_weights = batch, work_weights  # attention weights per block of work (all layers)
        self.maps: list[torch.Tensor] = []

    def layer(self, layer: int, attn: torch.Tensor) -> None:
        assert layer == len(self.maps), "layers come in order"
        self.maps.append(attn)

    def result(self) -> tuple[Arrays, Arrays, Arrays, np.ndarray]:
        maps, spec = self.maps, self.batch
        assert len(maps) == spec.n_layers, "every layer's maps"
        device = maps[0].device
        n_examples = len(spec.lengths)
        with torch.inference_mode(), stage("row work", device):
            batch = _Batch(device, spec.n_max, spec.lengths, spec.token_words, spec.n_words, spec.masks,
                           spec.first_piece)  # fmt: skip
            rule = (spec.kept_mass, spec.max_edges, spec.causal, spec.smoothing, spec.weight_step)
            done = [
                _block_rows(maps, batch, start, stop, *rule)
                for start, stop in _blocks(n_examples, spec.n_layers * spec.n_heads * spec.n_max**2, self.work_weights)
            ]
            self.maps = []
            # only the inputs' own rows cross to the host: input after input, each in (layer, head, position) order
            bounds = list(_blocks(n_examples, spec.n_layers * spec.n_heads * spec.n_max**2, self.work_weights))
            stats = _flat([d[0] for d in done], [batch.n[start:stop] for start, stop in bounds])
            word_rows = torch.tensor(spec.word_rows, device=device)
            words = _flat([d[1] for d in done], [word_rows[start:stop] for start, stop in bounds])
            edges, counts = _edge_columns([d[2] for d in done], n_examples, spec.n_layers, spec.n_heads,
                                          spec.weight_step)  # fmt: skip
        with stage("to the host"):
            stats, words, edges = (to_host(p) for p in (stats, words, edges))
            return stats, words, edges, to_host({"counts": counts})["counts"]


def _flat(parts: list[dict[str, torch.Tensor]], lengths: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """Columns (on the device) of the blocks' ``[examples, layers * heads, positions, ...]`` tensors: each example's
    first ``lengths`` positions of each of its rows, example after example (one index per block, found once)."""
    out: dict[str, list[torch.Tensor]] = {name: [] for name in parts[0]}
    for part, n in zip(parts, lengths, strict=True):
        if not part:
            continue
        grid = next(iter(part.values())).shape[:3]
        kept = (torch.arange(grid[2], device=n.device) < n[:, None, None]).expand(grid).flatten().nonzero()[:, 0]
        for name, t in part.items():
            out[name].append(t.flatten(0, 2)[kept])
    return {name: torch.cat(columns) for name, columns in out.items()}


def _block_rows(
    maps: Sequence[torch.Tensor],
    batch: _Batch,
    start: int,
    stop: int,
    kept_mass: float | None,
    max_edges: int | None,
    causal: bool,
    smoothing: float,
    weight_step: float,
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], tuple]:
    """Rows, word rows and edges of the inputs ``start`` to ``stop`` of the batch."""
    # every layer: [examples, layers * heads, n, n], in the order rows and edges are stored
    block = torch.stack([attn[start:stop] for attn in maps], dim=1).flatten(1, 2)
    for i, n in enumerate(batch.lengths[start:stop]):
        block[i, :, n:] = 0  # padding's rows: nothing to anyone
    argmax = block.max(dim=-1, keepdim=True).indices  # the first of equal maxima
    words = _word_stats(block, batch, start, stop) if batch.w_max >= 2 else {}
    rows = _row_stats(block, argmax[..., 0], batch, start, stop, smoothing)
    edges = kept_edges(block, argmax, batch.valid[start:stop], kept_mass, max_edges, causal, weight_step)
    return rows, words, (*edges, start, stop)


def _row_stats(
    block: torch.Tensor, argmax: torch.Tensor, batch: _Batch, start: int, stop: int, smoothing: float
) -> dict[str, torch.Tensor]:
    """Per-row statistics of ``block`` ``[examples, heads, n, n]`` (padding's rows 0): tensors
    ``[examples, heads, n]``."""
    received = block.sum(dim=-2, dtype=exact_dtype(block.device))  # column sums over the input's rows
    n = batch.n[start:stop, None, None].to(block.dtype)
    eps_n = smoothing / n  # what a weight of 0 becomes, padding's columns too: taken out below
    smoothed = block.mul(1 - smoothing).add_(eps_n[..., None])
    padding = (block.shape[-1] - n) * eps_n * eps_n.log()
    terms = torch.linalg.vecdot(smoothed, smoothed.log())  # sum of s log s
    # the largest weight's term again: near 1, log s of a float32 s is off by up to 6e-8; log1p of s - 1 is not
    largest = smoothed.gather(-1, argmax[..., None])[..., 0]
    near_one = (block.gather(-1, argmax[..., None])[..., 0] - 1) * (1 - smoothing) + eps_n
    near_one -= smoothing
    terms += largest * (torch.log1p(near_one) - largest.log())
    zero = block.new_zeros(block.shape[:-1])
    masses = [  # self, previous, next, first, then each target
        block.diagonal(0, -2, -1),
        torch.cat([zero[..., :1], block.diagonal(-1, -2, -1)], dim=-1),
        torch.cat([block.diagonal(1, -2, -1), zero[..., :1]], dim=-1),
        block[..., 0],
    ]
    if batch.masks.shape[-1]:
        masses.extend((block @ batch.masks[start:stop, None]).unbind(-1))  # [examples, heads, n] per target
    return {
        "entropy": padding - terms,
        "argmax_tok": argmax.to(POSITION),
        "masses": torch.stack(masses, dim=-1),
        "received": received,
    }


def _word_stats(block: torch.Tensor, batch: _Batch, start: int, stop: int) -> dict[str, torch.Tensor]:
    """Word-level predictions of ``block`` ``[examples, heads, n, n]``: tensors ``[examples, heads, words]``
    (words past an input's own are filler). Each word's first piece is gathered, its other pieces added to it."""
    examples, heads, n, _ = block.shape
    w = batch.w_max
    first = batch.first[start:stop]
    ranks = []
    for tok, word, counts in batch.continuations:
        if k := int(counts[start:stop].max()):
            ranks.append((tok[start:stop, :k], word[start:stop, :k]))
    # TO a word: the sum over its pieces (columns), its first piece's weight, then its second's added, ...
    to_words = block.gather(-1, first[:, None, None, :].expand(examples, heads, n, w + 1))
    for tok, word in ranks:
        extra = block.gather(-1, tok[:, None, None, :].expand(examples, heads, n, tok.shape[1]))
        to_words.scatter_add_(-1, word[:, None, None, :].expand(examples, heads, n, tok.shape[1]), extra)
    # FROM a word: the mean over its pieces (rows), or its first piece's row
    words = to_words.gather(-2, first[:, None, :, None].expand(examples, heads, w + 1, w + 1))
    for tok, word in ranks if not batch.first_piece else ():
        extra = to_words.gather(-2, tok[:, None, :, None].expand(examples, heads, tok.shape[1], w + 1))
        words.scatter_add_(-2, word[:, None, :, None].expand(examples, heads, tok.shape[1], w + 1), extra)
    # words past an input's own are 0 (never above a real word's weight, and after every real word: never chosen)
    words = words[:, :, :w, :w] * batch.word_scale[start:stop, None]
    if batch.word_mask is not None:
        words += batch.word_mask[start:stop, None]
    words.diagonal(0, -2, -1).fill_(-torch.inf)  # never the word itself
    weight, best = words.max(dim=-1)  # the word each word attends to most (the first of equal weights)
    from_weight, attending = words.max(dim=-2)  # the word attending most to each word
    return {
        "dst_word": best.to(POSITION),
        "weight": weight,
        "from_word": attending.to(POSITION),
        "from_weight": from_weight,
    }


def kept_edges(
    block: torch.Tensor,
    argmax: torch.Tensor,
    valid: torch.Tensor,
    kept_mass: float | None,
    max_edges: int | None,
    causal: bool,
    weight_step: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The kept edges of ``block`` ``[examples, heads, n, n]`` (``argmax`` ``[examples, heads, n, 1]``), in order
    (example, head, source, destination): their rows (``[edges, 3]``: example, head, source), destinations and
    stored weights. ``causal``: no edge to a later token (a sparse row never keeps one: its weight is 0)."""
    n = block.shape[-1]
    rows = valid[:, None, :, None]
    if kept_mass is None:
        pairs = rows & valid[:, None, None, :]
        if causal:
            pairs = pairs & torch.ones(n, n, dtype=torch.bool, device=block.device).tril()
        where = pairs.expand(block.shape).nonzero()
        return where[:, :3], where[:, 3], block[pairs.expand(block.shape)]
    # rank key: stored weight in steps, then the argmax, then the earlier position (float32 when it holds them
    # exactly, sorted fastest; int64 for longer inputs); decoded as an integer, by shifts
    bits = n.bit_length()
    dtype = torch.float32 if bits <= FLOAT_KEY_BITS else torch.int64
    key = torch.round(block / weight_step).to(dtype).mul_(2 ** (bits + 1))
    key.add_(torch.arange(n - 1, -1, -1, device=block.device, dtype=dtype))
    key.scatter_add_(-1, argmax, torch.full(argmax.shape, 2**bits, device=block.device, dtype=dtype))
    k = min(max_edges or n, n)
    # the k largest keys, largest first (keys are distinct: the position is in them)
    top = torch.topk(key, k, dim=-1).values.to(torch.int32 if dtype == torch.float32 else dtype)
    steps = top >> (bits + 1)
    before = steps.cumsum(dim=-1, dtype=steps.dtype) - steps
    keep = (before < kept_mass / weight_step) & (steps > 0)  # a prefix of the ranked row
    keep[..., 0] = True  # the argmax, even below one step
    position = (n - 1) - (top & (2**bits - 1))
    # the kept edges of each row in the order of their destination: (position, steps) as one sortable number,
    # the dropped ones after them
    code = torch.where(keep & rows, position * 1024 + steps.clamp(min=1), n * 1024).to(dtype)
    code = torch.sort(code, dim=-1).values.to(top.dtype)
    kept = code < n * 1024
    edges = code[kept]
    return kept.nonzero()[:, :3], edges >> 10, (edges & 1023) * weight_step


def _edge_columns(
    parts: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, int, int]],
    n_examples: int,
    n_layers: int,
    n_heads: int,
    weight_step: float,
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """The edges of the blocks (rows: example in the block, layer * heads + head, source; destinations and
    weights, in that order) as columns (on the device) in (example, layer, head, source, destination) order, and each
    example's count of edges."""
    counts = torch.zeros(n_examples, dtype=torch.int64, device=parts[0][0].device)
    columns: dict[str, list[torch.Tensor]] = {name: [] for name in ("layer", "head", "src_tok", "dst_tok", "weight")}
    index = torch.arange(n_layers * n_heads, device=parts[0][0].device)
    layer_of, head_of = (index // n_heads).to(LAYER), (index % n_heads).to(LAYER)
    for rows, dst, weight, start, stop in parts:
        counts[start:stop] = torch.bincount(rows[:, 0], minlength=stop - start)
        columns["layer"].append(layer_of[rows[:, 1]])
        columns["head"].append(head_of[rows[:, 1]])
        columns["src_tok"].append(rows[:, 2].to(POSITION))
        columns["dst_tok"].append(dst.to(POSITION))
        columns["weight"].append(weight.float())
    return {name: torch.cat(parts) for name, parts in columns.items()}, counts
