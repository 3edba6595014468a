"""Training-test helpers: configs derived from the session's prepared slice, one thread per
process."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import REPO, tiny_overrides
from translator import config


def variant(prepared: config.Config, run_dir: Path, *overrides: str) -> config.Config:
    """The prepared tiny config with its own run_dir and extra `key=value` overrides
    (type-checked)."""
    data_dir = Path(prepared.data.data_dir)
    base = [*tiny_overrides(data_dir, run_dir), "train.precision=fp32"]
    return config.load(REPO / "configs" / "tiny.yaml", [*base, *overrides])
