"""What a finished recipe leaves in its run directory: scores.txt and recipe.json."""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

import torch

from translator.bleu import Scores
from translator.config import Config
from translator.data.corpus import source_files
from translator.data.tokenizer import sha256_file
from translator.device import cpu_name, cpu_native_bf16
from translator.files import atomic_write
from translator.recipe.choose import Chosen, described
from translator.recipe.members import train_sessions
from translator.train.manifest import data_checksums

MANIFEST = "recipe.json"  # written last: its presence marks a finished recipe


def command_line() -> str:
    """How this process was started: `python -m translator.recipe` (or the script) and its args."""
    script = Path(sys.argv[0])  # translator/recipe/__main__.py under `python -m`
    started = "python -m translator.recipe" if script.parent.name == "recipe" else script.name
    return " ".join([started, *sys.argv[1:]])


def budget_record(
    run_dirs: list[Path], budget_minutes: float, reserve_minutes: float, average_s: float
) -> dict[str, Any]:
    """The manifest's `budget` (what it allowed, what was used) and `training` (its sessions).

    Ensemble members (and a channel model, last) train side by side: the longest one is what the
    budget used; `training` describes the first member's sessions, and `member_updates` each
    one's last update.
    """
    trained = max(round(sum(s["seconds"] for s in train_sessions(d)), 1) for d in run_dirs)
    sessions = train_sessions(run_dirs[0])
    members = {}
    if len(run_dirs) > 1:
        members = {"member_updates": [train_sessions(d)[-1]["last_update"] for d in run_dirs]}
    return {
        "budget": {
            "minutes": budget_minutes,
            "reserve_minutes": reserve_minutes,
            "used_seconds": round(trained + average_s, 1),
            "within": trained + average_s <= 60 * budget_minutes,
        },
        "training": {
            "seconds": trained,
            "sessions": len(sessions),
            "last_update": sessions[-1]["last_update"],
            "end_reason": sessions[-1]["end_reason"],
            **members,
        },
    }


def data_files(cfg: Config) -> dict[str, Any]:
    """sha256 of the local source files of each split, and of the prepared files (prepare's)."""
    sources = {
        split: {str(path): sha256_file(path) for path in source_files(cfg.data, split)}
        for split in ("train", "valid", "test")
    }
    return {"source": cfg.data.source, "files": sources, "prepared": data_checksums(cfg.data)}


def hardware() -> dict[str, Any]:
    """CPU model and cores, native bf16, GPU (if any), torch build and threads."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cpu": cpu_name(),
        "cores": cores,
        "cpu_native_bf16": cpu_native_bf16(),
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(),
    }


def write_results(
    run_dir: Path,
    manifest: dict[str, Any],
    valid: dict[str, Scores],
    chosen: Chosen,
    test: Scores | None,
) -> None:
    """scores.txt (what eval prints, for each checkpoint scored) and recipe.json, atomically."""
    lines = [f"valid, {name}:\n  " + "\n  ".join(s.lines()) for name, s in valid.items()]
    if test:
        lines.append(
            f"test, {described(chosen)} (the better on valid):\n  " + "\n  ".join(test.lines())
        )
    with atomic_write(run_dir / "scores.txt", follow_link=False) as handle:
        handle.write("\n".join(lines) + "\n")
    # last: its presence marks a finished recipe
    with atomic_write(run_dir / MANIFEST, follow_link=False) as handle:
        handle.write(json.dumps(manifest, indent=2) + "\n")
