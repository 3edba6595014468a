"""Linear layers for fp32 training on CPU through oneDNN: nn.Linear stays the model's definition.

PyTorch sends CPU fp32 linears to MKL's sgemm; bf16 (autocast) already goes to oneDNN. On an
AMD EPYC with AVX-512, oneDNN computes a training step's forward products and input gradients
faster than sgemm, while sgemm is as fast or faster for the weight gradient; on an Intel Xeon,
MKL's home, and on an AMD EPYC with AVX2 alone, sgemm made the whole step faster, so there the
linears stay plain (`onednn_fp32_pays`; docs/benchmarks/train.md). `OneDNNTrainingLinear` takes
the faster kernel for each of the three products of y = x W^T + b; `use_onednn_linears` swaps the
modules once, at setup. The swapped module holds the same parameters under the same names (ties,
the optimizer and checkpoints are unchanged), and under autocast, in another dtype or off the CPU
it is F.linear.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from translator.device import INTEL, cpu_features, cpu_vendor


def onednn_fp32_available() -> bool:
    """Whether this PyTorch build has oneDNN's linear op (CPU builds from pytorch.org do)."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def onednn_fp32_pays() -> bool:
    """Whether fp32 training linears run faster through oneDNN on this CPU: on AMD's with
    AVX-512; not on Intel's (where MKL's sgemm is Intel's own), nor where AVX2 is the widest."""
    return onednn_fp32_available() and cpu_vendor() != INTEL and "avx512f" in cpu_features()


def _onednn_product(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x (..., in) @ weight (out, in)^T through oneDNN; `weight` may be a transposed view."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, None, "none", [], "")


class _OneDNNLinearFunction(torch.autograd.Function):
    """y = x W^T + b: y and dL/dx through oneDNN, dL/dW as a plain (MKL) matrix product."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight = ctx.saved_tensors
        grad = grad.contiguous()
        grad_x = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:  # (..., out) @ (out, in): W^T as a view, no copy
            grad_x = _onednn_product(grad, weight.t())
        rows = grad.reshape(-1, grad.shape[-1])  # (N, out)
        if ctx.needs_input_grad[1]:  # (out, N) @ (N, in)
            grad_weight = rows.t() @ x.reshape(-1, x.shape[-1])
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_bias = rows.sum(0)
        return grad_x, grad_weight, grad_bias


class OneDNNTrainingLinear(nn.Module):
    """nn.Linear's function and parameters, with fp32 CPU products through oneDNN."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias = linear.weight, linear.bias  # the same Parameters (ties kept)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., in) -> (..., out)."""
        plain = (
            x.device.type != "cpu"
            or x.dtype != torch.float32
            or self.weight.dtype != torch.float32
            or torch.is_autocast_enabled("cpu")
        )
        if plain:
            return F.linear(x, self.weight, self.bias)
        return _OneDNNLinearFunction.apply(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, onednn"


def use_onednn_linears(model: nn.Module) -> int:
    """Replace every nn.Linear in `model` by a OneDNNTrainingLinear over its parameters; returns
    how many (0 where this PyTorch has no oneDNN)."""
    if not onednn_fp32_available():
        return 0
    count = 0
    for module in list(model.modules()):
        for name, child in module.named_children():
            if type(child) is nn.Linear:
                setattr(module, name, OneDNNTrainingLinear(child))
                count += 1
    return count
