"""The training step's speed-ups against their plain versions: BitsDropout against nn.Dropout's
definition, the fused AdamW against the per-parameter loop; the allocator setting."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from tests.train.conftest import TINY_MODEL
from translator import config
from translator.model.transformer import Transformer
from translator.train.dropout import BitsDropout, at_least, keep_mask, use_bits_dropout
from translator.train.session import make_optimizer, parameter_groups


def test_bits_dropout_is_the_dropout_formula_for_its_mask():
    """Forward x * keep / (1 - p) and backward grad * keep / (1 - p), keep read off the output."""
    torch.manual_seed(0)
    x = torch.randn(64, 33, requires_grad=True)  # an element count that is not a multiple of 4
    layer = BitsDropout(0.3).train()
    out = layer(x)
    keep = out != 0  # x has no zeros
    torch.testing.assert_close(out, x * keep / (1 - 0.3), rtol=1e-4, atol=1e-6)
    grad = torch.randn_like(out)
    out.backward(grad)
    torch.testing.assert_close(x.grad, grad * keep / (1 - 0.3), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("p", [0.1, 0.2, 0.5])
def test_bits_dropout_drops_each_element_independently_with_probability_p(p):
    torch.manual_seed(1)
    n = 1 << 20
    keep = keep_mask(torch.Size([n]), BitsDropout(p).dropped, torch.device("cpu"), torch.float32)
    assert keep.dtype == torch.float32 and set(keep.unique().tolist()) == {0, 1}
    dropped = keep == 0
    sigma = math.sqrt(p * (1 - p) / n)
    assert abs(dropped.float().mean().item() - p) < 6 * sigma
    # neighbours come from one 64-bit word: they must still be independent
    both = (dropped[:-1] & dropped[1:]).float().mean().item()
    assert abs(both - p * p) < 6 * math.sqrt(p * p * (1 - p * p) / n)
    lanes = dropped.view(-1, 4).float().mean(0)  # each of the four 16-bit lanes of a word
    assert torch.all((lanes - p).abs() < 6 * math.sqrt(p * (1 - p) / (n / 4)))


@pytest.mark.parametrize("threshold", [-(2**15) + 1, -19661, -1, 0, 1, 12345, 2**15 - 1])
def test_at_least_is_the_comparison_on_every_int16(threshold):
    draws = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16)  # all 65,536 values
    expected = torch.tensor([int(v >= threshold) for v in range(-(2**15), 2**15)])
    assert torch.equal(at_least(draws, threshold).long(), expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_bits_dropout_keeps_its_input_dtype_and_scales_at_its_precision(dtype):
    torch.manual_seed(4)
    x = torch.randn(257, 31).to(dtype).requires_grad_()
    layer = BitsDropout(0.1).train()
    out = layer(x)
    assert out.dtype == dtype
    keep = out != 0
    # the scale applied in fp32 (PyTorch's scalar product), then rounded once to the dtype
    torch.testing.assert_close(out, (x.float() * keep * layer.scale).to(dtype), rtol=0, atol=0)
    grad = torch.randn_like(out)
    out.backward(grad)
    assert x.grad.dtype == dtype
    expected = (grad.float() * keep * layer.scale).to(dtype)
    torch.testing.assert_close(x.grad, expected, rtol=0, atol=0)


def test_bits_dropout_keeps_the_mean_and_is_the_identity_in_eval_and_at_p_0():
    torch.manual_seed(2)
    x = torch.ones(1 << 20)
    assert abs(BitsDropout(0.2).train()(x).mean().item() - 1) < 6 * math.sqrt(0.2 / 0.8 / x.numel())
    assert BitsDropout(0.2).eval()(x) is x and BitsDropout(0.0).train()(x) is x
    with pytest.raises(ValueError):
        BitsDropout(1.0)


def test_bits_dropout_follows_the_seed():
    layer, x = BitsDropout(0.1).train(), torch.randn(1000)
    torch.manual_seed(3)
    first = layer(x)
    torch.manual_seed(3)
    assert torch.equal(first, layer(x))


def tiny_model() -> Transformer:
    cfg = config.load(
        None,
        [
            *TINY_MODEL,
            "model.dropout=0.1",
            "model.activation_dropout=0.2",
        ],
    )
    torch.manual_seed(0)
    return Transformer(cfg.model)


def test_use_bits_dropout_swaps_every_dropout_module_with_its_p():
    model = tiny_model()
    before = [m.p for m in model.modules() if type(m) is nn.Dropout]
    assert use_bits_dropout(model) == len(before) > 0
    assert not any(type(m) is nn.Dropout for m in model.modules())
    assert sorted(m.p for m in model.modules() if isinstance(m, BitsDropout)) == sorted(before)


def test_fused_adamw_takes_the_steps_of_the_per_parameter_loop():
    cfg = config.load(None, ["train.lr=1e-2", "train.weight_decay=0.01"])
    fused_model, loop_model = tiny_model(), tiny_model()
    fused = make_optimizer(fused_model, cfg.train)
    assert fused.defaults["fused"] and len(fused.param_groups) == 2  # decayed and not
    loop = torch.optim.AdamW(
        parameter_groups(loop_model, 0.01),
        lr=1e-2,
        betas=(cfg.train.adam_beta1, cfg.train.adam_beta2),
        eps=cfg.train.adam_eps,
        foreach=False,
    )
    torch.manual_seed(4)
    for _ in range(3):
        grads = [torch.randn_like(p) for p in fused_model.parameters()]
        for model, optimizer in ((fused_model, fused), (loop_model, loop)):
            for p, g in zip(model.parameters(), grads):
                p.grad = g.clone()
            optimizer.step()
    for a, b in zip(fused_model.parameters(), loop_model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_keep_freed_memory_sets_glibc_thresholds_once():
    from translator.train.allocator import keep_freed_memory

    if not hasattr(__import__("ctypes").CDLL(None), "mallopt"):
        pytest.skip("not glibc")
    assert keep_freed_memory() and keep_freed_memory()  # cached: set once
