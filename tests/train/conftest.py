"""Training-test helpers: configs derived from the session's prepared slice, one thread per
process."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch.multiprocessing as mp

from tests.conftest import REPO, tiny_overrides
from translator import config


def variant(prepared: config.Config, run_dir: Path, *overrides: str) -> config.Config:
    """The prepared tiny config with its own run_dir and extra `key=value` overrides
    (type-checked)."""
    data_dir = Path(prepared.data.data_dir)
    base = [*tiny_overrides(data_dir, run_dir, prepared.data.source), "train.precision=fp32"]
    return config.load(REPO / "configs" / "tiny.yaml", [*base, *overrides])


# a model of a few thousand parameters: vocabulary 40, d_model 32, 4 heads, one layer a side
TINY_MODEL = [
    "model.vocab_size=40",
    "model.d_model=32",
    "model.n_heads=4",
    "model.d_ff=64",
    "model.n_encoder_layers=1",
    "model.n_decoder_layers=1",
]


def torchrun_env(rank: int, port: int, world_size: int = 2) -> None:
    """The environment `torchrun --nproc_per_node 2` gives process `rank` (for mp.spawn workers)."""
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world_size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )


def spawn_ranks(worker, args: tuple, deadline_s: float) -> None:
    """worker(rank, *args) in two spawned processes; fails (rather than hang the suite) when they
    have not finished by the deadline."""
    context = mp.start_processes(worker, args=args, nprocs=2, join=False, start_method="spawn")
    deadline = time.time() + deadline_s
    while not context.join(timeout=1):
        if time.time() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail(f"the ranks did not finish within {deadline_s} s")
