"""Device and dtype names -> torch objects, for inference (`--device`, `--dtype`) and training
alike.

`auto` precision is bf16 where the hardware computes it natively and fp32 elsewhere: on a CPU
without native bf16, oneDNN emulates it and it is slower than fp32; with it (x86 AVX512-BF16 or
AMX, Arm BF16) it decodes and trains faster at the same BLEU (docs/benchmarks/decode.md).
"""

from __future__ import annotations

import functools
import platform
from pathlib import Path

import torch

from translator.errors import TranslatorError

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
DTYPE_NAMES = {dtype: name for name, dtype in DTYPES.items()}


def resolve_device(name: str, where: str = "--device") -> torch.device:
    """`auto` -> CUDA when present, else CPU; asking for absent CUDA is a user error, named as
    `where` (the flag or config key that asked)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise TranslatorError(
            f"unknown device {name!r}", where, "use auto, cpu, cuda or cuda:N"
        ) from None
    if device.type not in ("cpu", "cuda"):
        raise TranslatorError(
            f"unsupported device {name!r}", where, "use auto, cpu, cuda or cuda:N"
        )
    if device.type == "cuda" and not torch.cuda.is_available():
        raise TranslatorError("CUDA is not available on this machine", where, "use cpu or auto")
    return device


def int8_device(name: str) -> torch.device:
    """The device for int8 decoding (`--dtype int8`): the CPU, also for `auto`; CUDA is refused."""
    if name.split(":")[0] == "cuda":  # checked first: the same answer with or without CUDA
        raise TranslatorError(
            "int8 decoding runs on the CPU only",
            "--dtype int8",
            "use --device cpu (or auto), or --dtype fp16/bf16 on CUDA",
        )
    return resolve_device("cpu" if name == "auto" else name)


def resolve_dtype(name: str, device: torch.device, cpu_bf16: bool | None = None) -> torch.dtype:
    """`auto` -> bf16 on CUDA with native bf16 (else fp16); on CPU bf16 where it is native, else
    fp32.

    `cpu_bf16` says whether the CPU has native bf16; None asks `cpu_native_bf16()`.
    """
    if name == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if cuda_native_bf16(device) else torch.float16
        native = cpu_native_bf16() if cpu_bf16 is None else cpu_bf16
        return torch.bfloat16 if native else torch.float32
    if name not in DTYPES:
        raise TranslatorError(
            f"unknown dtype {name!r}",
            "--dtype",
            "use auto, " + ", ".join(DTYPES) + " (or int8: CPU decoding)",
        )
    return DTYPES[name]


def cuda_native_bf16(device: torch.device) -> bool:
    """Does this CUDA device compute bf16 in hardware (compute capability 8.0 on, or ROCm)?

    Not `torch.cuda.is_bf16_supported()`: by default it is also true where bf16 is only emulated
    (a V100 or T4, which want fp16 with a loss scaler), and it asks about the current device, not
    `device`.
    """
    return bool(torch.version.hip) or torch.cuda.get_device_capability(device)[0] >= 8


@functools.cache
def cpu_native_bf16() -> bool:
    """Does this CPU compute bf16 in hardware: x86 AVX512-BF16 or AMX, or Arm's BF16 extension?

    Not `torch.ops.mkldnn._is_mkldnn_bf16_supported()`: it is true on any AVX-512 CPU, where
    oneDNN runs bf16 by conversion, which is no faster than fp32.
    """
    # x86, via PyTorch's cpuinfo
    for probe in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        check = getattr(torch.cpu, probe, None)
        if check is not None and check():
            return True
    return "bf16" in cpu_features()  # Arm: the kernel lists FEAT_BF16 as `bf16`


def cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo; the architecture where it does not say."""
    for key, value in _cpuinfo_first_cpu():
        if key == "model name":
            return value.strip()
    return platform.processor() or platform.machine()


def cpu_features() -> set[str]:
    """The first CPU's `flags` (x86) or `Features` (Arm) in /proc/cpuinfo; empty elsewhere."""
    for key, value in _cpuinfo_first_cpu():
        if key in ("flags", "Features"):
            return set(value.split())
    return set()


INTEL = "GenuineIntel"  # cpu_vendor() of an Intel CPU


@functools.cache
def cpu_vendor() -> str:
    """The x86 vendor in /proc/cpuinfo (`GenuineIntel`, `AuthenticAMD`); empty elsewhere. Some CPU
    training kernels are chosen by it (train/linear.py, train/precision.py)."""
    for key, value in _cpuinfo_first_cpu():
        if key == "vendor_id":
            return value.strip()
    return ""


def _cpuinfo_first_cpu() -> list[tuple[str, str]]:
    """(key, value) lines of the first CPU in /proc/cpuinfo; none where there is no such file."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    first = text.split("\n\n", 1)[0]
    return [
        (key.strip(), value)
        for key, _, value in (line.partition(":") for line in first.splitlines())
    ]


def describe(device: torch.device, dtype: torch.dtype, asked: str) -> str:
    """What was chosen and why, for the log:
    e.g. `cpu, bf16 (auto: this CPU has native bf16; --dtype fp32 for fp32)`."""
    name = DTYPE_NAMES.get(dtype, str(dtype))
    if asked == "int8":
        return f"{device}, int8 (dynamic int8 linear layers, the rest {name})"
    if asked != "auto":
        return f"{device}, {name}"
    if device.type == "cuda":
        return f"{device}, {name} (auto)"
    if dtype == torch.bfloat16:
        return f"{device}, {name} (auto: this CPU has native bf16; --dtype fp32 for fp32)"
    return f"{device}, {name} (auto: this CPU has no native bf16)"
