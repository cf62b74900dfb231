"""The probing classifiers of Clark et al. 2019, Section 5, and the parser baselines.

Each model scores, for every word j of a batch, its candidate heads i (ROOT first): ``[B, n, n + 1]``.
p(i | j) is the softmax of these scores over the word's allowed candidates.

- attn-only: score(i, j) = sum_k w_k a^k(j->i) + u_k a^k(i->j)
- attn+glove: the head weights depend on the two words: W (v_j (+) v_i) + b in place of w and u
- distances+glove: no attention; a one-hidden-layer network over the GloVe vectors of both words and
  Clark et al.'s distance features
"""

from __future__ import annotations

import torch
from torch import nn

from atlas.probe_data import N_DISTANCE, Batch

HIDDEN = 256  # hidden units of distances+glove, as in the authors' code


class AttnOnly(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(channels))
        self.root_mix = nn.Parameter(torch.ones(2))  # [CLS] and [SEP] shares of the ROOT candidate

    def forward(self, batch: Batch) -> torch.Tensor:
        pair = batch.pair.float() @ self.weight  # [B, n, n]
        root = torch.einsum("bjsc,s,c->bj", batch.root.float(), self.root_mix, self.weight)
        return torch.cat([root[..., None], pair], dim=-1)


class AttnGlove(nn.Module):
    def __init__(self, channels: int, dim: int) -> None:
        super().__init__()
        self.dependent = nn.Linear(dim, channels)  # carries the bias b
        self.candidate = nn.Linear(dim, channels, bias=False)
        self.root_mix = nn.Parameter(torch.ones(2))

    def forward(self, batch: Batch) -> torch.Tensor:
        pair = batch.pair.float()
        dep = self.dependent(batch.glove)  # [B, n, C]
        cand = self.candidate(batch.glove)  # [B, n, C]; ROOT has no word vector
        words = torch.einsum("bjc,bjic->bji", dep, pair) + torch.einsum("bic,bjic->bji", cand, pair)
        root = torch.einsum("bjsc,s,bjc->bj", batch.root.float(), self.root_mix, dep)
        return torch.cat([root[..., None], words], dim=-1)


class DistancesGlove(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dependent = nn.Linear(dim, HIDDEN)
        self.candidate = nn.Linear(dim, HIDDEN, bias=False)
        self.distance = nn.Linear(N_DISTANCE, HIDDEN, bias=False)
        self.out = nn.Linear(HIDDEN, 1)

    def forward(self, batch: Batch) -> torch.Tensor:
        cand = self.candidate(batch.glove)
        cand = torch.cat([torch.zeros_like(cand[:, :1]), cand], dim=1)  # ROOT first, no word vector
        hidden = self.dependent(batch.glove)[:, :, None] + cand[:, None] + self.distance(batch.distance)
        return self.out(torch.tanh(hidden))[..., 0]


def branching(batch: Batch, direction: str) -> torch.Tensor:
    """Predicted candidate per word of a fixed chain. 'right' (Clark et al.'s right-branching baseline,
    26 UAS on the Penn Treebank): each word's head is the word after it, the last word is the root.
    'left': each word's head is the word before it, the first word is the root."""
    n_words = batch.words.sum(dim=1, keepdim=True)  # [B, 1]
    j = torch.arange(batch.words.shape[1])[None, :]
    if direction == "left":
        return j  # candidate j is word j - 1; word 0 gets candidate 0, ROOT
    return torch.where(j + 1 < n_words, j + 2, 0)
