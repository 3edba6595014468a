"""Speed for decoding on CPU, applied to a loaded model as one explicit conversion (loading.load).

The model's own code is the plain algorithm: nn.Linear, one fused SDPA call, a KV cache of
(N, G, T_max, K) slots. For a search's shapes on CPU, `for_cpu_decoding` swaps in kernels that
compute the same functions faster (why, with the measurements: docs/benchmarks/decode.md):
- every nn.Linear becomes a `OneDNNLinear` (PyTorch sends CPU fp32 linears to a slower GEMM
  than the oneDNN one it uses for bf16), its weight reordered once into oneDNN's own layout, bias
  fused, and each FFN's ReLU fused into its product, its input rows padded with zero rows to one
  of a few sizes an octave (`bucketed`), so that oneDNN's per-shape kernels are reused;
- the KV cache keeps a sentence's beams side by side (model/layer_cache.py), so a beam reorder moves
  no keys. Attention stays the fused SDPA call: with the beams' queries folded onto their
  sentence's keys it measured faster than a written-out kernel in most decoding shapes, and
  close where slower (short cross-attention, greedy).
With `int8=True` (`--dtype int8`) the linear layers become PyTorch's dynamically quantised int8
ones instead of oneDNN fp32 ones: int8 weights with one scale per output row, each input
quantised on the fly with one scale per call, products in int8, outputs in fp32 (`int8_linears`).
This one is not the same function: it is bounded against the fp32 logits in the tests.
The plain model is the reference the converted one is tested against
(tests/model/test_inference.py).
The conversion is for inference only: it turns autograd off for the parameters, a converted
linear refuses to run under autocast, which its private op would bypass, and a converted model
holds its linear weights in oneDNN's opaque layout only (not in its state dict; it cannot be copied
or saved: convert a copy, as loading.load converts a freshly loaded checkpoint).
"""

from __future__ import annotations

import logging
import warnings

import torch
import torch.nn.functional as F
from torch import nn
from torch.ao.nn.quantized.dynamic import Linear as Int8Linear
from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

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
    """y = activation(x W^T + b) through oneDNN, with W reordered once into oneDNN's blocked layout.

    The same function at the same precision; only the summation order differs from nn.Linear.
    oneDNN multiplies a weight in its own blocked layout faster than the plain (out, in) one, most
    of all for a decoding step's few rows, so the weight is reordered once, here. The packed copy
    replaces the dense weight (a tied output projection's dense matrix stays the embedding's).
    """

    def __init__(self, linear: nn.Linear, activation: str = "none") -> None:
        super().__init__()
        self.packed_weight = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), None)
        self.bias, self.activation = linear.bias, activation  # the bias stays shared

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., in) -> (..., out)."""
        if torch.is_autocast_enabled("cpu"):
            raise RuntimeError(
                "a model converted for CPU decoding runs in its own dtype, not under autocast"
            )
        linear = torch.ops.mkldnn._linear_pointwise
        m = x.numel() // x.shape[-1]
        size = bucketed(m)
        if size == m:  # kept as it is: sent as rows too, a search's steps ran slower (benchmarks)
            return linear(x, self.packed_weight, self.bias, self.activation, [], "")
        # as rows, zero rows added (dropped below): oneDNN keys its kernels by the whole shape
        rows = F.pad(x.reshape(m, x.shape[-1]), (0, 0, 0, size - m))
        y = linear(rows, self.packed_weight, self.bias, self.activation, [], "")[:m]
        return y.view(*x.shape[:-1], y.shape[-1])


def bucketed(rows: int) -> int:
    """`rows` rounded up to one of 8 sizes an octave (exact below 16), so at most 1/8 more.

    oneDNN compiles a kernel for each input shape it meets (and keeps 1,024). A search meets a
    new row count nearly every call, as batches differ in size and finished sentences leave
    them, so it compiled kernels all along, and their cache grew a long stream's process by
    most of its memory. A few sizes an octave are compiled once and reused."""
    step = 1 << max(0, rows.bit_length() - 4)
    return -(-rows // step) * step


def for_cpu_decoding(model: Transformer, int8: bool = False) -> str:
    """Convert `model` (in place, on CPU, in its final dtype) for searches -> what was done.

    int8: every nn.Linear becomes a dynamic int8 one (`int8_linears`; fp32 models only).
    """
    dtype = next(model.parameters()).dtype
    if next(model.parameters()).device.type != "cpu":
        return "no CPU decoding kernels (the model is not on the CPU)"
    if int8 and dtype != torch.float32:
        raise ValueError(f"int8 linear layers are made from an fp32 model, not {dtype}")
    model.requires_grad_(False)
    # a sliding window keeps its ring cache (model/layer_cache.py)
    cache = "window KV cache" if model.cfg.attention_window else "beam-slots KV cache"
    done = [cache]
    model.beam_slots_cache = True
    if int8:
        int8_linears(model)
        done.insert(0, "linear layers in dynamic int8")
    elif dtype in onednn_dtypes():
        _linears_through_onednn(model)
        done.insert(0, "linear layers through oneDNN")
    summary = "CPU decoding: " + ", ".join(done)
    log.info(summary)
    return summary


def _linears_through_onednn(model: nn.Module) -> None:
    # the parents only: a list holding the nn.Linear modules would keep every dense weight alive
    # beside its packed copy until the end
    for module in [m for m in model.modules() if not isinstance(m, nn.Linear)]:
        # fused into the product (not when gated: the activation takes half of the product)
        if (
            isinstance(module, FeedForward)
            and isinstance(module.activation, nn.ReLU)
            and not module.gated
        ):
            module.up, module.activation = OneDNNLinear(module.up, "relu"), nn.Identity()
        for name, child in module.named_children():
            if isinstance(child, nn.Linear):
                setattr(module, name, OneDNNLinear(child))


def int8_linears(model: nn.Module) -> None:
    """Every nn.Linear of `model` -> PyTorch's dynamic int8 Linear (in place; for inference).

    Weights int8 with one scale per output row (as CTranslate2's int8); each call quantises its
    input with one scale, multiplies in int8 (fbgemm or oneDNN, PyTorch's quantised engine) and
    returns fp32. A tied output projection gets its own int8 copy; the embedding keeps fp32.
    """
    with warnings.catch_warnings():
        # PyTorch 2.13 marks eager quantisation as moving to torchao, whose CPU int8 products
        # are far slower without torch.compile (docs/benchmarks/decode.md): this path stays.
        warnings.filterwarnings("ignore", message=r"torch\.ao\.quantization is deprecated")
        warnings.filterwarnings("ignore", message=r"torch\.quantize_per_(tensor|channel)")
        quantize_dynamic(
            model, {nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8, inplace=True
        )


def is_int8(model: nn.Module) -> bool:
    """Were this model's linear layers converted to int8 (`int8_linears`)?"""
    return any(isinstance(m, Int8Linear) for m in model.modules())
