"""nn.Linear whose inference on CPU runs on oneDNN: the same y = x W^T + b, a faster kernel.

PyTorch sends a CPU fp32 `nn.Linear` to MKL's sgemm and adds the bias as a separate copy. On
the AMD EPYC machine of docs/benchmarks/decode.md, sgemm runs a decoding step's output
projection (128 x 512) . (512 x 32000) at about half the speed of oneDNN, the library PyTorch
already uses for bf16 (49 vs 25 ms); the decoder's smaller products gain 15-30%. So without
autograd (search, validation) `Linear` calls oneDNN's linear directly, in fp32 and bf16 alike,
with the weight reordered once into oneDNN's blocked layout (`packed_weight`) rather than at
every call: another 10-15% on each product. It computes the same function at the same
precision; only the summation order differs (results agree to fp32 rounding). Training, other
dtypes, other devices and builds without oneDNN take `F.linear`. Parameters and state_dict keys
are nn.Linear's.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.weak import WeakIdKeyDictionary


def _onednn_dtypes() -> frozenset[torch.dtype]:
    """The dtypes this PyTorch build and CPU can run through oneDNN's linear (empty: none)."""
    ops = torch.ops.mkldnn
    if not (torch.backends.mkldnn.is_available() and hasattr(ops, "_linear_pointwise")
            and hasattr(ops, "_reorder_linear_weight")):
        return frozenset()
    if ops._is_mkldnn_bf16_supported():
        return frozenset({torch.float32, torch.bfloat16})
    return frozenset({torch.float32})


ONEDNN_DTYPES = _onednn_dtypes()

# weight -> ((storage, version), the weight in oneDNN's layout). Kept beside the model, not in
# it: a module's state stays its parameters (copy.deepcopy cannot copy oneDNN tensors), and an
# entry goes when its weight does.
_PACKED: WeakIdKeyDictionary = WeakIdKeyDictionary()


def packed_weight(weight: torch.Tensor, rows: int) -> torch.Tensor:
    """`weight` (out, in) in oneDNN's layout for products with about `rows` input rows, memoised.

    Rebuilt whenever the weight changes: any in-place update (an optimizer step,
    load_state_dict, `mul_` under no_grad) bumps its version, and `.to()` gives new storage.
    """
    key = (weight.data_ptr(), weight._version)
    entry = _PACKED.get(weight)
    if entry is None or entry[0] != key:
        entry = _PACKED[weight] = (key, torch.ops.mkldnn._reorder_linear_weight(weight, max(rows, 1)))
    return entry[1]


def onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """F.linear(x, weight, bias) through oneDNN, bias fused: x (..., in) -> (..., out).

    `weight` is (out, in), plain or from `packed_weight`.
    """
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


class Linear(nn.Linear):
    """nn.Linear; on CPU without autograd, through oneDNN with a packed weight (module docstring)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (x.device.type == "cpu" and x.dtype in ONEDNN_DTYPES and x.dtype == self.weight.dtype
                and not torch.is_grad_enabled()):
            rows = x.numel() // x.shape[-1]  # the first call's rows tune the layout; any count works
            return onednn_linear(x, packed_weight(self.weight, rows), self.bias)
        return F.linear(x, self.weight, self.bias)
