"""Speed for decoding on CPU, applied to a loaded model as one explicit conversion (translate.load).

The model's own code is the plain algorithm: nn.Linear, one fused SDPA call, a KV cache of
(N, G, T_max, K) slots. For a search's shapes on CPU, `for_cpu_decoding` swaps in kernels that
compute the same functions faster (why, with the measurements: docs/benchmarks/decode.md):
- every nn.Linear becomes a `OneDNNLinear` (PyTorch sends CPU fp32 linears to a slower GEMM
  than the oneDNN one it uses for bf16), bias fused, and each FFN's ReLU fused into its product;
- the decoder's attention is written out: PyTorch's fused CPU kernel is slower for a decoding
  step's one query row;
- the KV cache keeps dense prefixes (model/cache.py), which oneDNN's `bmm` reads without a copy.
The plain model is the reference the converted one is tested against
(tests/model/test_inference.py).
The conversion is for inference only: it turns autograd off for the parameters, and a converted
linear refuses to run under autocast, which its private op would bypass.
"""

from __future__ import annotations

import logging

import torch
from torch import nn

from translator.model.attention import attention
from translator.model.layers import FeedForward
from translator.model.transformer import Transformer

log = logging.getLogger(__name__)


def onednn_dtypes() -> frozenset[torch.dtype]:
    """The dtypes this PyTorch build and CPU can run through oneDNN's linear (empty: none)."""
    mkldnn = torch.ops.mkldnn
    if not (torch.backends.mkldnn.is_available() and hasattr(mkldnn, "_linear_pointwise")):
        return frozenset()
    if torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return frozenset({torch.float32, torch.bfloat16})
    return frozenset({torch.float32})


class OneDNNLinear(nn.Module):
    """y = activation(x W^T + b) through oneDNN, sharing the replaced nn.Linear's weight and bias.

    The same function at the same precision; only the summation order differs from nn.Linear.
    """

    def __init__(self, linear: nn.Linear, activation: str = "none") -> None:
        super().__init__()
        # shared: ties stay
        self.weight, self.bias, self.activation = linear.weight, linear.bias, activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., in) -> (..., out)."""
        if torch.is_autocast_enabled("cpu"):
            raise RuntimeError(
                "a model converted for CPU decoding runs in its own dtype, not under autocast"
            )
        linear = torch.ops.mkldnn._linear_pointwise
        return linear(x, self.weight, self.bias, self.activation, [], "")


def for_cpu_decoding(model: Transformer) -> str:
    """Convert `model` (in place, on CPU, in its final dtype) for searches -> what was done."""
    dtype = next(model.parameters()).dtype
    if next(model.parameters()).device.type != "cpu":
        return "no CPU decoding kernels (the model is not on the CPU)"
    model.requires_grad_(False)
    # a sliding window's ring cache is dense already (model/cache.py)
    cache = "window KV cache" if model.cfg.attention_window else "dense-prefix KV cache"
    done = ["decoder attention written out", cache]
    for layer in model.decoder:
        for attn in (layer.self_attn, layer.cross_attn):
            attn.kernel = attention
    model.dense_prefix_cache = True
    if dtype in onednn_dtypes():
        _linears_through_onednn(model)
        done.insert(0, "linear layers through oneDNN")
    summary = "CPU decoding: " + ", ".join(done)
    log.info(summary)
    return summary


def _linears_through_onednn(model: nn.Module) -> None:
    for module in list(model.modules()):
        # fused into the product
        if isinstance(module, FeedForward) and isinstance(module.activation, nn.ReLU):
            module.up, module.activation = OneDNNLinear(module.up, "relu"), nn.Identity()
        for name, child in module.named_children():
            if isinstance(child, nn.Linear):
                setattr(module, name, OneDNNLinear(child))
