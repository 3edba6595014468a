"""Mixed precision: which autocast dtype, the autocast context, and the fp16 gradient scaler."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from translator.device import resolve_dtype


def amp_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """Autocast dtype, or None for plain fp32.

    auto: bf16 on CUDA that supports it, fp16 (with a gradient scaler) on older CUDA; on CPU bf16
    where it is native (device.cpu_native_bf16), else fp32.
    """
    dtype = resolve_dtype(precision, device)  # the same rule as inference's --dtype
    return None if dtype == torch.float32 else dtype


def grad_scaler(device: torch.device, dtype: torch.dtype | None) -> torch.amp.GradScaler:
    """A loss scaler that is active only for fp16 (bf16 has fp32's exponent range and needs
    none)."""
    return torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)


@contextmanager
def autocast(device: torch.device, dtype: torch.dtype | None) -> Iterator[None]:
    """Mixed precision for the enclosed forward passes (no-op for fp32).

    On CPU in bf16, PyTorch's fused flash-attention backward is several times slower than the
    math path (measured 2x slower per update on a 2-core machine), so the math path is chosen there.
    """
    if dtype is None:
        yield
        return
    with torch.autocast(device.type, dtype=dtype):
        if device.type == "cpu":
            with sdpa_kernel([SDPBackend.MATH]):
                yield
        else:
            yield
