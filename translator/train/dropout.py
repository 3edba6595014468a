"""Dropout for training on CPU with cheaper random numbers: nn.Dropout stays the model's definition.

PyTorch's CPU dropout draws one float per element and keeps a float mask for the backward pass;
`BitsDropout` cuts four 16-bit draws from each 64-bit random word, several times faster
(docs/benchmarks/train.md). Its 0/1 mask is kept in the input's dtype, as PyTorch's is: a
one-byte mask saved memory but was converted again for each of its two products. The drop
probability is p rounded to a multiple of 2^-16 (at most 7.7e-6 away) and the kept values are
scaled by the inverse of the rounded keep probability, so the output stays unbiased.
`use_bits_dropout` swaps the modules once, at setup.
"""

from __future__ import annotations

import math

import torch
from torch import nn

LEVELS = 1 << 16  # the values a 16-bit draw takes


def keep_mask(
    shape: torch.Size, dropped: int, device: torch.device, dtype: torch.dtype
) -> torch.Tensor:
    """0/1 mask of `shape` and `dtype`: each element 0 (dropped) with probability dropped / 2^16,
    else 1, independently. 0 < dropped < 2^16."""
    n = math.prod(shape)
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=device)
    words.random_(-(2**63), None)  # every bit uniform (the default range leaves the top bit 0)
    draws = words.view(torch.int16)[:n].view(shape)  # uniform over [-2^15, 2^15)
    return at_least(draws, dropped - LEVELS // 2).to(dtype)


def at_least(draws: torch.Tensor, threshold: int) -> torch.Tensor:
    """int16 `draws` -> (draws >= threshold) as int16 0/1, for -2^15 < threshold < 2^15.

    Clamped to [threshold - 1, threshold], then shifted down by threshold - 1: the comparison in
    integer arithmetic, because PyTorch's CPU comparisons into bool, and products with a bool
    tensor, run several times slower than same-dtype arithmetic (docs/benchmarks/train.md).
    """
    return draws.clamp(threshold - 1, threshold).sub_(threshold - 1)


class _MaskedScale(torch.autograd.Function):
    """x * keep * scale with `keep` a 0/1 mask in x's dtype (a product of two tensors of one dtype
    is the fast path on CPU); the scale is a product of its own, in fp32, as nn.Dropout's."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, keep: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return x.mul(keep).mul_(scale)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (keep,) = ctx.saved_tensors
        return grad.mul(keep).mul_(ctx.scale), None, None


class BitsDropout(nn.Module):
    """nn.Dropout(p) with 16-bit draws: in training, zero each element with probability ~p."""

    def __init__(self, p: float) -> None:
        super().__init__()
        if not 0 <= p < 1:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p = p
        self.dropped = round(p * LEVELS)  # out of LEVELS
        self.scale = LEVELS / (LEVELS - self.dropped)  # 1 / the keep probability

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or not self.dropped:
            return x
        keep = keep_mask(x.shape, self.dropped, x.device, x.dtype)
        return _MaskedScale.apply(x, keep, self.scale)

    def extra_repr(self) -> str:
        return f"p={self.p}"


def use_bits_dropout(model: nn.Module) -> int:
    """Replace every nn.Dropout in `model` by a BitsDropout of the same p; returns how many."""
    count = 0
    for module in list(model.modules()):
        for name, child in module.named_children():
            if type(child) is nn.Dropout:
                setattr(module, name, BitsDropout(child.p))
                count += 1
    return count
