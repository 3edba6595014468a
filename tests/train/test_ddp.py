"""Data parallel on CPU: 2 gloo processes stay identical and compute the gradient of both their
batches."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.train.conftest import TINY_MODEL, torchrun_env, variant
from translator import config
from translator.data.batching import make_batch
from translator.model.transformer import Transformer
from translator.train import distributed, loop
from translator.train.batches import TrainBatches
from translator.train.distributed import Dist
from translator.train.loop import loss_sums
from translator.train.schedule import learning_rate
from translator.train.startup import setup
from translator.train.state import TrainState

SETTINGS = (
    "model.dropout=0.0",
    "train.max_tokens=512",
    "train.max_updates=4",
    "train.eval_every=4",
    "train.log_every=2",
)


def _worker(rank: int, cfg, port: int, out_dir: str) -> None:
    """One process of `torchrun --nproc_per_node 2`: the same environment, then `train`."""
    torch.set_num_threads(1)
    torchrun_env(rank, port)
    model = loop.run(cfg, quiet=True)
    torch.save(model.state_dict(), os.path.join(out_dir, f"rank{rank}.pt"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def single_process_reference(cfg) -> tuple[dict[str, torch.Tensor], list[float], list[float]]:
    """One process that, each update, accumulates the batch rank 0 and the batch rank 1 would take.

    Returns its final weights, and the gradient norm and loss per token of every update.
    """
    s = setup(cfg, quiet=True)
    ranks = [TrainBatches(cfg, Dist(s.dist.device, rank=r, world_size=2)) for r in range(2)]
    states = [TrainState() for _ in ranks]
    norms, losses = [], []
    for step in range(cfg.train.max_updates):
        batches = [data.take(state, 1)[0] for data, state in zip(ranks, states)]
        for group in s.optimizer.param_groups:
            group["lr"] = learning_rate(step + 1, cfg.train)
        tokens = sum(b.n_tgt_tokens for b in batches)
        loss, _, norm, _ = loop.train_step(s, batches, tokens)
        norms.append(norm)
        losses.append((loss, tokens))
    s.metrics.close()
    return s.model.state_dict(), norms, losses


def logged(run_dir, tag: str) -> list[float]:
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    return [e.value for e in events.Scalars(tag)]


def test_two_gloo_processes_train_as_one(prepared, tmp_path):
    cfg = variant(prepared, tmp_path / "run", *SETTINGS)
    mp.spawn(_worker, args=(cfg, free_port(), str(tmp_path)), nprocs=2, join=True)
    rank0, rank1 = (torch.load(tmp_path / f"rank{r}.pt") for r in range(2))
    for name, tensor in rank0.items():
        assert torch.equal(tensor, rank1[name]), f"ranks differ in {name}"

    reference, norms, losses = single_process_reference(
        variant(prepared, tmp_path / "reference", *SETTINGS)
    )
    start = setup(variant(prepared, tmp_path / "initial", *SETTINGS), quiet=True)
    start.metrics.close()
    assert not torch.equal(rank0["out_proj.weight"], start.model.out_proj.weight)  # it did train
    for name, tensor in rank0.items():
        torch.testing.assert_close(tensor, reference[name], rtol=1e-4, atol=1e-5, msg=name)

    run_dir = tmp_path / "run"
    # Adam hides a wrongly scaled gradient; the logged norms and losses (updates 2 and 4) do not
    assert logged(run_dir, "train/grad_norm") == pytest.approx([norms[1], norms[3]], rel=1e-4)
    window_means = [
        sum(x for x, _ in pair) / sum(n for _, n in pair) for pair in (losses[:2], losses[2:])
    ]
    assert logged(run_dir, "train/loss") == pytest.approx(window_means, rel=1e-5)
    events = sorted(p.relative_to(run_dir).parent for p in run_dir.rglob("events.out.*"))
    assert events == [Path("tensorboard"), Path("tensorboard/by_seconds")]  # none from rank 1
    log = (run_dir / "train.log").read_text()
    assert log.count("model: ") == 1 and "2 x cpu" in log and "validation at update 4" in log
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert (
        manifest["sessions"][0]["world_size"] == 2 and manifest["sessions"][0]["last_update"] == 4
    )


@pytest.mark.parametrize("positions", ["sinusoidal", "rope", "relative", "learned"])
def test_training_changes_no_buffer_so_ddp_need_not_broadcast_them(positions):
    """wrap's forward_sync_buffers=False holds only while every buffer is a constant (a running
    statistic would drift apart between processes)."""
    cfg = config.load(
        None,
        [
            *TINY_MODEL,
            f"model.positions={positions}",
        ],
    )
    model = Transformer(cfg.model)
    before = {name: b.clone() for name, b in model.named_buffers()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    batch = make_batch([[5, 6, 7], [8, 9]], [[10, 11], [12, 13, 14]])
    for _ in range(2):
        loss, _ = loss_sums(model, batch, 0.1)
        loss.backward()
        optimizer.step()
    assert before or positions in ("relative", "learned")  # the tables are buffers
    for name, buffer in model.named_buffers():
        assert torch.equal(buffer, before[name]), name

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:  # a one-process group; world_size=2 only to get past wrap's no-op for one process
        net = distributed.wrap(model, Dist(torch.device("cpu"), 0, 2))
        assert net.forward_sync_buffers is False
    finally:
        dist.destroy_process_group()
