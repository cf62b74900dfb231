"""Attention rollout at ingest (``--rollout cls|last|all``; Abnar & Zuidema 2020, "Quantifying Attention Flow in
Transformers"), by their released recurrence (samiraabnar/attention_flow, ``compute_joint_attention``): each layer's
heads averaged, the residual added as the identity with the rows renormalised (``aug_i = (A_i + I) / 2`` for rows
that sum to 1), and ``joint_0 = aug_0``, ``joint_i = aug_i joint_{i-1}``. Row q of ``joint_i`` says how much token q at
layer i draws on each input token.

- ``cls`` and ``last``: one row per input and layer, the input's first cls/bos token's (an input without one has none)
  or its last token's, kept whole (every input token, float32): ``e_q aug_i ... aug_0``, vector-matrix products only
  (``L (L + 1) / 2`` of ``O(n^2)`` per input), never a product of two maps.
- ``all``: every row of every ``joint_i`` (one product of two maps per layer), kept as the edges are (the run's kept
  mass and cap, weights in the same steps; the argmax always), every weight on a dense run.

Every layer's averaged map of the input is held until the last layer's is in (``[inputs, n, n]`` per layer: a head's
share of the maps), so an input read by rows (too long for its whole maps) gets no rollout.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from atlas.ingestion.host_copy import to_host
from atlas.ingestion.row_batch import LAYER_TYPE, POSITION_TYPE
from atlas.ingestion.tensor_rows import LAYER, POSITION, kept_edges


class Rollout:
    """A forward batch's rollout rows, fed each layer's maps (``layer``), collected once every layer is in
    (``columns``)."""

    def __init__(
        self, which: str, lengths: Sequence[int], cls: Sequence[int | None], kept_mass: float | None,
        max_edges: int | None, causal: bool, weight_step: float,
    ) -> None:  # fmt: skip
        """``cls``: each input's first cls/bos token (None: it has none)."""
        self.which, self.lengths, self.cls = which, list(lengths), list(cls)
        self.rule = (kept_mass, max_edges, causal, weight_step)
        self.aug: list[torch.Tensor] = []  # [batch, n, n] per layer

    def layer(self, layer: int, attn: torch.Tensor) -> None:
        """Layer ``layer``'s maps ``[batch, heads, n, n]`` (float32; padding's rows not the input's)."""
        assert layer == len(self.aug), "layers come in order"
        mean = attn.mean(dim=1)
        n = mean.shape[-1]
        valid = torch.arange(n, device=attn.device) < torch.tensor(self.lengths, device=attn.device)[:, None]
        mean = mean * valid[:, :, None]  # padding's rows: only the residual
        aug = mean + torch.eye(n, device=attn.device)
        self.aug.append(aug / aug.sum(dim=-1, keepdim=True))

    def columns(self) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """The batch's rollout rows (``layer``, ``src_tok``, ``dst_tok``, ``weight``), input after input, each in
        (layer, source, destination) order, and each input's number of rows."""
        aug, self.aug = self.aug, []
        if self.which == "all":
            return self._all(aug)
        queries = [n - 1 for n in self.lengths] if self.which == "last" else self.cls
        has = [b for b, q in enumerate(queries) if q is not None]
        counts = np.zeros(len(self.lengths), dtype=np.int64)
        if not has:
            return empty_columns(), counts
        index = torch.tensor(has, device=aug[0].device)
        q = torch.tensor([queries[b] for b in has], device=aug[0].device)
        if len(has) < len(queries):
            aug = [a[index] for a in aug]  # the inputs with a row
        rows = []
        for i in range(len(aug)):  # e_q aug_i ... aug_0
            row = aug[i][torch.arange(len(has), device=q.device), q]
            for k in range(i - 1, -1, -1):
                row = (row[:, None] @ aug[k])[:, 0]
            rows.append(row)
        joint = torch.stack(rows, dim=1)  # [inputs with a row, layers, n]
        layers = len(aug)
        parts = {name: [] for name in ("layer", "src_tok", "dst_tok", "weight")}
        for j, b in enumerate(has):
            n = self.lengths[b]
            counts[b] = layers * n
            parts["layer"].append(torch.arange(layers, device=joint.device).repeat_interleave(n).to(LAYER))
            parts["src_tok"].append(torch.full((layers * n,), queries[b], device=joint.device, dtype=POSITION))
            parts["dst_tok"].append(torch.arange(n, device=joint.device).repeat(layers).to(POSITION))
            parts["weight"].append(joint[j, :, :n].reshape(-1))
        return to_host({name: torch.cat(p) for name, p in parts.items()}), counts

    def _all(self, aug: list[torch.Tensor]) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Every row, layer by layer (one ``joint_i`` at a time beside the last), in (input, layer, source,
        destination) order."""
        n = aug[0].shape[-1]
        device = aug[0].device
        valid = torch.arange(n, device=device) < torch.tensor(self.lengths, device=device)[:, None]
        pairs = valid[:, :, None] & valid[:, None, :]
        parts, joint = [], None
        for layer, a in enumerate(aug):
            joint = a if joint is None else a @ joint
            block = (joint * pairs)[:, None]  # [batch, 1, n, n]
            rows, dst, weight = kept_edges(block, block.max(dim=-1, keepdim=True).indices, valid, *self.rule)
            parts.append((rows[:, 0], torch.full_like(dst, layer), rows[:, 2], dst, weight))
        example, layer, src, dst, weight = (torch.cat(column) for column in zip(*parts, strict=True))
        order = torch.argsort(example, stable=True)  # each input's rows, its layers in order
        counts = torch.bincount(example, minlength=len(self.lengths))
        columns = {"layer": layer[order].to(LAYER), "src_tok": src[order].to(POSITION),
                   "dst_tok": dst[order].to(POSITION), "weight": weight[order].float()}  # fmt: skip
        host = to_host({**columns, "counts": counts})
        return {name: host[name] for name in columns}, host["counts"]


def empty_columns() -> dict[str, np.ndarray]:
    """The columns of no rollout rows."""
    positions = {name: np.zeros(0, POSITION_TYPE) for name in ("src_tok", "dst_tok")}
    return {"layer": np.zeros(0, LAYER_TYPE), **positions, "weight": np.zeros(0, np.float32)}
