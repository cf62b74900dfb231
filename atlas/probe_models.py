"""The probing classifiers of Clark et al. 2019, Section 5, and the parser baselines.

Each model scores, for every word j of a batch, its candidate heads i (ROOT first, then every word,
j itself included): ``[B, n, n + 1]``. p(i | j) is the softmax of these scores over the candidates.
As the released ``Probe`` (Syntax_Analysis.ipynb, cell 14):

- attn-only: score(i, j) = sum_k w_k a^k(j->i) + u_k a^k(i->j); for ROOT the maps are
  s a^k(j<->[CLS]) + e a^k(j<->[SEP]) with two learned scalars s and e (``ROOT_start``, ``ROOT_end``)
- attn+glove: the head weights depend on the two words: W (v_j (+) v_i) + b in place of w and u (a dense
  layer over the concatenated vectors; ROOT's vector is zeros)
- distances+glove: no attention; a one-hidden-layer network (256 tanh units) over the distance features
  and the GloVe vectors of both words

Initialisation as TensorFlow 1's defaults there: every weight Glorot-uniform, U(-l, l) with
l = sqrt(6 / (fan_in + fan_out)) (a vector of m: fans m and m; a scalar: 1 and 1), biases zero.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from atlas.probe_data import N_DISTANCE, Batch

HIDDEN = 256  # hidden units of distances+glove, as in the authors' code


def glorot(*shape: int, fans: tuple[int, int]) -> nn.Parameter:
    """A parameter drawn as TensorFlow 1's glorot_uniform with the given (fan_in, fan_out)."""
    limit = math.sqrt(6.0 / sum(fans))
    return nn.Parameter(torch.empty(shape).uniform_(-limit, limit))


def root_scalars() -> nn.Parameter:
    """``ROOT_start`` and ``ROOT_end``: two scalar variables, each Glorot-uniform with fans 1 and 1."""
    return glorot(2, fans=(1, 1))


def attention_maps(batch: Batch, root_mix: torch.Tensor) -> torch.Tensor:
    """``[B, n, n + 1, 2K]``: the ROOT candidate's mixed [CLS]/[SEP] channels, then the word candidates'."""
    root = torch.einsum("bjsc,s->bjc", batch.root.float(), root_mix)
    return torch.cat([root[:, :, None], batch.pair.float()], dim=2)


class AttnOnly(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.weight = glorot(channels, fans=(channels, channels))
        self.root_mix = root_scalars()  # [CLS] and [SEP] shares of the ROOT candidate

    def forward(self, batch: Batch) -> torch.Tensor:
        return attention_maps(batch, self.root_mix) @ self.weight


class AttnGlove(nn.Module):
    def __init__(self, channels: int, dim: int) -> None:
        super().__init__()
        self.root_mix = root_scalars()
        self.kernel = glorot(2 * dim, channels, fans=(2 * dim, channels))
        self.bias = nn.Parameter(torch.zeros(channels))

    def forward(self, batch: Batch) -> torch.Tensor:
        weights = batch.word_pairs @ self.kernel + self.bias  # [B, n, n + 1, C]
        return (weights * attention_maps(batch, self.root_mix)).sum(dim=-1)


class DistancesGlove(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        # the released network's input also holds one all-zero channel (its dummy attention map), which
        # counts in fan_in only
        self.kernel = glorot(N_DISTANCE + 2 * dim, HIDDEN, fans=(1 + N_DISTANCE + 2 * dim, HIDDEN))
        self.bias = nn.Parameter(torch.zeros(HIDDEN))
        self.out = glorot(HIDDEN, fans=(HIDDEN, 1))
        self.out_bias = nn.Parameter(torch.zeros(()))

    def forward(self, batch: Batch) -> torch.Tensor:
        hidden = batch.distance @ self.kernel[:N_DISTANCE] + batch.word_pairs @ self.kernel[N_DISTANCE:] + self.bias
        return torch.tanh(hidden) @ self.out + self.out_bias


def branching(batch: Batch, direction: str) -> torch.Tensor:
    """Predicted candidate per word of a fixed chain. 'right' (Clark et al.'s right-branching baseline):
    each word's head is the word after it, the last word is the root. 'left': each word's head is the
    word before it, the first word is the root."""
    n_words = batch.words.sum(dim=1, keepdim=True)  # [B, 1]
    j = torch.arange(batch.words.shape[1])[None, :]
    if direction == "left":
        return j  # candidate j is word j - 1; word 0 gets candidate 0, ROOT
    return torch.where(j + 1 < n_words, j + 2, 0)
