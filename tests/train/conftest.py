"""Training-test helpers: configs derived from the session's prepared slice, one thread per process."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.conftest import REPO, tiny_overrides
from translator import config


@pytest.fixture(autouse=True)
def _one_thread():
    """On the shared 2-core machine, two OpenMP threads spin against other jobs (measured 20x slower)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def variant(prepared: config.Config, run_dir: Path, *overrides: str) -> config.Config:
    """The prepared tiny config with its own run_dir and extra `key=value` overrides (type-checked)."""
    data_dir = Path(prepared.data.data_dir)
    base = [*tiny_overrides(data_dir, run_dir), "train.precision=fp32"]
    return config.load(REPO / "configs" / "tiny.yaml", [*base, *overrides])
