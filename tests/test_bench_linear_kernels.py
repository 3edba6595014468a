"""bench/linear_kernels.py compares three kernels for one product: they must compute it alike."""

import torch
import torch.nn.functional as F

from bench import linear_kernels


def test_the_kernels_compared_compute_the_same_product():
    x, w, b = linear_kernels._inputs(6, 16, 24)
    expected = x.double() @ w.double().T + b.double()
    with torch.inference_mode():
        for name, call in linear_kernels.kernels(x, w, b).items():
            assert torch.allclose(call().double(), expected, atol=1e-4), name
    assert torch.equal(linear_kernels.kernels(x, w, b)["F.linear (MKL sgemm)"](), F.linear(x, w, b))


def test_the_table_has_a_row_per_shape(capsys):
    linear_kernels.main(["--rows", "4", "--rounds", "1", "--calls", "1", "--threads", "1"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + len(linear_kernels.SHAPES)
    assert all(len(row.split("|")) == 6 for row in rows)
