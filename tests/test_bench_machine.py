"""The benchmarks' CPU memory figures: a process's own peak, not its parent's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="Linux /proc")

CHILD = """
from bench.machine import memory_mib, reset_peak_memory
reset_peak_memory()
print(memory_mib("VmHWM"))
"""


def test_a_child_process_peak_does_not_start_at_its_parents():
    """ru_maxrss in a child starts at the parent's peak (Linux keeps it across exec): a benchmark
    started by a parent that prepared data reported the parent's memory as its own."""
    held = bytearray(600 * 2**20)  # the parent's peak: 600 MiB, every page touched
    held[::4096] = b"x" * len(held[::4096])
    child = subprocess.run(
        [sys.executable, "-c", CHILD],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
    )
    assert 0 < float(child.stdout) < 300  # Python, torch's import by bench.machine: not 600+
    del held
