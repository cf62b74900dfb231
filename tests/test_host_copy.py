"""The rows' columns from the device to the host: through two small buffers taken in turn (as on CUDA, where they
are page-locked), every column arrives whole, of its shape and dtype, whatever its size against the buffers', and
a buffer is waited for before its piece is moved out of it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from atlas.ingestion import host_copy
from atlas.ingestion.host_copy import through, to_host


def _columns() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "weight": torch.rand(37, generator=g),
        "received": torch.rand(5, 3, generator=g, dtype=torch.float64),
        "src_tok": torch.randint(-(2**31), 2**31 - 1, (41,), generator=g, dtype=torch.int32),
        "layer": torch.randint(-300, 300, (9,), generator=g, dtype=torch.int16),
        "counts": torch.randint(0, 2**40, (4,), generator=g, dtype=torch.int64),
        "empty": torch.zeros(0, 6),
        "masses": torch.rand(6, 4, generator=g).t(),  # not contiguous
        "one": torch.rand(1, 5, generator=g, dtype=torch.float64)[:, 2],  # one element, a stride of 5
        "none": torch.zeros(0, 5, dtype=torch.int32)[:, 0],
        "kept": torch.rand(13, generator=g) > 0.5,
    }


@pytest.mark.parametrize("size", [8, 12, 24, 4096])
def test_every_column_arrives_whole_through_buffers_of_any_size(size, monkeypatch):
    order: list[str] = []
    copyto = np.copyto
    monkeypatch.setattr(np, "copyto", lambda *args: (order.append("move"), copyto(*args)))
    buffers = [
        (
            torch.zeros(size, dtype=torch.uint8),
            lambda k=k: order.append(f"mark {k}"),
            lambda k=k: order.append(f"wait {k}"),
        )
        for k in range(2)
    ]
    columns = _columns()
    got = through(columns, buffers)
    assert list(got) == list(columns)
    for name, tensor in columns.items():
        assert got[name].dtype == tensor.numpy().dtype and got[name].shape == tuple(tensor.shape), name
        np.testing.assert_array_equal(got[name], tensor.numpy(), err_msg=name)
    # the buffers in turn: a piece is queued into one, then the piece before, in the other, waited for and moved
    pieces = sum(-(-t.numel() // (size // t.element_size())) for t in columns.values())
    want = ["mark 0"]
    for k in range(1, pieces):
        want += [f"mark {k % 2}", f"wait {(k - 1) % 2}", "move"]
    assert order == [*want, f"wait {(pieces - 1) % 2}", "move"]


def test_off_cuda_the_columns_are_copied_as_they_are():
    columns = _columns()
    got = to_host(columns)
    for name, tensor in columns.items():
        np.testing.assert_array_equal(got[name], tensor.numpy(), err_msg=name)
    assert to_host({}) == {}
    assert not host_copy._buffers  # no page-locked memory taken off CUDA
