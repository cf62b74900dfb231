"""How much attention the ingest holds at once: a forward batch's maps (every layer's, ``atlas.ingestion.tensor_rows``
keeps them until the last is in), and, for an input whose maps alone exceed that, a block of its rows
(``atlas.ingestion.cpu_rows.CpuBlockRows``, ``atlas.ingestion.block_rows``). On a CPU fixed numbers (tuned there: see
``atlas.ingestion.pipeline``); on CUDA sized from the device's free memory once the model is on it."""

from __future__ import annotations

from dataclasses import dataclass

import torch

BATCH_WEIGHTS = 32_000_000  # on a CPU or MPS: attention weights per forward batch (layers x heads x B x n x n)
BLOCK_WEIGHTS = 4_000_000  # on a CPU or MPS: weights per block of rows (heads x rows x n)
BATCH_SHARE = 0.25  # of the device's free memory, for a batch's maps (two are on the device at once: the pipeline)
BLOCK_SHARE = 0.5  # of the device's free memory, for a block of rows (an input read by rows is a batch alone)
BATCH_BYTES = 8  # a batch's weight: kept in float32, plus the model's and the row work's temporaries
BLOCK_BYTES = 64  # a block's weight: scores, probabilities, the row work's temporaries (rank keys, sorted keys)


@dataclass(frozen=True)
class Budget:
    batch_weights: int  # a forward batch's maps, every layer's, at most this many weights (a longer input: alone)
    block_weights: int  # an input whose maps are more: read in blocks of rows of this many weights

    @property
    def work_weights(self) -> int:
        """Beside an accelerator, the weights whose rows are computed at once (atlas.ingestion.tensor_rows): half a
        block, since a batch's rows are computed while the next batch runs."""
        return self.block_weights // 2


def budget_for(device: torch.device) -> Budget:
    """The budget on ``device``: on CUDA from its free memory now (the model loaded), else the fixed numbers. Free
    memory counts what torch's allocator holds unused, kept from earlier work in the process, which the device
    reports as taken (beside an H200, ingests of UD GUM dev in 1,024-piece windows run one after another in a process
    took 15 to 16 s against 7.4 to 9.5, with 2.9 GiB at their peak against 17 to 43: too small a budget for a whole
    input's maps, each input was read by rows)."""
    if device.type != "cuda":
        return Budget(BATCH_WEIGHTS, BLOCK_WEIGHTS)
    free, _total = torch.cuda.mem_get_info(device)
    free += torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    batch, block = int(free * BATCH_SHARE // BATCH_BYTES), int(free * BLOCK_SHARE // BLOCK_BYTES)
    return Budget(max(BATCH_WEIGHTS, batch), max(BLOCK_WEIGHTS, block))
