"""The chunked training loss against the plain one and PyTorch's own cross-entropy."""

import pytest
import torch
import torch.nn.functional as F

from translator.train import loss as loss_module
from translator.train.loss import chunked_token_loss, token_loss

V = 50


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    """7 rows per chunk: 23 rows make three full chunks and a ragged last one."""
    monkeypatch.setattr(loss_module, "CHUNK_ELEMENTS", 7 * V)


def logits_and_targets(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    logits = (torch.randn(2, 23, V) * 3).to(dtype).requires_grad_()
    target = torch.randint(1, V, (2, 23))
    target[0, [2, 5]] = 0  # PAD
    target[1, -4:] = 0
    return logits, target


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_chunked_loss_is_pytorchs_label_smoothed_cross_entropy(eps):
    logits, target = logits_and_targets(torch.float32)
    loss, nll = chunked_token_loss(logits, target, eps)
    (grad,) = torch.autograd.grad(loss * 1.7, logits)
    flat, tgt = logits.flatten(0, 1), target.flatten()
    expected = F.cross_entropy(flat, tgt, ignore_index=0, label_smoothing=eps, reduction="sum")
    expected_nll = F.cross_entropy(flat, tgt, ignore_index=0, reduction="sum")
    (expected_grad,) = torch.autograd.grad(expected * 1.7, logits)
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(nll, expected_nll)
    torch.testing.assert_close(grad, expected_grad)
    assert not nll.requires_grad
    assert grad[target == 0].abs().max() == 0  # padding gets no gradient


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_chunked_loss_matches_the_plain_one_in_training_dtypes(dtype, eps):
    logits, target = logits_and_targets(dtype)
    before = logits.detach().clone()
    plain, plain_nll = token_loss(logits, target, eps)
    (plain_grad,) = torch.autograd.grad(plain, logits)
    chunked, chunked_nll = chunked_token_loss(logits, target, eps)
    (chunked_grad,) = torch.autograd.grad(chunked, logits)
    torch.testing.assert_close(chunked, plain)
    torch.testing.assert_close(chunked_nll, plain_nll)
    assert chunked_grad.dtype == plain_grad.dtype == dtype
    torch.testing.assert_close(chunked_grad, plain_grad)
    assert torch.equal(logits.detach(), before)  # the backward pass computed on a copy


def test_chunked_loss_under_autocast_gives_the_logits_dtype_gradient():
    """As in a bf16 training step: logits from an autocast product, gradients into fp32
    weights."""
    torch.manual_seed(0)
    hidden, weight = torch.randn(40, 16), torch.randn(V, 16, requires_grad=True)
    target = torch.randint(0, V, (40,))
    grads = []
    for loss_fn in (token_loss, chunked_token_loss):
        with torch.autocast("cpu", torch.bfloat16):
            loss, _ = loss_fn(hidden @ weight.t(), target, 0.1)
        grads.append(torch.autograd.grad(loss, weight)[0])
    torch.testing.assert_close(grads[1], grads[0], rtol=2e-2, atol=2e-2)
