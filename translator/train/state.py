"""What an exact resume needs: counters, data position, RNG states; checkpoint save and the
run-directory checks at a start (train/resume.py reads the checkpoint back)."""

from __future__ import annotations

import errno
import fcntl
import os
import random
import shutil
import socket
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from translator import checkpoint
from translator.config import Config
from translator.data.tokenizer import Tokenizer
from translator.errors import TranslatorError
from translator.files import open_own, sweep_dead_temps
from translator.train.distributed import EveryRankError


@dataclass
class TrainState:
    """Counters and positions that, with model, optimizer and scaler, determine the rest of a
    run."""

    step: int = 0  # updates done (skipped ones included: their batches were consumed)
    epoch: int = 0
    batch_index: int = 0  # next batch of this epoch, per rank
    best_bleu: float = -1.0
    best_step: int = -1  # the update best.pt holds (-1: none yet, or saved before it was recorded)
    best_loss: float = -1.0  # best.pt's valid loss, which breaks ties of BLEU (-1: not recorded)
    bad_evals: int = 0  # validations in a row without a better BLEU (early stopping)
    last_valid_step: int = -1
    skipped_steps: int = 0  # updates dropped for a non-finite loss or gradient
    oom_splits: int = 0  # batches halved after running out of memory (train/oom.py)
    oom_skipped: int = 0  # single sentences dropped because even alone they ran out of memory
    window_loss: float = 0.0  # token sums since the last log line, so resumed logs match
    window_nll: float = 0.0
    window_tokens: int = 0
    world_size: int = 1
    # wall-clock of training up to this state, summed over sessions (time between them not counted)
    seconds: float = 0.0
    # training seconds when the warm-up ended (-1: not yet): where a cosine decay over the
    # wall-clock budget starts (schedule.budget_progress)
    warmup_end_seconds: float = -1.0
    rng: list[dict] = field(default_factory=list)  # one entry per rank

    def state_dict(self) -> dict[str, Any]:
        return asdict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key, value in state.items():
            setattr(self, key, value)


def rng_state() -> dict[str, Any]:
    """Python, NumPy, torch CPU and this process's CUDA device's generator states (tensors, so
    `weights_only` loads them).

    CUDA: the current device's state alone (distributed.init makes the process's device current),
    None without CUDA. Not every visible device's: a resume where fewer are visible could not
    restore them all.
    """
    kind, key, pos, has_gauss, cached = np.random.get_state()
    numpy_state = [kind, torch.from_numpy(key.astype(np.int64)), pos, has_gauss, cached]
    return {
        "python": random.getstate(),
        "numpy": numpy_state,
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state() if torch.cuda.is_available() else None,
    }


def set_rng_state(rng: dict[str, Any]) -> None:
    """Restore `rng_state()`'s states; CUDA's into the current device, when both sides have CUDA.

    Older checkpoints hold a list, one state per device visible at the save (each DDP rank saved
    all of them): the current device's entry is this process's own; where fewer devices are
    visible now, the first is taken.
    """
    random.setstate(rng["python"])
    kind, key, pos, has_gauss, cached = rng["numpy"]
    np.random.set_state((kind, key.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(rng["torch"])
    cuda = rng["cuda"]
    if isinstance(cuda, list):
        cuda = _own_cuda_state(cuda)
    if cuda is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state(cuda)


def _own_cuda_state(states: list[torch.Tensor]) -> torch.Tensor | None:
    """This process's state in an older checkpoint's per-device list: the current device's, the
    first where fewer devices are visible now; None when saved without CUDA (an empty list)."""
    if not states or not torch.cuda.is_available():
        return None
    index = torch.cuda.current_device()
    return states[index] if index < len(states) else states[0]


def seed_all(seed: int) -> None:
    """Seed Python, NumPy and torch (CPU and every CUDA device), modulo 2**32 (NumPy's range):
    callers add the rank, the update or a recipe member's index to train.seed, itself up to
    2**32 - 1."""
    seed %= 2**32
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def save_checkpoints(
    run_dir: Path,
    model: torch.nn.Module,
    cfg: Config,
    tokenizer: Tokenizer,
    payload: dict[str, Any],
    step: int,
    best: bool,
    validated: bool = True,
) -> None:
    """last.pt always; best.pt when validation improved; step-N.pt, of validated updates only
    (what `average --last N` takes), with only the newest keep_last kept.

    The state is serialized once, as last.pt; the other names are hard links of it (copies where
    links fail), each put in place by an atomic rename. last.pt first: a kill before the links
    leaves a run that resumes (without this step-N.pt), where step-N.pt alone would look like an
    earlier run's checkpoint (refuse_earlier_checkpoints).
    """
    keep = cfg.train.keep_last if validated else 0
    last = run_dir / "last.pt"
    checkpoint.save(last, model, cfg, tokenizer, payload, follow_link=False)
    for name in [f"step-{step}.pt"] * bool(keep) + ["best.pt"] * best:
        _link(last, run_dir / name)
    if keep:
        for old in checkpoint.step_files(run_dir)[:-keep]:
            old.unlink()


def refuse_non_finite(step: int, run_dir: Path, *models: torch.nn.Module) -> None:
    """A NaN or inf weight would be saved with a valid checksum and, pruning, push the good
    checkpoints out: refused, with one device sync over all tensors."""
    tensors = [t for m in models for t in m.state_dict().values() if t.is_floating_point()]
    if tensors and not torch.stack([torch.isfinite(t).all() for t in tensors]).all():
        raise EveryRankError(
            f"the weights after update {step} are not finite (NaN or inf): not saved",
            str(run_dir / "last.pt"),
            "it keeps the last checkpoint saved; lower train.lr or check the data, then rerun to "
            "resume from it",
        )


def check_run_dir(
    run_dir: Path, model: torch.nn.Module, keep_last: int, averaged: bool = False
) -> None:
    """Before training: the run directory is writable and has room for the checkpoints to come.

    A checkpoint is about the weights plus AdamW's two moments (and the moving average of the
    weights when `averaged`); keep_last of them stay, and one more is written before the oldest
    goes.
    """
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=run_dir):
            pass
    except OSError as err:
        raise TranslatorError(
            f"cannot write to the run directory: {err.strerror or err}",
            str(run_dir),
            "check its permissions, or use another train.run_dir",
        ) from None
    # + tokenizer, config
    size = (3 + averaged) * sum(
        t.numel() * t.element_size() for t in model.state_dict().values()
    ) + 2**20
    kept = len(list(run_dir.glob("step-*.pt")))
    need = size * max(1, keep_last + 1 - kept) if keep_last else size
    free = shutil.disk_usage(run_dir).free
    if free < need:
        needed, left = _mebibytes(need, free)
        raise TranslatorError(
            f"not enough free space for checkpoints: {needed} MiB needed (about "
            f"{size / 2**20:,.0f} MiB each), {left} MiB free",
            str(run_dir),
            "free some space, lower train.keep_last, or use another train.run_dir",
        )


def _mebibytes(need: int, free: int) -> tuple[str, str]:
    """`need` > `free` bytes in MiB with the fewest decimals that tell them apart (never "1 MiB
    needed, 1 MiB free")."""
    for decimals in range(8):  # 7 decimals of a MiB resolve one byte
        pair = f"{need / 2**20:,.{decimals}f}", f"{free / 2**20:,.{decimals}f}"
        if pair[0] != pair[1]:
            break
    return pair


# run directory -> the descriptor of its .lock, open (so locked) until this process ends: a later
# run in the same process (the recipe's, a test's) finds the lock its own
_LOCKS: dict[Path, int] = {}


def claim_run_dir(run_dir: Path) -> list[str]:
    """Lock run_dir for this process's life, then remove the temporary files that killed saves
    (or a killed `eval -o` there) left; returns the lines to log about it. A second trainer is
    refused, naming the process that holds the lock. Rank 0's job: only it writes there."""
    lines = []
    if not _lock(run_dir):
        lines.append(
            f"{run_dir}'s file system has no file locks: a second trainer started there would "
            "not be refused"
        )
    removed = sweep_dead_temps(run_dir)
    if removed:
        lines.append(f"removed {removed} temporary files of saves that were cut short")
    return lines


def _lock(run_dir: Path) -> bool:
    """An exclusive flock on run_dir/.lock (False: the file system has none). The kernel drops it
    when the process ends, however it ends; on NFS, Linux takes it as a lock on the server, which
    other hosts see."""
    if run_dir.resolve() in _LOCKS:
        return True
    fd = open_own(run_dir / ".lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "its pid not yet written"
        os.close(fd)
        if err.errno not in (errno.EWOULDBLOCK, errno.EACCES):  # ENOLCK: an NFS without lockd
            return False
        raise TranslatorError(
            f"another `translator train` is running in it ({holder})",
            str(run_dir),
            "wait for it to end (or stop it), or use another train.run_dir",
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
    _LOCKS[run_dir.resolve()] = fd
    return True


def _link(src: Path, dst: Path) -> None:
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.link.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)
    except OSError:  # a file system without hard links
        shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def restore_best(run_dir: Path, best_step: int) -> str | None:
    """On a resume: best.pt must hold update `best_step` (last.pt's record), which a kill between
    last.pt's rename and best.pt's link leaves undone. Re-linked from last.pt or step-N.pt when one
    holds it; returns what was done, or that best.pt stays stale; None when it is right (or the
    checkpoint predates the record)."""
    best = run_dir / "best.pt"
    held = checkpoint.saved_update(best)
    if best_step < 0 or held == best_step:
        return None
    was = "missing" if held is None else f"holding update {held}"
    for source in (run_dir / "last.pt", run_dir / f"step-{best_step}.pt"):
        if checkpoint.saved_update(source) == best_step:
            _link(source, best)
            return (
                f"best.pt was {was}, not update {best_step}'s (a save was cut short): linked "
                f"to {source.name} again"
            )
    return (
        f"best.pt is {was}, not update {best_step}'s, the best validation, whose checkpoint is "
        "gone; it stays so until a validation beats that BLEU"
    )


def refuse_earlier_checkpoints(run_dir: Path) -> None:
    """A run_dir without last.pt but with step-N.pt or best.pt holds an earlier run: a fresh start
    there would prune its step files, overwrite its best.pt and mix its logs with the new run's."""
    found = [p.name for p in [*checkpoint.step_files(run_dir), run_dir / "best.pt"] if p.is_file()]
    if found:
        raise TranslatorError(
            f"holds an earlier run's checkpoints ({', '.join(found)}) but no last.pt to resume",
            str(run_dir),
            "use another train.run_dir, or remove the old checkpoints to start over there",
        )
