"""Stage 4: turn a forward batch's attention into store rows, on the model's device, for the whole batch at once.

The maps come as one tensor ``[batch, heads, n, n]`` per layer (padded to the batch's longest input). The work
runs on blocks of a few inputs with all their layers (sized for a CPU cache; on a CPU, blocks in parallel
threads), as tensor operations over the whole block with the padding masked; only the rows that are stored
cross to the host.

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
  its pieces, special tokens as units of their own); for every word, the other word it attends to most (never
  itself or a special token) and that weight, and the other word attending to it most (the transposed map:
  Clark et al.'s head -> dependent predictor) and that weight. Exact whatever the edge sparsity.

Precision. The dense setting stores everything exact (float32). The sparse setting stores weights in fixed
point: edge and word-level weights as multiples of 1/256 (``WEIGHT_STEP``, error at most 1/512; a weight below
1/512 rounds to 0 and is never an edge, except an argmax, stored as 1/256), the row masses ``to_*`` as
multiples of 1/2048 (``MASS_STEP``, error at most 1/4096, what float16 gives a mass of 0.5 to 1), the received
attention at float16 precision (relative error at most 2**-11), the entropy to 17 significant bits (relative
error at most 2**-17, 0.0001 nats at most: a twentieth of what the smoothing adds). Argmax and all word-level
predictions are exact.
Arithmetic is float32 on every device (measured against float64 on samples of EWT and GUM: entropy within a
relative 3.4e-7, the word-level predictions all the same, 2.8 M of them), except the received attention,
summed in float64 (float32 on MPS, which has no float64).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import cache

import numpy as np
import torch

from ingest.device import exact_dtype
from ingest.run_id import MAX_EDGES

Columns = dict[str, np.ndarray]

ENTROPY_SMOOTHING = 1e-4  # Clark et al.: entropy of (1 - s) a + s / n, "to avoid NaNs"
WEIGHT_STEP = 2**-8  # sparse setting: edge and word-level weights are multiples of this
MASS_STEP = 2**-11  # sparse setting: the row masses to_* are multiples of this
ENTROPY_ROUND = 2**7  # sparse setting: entropy keeps 23 - 7 of float32's mantissa bits (17 significant bits)
FLOAT_KEY_BITS = 13  # inputs up to 2**13 tokens rank by float32 keys (exact up to 2**24), longer by int64
BLOCK_WEIGHTS = 1 << 20  # attention weights per block of work (4 MiB of float32)
MASSES = ("to_self", "to_prev", "to_next", "to_first")  # then to_<target> for each target
WORD_COLUMNS = {"dst_word": np.int16, "weight": np.float32, "from_word": np.int16, "from_weight": np.float32}


@cache
def _row_index(n_layers: int, n_heads: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Layer, head and position of each row of a ``[layers, heads, n]`` grid, flattened (store dtypes)."""
    r = np.arange(n_layers * n_heads * n)
    return (r // (n_heads * n)).astype(np.int8), ((r // n) % n_heads).astype(np.int8), (r % n).astype(np.int16)


def _blocks(n_examples: int, per_example: int) -> Iterator[tuple[int, int]]:
    step = max(1, BLOCK_WEIGHTS // per_example)
    for start in range(0, n_examples, step):
        yield start, min(start + step, n_examples)


def _fixed(x: torch.Tensor, step: float) -> torch.Tensor:
    return torch.round(x / step) * step


def _half(x: torch.Tensor) -> torch.Tensor:
    return x.half().float()


class _Batch:
    """Per-example facts of a batch as device tensors: lengths, the pieces of each word, target masks."""

    def __init__(
        self,
        device: torch.device,
        n_max: int,
        lengths: Sequence[int],
        token_words: Sequence[Sequence[int | None]],
        targets: Sequence[dict[str, np.ndarray]] | None,
    ) -> None:
        self.lengths = list(lengths)
        self.n_words = [1 + max((w for w in tw if w is not None), default=-1) for tw in token_words]
        self.w_max = w_max = max(self.n_words)
        self.n = torch.tensor(self.lengths, device=device)
        self.valid = torch.arange(n_max, device=device) < self.n[:, None]  # [batch, n]: a real token, not padding
        # each word's first piece (column w_max: a spare unit taking whatever belongs to no word), and every other
        # piece of a word (a "continuation") with its word (padded with the spare unit)
        first = np.zeros((len(lengths), w_max + 1), dtype=np.int64)
        pieces = np.zeros((len(lengths), w_max), dtype=np.float64)
        continuations: list[list[tuple[int, int]]] = []
        for b, tw in enumerate(token_words):
            continuations.append([])
            for t, w in enumerate(tw):
                if w is None:
                    continue
                if pieces[b, w]:
                    continuations[b].append((t, w))
                else:
                    first[b, w] = t
                pieces[b, w] += 1
        n_cont = max(map(len, continuations))
        cont_tok = np.zeros((len(lengths), n_cont), dtype=np.int64)
        cont_word = np.full((len(lengths), n_cont), w_max, dtype=np.int64)
        for b, pairs in enumerate(continuations):
            if pairs:
                cont_tok[b, : len(pairs)], cont_word[b, : len(pairs)] = zip(*pairs, strict=True)
        pieces[pieces == 0] = 1  # words past an input's own
        self.first, self.cont_tok, self.cont_word = (
            torch.from_numpy(a).to(device) for a in (first, cont_tok, cont_word)
        )
        # [batch, words, words]: FROM a word the mean over its pieces; 0 where either word is past the input's own
        real = np.arange(w_max) < np.array(self.n_words)[:, None]
        scale = (real / pieces)[:, :, None] * real[:, None, :]
        self.word_scale = torch.from_numpy(scale).to(device, torch.float32)
        self.names = list(targets[0]) if targets else []
        masks = np.zeros((len(lengths), n_max, len(self.names)), dtype=np.float32)
        for b, t in enumerate(targets or []):
            masks[b, : self.lengths[b]] = np.stack([t[name] for name in self.names], axis=1)
        self.masks = torch.from_numpy(masks).to(device)
        # inputs whose first token is their only cls/bos token: to_first is to_cls there (stored once)
        self.first_is_cls = [bool(t["cls"][0]) and t["cls"].sum() == 1 for t in targets or []]


def batch_rows(
    maps: Sequence[torch.Tensor],
    lengths: Sequence[int],
    token_words: Sequence[Sequence[int | None]],
    targets: Sequence[dict[str, np.ndarray]] | None,
    kept_mass: float | None,
    max_edges: int | None = MAX_EDGES,
    causal: bool = False,
) -> list[tuple[Columns, Columns, Columns]]:
    """(edges, rows, word rows) column arrays of every input of a batch, in input order.

    ``maps``: one tensor ``[batch, heads, n, n]`` per layer (see ``atlas.model.forward``); ``lengths``: each input's
    number of tokens; ``token_words``: each input's word of each token (None: a special token); ``targets``:
    per input, a boolean mask over its tokens for each target token kind, e.g. cls, sep, dot_comma (None: no
    ``to_<target>`` columns);
    ``causal``: a decoder's maps, where no edge to a later token is ever stored (not even a dense one of weight 0).
    """
    device = maps[0].device
    n_examples, n_heads, n_max, _ = maps[0].shape
    n_layers = len(maps)
    with torch.inference_mode():
        batch = _Batch(device, n_max, lengths, token_words, targets)
    blocks = _blocks(n_examples, n_layers * n_heads * n_max * n_max)
    # on a CPU, one torch thread: the many small operations here lose more to the synchronisation of torch's
    # threads than they gain from a second core (measured on 2 busy cores: 4x the wall time; blocks in 2 Python
    # threads of one torch thread each: 1.7x)
    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(1)
    try:
        with torch.inference_mode():
            done = [_block_rows(maps, batch, start, stop, kept_mass, max_edges, causal) for start, stop in blocks]
            stats = {name: torch.cat([d[0][name] for d in done]).cpu().numpy() for name in done[0][0]}
            words = {name: torch.cat([d[1][name] for d in done]).cpu().numpy() for name in done[0][1]}
            return _to_host(stats, words, [d[2] for d in done], batch, n_layers, n_heads, n_max)
    finally:
        torch.set_num_threads(threads)


def _block_rows(
    maps: Sequence[torch.Tensor],
    batch: _Batch,
    start: int,
    stop: int,
    kept_mass: float | None,
    max_edges: int | None,
    causal: bool,
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], tuple]:
    """Rows, word rows and edges of the inputs ``start`` to ``stop`` of the batch."""
    sparse = kept_mass is not None
    # every layer: [examples, layers * heads, n, n], in the order rows and edges are stored
    block = torch.stack([attn[start:stop] for attn in maps], dim=1).flatten(1, 2)
    for i, n in enumerate(batch.lengths[start:stop]):
        block[i, :, n:] = 0  # padding's rows: nothing to anyone
    argmax = block.max(dim=-1, keepdim=True).indices  # the first of equal maxima
    words = _word_stats(block, batch, start, stop, sparse) if batch.w_max >= 2 else {}
    rows = _row_stats(block, argmax[..., 0], batch, start, stop, sparse)
    edges = _edges(block, argmax, batch.valid[start:stop], kept_mass, max_edges, causal)
    return rows, words, (*edges, start, stop)


def _row_stats(
    block: torch.Tensor,
    argmax: torch.Tensor,
    batch: _Batch,
    start: int,
    stop: int,
    sparse: bool,
) -> dict[str, torch.Tensor]:
    """Per-row statistics of ``block`` ``[examples, heads, n, n]`` (padding's rows 0): tensors
    ``[examples, heads, n]``."""
    received = block.sum(dim=-2, dtype=exact_dtype(block.device))  # column sums over the input's rows
    n = batch.n[start:stop, None, None].to(block.dtype)
    smoothing = ENTROPY_SMOOTHING / n  # what a weight of 0 becomes, padding's columns too: taken out below
    smoothed = block.mul(1 - ENTROPY_SMOOTHING).add_(smoothing[..., None])
    padding = (block.shape[-1] - n) * smoothing * smoothing.log()
    terms = torch.linalg.vecdot(smoothed, smoothed.log())  # sum of s log s
    # the largest weight's term again: near 1, log s of a float32 s is off by up to 6e-8; log1p of s - 1 is not
    largest = smoothed.gather(-1, argmax[..., None])[..., 0]
    near_one = (block.gather(-1, argmax[..., None])[..., 0] - 1) * (1 - ENTROPY_SMOOTHING) + smoothing
    near_one -= ENTROPY_SMOOTHING
    terms += largest * (torch.log1p(near_one) - largest.log())
    entropy = padding - terms
    zero = block.new_zeros(block.shape[:-1])
    masses = [  # MASSES, in order
        block.diagonal(0, -2, -1),
        torch.cat([zero[..., :1], block.diagonal(-1, -2, -1)], dim=-1),
        torch.cat([block.diagonal(1, -2, -1), zero[..., :1]], dim=-1),
        block[..., 0],
    ]
    if batch.masks.shape[-1]:
        masses.extend((block @ batch.masks[start:stop, None]).unbind(-1))  # [examples, heads, n] per target
    masses = torch.stack(masses, dim=-1)
    received, entropy = received.float(), entropy.float()
    if sparse:  # to 17 significant bits (relative error at most 2**-17): the lower bits cost a byte a row on disk
        entropy = (entropy.view(torch.int32) + ENTROPY_ROUND // 2).bitwise_and_(-ENTROPY_ROUND).view(torch.float32)
    return {
        "entropy": entropy,
        "argmax_tok": argmax.short(),
        "masses": _fixed(masses, MASS_STEP) if sparse else masses,
        "received": _half(received) if sparse else received,
    }


def _word_stats(block: torch.Tensor, batch: _Batch, start: int, stop: int, sparse: bool) -> dict[str, torch.Tensor]:
    """Word-level predictions of ``block`` ``[examples, heads, n, n]``: tensors ``[examples, heads, words]``
    (words past an input's own are filler). Each word's first piece is gathered, its other pieces added to it."""
    examples, heads, n, _ = block.shape
    w = batch.w_max
    first, cont_tok, cont_word = batch.first[start:stop], batch.cont_tok[start:stop], batch.cont_word[start:stop]
    n_cont = cont_tok.shape[1]
    # TO a word: the sum over its pieces (columns)
    to_words = block.gather(-1, first[:, None, None, :].expand(examples, heads, n, w + 1))
    if n_cont:
        extra = block.gather(-1, cont_tok[:, None, None, :].expand(examples, heads, n, n_cont))
        to_words.scatter_add_(-1, cont_word[:, None, None, :].expand(examples, heads, n, n_cont), extra)
    # FROM a word: the mean over its pieces (rows)
    words = to_words.gather(-2, first[:, None, :, None].expand(examples, heads, w + 1, w + 1))
    if n_cont:
        extra = to_words.gather(-2, cont_tok[:, None, :, None].expand(examples, heads, n_cont, w + 1))
        words.scatter_add_(-2, cont_word[:, None, :, None].expand(examples, heads, n_cont, w + 1), extra)
    # words past an input's own are 0 (never above a real word's weight, and after every real word: never chosen)
    words = words[:, :, :w, :w] * batch.word_scale[start:stop, None]
    words.diagonal(0, -2, -1).fill_(-torch.inf)  # never the word itself
    weight, best = words.max(dim=-1)  # the word each word attends to most (the first of equal weights)
    from_weight, attending = words.max(dim=-2)  # the word attending most to each word
    weight, from_weight = weight.float(), from_weight.float()
    if sparse:
        weight, from_weight = _fixed(weight, WEIGHT_STEP), _fixed(from_weight, WEIGHT_STEP)
    return {"dst_word": best.short(), "weight": weight, "from_word": attending.short(), "from_weight": from_weight}


def _sorted(x: torch.Tensor) -> torch.Tensor:
    """``x`` sorted along its last dimension (ascending). On the CPU numpy's vectorised sort, several times faster
    there than torch's; the results are the same (the values sorted here are distinct in each row)."""
    if x.device.type == "cpu":
        return torch.from_numpy(np.sort(x.numpy(), axis=-1))
    return torch.sort(x, dim=-1).values


def _edges(
    block: torch.Tensor,
    argmax: torch.Tensor,
    valid: torch.Tensor,
    kept_mass: float | None,
    max_edges: int | None,
    causal: bool,
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
    # exactly: numpy sorts it fastest; int64 for longer inputs); decoded as an integer, by shifts
    bits = n.bit_length()
    dtype = torch.float32 if bits <= FLOAT_KEY_BITS else torch.int64
    key = torch.round(block / WEIGHT_STEP).to(dtype).mul_(2 ** (bits + 1))
    key.add_(torch.arange(n - 1, -1, -1, device=block.device, dtype=dtype))
    key.scatter_add_(-1, argmax, torch.full(argmax.shape, 2**bits, device=block.device, dtype=dtype))
    k = min(max_edges or n, n)
    top = _sorted(key)[..., -k:].flip(-1).to(torch.int32 if dtype == torch.float32 else dtype)  # largest first
    steps = top >> (bits + 1)
    before = steps.cumsum(dim=-1, dtype=steps.dtype) - steps
    keep = (before < kept_mass / WEIGHT_STEP) & (steps > 0)  # a prefix of the ranked row
    keep[..., 0] = True  # the argmax, even below one step
    position = (n - 1) - (top & (2**bits - 1))
    # the kept edges of each row in the order of their destination: (position, steps) as one sortable number,
    # the dropped ones after them
    code = torch.where(keep & rows, position * 1024 + steps.clamp(min=1), n * 1024).to(dtype)
    code = _sorted(code).to(top.dtype)
    kept = code < n * 1024
    edges = code[kept]
    return kept.nonzero()[:, :3], edges >> 10, (edges & 1023) * WEIGHT_STEP


def _to_host(
    stats: dict[str, np.ndarray],
    words: dict[str, np.ndarray],
    edge_parts: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, int, int]],
    batch: _Batch,
    n_layers: int,
    n_heads: int,
    n_max: int,
) -> list[tuple[Columns, Columns, Columns]]:
    """Split the batch's columns (``stats``, ``words``: ``[examples, layers * heads, ...]`` arrays; edges: the
    blocks' rows, destinations and weights) into each input's columns on the host."""
    mass_names = [*MASSES, *(f"to_{name}" for name in batch.names)]
    edges, counts = _edge_columns(edge_parts, len(batch.lengths), n_layers, n_heads)
    bounds = np.concatenate([[0], np.cumsum(counts)])
    out = []
    for b, (n, n_words) in enumerate(zip(batch.lengths, batch.n_words, strict=True)):
        layer, head, src = _row_index(n_layers, n_heads, n)
        rows = {"layer": layer, "head": head, "src_tok": src}
        rows.update({name: t[b, :, :n].reshape(-1) for name, t in stats.items() if name != "masses"})
        masses = stats["masses"][b, :, :n].reshape(-1, len(mass_names))
        rows.update({name: masses[:, i] for i, name in enumerate(mass_names)})
        if batch.first_is_cls and batch.first_is_cls[b]:
            rows["to_first"] = np.ma.masked_all(len(masses), dtype=masses.dtype)  # NULL: the store reads to_cls
        n_words = n_words if n_words >= 2 else 0
        layer, head, src = _row_index(n_layers, n_heads, n_words)
        word = {"layer": layer, "head": head, "src_word": src}
        for name, dtype in WORD_COLUMNS.items():
            word[name] = words[name][b, :, :n_words].reshape(-1) if n_words else np.zeros(0, dtype)
        cut = slice(bounds[b], bounds[b + 1])
        out.append(({name: column[cut] for name, column in edges.items()}, rows, word))
    return out


def _edge_columns(
    parts: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, int, int]],
    n_examples: int,
    n_layers: int,
    n_heads: int,
) -> tuple[Columns, np.ndarray]:
    """The edges of the blocks (rows: example in the block, layer * heads + head, source; destinations and
    weights, in that order) as host columns in (example, layer, head, source, destination) order, and each
    example's count of edges."""
    counts = np.zeros(n_examples, dtype=np.int64)
    columns: dict[str, list[torch.Tensor]] = {name: [] for name in ("layer", "head", "src_tok", "dst_tok", "weight")}
    layer_of, head_of = _layer_head(n_layers, n_heads, parts[0][0].device)
    for rows, dst, weight, start, stop in parts:
        counts[start:stop] = torch.bincount(rows[:, 0], minlength=stop - start).cpu()
        columns["layer"].append(layer_of[rows[:, 1]])
        columns["head"].append(head_of[rows[:, 1]])
        columns["src_tok"].append(rows[:, 2].to(torch.int16))
        columns["dst_tok"].append(dst.to(torch.int16))
        columns["weight"].append(weight.float())
    return {name: torch.cat(parts).cpu().numpy() for name, parts in columns.items()}, counts


def _layer_head(n_layers: int, n_heads: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The layer and head (int8) of each index ``layer * n_heads + head``."""
    index = torch.arange(n_layers * n_heads, device=device)
    return (index // n_heads).to(torch.int8), (index % n_heads).to(torch.int8)


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


def word_rows(attn: np.ndarray, token_word: list[int | None], kept_mass: float | None) -> Columns:
    """Word-level rows of one input's attention (``batch_rows`` on a batch of one)."""
    return batch_rows(_single(attn), [attn.shape[-1]], [token_word], None, kept_mass)[0][2]
