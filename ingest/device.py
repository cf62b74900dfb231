"""Where the ingest runs: ``--device auto|cpu|cuda|mps``.

The model, its inputs, the attention maps and all work per attention weight live on the chosen device;
only the rows written to the store cross to the host.
"""

from __future__ import annotations

import torch

from atlas.errors import AtlasError, arg
from atlas.ingestion.run_id import check_device_name


def resolve_device(name: str) -> torch.device:
    """The torch device for ``--device``: ``auto`` takes CUDA, then MPS, when torch sees one, else the CPU."""
    check_device_name(name)
    cuda, mps = torch.cuda.is_available(), torch.backends.mps.is_available()
    if name == "auto":
        return torch.device("cuda" if cuda else "mps" if mps else "cpu")
    if (name == "cuda" and not cuda) or (name == "mps" and not mps):
        raise AtlasError(
            f"{arg('device', repr(name))}: torch sees no {name.upper()} device here "
            f"(use {arg('device', repr('cpu'))} or 'auto')"
        )
    return torch.device(name)


def exact_dtype(device: torch.device) -> torch.dtype:
    """The dtype of sums that must not round (the column sums of a map): float64, except on MPS, which has no
    float64 (float32 there)."""
    return torch.float32 if device.type == "mps" else torch.float64
