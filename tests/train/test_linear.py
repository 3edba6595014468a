"""OneDNNTrainingLinear (train/linear.py) against nn.Linear's definition: the same function and
gradients, the same parameters, and the plain path wherever oneDNN's fp32 op does not apply."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.model.conftest import tiny_config
from translator.model.transformer import Transformer
from translator.train import linear
from translator.train.linear import (
    OneDNNTrainingLinear,
    onednn_fp32_available,
    use_onednn_linears,
)
from translator.train.loss import token_loss
from translator.train.session import training_model

pytestmark = pytest.mark.skipif(not onednn_fp32_available(), reason="no oneDNN in this PyTorch")


@pytest.mark.parametrize("shape", [(33, 16), (5, 7, 16)])
@pytest.mark.parametrize("bias", [True, False])
def test_forward_and_gradients_are_the_linear_formula(shape, bias):
    """y = x W^T + b and its three gradients, against the formula in float64; the incoming
    gradient is a transposed (non-contiguous) view, as attention's merges produce."""
    torch.manual_seed(0)
    layer = OneDNNTrainingLinear(nn.Linear(16, 24, bias=bias))
    x = torch.randn(*shape, requires_grad=True)
    grad = torch.randn(24, *shape[:-1]).movedim(0, -1)  # (..., 24), not contiguous
    out = layer(x)
    out.backward(grad)
    x64 = x.detach().double().requires_grad_()
    w64 = layer.weight.detach().double().requires_grad_()
    b64 = layer.bias.detach().double().requires_grad_() if bias else None
    ref = x64 @ w64.T + (b64 if bias else 0)
    ref.backward(grad.double())
    close = dict(rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out.double(), ref, **close)
    torch.testing.assert_close(x.grad.double(), x64.grad, **close)
    torch.testing.assert_close(layer.weight.grad.double(), w64.grad, **close)
    if bias:
        torch.testing.assert_close(layer.bias.grad.double(), b64.grad, **close)


def test_plain_path_under_autocast_and_in_other_dtypes():
    """Autocast's bf16 products (and a bf16 model) are nn.Linear's, bit for bit."""
    torch.manual_seed(1)
    linear = nn.Linear(16, 8)
    layer, x = OneDNNTrainingLinear(linear), torch.randn(4, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(layer(x), linear(x))
    linear.bfloat16()
    assert torch.equal(layer(x.bfloat16()), linear(x.bfloat16()))


def small_model() -> Transformer:
    """tests/model's 2+2-layer, d_model 32 model (dropout 0), seeded."""
    torch.manual_seed(0)
    return Transformer(tiny_config())


def test_swap_keeps_every_parameter_its_name_and_the_tie():
    model = small_model()
    linears = [name for name, m in model.named_modules() if type(m) is nn.Linear]
    params = dict(model.named_parameters())
    assert use_onednn_linears(model) == len(linears) > 0
    assert not any(type(m) is nn.Linear for m in model.modules())
    assert all(isinstance(model.get_submodule(name), OneDNNTrainingLinear) for name in linears)
    after = dict(model.named_parameters())
    assert after.keys() == params.keys() and all(after[k] is params[k] for k in params)
    assert model.out_proj.weight is model.tgt_embed.token.weight  # the tie, as Transformer made it
    assert Transformer(model.cfg).state_dict().keys() == model.state_dict().keys()


def test_a_training_step_computes_the_plain_models_loss_and_gradients():
    plain, swapped = small_model(), small_model()
    use_onednn_linears(swapped)
    torch.manual_seed(2)
    src, tgt = torch.randint(4, 40, (3, 9)), torch.randint(4, 40, (3, 7))
    for model in (plain, swapped):
        logits = model(src, tgt[:, :-1], (src != 0)[:, None, None, :])
        loss, _ = token_loss(logits, tgt[:, 1:], 0.1)
        loss.backward()
        model.loss = loss.detach()
    torch.testing.assert_close(swapped.loss, plain.loss, rtol=1e-5, atol=1e-5)
    for (name, a), b in zip(swapped.named_parameters(), plain.parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5, msg=name)


def test_training_model_uses_onednn_linears_on_an_amd_cpu_with_avx512_unless_compiled(
    monkeypatch,
):
    monkeypatch.setattr(linear, "cpu_vendor", lambda: "AuthenticAMD")
    monkeypatch.setattr(linear, "cpu_features", lambda: {"avx2", "avx512f", "avx512_bf16"})
    cfg = small_model().cfg
    eager = training_model(cfg, torch.device("cpu"))
    compiled = training_model(cfg, torch.device("cpu"), compiled=True)
    assert any(isinstance(m, OneDNNTrainingLinear) for m in eager.modules())
    assert not any(isinstance(m, OneDNNTrainingLinear) for m in compiled.modules())
    assert any(type(m) is nn.Linear for m in compiled.modules())


def test_training_model_keeps_plain_linears_on_an_intel_cpu(monkeypatch):
    """MKL's sgemm, PyTorch's own fp32 path, is Intel's library and was the faster one there."""
    monkeypatch.setattr(linear, "cpu_vendor", lambda: "GenuineIntel")
    model = training_model(small_model().cfg, torch.device("cpu"))
    assert not any(isinstance(m, OneDNNTrainingLinear) for m in model.modules())
    assert any(type(m) is nn.Linear for m in model.modules())


def test_training_model_keeps_plain_linears_on_an_amd_cpu_with_avx2_alone(monkeypatch):
    """There sgemm made the whole fp32 step faster (docs/benchmarks/train.md, 2026-12-07)."""
    monkeypatch.setattr(linear, "cpu_vendor", lambda: "AuthenticAMD")
    monkeypatch.setattr(linear, "cpu_features", lambda: {"avx", "avx2", "fma"})
    model = training_model(small_model().cfg, torch.device("cpu"))
    assert not any(isinstance(m, OneDNNTrainingLinear) for m in model.modules())
