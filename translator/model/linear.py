"""nn.Linear whose inference on CPU runs on oneDNN: the same y = x W^T + b, a faster kernel.

PyTorch sends a CPU fp32 `nn.Linear` to MKL's sgemm and adds the bias as a separate copy. On
the AMD EPYC machine of docs/benchmarks/decode.md, sgemm runs a decoding step's output
projection (128 x 512) . (512 x 32000) at about half the speed of oneDNN, the library PyTorch
already uses for bf16 (49 vs 25 ms); the decoder's smaller products gain 15-30%. So without
autograd (search, validation) `Linear` calls oneDNN's linear directly, in fp32 and bf16 alike.
It computes the same function at the same precision; only the summation order differs (results
agree to fp32 rounding). Training, other dtypes, other devices and builds without oneDNN take
`nn.Linear.forward`. Parameters and state_dict keys are nn.Linear's.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def _onednn_dtypes() -> frozenset[torch.dtype]:
    """The dtypes this PyTorch build and CPU can run through oneDNN's linear (empty: none)."""
    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")):
        return frozenset()
    if torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return frozenset({torch.float32, torch.bfloat16})
    return frozenset({torch.float32})


ONEDNN_DTYPES = _onednn_dtypes()


def onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, activation: str = "none"
                  ) -> torch.Tensor:
    """F.linear(x, weight, bias) through oneDNN, bias (and "relu") fused: x (..., in), weight (out, in) -> (..., out)."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, activation, [], "")


class Linear(nn.Linear):
    """nn.Linear; on CPU without autograd, through oneDNN (see the module docstring)."""

    def forward(self, x: torch.Tensor, relu: bool = False) -> torch.Tensor:
        """x W^T + b, then ReLU when `relu` (on the oneDNN path fused into the product: ~10% of an FFN's
        first product in fp32)."""
        if (x.device.type == "cpu" and x.dtype in ONEDNN_DTYPES and x.dtype == self.weight.dtype
                and not torch.is_grad_enabled()):
            return onednn_linear(x, self.weight, self.bias, "relu" if relu else "none")
        y = F.linear(x, self.weight, self.bias)
        return torch.relu(y) if relu else y
