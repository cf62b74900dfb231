"""Stage 4 on a CPU: the work per attention weight of ``atlas.ingestion.sparsify`` compiled (numba) into one pass over
each attention row, in parallel over a batch's inputs and heads.

The tensor operations of ``atlas.ingestion.tensor_rows`` make a dozen passes over every weight, most of them writing a
temporary as large as the maps: cheap on an accelerator, on a CPU 40 ns per weight, a fifth to a third of the
forward pass. Here a row is read a few times while it is in the cache and nothing as large as the maps is
written (on one core 5 ns per weight of 128-piece windows, 9 of one-sentence inputs, where the work per row
weighs more; UD GUM and EWT dev). The results are those of the tensor operations (tested against them): the same
edges, argmaxes and word-level predictions; the word-level map summed in the same order (token
order, float32), the entropy, masses and received attention in float64. Rounding to the stored precision is
``atlas.ingestion.sparsify``'s, after this.

An input too long for its whole maps (``atlas.ingestion.block_rows``) goes through the same pass a block of rows at a
time (``CpuBlockRows``). With the tensor operations there, two 4,097-token inputs (4 layers, 8 heads) took 22 to 26 s of
row work against the model's 9 to 11 s, their temporaries mapped and unmapped for every block to keep the heap from
growing around the small tensors kept of each block; here 2.0 to 2.4 s, and nothing of a block is kept but its
rows (bench/RESULTS.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numba as nb
import numpy as np
import torch

from atlas.ingestion.row_batch import EDGE_COLUMNS, LAYER_TYPE, POSITION_TYPE, RowBatch, row_blocks

# what atlas.ingestion.sparsify's BatchRows needs from here: (stats, words, edges, counts) of a batch
Arrays = dict[str, np.ndarray]
KEPT = EDGE_COLUMNS[1:]  # an input read by rows: its edges' columns kept block after block (the layer: from where)


POSITION_BITS = 22  # a rank key's lower bits: POSITION less the weight's position (see _kept_edges) ...
POSITION = np.int32(2**POSITION_BITS - 1)
MAX_TOKENS = 2**POSITION_BITS  # ... in an input shorter than this
ONE_STEP = np.int32(1 << POSITION_BITS)  # the smallest key of a weight of one step or more
MAX_KEY = np.int32(2**31 - 1)  # above every key: weights of at most 510 steps (see CpuRows)
SQRT2 = np.float32(math.sqrt(2))
NEVER = np.float32(-1)  # a word's own place in its row of the word-level map: below every weight
# Cephes' logf: log(1 + f) for f in [sqrt(1/2) - 1, sqrt(2) - 1], relative error about 1e-7
LOG_POLY = tuple(np.float32(c) for c in (
    7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1, -1.6668057665e-1,
    2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1,
))  # fmt: skip


@nb.njit(fastmath={"reassoc", "nsz"}, nogil=True, cache=True)
def _s_log_s(x, ones, zero, s, bits, terms):
    """s log s of each smoothed weight s = ones x + zero of ``x`` (float32, positive) into ``terms``, the logarithm
    from the float's exponent and a polynomial in its mantissa (Cephes' logf, within about 1e-7 relative:
    vectorised, a quarter of the time of the math library's); ``s`` and ``bits``: scratch arrays. Run over a head's
    rows at once: a row of a sentence is too short to fill the vector units."""
    n = x.shape[0]
    for j in range(n):
        s[j] = x[j] * ones + zero
    exponent = s.view(np.int32)
    for j in range(n):
        bits[j] = (exponent[j] & 0x7FFFFF) | 0x3F800000  # the mantissa as a float in [1, 2)
    mantissa = bits.view(np.float32)
    for j in range(n):
        e = np.float32((exponent[j] >> 23) - 127)
        m = mantissa[j]
        big = m > SQRT2
        f = (m * np.float32(0.5) if big else m) - np.float32(1)
        e = e + np.float32(1) if big else e
        z = f * f
        y = LOG_POLY[0]
        for c in LOG_POLY[1:]:
            y = y * f + c
        y = y * f * z + np.float32(-2.12194440e-4) * e - np.float32(0.5) * z
        terms[j] = s[j] * (f + y + np.float32(0.693359375) * e)


@nb.njit(nogil=True, cache=True)
def _rank_keys(x, per_step, positions, keys):
    """Each weight's rank key (see ``_kept_edges``): its steps, then ``positions`` (POSITION less its position)."""
    for j in range(x.shape[0]):
        keys[j] = (np.int32(np.rint(x[j] * per_step)) << POSITION_BITS) | positions[j]


@nb.njit(fastmath={"reassoc", "nsz"}, nogil=True, cache=True)
def _sum(x, start, stop):
    """The float64 sum of ``x[start:stop]`` (float32; vectorised, in an order of the compiler's choosing)."""
    total = 0.0
    for j in range(start, stop):
        total += x[j]
    return total


@nb.njit(nogil=True, cache=True)
def _first_largest(x, n):
    """Where the largest of ``x[:n]`` is first (float32, all non-negative but a few NEVER, which are below them all):
    compared as their bits, which non-negative floats order alike; vectorised, where a float maximum is not."""
    bits = x[:n].view(np.int32)
    top = bits[0]
    for j in range(1, n):
        top = max(top, bits[j])
    best = 0
    while bits[best] != top:
        best += 1
    return best


class Scratch(NamedTuple):
    """Each thread's working arrays for ``_layer`` (first axis: the thread), made once per forward batch: made for
    each head's task, they took about a tenth of the time of the pass over one-sentence inputs."""

    floats: np.ndarray  # [threads, 2, rows * m] float32: a head's smoothed weights and their s log s terms
    ints: np.ndarray  # [threads, 2, rows * m] int32: their bits and rank keys
    to_words: np.ndarray  # [threads, rows * max(words, 1)] float32: each row's attention TO each word
    tok_word: np.ndarray  # [threads, m] int64: each token's word (-1: none)
    word_row: np.ndarray  # [threads, max(words, m)] float32: a word's row of the word-level map

    @classmethod
    def of(cls, n_threads: int, rows: int, m: int, w_max: int) -> Scratch:
        """For maps of ``rows`` rows of ``m`` weights."""
        return cls(
            np.empty((n_threads, 2, rows * m), np.float32),
            np.empty((n_threads, 2, rows * m), np.int32),
            np.empty((n_threads, rows * max(w_max, 1)), np.float32),
            np.empty((n_threads, m), np.int64),
            np.empty((n_threads, max(w_max, m)), np.float32),  # an input may have more words than tokens
        )


class Columns(NamedTuple):
    """What a layer's rows add up over its rows, for each input and head (reset with each layer; kept across the
    blocks of an input read by rows)."""

    received: np.ndarray  # [batch, heads, m] float64: the column sums
    col_max: np.ndarray  # [batch, heads, words] float32: the largest weight TO each word, so far
    col_best: np.ndarray  # [batch, heads, words] int32: the word giving it

    @classmethod
    def of(cls, n_batch: int, n_heads: int, m: int, w_max: int) -> Columns:
        w = max(w_max, 1)
        return cls(np.zeros((n_batch, n_heads, m)), np.full((n_batch, n_heads, w), -np.inf, np.float32),
                   np.zeros((n_batch, n_heads, w), np.int32))  # fmt: skip

    def reset(self) -> None:
        self.received[:] = 0.0
        self.col_max[:] = -np.inf
        self.col_best[:] = 0


@nb.njit(parallel=True, nogil=True, cache=True)
def _layer(attn, start, positions, layer, lengths, n_words, word_start, word_stop, gaps, first_only, target_tok,
           target_of, n_target_tokens, k, kept_steps, per_step, causal, smoothing, slot_base, row_base, word_base,
           entropy, argmax, masses, received, dst_word, weight, from_word, from_weight, edge_dst, edge_w, edge_n,
           columns, col_max, col_best, floats, ints, to_words_of, tok_words, word_rows):  # fmt: skip
    """Rows ``start`` on of one layer's maps, ``attn`` ``[batch, heads, rows, m]`` (whole maps: ``start`` 0 and
    ``rows`` the padded length; an input read by rows: a block of its rows), into the batch's rows. Of input ``b``'s
    head ``h``: the row of position 0 at ``row_base[b, h]`` (input after input, each input's in (layer, head,
    position) order), its word rows from ``word_base[b, h]`` (inputs of two words or more), the edge slots of the
    block's first row from ``slot_base[b, h]`` (``k`` slots per row, at most ``n``), the counts in ``edge_n`` by
    position. The column sums go on in ``columns`` (float64) and the running maxima of each word's column in
    ``col_max`` and ``col_best``, ``received``, ``from_word`` and ``from_weight`` are rewritten from them: after a
    layer's last block they are the layer's. A word's pieces are the tokens ``word_start`` to ``word_stop`` (none:
    equal; ``gaps``: an input has such a word before its last word with pieces), all in one block; ``first_only``:
    FROM a word, its first piece's row; ``positions``: the lower bits of the rank keys of ``rows`` rows, flat;
    ``floats`` to ``word_rows``: a ``Scratch``, one thread's working arrays for each of its tasks (a head of an
    input: thread t takes tasks t, t + threads, ...)."""
    n_batch, n_heads, n_rows, m = attn.shape
    n_targets = masses.shape[1] - 4
    n_threads = floats.shape[0]
    for thread in nb.prange(n_threads):
        for task in range(thread, n_batch * n_heads, n_threads):
            b, h = task // n_heads, task % n_heads
            n = lengths[b]
            rows = min(n_rows, n - start)
            r = layer * n_heads + h
            nw = n_words[b]
            slots = min(k, n)
            base, row, word = slot_base[b, h], row_base[b, h], word_base[b, h]
            eps_n = smoothing / n
            ones, zero = np.float32(1 - smoothing), np.float32(eps_n)  # s = ones a + zero, in float32
            column = columns[b, h, :n]
            # TO each word: the sum over its pieces, in token order
            to_words = to_words_of[thread, : rows * max(nw, 1)].reshape((rows, max(nw, 1)))
            to_words[:] = 0.0
            tok_word = tok_words[thread, :n]
            tok_word[:] = -1
            for w in range(nw if nw >= 2 else 0):
                tok_word[word_start[b, w] : word_stop[b, w]] = w
            top_steps = np.zeros(slots, np.int64)
            top_pos = np.zeros(slots, np.int64)
            target = np.zeros(n_targets, np.float64)
            # per weight, over the head's rows at once (all m columns of each: the padding's are 0, never read)
            flat = attn[b, h].reshape(n_rows * m)[: rows * m]
            each = floats[thread, 0, : rows * m]
            _s_log_s(flat, ones, zero, floats[thread, 1, : rows * m], ints[thread, 0, : rows * m], each)
            keys = ints[thread, 1, : rows * m]
            if kept_steps >= 0:
                _rank_keys(flat, per_step, positions[: rows * m], keys)
            for i in range(rows):
                p = start + i  # the row's position
                weights = attn[b, h, i]
                best = _first_largest(weights, n)  # the first of equal maxima
                largest = weights[best]
                # entropy: the largest weight's term again in float64 (near 1, a float32 s is off by up to 6e-8, a
                # large error in its small logarithm)
                terms = _sum(each, i * m, i * m + n) - each[i * m + best]
                s = largest * (1 - smoothing) + eps_n
                terms += s * math.log1p((largest - 1.0) * (1 - smoothing) - smoothing + eps_n)
                entropy[row + p] = 0.0 - terms  # (never -0.0)
                argmax[row + p] = best
                for j in range(n):
                    column[j] += weights[j]
                if nw >= 2:
                    for j in range(n):
                        if tok_word[j] >= 0:
                            to_words[i, tok_word[j]] += weights[j]
                target[:] = 0.0
                for q in range(n_target_tokens[b]):
                    target[target_of[b, q]] += weights[target_tok[b, q]]
                masses[row + p, 0] = weights[p]
                masses[row + p, 1] = weights[p - 1] if p > 0 else 0.0
                masses[row + p, 2] = weights[p + 1] if p + 1 < n else 0.0
                masses[row + p, 3] = weights[0]
                for t in range(n_targets):
                    masses[row + p, 4 + t] = target[t]
                slot = base + i * slots
                if kept_steps < 0:  # dense: every weight (a decoder's up to its own position)
                    upto = p + 1 if causal else n
                    for j in range(upto):
                        edge_dst[slot + j] = j
                        edge_w[slot + j] = weights[j]
                    edge_n[b, r, p] = upto
                    continue
                edge_n[b, r, p] = _kept_edges(n, best, slots, kept_steps, per_step, keys[i * m : i * m + n], top_steps,
                                              top_pos, edge_dst, edge_w, slot)  # fmt: skip
            for j in range(n):
                received[row + j] = column[j]
            if nw >= 2:
                at = slice(word, word + nw)
                _word_predictions(to_words, start, start + rows, word_start[b], word_stop[b], nw,
                                  word_rows[thread, :nw], col_max[b, h, :nw], col_best[b, h, :nw], dst_word[at],
                                  weight[at], from_word[at], from_weight[at], first_only, gaps[b])  # fmt: skip


@nb.njit(fastmath=True, nogil=True, cache=True)
def _largest_below(x, n, bound):
    """The largest of ``x[:n]`` below ``bound`` (-1 if none; vectorised)."""
    none = np.int32(-1)  # int32 throughout: eight keys to a vector (mixed with int64, four)
    top = none
    for j in range(n):
        key = x[j]
        top = max(top, key if key < bound else none)
    return top


@nb.njit(nogil=True, cache=True)
def _kept_edges(n, best, slots, kept_steps, per_step, keys, top_steps, top_pos, dst, out_w, slot):
    """A sparse row's edges into ``dst`` and ``out_w`` from ``slot`` on, in the order of their destination; returns
    their number. Ranked: the argmax, then by stored weight (steps), then the earlier token; a prefix of the
    ranking is kept, while the mass before an edge is below the target (weight 0: never an edge). Each weight's rank
    is one distinct integer (its steps, then its position reversed: the row's ``keys``), so each next edge is the
    row's largest key below the last one's (a vectorised pass, no search, nothing written): a row keeps a handful.
    Besides the argmax (its key set to 0 in ``keys``) only weights of one step or more can be an edge."""
    top_pos[0], top_steps[0] = best, keys[best] >> POSITION_BITS  # the argmax, even below one step
    before = top_steps[0]
    keys[best] = 0
    kept = 1
    key = MAX_KEY  # above every key
    while kept < slots and before < kept_steps:
        key = _largest_below(keys, n, key)  # keys are distinct: the next of the ranking
        if key < ONE_STEP:
            break
        steps = key >> POSITION_BITS
        top_pos[kept], top_steps[kept] = POSITION - (key & POSITION), steps
        before += steps
        kept += 1
    for c in range(kept):  # in the order of their destination: each edge's place is the number of edges before it
        place = 0
        for d in range(kept):
            place += top_pos[d] < top_pos[c]
        dst[slot + place] = top_pos[c]
        out_w[slot + place] = max(top_steps[c], 1) / per_step
    return kept


@nb.njit(nogil=True, cache=True)
def _word_predictions(to_words, first_row, past_row, start, stop, nw, row, col_max, col_best, dst_word, weight,
                      from_word, from_weight, first_only, gaps):  # fmt: skip
    """Clark et al.'s word-level map of one head (FROM a word: the mean over its pieces' rows of ``to_words``,
    summed in token order, or with ``first_only`` its first piece's row; a word of one piece: its row as it is,
    where no other word reads it) for the words whose pieces are the rows ``first_row`` to ``past_row`` (the rows of
    ``to_words``), and for every word the other word it attends to most and, so far, the other word attending to
    it most (the first of equal weights: ``col_max`` and ``col_best``, kept from the rows before, int32: vectorised
    beside the float32 weights); ``row``: a working array of ``nw``. A word without pieces (``gaps``: the input has
    one) is never a prediction; its own are filler (``atlas.ingestion.sparsify`` drops its rows)."""
    for u in range(nw):
        first, past = start[u], stop[u]
        if past == first:
            if first_row == 0:
                dst_word[u], weight[u] = 0, 0.0
            continue
        if first < first_row or past > past_row:  # another block's word
            continue
        first, past = first - first_row, past - first_row
        if past - first == 1 or first_only:
            mean = to_words[first]
        else:
            mean = row
            mean[:] = to_words[first]
            for t in range(first + 1, past):
                for v in range(nw):
                    mean[v] += to_words[t, v]
            scale = np.float32(1.0 / (past - first))
            for v in range(nw):
                mean[v] *= scale
        mean[u] = NEVER  # never the word itself
        if gaps:
            for v in range(nw):
                if start[v] == stop[v]:
                    mean[v] = NEVER
        best = _first_largest(mean, nw)
        dst_word[u], weight[u] = best, mean[best]
        source = np.int32(u)
        for v in range(nw):
            better = mean[v] > col_max[v]
            col_max[v] = mean[v] if better else col_max[v]
            col_best[v] = source if better else col_best[v]
    for v in range(nw):
        from_word[v], from_weight[v] = col_best[v], col_max[v]


@nb.njit(nogil=True, cache=True)
def _compact(edge_dst, edge_w, edge_n, lengths, offsets, k, n_layers, n_heads, out_layer, out_head, out_src, out_dst,
             out_w, counts):  # fmt: skip
    """The filled edge slots as flat columns in (input, layer, head, source, destination) order."""
    e = 0
    for b in range(lengths.shape[0]):
        n = lengths[b]
        slots = min(k, n)
        start = e
        for r in range(n_layers * n_heads):
            layer, head = r // n_heads, r % n_heads
            for i in range(n):
                slot = offsets[b] + (r * n + i) * slots
                for c in range(edge_n[b, r, i]):
                    out_layer[e], out_head[e], out_src[e] = layer, head, i
                    out_dst[e], out_w[e] = edge_dst[slot + c], edge_w[slot + c]
                    e += 1
        counts[b] = e - start


class CpuRows:
    """A batch's rows computed one layer at a time, as the forward pass hands each layer's maps over (``layer``: no
    layer's maps need be kept), then collected (``result``)."""

    def __init__(self, batch: RowBatch, rows: int | None = None) -> None:
        """``rows``: the most rows of a map handed over at once (None: the batch's whole maps)."""
        n_layers, n_heads, n_max, lengths = batch.n_layers, batch.n_heads, batch.n_max, batch.lengths
        masks = batch.masks
        kept_mass, weight_step, causal, smoothing = batch.kept_mass, batch.weight_step, batch.causal, batch.smoothing
        n_batch = len(lengths)
        lh = n_layers * n_heads
        rows = n_max if rows is None else rows
        self.n_layers, self.n_heads, self.causal, self.smoothing = n_layers, n_heads, causal, smoothing
        self.n = n = np.asarray(lengths, dtype=np.int64)
        self.n_words = n_words = np.asarray(batch.n_words, dtype=np.int64)
        self.word_start, self.word_stop = _word_spans(batch.token_words, max(int(n_words.max()), 1))
        inside = np.arange(self.word_start.shape[1]) < n_words[:, None]
        self.gaps = ((self.word_start == self.word_stop) & inside).any(axis=1)
        self.first_only = batch.first_piece
        self.k = k = n_max if kept_mass is None else min(batch.max_edges or n_max, n_max)
        self.slots = np.minimum(k, n)  # each input's edge slots per row
        slots = lh * n * self.slots
        self.offsets = np.concatenate([[0], np.cumsum(slots)[:-1]]).astype(np.int64)
        rows_of, word_rows = lh * n, lh * np.asarray(batch.word_rows, dtype=np.int64)  # each input's
        self.row_offsets, self.word_offsets = np.cumsum(rows_of) - rows_of, np.cumsum(word_rows) - word_rows
        n_rows, n_word_rows = int(rows_of.sum()), int(word_rows.sum())
        # float64 sums stored as float32, as atlas.ingestion.sparsify would round them
        self.stats = {
            "entropy": np.empty(n_rows, dtype=np.float32),
            "argmax_tok": np.empty(n_rows, dtype=POSITION_TYPE),
            "masses": np.empty((n_rows, 4 + masks.shape[2]), dtype=np.float32),
            "received": np.empty(n_rows, dtype=np.float32),
        }
        self.words = {
            "dst_word": np.empty(n_word_rows, dtype=POSITION_TYPE),
            "weight": np.empty(n_word_rows, dtype=np.float32),
            "from_word": np.empty(n_word_rows, dtype=POSITION_TYPE),
            "from_weight": np.empty(n_word_rows, dtype=np.float32),
        }
        # the slots' destinations: int16 where it holds every position of the batch (a dense batch's slots are as many
        # as its weights: a third less memory than int32), else the store's type; whole maps: every row's slots, rows
        # read in blocks: a block's
        total = int(slots.sum()) if rows == n_max else n_heads * rows * int(self.slots[0])
        self.edge_dst = np.empty(total, dtype=np.int16 if n_max <= 2**15 else POSITION_TYPE)
        self.edge_w = np.empty(total, dtype=np.float32)
        self.edge_n = np.zeros((n_batch, lh, n_max), dtype=np.int32)
        self.kept_steps = -1.0 if kept_mass is None else kept_mass / weight_step
        self.per_step = np.float32(1 / weight_step)
        self.positions = np.tile(POSITION - np.arange(n_max, dtype=np.int32), rows)
        self.threads = max(1, min(torch.get_num_threads(), nb.config.NUMBA_NUM_THREADS))
        self.scratch = Scratch.of(self.threads, rows, n_max, int(n_words.max()))
        self.columns = Columns.of(n_batch, n_heads, n_max, int(n_words.max()))
        if n_max >= MAX_TOKENS or (self.per_step + 1) * MAX_TOKENS >= 2**31:
            raise ValueError(f"rank keys hold inputs of fewer than {MAX_TOKENS} tokens, weights of up to 510 steps")
        # each input's target tokens and their targets (a token may count for several)
        self.n_target_tokens = masks.sum(axis=(1, 2)).astype(np.int64)
        self.target_tok = np.zeros((n_batch, max(1, int(self.n_target_tokens.max(initial=0)))), dtype=np.int64)
        self.target_of = np.zeros_like(self.target_tok)
        for b in range(n_batch):
            tokens, kinds = np.nonzero(masks[b])
            self.target_tok[b, : len(tokens)], self.target_of[b, : len(tokens)] = tokens, kinds

    def layer(self, layer: int, attn: torch.Tensor) -> None:
        """Layer ``layer``'s maps ``[batch, heads, n, n]`` (float32, on the CPU) into the batch's rows."""
        heads = np.arange(self.n_heads)
        r = layer * self.n_heads + heads[None, :]
        slot_base = self.offsets[:, None] + r * (self.n * self.slots)[:, None]
        self.columns.reset()
        self._rows(layer, 0, attn, slot_base)

    def _rows(self, layer: int, start: int, attn: torch.Tensor, slot_base: np.ndarray) -> None:
        """The rows from ``start`` on of layer ``layer`` (``attn``: ``[batch, heads, rows, n]``), the edge slots of
        the first of them at ``slot_base`` ``[batch, heads]``."""
        nb.set_num_threads(self.threads)
        stats, words = self.stats, self.words
        r = layer * self.n_heads + np.arange(self.n_heads)[None, :]
        row_base = self.row_offsets[:, None] + r * self.n[:, None]
        word_base = self.word_offsets[:, None] + r * self.n_words[:, None]
        _layer(np.ascontiguousarray(attn.numpy()), start, self.positions, layer, self.n, self.n_words,
               self.word_start, self.word_stop, self.gaps, self.first_only, self.target_tok, self.target_of,
               self.n_target_tokens, self.k, self.kept_steps, self.per_step, self.causal, self.smoothing, slot_base,
               row_base, word_base, stats["entropy"], stats["argmax_tok"], stats["masses"], stats["received"],
               words["dst_word"], words["weight"], words["from_word"], words["from_weight"], self.edge_dst,
               self.edge_w, self.edge_n, *self.columns, *self.scratch)  # fmt: skip

    def result(self) -> tuple[Arrays, Arrays, Arrays, np.ndarray]:
        """Rows (entropy, argmax_tok, masses ``[rows, 4 + targets]``, received) and word rows, input after input,
        each input's in (layer, head, position) order (word rows: inputs of two words or more), the edge columns and
        each input's count of edges, as computed, before any rounding."""
        n_edges = int(self.edge_n.sum())
        edges = _edge_arrays(n_edges)
        counts = np.zeros(len(self.n), dtype=np.int64)
        _compact(self.edge_dst, self.edge_w, self.edge_n, self.n, self.offsets, self.k, self.n_layers,
                 self.n_heads, edges["layer"], edges["head"], edges["src_tok"], edges["dst_tok"], edges["weight"],
                 counts)  # fmt: skip
        return self.stats, self.words, edges, counts


class CpuBlockRows(CpuRows):
    """``CpuRows`` for one input read by rows (``atlas.model.forward.stream_rows``): each layer's rows come a block
    at a time (``bounds``, then ``rows`` for each block, layer after layer), as ``atlas.ingestion.block_rows.BlockRows``
    takes them on an accelerator, and go through the same compiled pass as whole maps do: the same rows, word rows and
    edges. Nothing as large as a block is allocated per block: the edges of each block are appended to columns
    that grow by doubling."""

    def __init__(self, batch: RowBatch, block_weights: int) -> None:
        assert len(batch.lengths) == 1, "one input"
        n = batch.lengths[0]
        self.blocks = row_blocks(batch.token_words[0], max(1, block_weights // (batch.n_heads * n)))
        super().__init__(batch, max(stop - start for start, stop in self.blocks))
        self.kept = _edge_arrays(self.n_heads * n, KEPT)  # the edges so far: (layer, block, head, source, destination)
        self.n_kept = 0
        self.layer_ends: list[int] = []  # where each layer's edges end in them

    def bounds(self, n: int) -> list[tuple[int, int]]:
        """The blocks of rows of a layer (``row_batch.row_blocks``)."""
        assert n == self.n[0], "the input's own rows"
        return self.blocks

    def rows(self, layer: int, start: int, probs: torch.Tensor) -> None:
        """The float32 probabilities ``[1, heads, rows, n]`` of the rows from ``start`` on of layer ``layer``."""
        if start == 0:
            self.columns.reset()
            if layer:
                self.layer_ends.append(self.n_kept)
        n_rows = probs.shape[-2]
        slot_base = (np.arange(self.n_heads) * n_rows * int(self.slots[0]))[None, :]
        self._rows(layer, start, probs, slot_base)
        r = layer * self.n_heads
        n_new = int(self.edge_n[0, r : r + self.n_heads, start : start + n_rows].sum())
        if self.n_kept + n_new > len(self.kept["weight"]):
            size = max(2 * len(self.kept["weight"]), self.n_kept + n_new)
            grown = _edge_arrays(size, KEPT)
            for name, column in self.kept.items():
                grown[name][: self.n_kept] = column[: self.n_kept]
            self.kept = grown
        kept = self.kept
        self.n_kept = _compact_rows(self.edge_dst, self.edge_w, self.edge_n[0], r, self.n_heads, start, n_rows,
                                    int(self.slots[0]), self.n_kept, kept["head"], kept["src_tok"], kept["dst_tok"],
                                    kept["weight"])  # fmt: skip

    def result(self) -> tuple[Arrays, Arrays, Arrays, np.ndarray]:
        ends = [*self.layer_ends, self.n_kept]
        assert len(ends) == self.n_layers, "every layer's rows"
        edges = _edge_arrays(self.n_kept)
        begin = 0
        for layer, end in enumerate(ends):
            # a layer's edges came block after block, each block's head after head: each head's, in order
            order = begin + np.argsort(self.kept["head"][begin:end], kind="stable")
            edges["layer"][begin:end] = layer
            for name in KEPT:
                edges[name][begin:end] = self.kept[name][order]
            begin = end
        return self.stats, self.words, edges, np.array([self.n_kept], dtype=np.int64)


def _edge_arrays(n: int, names: tuple[str, ...] = EDGE_COLUMNS) -> Arrays:
    """Edge columns of ``n`` rows, each in the store's type."""
    types = {"layer": LAYER_TYPE, "head": LAYER_TYPE, "src_tok": POSITION_TYPE, "dst_tok": POSITION_TYPE,
             "weight": np.float32}  # fmt: skip
    return {name: np.empty(n, dtype=types[name]) for name in names}


@nb.njit(nogil=True, cache=True)
def _compact_rows(edge_dst, edge_w, edge_n, r, n_heads, start, n_rows, slots, at, out_head, out_src, out_dst, out_w):
    """The filled edge slots of a block of rows (``n_rows`` from ``start`` on, heads ``r`` on of ``edge_n``) appended
    from ``at`` on in (head, source, destination) order; returns where they end."""
    e = at
    for h in range(n_heads):
        for i in range(n_rows):
            slot = (h * n_rows + i) * slots
            for c in range(edge_n[r + h, start + i]):
                out_head[e], out_src[e] = h, start + i
                out_dst[e], out_w[e] = edge_dst[slot + c], edge_w[slot + c]
                e += 1
    return e


def _word_spans(token_words: Sequence[Sequence[int | None]], w_max: int) -> tuple[np.ndarray, np.ndarray]:
    """Each input's first and past-the-last token of each word ``[batch, w_max]`` (a word without pieces, and words
    past an input's own: 0, 0); a word's pieces must be consecutive tokens, words in order."""
    # the batch's tokens at once: input by input, 9 times the time over UD EWT dev, 2.6 over GUM dev's windows
    n_batch = len(token_words)
    lengths = np.array([len(tw) for tw in token_words], dtype=np.int64)
    ids = np.array([-1 if w is None else w for tw in token_words for w in tw], dtype=np.int64)
    inputs = np.repeat(np.arange(n_batch), lengths)
    positions = np.arange(len(ids)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    tokens = np.flatnonzero(ids >= 0)  # the pieces of words, input after input
    word, of = ids[tokens], inputs[tokens]
    first = np.flatnonzero(np.diff(word, prepend=-1) | np.diff(of, prepend=-1))  # each word's first piece
    last = np.flatnonzero(np.diff(word, append=-1) | np.diff(of, append=-1))  # and its last
    words, owner = word[first], of[first]
    starts, stops = positions[tokens[first]], positions[tokens[last]] + 1
    disorder = owner[1:][(np.diff(words) <= 0) & (owner[1:] == owner[:-1])]
    gaps = np.bincount(of, minlength=n_batch) != np.bincount(owner, weights=stops - starts, minlength=n_batch)
    bad = np.union1d(disorder, np.flatnonzero(gaps))
    if len(bad):
        raise ValueError(f"input {bad[0]}: a word's pieces are not consecutive tokens, in word order")
    word_start = np.zeros((n_batch, w_max), dtype=np.int64)
    word_stop = np.zeros((n_batch, w_max), dtype=np.int64)
    word_start[owner, words], word_stop[owner, words] = starts, stops
    return word_start, word_stop
