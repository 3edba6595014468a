"""Data-parallel training: join the process group torchrun describes, wrap the model, reduce
numbers.

`torchrun --nproc_per_node N -m translator train CFG` sets RANK, WORLD_SIZE and LOCAL_RANK; each
process then trains on every N-th batch (data.batching.token_batches) and DDP averages gradients.
Without those variables everything here is a no-op for one process. Only rank 0 writes files.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from translator.device import resolve_device
from translator.errors import TranslatorError

# How long the other processes wait for rank 0's `main_first` work (preparing the data): a prepare
# at WMT14 en-de scale takes minutes (docs/benchmarks/prepare.md); this leaves room for corpora ten
# times that on a slow disk. A rank 0 that fails says so at once (see main_first), so this bounds
# only a hang.
MAIN_FIRST_TIMEOUT = timedelta(hours=6)


class EveryRankError(TranslatorError):
    """An error every process raises alike (the same check on the same numbers): the command line
    prints it on rank 0 alone (cli.run_command), not once per process."""

    every_rank = True


@dataclass
class Dist:
    """Where this process stands: its rank among world_size processes and its device."""

    device: torch.device
    rank: int = 0
    world_size: int = 1

    @property
    def main(self) -> bool:
        """Rank 0: the one process that logs and writes checkpoints."""
        return self.rank == 0


def init(device_name: str) -> Dist:
    """Join the process group when launched with WORLD_SIZE > 1 (NCCL on CUDA, gloo on CPU)."""
    device = resolve_device(device_name, "train.device")
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size == 1:
        # cuda:N made current: what torch.cuda does without a device (the RNG state a save
        # keeps, train/state.py) is then about this process's device
        if device.type == "cuda" and device.index is not None:
            torch.cuda.set_device(device)
        return Dist(device)
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if device.type == "cuda":  # one GPU per process, chosen by the launcher's local rank
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    # rank 0 validates alone while the others wait, so allow more than the default 10 minutes
    dist.init_process_group(
        "nccl" if device.type == "cuda" else "gloo",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(minutes=60),
    )
    return Dist(device, rank, world_size)


def close(d: Dist) -> None:
    if d.world_size > 1 and dist.is_initialized():
        dist.destroy_process_group()


def main_first(d: Dist, work: Callable[[], object], what: str) -> None:
    """Run `work` on rank 0 alone while the other processes wait (one writer, e.g. of the prepared
    data).

    Rank 0 then tells the others how it went, over a gloo group of its own (CPU, whatever the
    training backend, with a timeout for long work): when it failed, every process raises, rather
    than waiting out the timeout for a rank 0 that has gone.
    """
    if d.world_size == 1:
        work()
        return
    group = dist.new_group(backend="gloo", timeout=MAIN_FIRST_TIMEOUT)
    outcome: list[str | None] = [None]  # rank 0's error, or None when its work succeeded
    try:
        if d.main:
            try:
                work()
            except BaseException as err:
                outcome[0] = (
                    str(err) if isinstance(err, TranslatorError) else f"{type(err).__name__}: {err}"
                )
                with suppress(Exception):  # raise rank 0's own error, not a failed broadcast's
                    dist.broadcast_object_list(outcome, src=0, group=group)
                raise
        dist.broadcast_object_list(outcome, src=0, group=group)
    finally:
        dist.destroy_process_group(group)
    if outcome[0] is not None:
        # short: rank 0 prints the whole error, and maybe after this line
        raise TranslatorError(f"rank 0 failed while {what}", f"rank {d.rank}", "see its error")


def wrap(model: torch.nn.Module, d: Dist) -> torch.nn.Module:
    """DDP around the model when there are several processes (it also broadcasts rank 0's
    weights and buffers, once)."""
    if d.world_size == 1:
        return model
    return DistributedDataParallel(
        model,
        device_ids=[d.device.index] if d.device.type == "cuda" else None,
        # the model's buffers (sinusoid and RoPE tables) are constants: synced at the start, not
        # broadcast before every forward (tests/train/test_ddp.py checks that training changes
        # none). broadcast_buffers=False, its deprecated name, would skip the start's sync too
        forward_sync_buffers=False,
    )


def no_sync(model: torch.nn.Module, sync: bool):
    """Skip DDP's gradient all-reduce on accumulation micro-batches before the last."""
    if sync or not hasattr(model, "no_sync"):
        return nullcontext()
    return model.no_sync()


def sum_all(d: Dist, values: list[float]) -> list[float]:
    """Element-wise sum of `values` over all processes (float64)."""
    if d.world_size == 1:
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=d.device)
    dist.all_reduce(tensor)
    return tensor.tolist()


def max_all(d: Dist, values: list[float]) -> list[float]:
    """Element-wise maximum of `values` over all processes (float64)."""
    if d.world_size == 1:
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=d.device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return tensor.tolist()


def gather(d: Dist, obj: Any) -> list[Any]:
    """`obj` from every process, in rank order (picklable objects, e.g. RNG states)."""
    if d.world_size == 1:
        return [obj]
    out: list[Any] = [None] * d.world_size
    dist.all_gather_object(out, obj)
    return out


@contextmanager
def peer_failures() -> Iterator[None]:
    """A collective that fails because another process has stopped becomes one line naming this
    process (the other one printed why it stopped), not gloo's or NCCL's 40-line traceback."""
    try:
        yield
    except RuntimeError as err:  # DistBackendError (NCCL) is one too
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        if world_size == 1 or not _peer_gone(err):
            raise
        raise TranslatorError(
            "another process stopped",
            f"rank {os.environ.get('RANK', '0')}",
            "see its error above",
        ) from None


def _peer_gone(err: RuntimeError) -> bool:
    """Whether `err` is a collective's failure: NCCL raises DistBackendError, gloo a RuntimeError
    from its transport ("Connection closed by peer", "Connection reset by peer")."""
    return isinstance(err, dist.DistBackendError) or "/gloo/" in str(err)
