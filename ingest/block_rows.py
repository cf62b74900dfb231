"""Stage 4 for an input too long for its whole maps: the work per attention weight of ``atlas.ingestion.sparsify`` done
on each block of rows as the model computes it (``atlas.model.forward.stream_rows``), so that no layer's
``[heads, n, n]`` map is ever held, only ``[heads, rows, n]`` of it.

The rows, edges and statistics are those of ``atlas.ingestion.tensor_rows`` on the whole maps (tested on every family
against the eager maps): a row's statistics and edges need that row alone; the received attention (a column sum) is
summed over the blocks in float64; the word-level map is made of whole words' rows, since blocks end where a word does,
and the word attending most to a word is the running maximum over the blocks (the first of equal weights, as over the
whole map). A forward batch of one input, no padding. On a CPU ``atlas.ingestion.cpu_rows.CpuBlockRows`` does this work
in the compiled pass of the whole maps.
"""

from __future__ import annotations

import numpy as np
import torch

from atlas.ingestion.device import exact_dtype
from atlas.ingestion.row_batch import EDGE_COLUMNS, LAYER_TYPE, POSITION_TYPE, RowBatch, row_blocks
from atlas.ingestion.stages import stage
from atlas.ingestion.tensor_rows import _Batch, kept_edges, word_pieces

Arrays = dict[str, np.ndarray]


class BlockRows:
    """The rows of one input's attention, fed block by block (``bounds``, then ``rows`` for each block, layer after
    layer), collected by ``result`` as ``atlas.ingestion.tensor_rows.TensorRows`` gives them. ``block_weights``:
    attention weights per block (heads x rows x n); a block holds at least one word's rows."""

    def __init__(self, batch: RowBatch, block_weights: int) -> None:
        assert len(batch.lengths) == 1, "one input"
        self.batch, self.n = batch, batch.lengths[0]
        self.blocks = row_blocks(batch.token_words[0], max(1, block_weights // (batch.n_heads * self.n)))
        self.words = batch.word_rows[0]  # words with word rows: 0 or 2 or more
        # on the host: each word's first piece (-1: none of its own), and every other piece of a word with its word,
        # by rank (tensor_rows.continuations)
        token_word = [w if w is not None and w < self.words else None for w in batch.token_words[0]]
        first, _, ranks = word_pieces([token_word], self.words)
        self.first_tok = first[0]
        self.ranks = [(tok[0], word[0]) for tok, word in ranks]
        self.pieceless = bool((self.first_tok < 0).any())
        self.block_words: dict[int, tuple[torch.Tensor, torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]] = {}
        self.shape: _Batch | None = None  # the word structure, on the maps' device (made with the first block)
        self.stats: list[dict[str, list[torch.Tensor]]] = []  # per layer, per name, the blocks' [heads, rows]
        self.word_stats: list[dict[str, torch.Tensor]] = []  # per layer: [heads, words]
        self.edges: list[list[tuple[torch.Tensor, ...]]] = []  # per layer, the blocks' (head, source, dst, weight)

    def bounds(self, n: int) -> list[tuple[int, int]]:
        """The blocks of rows of a layer (``row_batch.row_blocks``)."""
        assert n == self.n, "the input's own rows"
        return self.blocks

    def rows(self, layer: int, start: int, probs: torch.Tensor) -> None:
        """The float32 probabilities ``[1, heads, rows, n]`` of the rows from ``start`` on of layer ``layer``."""
        spec = self.batch
        if self.shape is None:
            self.shape = _Batch(probs.device, self.n, spec.lengths, spec.token_words, spec.n_words, spec.masks,
                                spec.first_piece, whole=False)  # fmt: skip
        if layer == len(self.stats):
            self._new_layer(probs)
        block = probs[0]
        stop = start + block.shape[-2]
        argmax = block.max(dim=-1, keepdim=True).indices  # the first of equal maxima
        stats = self.stats[layer]
        for name, value in _row_stats(block, argmax[..., 0], start, self.shape, spec.smoothing).items():
            stats[name].append(value)
        stats["received"][0] += block.sum(dim=-2, dtype=exact_dtype(block.device))
        if self.words:
            self._word_rows(layer, block, start, stop)
        head, row, dst, weight = self._edges(block, argmax, start)
        self.edges[layer].append((head, row + start, dst, weight))

    def _new_layer(self, probs: torch.Tensor) -> None:
        heads, device = probs.shape[1], probs.device
        received = torch.zeros(heads, self.n, dtype=exact_dtype(device), device=device)
        self.stats.append({"entropy": [], "argmax_tok": [], "masses": [], "received": [received]})
        self.edges.append([])
        if self.words:
            w = self.words
            self.word_stats.append({
                "dst_word": torch.zeros(heads, w, dtype=torch.long, device=device),
                "weight": torch.zeros(heads, w, device=device),
                "from_word": torch.zeros(heads, w, dtype=torch.long, device=device),
                "from_weight": torch.full((heads, w), -torch.inf, device=device),
            })  # fmt: skip

    def _edges(
        self, block: torch.Tensor, argmax: torch.Tensor, start: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The block's kept edges, in (head, row, destination) order: their heads, rows in the block, destinations and
        stored weights."""
        spec = self.batch
        if spec.kept_mass is not None:
            valid = torch.ones(1, block.shape[-2], dtype=torch.bool, device=block.device)  # every row its input's
            where, dst, weight = kept_edges(block[None], argmax[None], valid, spec.kept_mass, spec.max_edges, False,
                                        spec.weight_step)  # fmt: skip
            return where[:, 1], where[:, 2], dst, weight
        rows, n = block.shape[-2:]
        pairs = torch.ones(rows, n, dtype=torch.bool, device=block.device)
        if spec.causal:
            pairs = pairs.tril(start)  # no edge to a later token
        head, row, dst = pairs.expand(block.shape).nonzero().unbind(-1)
        return head, row, dst, block[pairs.expand(block.shape)]

    def _word_rows(self, layer: int, block: torch.Tensor, start: int, stop: int) -> None:
        """The word-level rows of the words whose first piece is in the block (all their pieces are), and the running
        maximum of each word's column. Which words and pieces those are is found on the host (no wait for the
        device)."""
        shape, w, device = self.shape, self.words, block.device
        heads, rows, n = block.shape
        if start not in self.block_words:
            self.block_words[start] = self._block_words(start, stop, device)
        mine, first_rows, ranks = self.block_words[start]
        if not len(mine):
            return
        # TO a word: the sum over its pieces (columns), as tensor_rows sums them
        to_words = block.gather(-1, shape.first[0][None, None, :].expand(heads, rows, w + 1))
        for cont_tok, cont_word, _ in shape.continuations:
            extra = block.gather(-1, cont_tok[0][None, None, :].expand(heads, rows, cont_tok.shape[1]))
            to_words.scatter_add_(-1, cont_word[0][None, None, :].expand(heads, rows, cont_tok.shape[1]), extra)
        # FROM a word: the mean over its pieces (rows), or its first piece's row
        words = to_words.gather(-2, first_rows[None, :, None].expand(heads, len(mine), w + 1))
        for tok, word in ranks if not shape.first_piece else ():
            extra = to_words.gather(-2, tok[None, :, None].expand(heads, len(tok), w + 1))
            words.scatter_add_(-2, word[None, :, None].expand(heads, len(tok), w + 1), extra)
        words = words[:, :, :w] * (shape.row_scale[0, mine][:, None] * shape.real[0][None, :])[None]
        if self.pieceless:  # -inf from and to a word without pieces of its own
            never = shape.pieceless[0, mine][:, None] | shape.pieceless[0][None, :]
            words += torch.where(never, -torch.inf, 0.0)[None]
        words[:, torch.arange(len(mine), device=device), mine] = -torch.inf  # never the word itself
        stats = self.word_stats[layer]
        weight, best = words.max(dim=-1)
        stats["weight"][:, mine], stats["dst_word"][:, mine] = weight, best
        from_weight, attending = words.max(dim=-2)  # the first of equal weights in the block ...
        better = from_weight > stats["from_weight"]  # ... and of the blocks: an earlier block's stays
        stats["from_weight"] = torch.where(better, from_weight, stats["from_weight"])
        stats["from_word"] = torch.where(better, mine[attending], stats["from_word"])

    def _block_words(
        self, start: int, stop: int, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """The words whose first piece is in the block of rows ``start`` to ``stop`` (all their pieces are), their first
        pieces' rows in the block, and their other pieces' rows in the block with their places among those words, by
        rank; found on the host, once for every layer."""
        mine = np.flatnonzero((self.first_tok >= start) & (self.first_tok < stop))
        ranks = []
        for cont_tok, cont_word in self.ranks:
            inside = (cont_tok >= start) & (cont_tok < stop)
            if inside.any():
                tok, word = cont_tok[inside] - start, np.searchsorted(mine, cont_word[inside])
                ranks.append((torch.from_numpy(tok).to(device), torch.from_numpy(word).to(device)))
        first_rows, mine_t = (torch.from_numpy(a).to(device) for a in (self.first_tok[mine] - start, mine))
        return mine_t, first_rows, ranks

    def result(self) -> tuple[Arrays, Arrays, Arrays, np.ndarray]:
        """(stats, words, edges, counts) of the input, as ``TensorRows.result`` gives them."""
        spec = self.batch
        assert len(self.stats) == spec.n_layers, "every layer's rows"
        with stage("to the host"):
            return self._host()

    def _host(self) -> tuple[Arrays, Arrays, Arrays, np.ndarray]:
        stats = {
            name: torch.cat([torch.cat(layer[name], dim=1) if name != "received" else layer[name][0]
                             for layer in self.stats], dim=0).flatten(0, 1).cpu().numpy()
            for name in ("entropy", "argmax_tok", "masses", "received")
        }  # fmt: skip
        stats["argmax_tok"] = stats["argmax_tok"].astype(POSITION_TYPE)
        words: Arrays = {}
        if self.words:
            for name in ("dst_word", "weight", "from_word", "from_weight"):
                column = torch.cat([layer[name] for layer in self.word_stats]).flatten().cpu().numpy()
                words[name] = column.astype(POSITION_TYPE) if name.endswith("word") else column
        edges = {name: [] for name in EDGE_COLUMNS}
        for layer, blocks in enumerate(self.edges):
            head, source, dst, weight = (torch.cat(part) for part in zip(*blocks, strict=True))
            order = torch.sort(head, stable=True).indices  # (head, source, destination): each block is in that order
            edges["layer"].append(np.full(len(order), layer, dtype=LAYER_TYPE))
            edges["head"].append(head[order].cpu().numpy().astype(LAYER_TYPE))
            edges["src_tok"].append(source[order].cpu().numpy().astype(POSITION_TYPE))
            edges["dst_tok"].append(dst[order].cpu().numpy().astype(POSITION_TYPE))
            edges["weight"].append(weight[order].float().cpu().numpy())
        columns = {name: np.concatenate(parts) for name, parts in edges.items()}
        return stats, words, columns, np.array([len(columns["weight"])], dtype=np.int64)


def _row_stats(
    block: torch.Tensor, argmax: torch.Tensor, start: int, shape: _Batch, smoothing: float
) -> dict[str, torch.Tensor]:
    """Per-row statistics of the rows from ``start`` on (``block`` ``[heads, rows, n]``) as ``tensor_rows``'s
    ``_row_stats`` computes them on the whole map: tensors ``[heads, rows]``."""
    heads, rows, n = block.shape
    count = shape.n[:1, None, None].to(block.dtype)[0]
    eps_n = smoothing / count
    smoothed = block.mul(1 - smoothing).add_(eps_n[..., None])
    terms = torch.linalg.vecdot(smoothed, smoothed.log())
    largest = smoothed.gather(-1, argmax[..., None])[..., 0]
    near_one = (block.gather(-1, argmax[..., None])[..., 0] - 1) * (1 - smoothing) + eps_n
    near_one -= smoothing
    terms += largest * (torch.log1p(near_one) - largest.log())
    zero = block.new_zeros(heads, 1)
    previous = block.diagonal(start - 1, -2, -1) if start else torch.cat([zero, block.diagonal(-1, -2, -1)], dim=-1)
    following = block.diagonal(start + 1, -2, -1)
    if following.shape[-1] < rows:  # the last row has no next token
        following = torch.cat([following, zero], dim=-1)
    masses = [block.diagonal(start, -2, -1), previous, following, block[..., 0]]
    if shape.masks.shape[-1]:
        masses.extend((block @ shape.masks[0]).unbind(-1))
    return {"entropy": -terms, "argmax_tok": argmax, "masses": torch.stack(masses, dim=-1)}
