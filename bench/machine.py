"""What a benchmark page says about the machine it ran on."""

from __future__ import annotations

import os
from pathlib import Path

from translator.device import cpu_features, cpu_name
from translator.versions import installed

ISA = [
    ("amx_bf16", "AMX"),
    ("avx512_bf16", "AVX512-BF16"),
    ("avx512f", "AVX-512"),
    ("avx2", "AVX2"),
]


def cpu_model() -> str:
    """The CPU's model name, widest matrix instructions and core count ("Intel(R) Xeon(R)
    Processor with AMX, 2 cores"); the architecture where /proc/cpuinfo is not there."""
    flags = cpu_features()
    # the widest matrix instructions, which set what bf16 and int8 products cost
    isa = next((label for flag, label in ISA if flag in flags), "")
    return f"{cpu_name()}{' with ' + isa if isa else ''}, {os.cpu_count()} cores"


def load_average() -> str:
    """The 1-minute load average now (what else ran), or "" where the OS does not say."""
    try:
        return f"load average {os.getloadavg()[0]:.2f} at the start"
    except (OSError, AttributeError):
        return ""


def versions(*packages: str) -> str:
    """ "transformers 5.25.0, ctranslate2 4.8.5" for those of `packages` that are installed."""
    found = installed(*packages)
    return ", ".join(f"{p} {found[p]}" for p in packages if p in found)


def memory_mib(field: str) -> float:
    """A memory figure of this process from /proc/self/status in MiB (VmRSS now, VmHWM its peak).
    VmHWM, not ru_maxrss: a child's ru_maxrss starts at its parent's peak. Without /proc (macOS)
    the peak is ru_maxrss (bytes there), the current figure 0."""
    try:
        fields = Path("/proc/self/status").read_text().split(f"{field}:")[1].split()
        return int(fields[0]) / 1024  # kB
    except (OSError, IndexError, ValueError):
        if field != "VmHWM":
            return 0.0
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def reset_peak_memory() -> None:
    """Set this process's VmHWM to its VmRSS (Linux), so that the peak counts from now on."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass
