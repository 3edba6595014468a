"""`Linear` computes nn.Linear's function on every path: oneDNN at inference, F.linear otherwise."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from translator.model.linear import ONEDNN_DTYPES, Linear


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(5, 16), (3, 4, 16), (16,), (0, 16), "transposed"])
@pytest.mark.parametrize("relu", [False, True])
def test_inference_equals_nn_linear(dtype, bias, shape, relu):
    torch.manual_seed(0)
    linear = Linear(16, 24, bias=bias).to(dtype)
    x = torch.randn(16, 5).t() if shape == "transposed" else torch.randn(shape)  # (5, 16) non-contiguous
    x = x.to(dtype)
    with torch.inference_mode():
        got = linear(x, relu=relu)
        if relu:  # fused ReLU == ReLU after, bit for bit
            assert torch.equal(got, torch.relu(linear(x)))
    want = F.linear(x.double(), linear.weight.double(), None if linear.bias is None else linear.bias.double())
    want = torch.relu(want) if relu else want
    tol = 1e-5 if dtype == torch.float32 else 2e-2  # bf16: the output is rounded to 8 mantissa bits
    assert got.dtype == dtype and got.shape == want.shape
    torch.testing.assert_close(got.double(), want, atol=tol, rtol=tol)


def test_inference_takes_onednn_and_training_takes_f_linear(monkeypatch):
    if torch.float32 not in ONEDNN_DTYPES:
        pytest.skip("this PyTorch build has no oneDNN linear")
    calls = []
    real = torch.ops.mkldnn._linear_pointwise
    monkeypatch.setattr("translator.model.linear.onednn_linear",
                        lambda x, w, b, act: calls.append(x.shape) or real(x, w, b, act, [], ""))
    linear, x = Linear(16, 8), torch.randn(3, 16)
    with torch.no_grad():
        linear(x)
    assert calls == [(3, 16)]
    y = linear(x, relu=True)  # autograd on: nn.Linear's own path, then ReLU, and gradients flow
    y.sum().backward()
    assert calls == [(3, 16)] and linear.weight.grad is not None and (y >= 0).all()


def test_state_dict_keys_are_nn_linears():
    assert Linear(4, 3).state_dict().keys() == torch.nn.Linear(4, 3).state_dict().keys()
