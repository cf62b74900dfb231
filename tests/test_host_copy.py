"""The rows' columns from the device to the host: through two small buffers taken in turn (as on CUDA, where they
are page-locked), every column arrives whole, of its shape and dtype, whatever its size against the buffers'."""

from __future__ import annotations

import numpy as np
import pytest
import torch

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
        "kept": torch.rand(13, generator=g) > 0.5,
    }


@pytest.mark.parametrize("size", [1, 3, 8, 64, 4096])
def test_every_column_arrives_whole_through_buffers_of_any_size(size):
    order: list[str] = []
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
    # each buffer is waited for before its bytes are moved, and the two are taken in turn
    marks = [entry for entry in order if entry.startswith("mark")]
    assert marks == [f"mark {k % 2}" for k in range(len(marks))]
    assert order.count("wait 0") + order.count("wait 1") == len(marks)
    nbytes = sum(t.numel() * t.element_size() for t in columns.values())
    assert len(marks) == sum(-(-t.numel() * t.element_size() // size) for t in columns.values()) >= nbytes // size


def test_off_cuda_the_columns_are_copied_as_they_are():
    columns = _columns()
    got = to_host(columns)
    for name, tensor in columns.items():
        np.testing.assert_array_equal(got[name], tensor.numpy(), err_msg=name)
    assert to_host({}) == {}
