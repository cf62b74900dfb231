"""Where the ingest runs, and in which dtype: ``--device auto|cpu|cuda|mps``, ``--dtype auto|float32|bfloat16|float16``.

The model, its inputs, the attention maps and all work per attention weight live on the chosen device;
only the rows written to the store cross to the host. torch is imported only where a question needs it, so that
``resolve_dtype`` tells a run's dtype without it where it can (an ingest already in the store is found without
importing torch: ``atlas.ingestion.run_id.ingested_run``).
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from atlas.errors import AtlasError, arg
from atlas.ingestion.run_id import check_device_name, check_dtype_name

if TYPE_CHECKING:
    import torch


def resolve_device(name: str) -> torch.device:
    """The torch device for ``--device``: ``auto`` takes CUDA, then MPS, when torch sees one, else the CPU."""
    import torch

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


def resolve_dtype(name: str, device: str = "auto", worker_gpus: float | None = None) -> str:
    """The dtype the weights are loaded in for ``--dtype name`` on ``--device device``: ``auto`` is bfloat16 where
    the model runs on CUDA, float32 on the CPU and on MPS; another name is itself. ``worker_gpus``: the GPUs each
    Ray worker claims (``--engine ray``: a worker sees only those, so ``--device auto`` runs on CUDA exactly when
    it claims some); None: this process runs the model.

    torch is asked only when ``device`` is auto, the model runs here and the installed torch is built for CUDA or
    ROCm (a CPU build sees no CUDA device)."""
    check_dtype_name(name)
    check_device_name(device)
    if name != "auto":
        return name
    if device != "auto":
        cuda = device == "cuda"
    elif worker_gpus is not None:
        cuda = worker_gpus > 0
    else:
        cuda = _gpu_build() and resolve_device("auto").type == "cuda"
    return "bfloat16" if cuda else "float32"


def _gpu_build() -> bool:
    """Whether the installed torch may see a CUDA device: False for a CPU build, told from its ``torch/version.py``
    without importing torch (True where that cannot be read)."""
    if "torch" in sys.modules:
        import torch

        return torch.version.cuda is not None or torch.version.hip is not None
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return True
    try:
        text = (Path(spec.origin).parent / "version.py").read_text()
    except OSError:
        return True
    builds = re.findall(r"^(cuda|hip)\b[^=\n]*=\s*(.+?)\s*$", text, flags=re.MULTILINE)
    return len(builds) < 2 or any(value != "None" for _, value in builds)


def exact_dtype(device: torch.device) -> torch.dtype:
    """The dtype of sums that must not round (the column sums of a map): float64, except on MPS, which has no
    float64 (float32 there)."""
    import torch

    return torch.float32 if device.type == "mps" else torch.float64
