"""What the work per attention weight needs to know of a forward batch: ``atlas.ingestion.sparsify`` describes the
batch, ``atlas.ingestion.cpu_rows`` or ``atlas.ingestion.tensor_rows`` computes its rows from the description and
the maps."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# The store's integer types for what an attention row is keyed by (schema.sql): a layer or head number (128 heads or
# more overflow int8) and a position in an input, of a token or a word (inputs of over 32,767 tokens overflow int16).
LAYER_TYPE = np.int16  # layer, head: SMALLINT
POSITION_TYPE = np.int32  # src_tok, dst_tok, argmax_tok, tok_idx, word_idx, src_word, dst_word, ...: INTEGER
EDGE_COLUMNS = ("layer", "head", "src_tok", "dst_tok", "weight")  # the row work's edge columns, in this order


@dataclass(frozen=True)
class RowBatch:
    n_layers: int
    n_heads: int
    n_max: int  # the longest input's number of tokens (the maps' padded size)
    lengths: Sequence[int]  # each input's number of tokens
    token_words: Sequence[Sequence[int | None]]  # each input's word of each token (None: a special token)
    n_words: Sequence[int]  # each input's number of words
    masks: np.ndarray  # [batch, n_max, targets]: each input's tokens of each target kind
    kept_mass: float | None  # None: dense, every weight an edge
    max_edges: int | None  # at most this many edges per row (None: no cap)
    causal: bool  # a decoder's maps: no edge to a later token
    smoothing: float  # the entropy's: of (1 - smoothing) a + smoothing / n
    weight_step: float  # stored weights are multiples of this
    first_piece: bool = False  # FROM a word of several pieces: its first piece's row (else the mean of its pieces')

    @property
    def word_rows(self) -> list[int]:
        """Each input's words that have word rows: all of them in an input of two words or more, else none."""
        return [n if n >= 2 else 0 for n in self.n_words]


def cuts(token_word: Sequence[int | None]) -> np.ndarray:
    """Where a block of rows may end: before a token that starts a word or is a special token, and at the end."""
    n = len(token_word)
    words = np.array([-1 if w is None else w for w in token_word])
    inside = np.zeros(n + 1, dtype=np.bool_)  # token t continues the word of token t - 1
    inside[1:n] = (words[1:] >= 0) & (words[1:] == words[:-1])
    return np.flatnonzero(~inside[1:]) + 1


def row_blocks(token_word: Sequence[int | None], rows_per_block: int) -> list[tuple[int, int]]:
    """An input read by rows: its blocks of about ``rows_per_block`` rows each, each ending where a word does (so that a
    word's rows are all in one block)."""
    ends = cuts(token_word)
    blocks, start, n = [], 0, len(token_word)
    while start < n:
        fits = ends[ends <= start + rows_per_block]
        stop = int(fits[-1]) if fits.size and fits[-1] > start else int(ends[ends > start][0])
        blocks.append((start, stop))
        start = stop
    return blocks
