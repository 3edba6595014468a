"""Checkpoint averaging (`translator average`): the mean of the parameters of checkpoints of one
run, as fairseq's average_checkpoints does; also the recipe's last step."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import torch

from translator.checkpoint import read, refuse_replacing_another_kind, seal, step_files
from translator.config import architecture_changes
from translator.errors import TranslatorError, counted
from translator.files import atomic_write
from translator.versions import made_by


def latest_steps(run_dir: str | Path, count: int) -> list[Path]:
    """The newest `count` step checkpoints of a run directory, for `average --last N`."""
    if not Path(run_dir).is_dir():
        raise TranslatorError(
            "not a directory: --last takes a run directory", str(run_dir), "give its run_dir"
        )
    found = step_files(run_dir)
    if len(found) < count:
        raise TranslatorError(
            f"{counted(len(found), 'step checkpoint')} found, {count} asked for",
            str(run_dir),
            "train with train.keep_last >= N, or average fewer",
        )
    return found[len(found) - count :]


def _refuse_duplicates(paths: list[str | Path]) -> None:
    """One file given twice, or as two names (best.pt and last.pt are hard links of a step-N.pt),
    would count twice in the mean: refused, as os.path.samefile compares them (device and inode)."""
    seen: dict[tuple[int, int], int] = {}  # file -> its first position in paths
    for i, path in enumerate(paths):
        try:
            stat = os.stat(path)
        except OSError:  # read() says what is wrong with it
            continue
        first = seen.setdefault((stat.st_dev, stat.st_ino), i)
        if first != i:
            raise TranslatorError(
                f"is the same checkpoint as {paths[first]} (given twice, or a hard link of it)",
                str(path),
                "give each checkpoint once",
            )


def average(
    paths: list[str | Path], out: str | Path, progress: Callable[[int, int], None] | None = None
) -> int:
    """Average the parameters of checkpoints of one architecture into `out` (optimizer state
    dropped); `progress(read, total)` after each checkpoint read.

    Sums in float64, so averaging identical checkpoints gives them back bit for bit; integer
    tensors are taken from the first checkpoint; tied weights stay one shared tensor.
    """
    if not paths:
        raise TranslatorError("no checkpoints to average", "average", "give one or more .pt files")
    if any(Path(out).resolve() == Path(path).resolve() for path in paths):
        raise TranslatorError(
            "is one of the checkpoints it averages", str(out), "write the average to a new file"
        )
    _refuse_duplicates(paths)
    refuse_replacing_another_kind(out)
    # opened first: an output that cannot be written fails before minutes of reading
    with atomic_write(out, "wb") as handle:
        torch.save(seal(_mean(paths, progress or (lambda done, total: None))), handle)
    return len(paths)


def _mean(paths: list[str | Path], progress: Callable[[int, int], None]) -> dict:
    """The first checkpoint's payload with the mean of all their weights."""
    first = read(paths[0])
    progress(1, len(paths))
    weights = first["model"]
    direction = _direction(first)
    total = {k: v.double() for k, v in weights.items() if v.is_floating_point()}
    for done, path in enumerate(paths[1:], start=2):
        payload = read(path)
        diff = architecture_changes(first["config"]["model"], payload["config"]["model"])
        if diff or payload["model"].keys() != weights.keys():
            raise TranslatorError(
                f"architecture differs from the first checkpoint ({diff or 'parameter names'})",
                str(path),
                "average checkpoints of one training run",
            )
        if _direction(payload) != direction:  # a joint vocabulary serves both directions
            raise TranslatorError(
                f"it translates {_direction(payload)}, the first checkpoint {direction}",
                str(path),
                "average checkpoints of one training run",
            )
        if payload["tokenizer"]["sha256"] != first["tokenizer"]["sha256"]:
            raise TranslatorError(
                "tokenizer differs from the first checkpoint",
                str(path),
                "average checkpoints of one training run",
            )
        for key in total:
            total[key] += payload["model"][key].double()
        progress(done, len(paths))
    shared: dict[tuple, torch.Tensor] = {}  # a tensor of the first checkpoint -> its average
    for key, value in weights.items():
        if key in total:
            same = (value.data_ptr(), value.shape, value.stride())  # tied keys are one tensor
            if same not in shared:
                shared[same] = (total[key] / len(paths)).to(value.dtype)
            weights[key] = shared[same]
    first["state"] = {"averaged": [str(p) for p in paths]}
    first["made_by"] = made_by()
    return first


def _direction(payload: dict) -> str:
    data = payload["config"]["data"]
    return f"{data['src_lang']}->{data['tgt_lang']}"
