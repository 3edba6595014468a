"""The versions of what is installed and of the code that runs, as manifests, checkpoints and
benchmark pages record them."""

from __future__ import annotations

import platform
import subprocess
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from translator import __version__

PACKAGE_ROOT = Path(__file__).resolve().parents[1]


def installed(*packages: str) -> dict[str, str]:
    """translator's and Python's versions, then those of `packages` that are installed."""
    found = {"translator": __version__, "python": platform.python_version()}
    for package in packages:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    return found


def git_state() -> dict[str, Any]:
    """Commit and dirtiness of the code that runs, or None outside a git checkout of it.

    An installed copy (site-packages) has no .git beside it: git would find the repository of
    whatever project holds the environment, and name its commit as ours."""

    def git(*args: str) -> str | None:
        if not (PACKAGE_ROOT / ".git").exists():  # a directory, or a worktree's file
            return None
        try:
            done = subprocess.run(
                ["git", *args], cwd=PACKAGE_ROOT, capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=normal") if commit else None
    if status is None:
        return {"commit": commit, "dirty": None}
    # changes to tracked files anywhere, and new files where the code and configs live (an
    # uncommitted module runs too); not other untracked files (notes, scratch)
    changes = [
        line
        for line in status.splitlines()
        if not line.startswith("??") or line[3:].startswith(("translator/", "configs/"))
    ]
    return {"commit": commit, "dirty": bool(changes)}


@cache
def made_by() -> dict[str, Any]:
    """What a checkpoint records of the code that wrote it: translator's version and, in a git
    checkout, its commit. Asked once a process: the code that runs is the code it imported."""
    return {"translator": __version__, **git_state()}
