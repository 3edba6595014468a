"""Mixed precision: which autocast dtype, the autocast context, and the fp16 gradient scaler."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from translator.device import INTEL, cpu_vendor, resolve_dtype


def amp_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """Autocast dtype, or None for plain fp32.

    auto: bf16 on CUDA that computes it (device.cuda_native_bf16), else fp16 with a gradient
    scaler (a V100 or T4 only emulates bf16); on CPU bf16 where it is native
    (device.cpu_native_bf16), else fp32.
    """
    dtype = resolve_dtype(precision, device)  # the same rule as inference's --dtype
    return None if dtype == torch.float32 else dtype


def grad_scaler(device: torch.device, dtype: torch.dtype | None) -> torch.amp.GradScaler:
    """A loss scaler that is active only for fp16 (bf16 has fp32's exponent range and needs
    none)."""
    return torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)


# fp32 on an AMD CPU: for sequences up to this many positions the math path (batched products
# and a softmax) trains faster than the flash kernel, which wins on longer ones. On an Intel CPU
# the flash kernel was the faster one at every length (docs/benchmarks/train.md).
SHORT_ATTENTION = 64


def cpu_attention_kernels(
    dtype: torch.dtype | None, longest: int | None, vendor: str = ""
) -> list[SDPBackend]:
    """The SDPA kernels a CPU training step allows (empty: PyTorch's own choice). `longest`: the
    batch's longest sequence, None when unknown; `vendor`: the CPU's (device.cpu_vendor)."""
    if dtype is not None:  # bf16: the flash backward is slower (docs/benchmarks/train.md)
        return [SDPBackend.MATH]
    short = longest is not None and longest <= SHORT_ATTENTION
    if short and vendor != INTEL:
        return [SDPBackend.MATH]
    return []


@contextmanager
def autocast(
    device: torch.device, dtype: torch.dtype | None, longest: int | None = None
) -> Iterator[None]:
    """Mixed precision for the enclosed forward passes (no-op for fp32), and on CPU the attention
    kernels of `cpu_attention_kernels` (`longest`: the batch's longest sequence, if known)."""
    kernels = cpu_attention_kernels(dtype, longest, cpu_vendor()) if device.type == "cpu" else []
    with ExitStack() as stack:
        if dtype is not None:
            stack.enter_context(torch.autocast(device.type, dtype=dtype))
        if kernels:
            stack.enter_context(sdpa_kernel(kernels))
        yield
