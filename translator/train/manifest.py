"""`run_dir/manifest.json`: what a run was made from (code, data, seeds, versions) and its
wall-clock.

Each session (the first start and every resume) appends an entry, with the resolved config it
trained with (config.yaml holds the latest session's only) and, on a resume, the settings changed
since last.pt was saved; the file is rewritten atomically at the start and at the end of a session.
"""

from __future__ import annotations

import json
import platform
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import torch

from translator.config import to_dict
from translator.data.tokenizer import sha256_file
from translator.files import atomic_write
from translator.prepared import load_manifest, prepared_dir
from translator.versions import git_state, installed


def data_checksums(cfg_data, vocab_from: str | None = None) -> dict[str, Any]:
    """The prepared files' sha256 as recorded by prepare (re-hashing ~1 GB at WMT scale costs
    seconds)."""
    folder = prepared_dir(cfg_data)
    prepared = load_manifest(cfg_data, vocab_from)
    files = prepared.get("files")
    if files is None:  # prepared by an older version: hash the files now
        # *.model: spm.model, or spm.src.model and spm.tgt.model with separate vocabularies
        paths = sorted(folder.glob("*.npy")) + sorted(folder.glob("*.model"))
        files = {path.name: sha256_file(path) for path in paths}
    return {
        "dir": str(folder),
        "config_hash": prepared.get("config_hash"),
        "pairs": prepared.get("pairs"),
        "sha256": files,
        # SentencePiece's threads when it trained the vocabulary (its result depends on them);
        # None: the checkpoint's vocabulary, or data prepared before the count was recorded
        "spm_threads": prepared.get("spm_threads"),
    }


def versions() -> dict[str, str]:
    import torch

    packages = installed("torch", "numpy", "sentencepiece", "sacrebleu")
    return {**packages, "cuda": str(torch.version.cuda)}


class RunManifest:
    """The manifest of one run directory, with this session appended."""

    def __init__(
        self,
        run_dir: Path,
        cfg,
        world_size: int,
        start_step: int,
        vocab_from: str | None = None,
        changed: dict[str, tuple] | None = None,
    ) -> None:
        """changed: a resume's settings changed since last.pt -> (old, new); None: a fresh
        start."""
        self.path = run_dir / "manifest.json"
        self.data = read_record(self.path)
        if changed is None:  # a fresh start: what earlier sessions trained here is not built on
            for earlier in self.data["sessions"]:
                earlier["discarded"] = True
        self.started = time.time()
        self.session = {
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "ended": None,
            "seconds": 0.0,
            "command": command_line(),
            "host": platform.node(),
            "git": git_state(),
            "versions": versions(),
            "world_size": world_size,
            # a float sum's order follows the thread count: the same seed and data give the same
            # weights only with the same count (each process's)
            "threads": torch.get_num_threads(),
            "seeds": {
                "train": cfg.train.seed,
                "per_rank": [cfg.train.seed + r for r in range(world_size)],
            },
            "data": data_checksums(cfg.data, vocab_from),
            "init_from": cfg.train.init_from or None,
            "config": to_dict(cfg),
            "changed": None if changed is None else {k: list(v) for k, v in changed.items()},
            "first_update": start_step,
            "last_update": start_step,
            "end_reason": None,
        }
        self.data["sessions"].append(self.session)
        self.write()

    def saved(self, step: int, saved_step: int) -> None:
        """After a checkpoint: the session so far, as a SIGKILL would leave it (end_reason None)."""
        self.session.update(
            seconds=round(time.time() - self.started, 1),
            last_update=step,
            saved_update=saved_step,
        )
        self.write()

    def finish(self, step: int, reason: str, saved_step: int, error: str | None = None) -> None:
        """last_update: the last update trained; saved_update: the one last.pt holds (less if a save
        failed); error: the message of the error that ended the run."""
        self.session.update(
            ended=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            seconds=round(time.time() - self.started, 1),
            last_update=step,
            saved_update=saved_step,
            end_reason=reason,
        )
        if error is not None:
            self.session["error"] = error
        self.write()

    def write(self) -> None:
        self.data["wall_seconds"] = round(
            sum(s.get("seconds", 0) for s in self.data["sessions"] if not s.get("discarded")), 1
        )
        with atomic_write(self.path, follow_link=False) as handle:
            handle.write(json.dumps(self.data, indent=2) + "\n")


def read_record(path: Path) -> dict:
    """The sessions recorded so far; a damaged file (truncated, edited) is kept aside as
    manifest.json.damaged, with one warning, and a new record starts. Why not refuse: it is a
    record of what ran, not state that training needs, and a long run should not stop over it."""
    if not path.is_file():
        return {"sessions": []}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict) and isinstance(data.get("sessions"), list):
            return data
        problem = "no list of sessions"
    except (ValueError, UnicodeDecodeError) as err:  # JSONDecodeError is a ValueError
        problem = str(err)
    aside = path.with_name(path.name + ".damaged")
    path.replace(aside)
    print(
        f"warning: {path}: damaged ({problem}); kept as {aside.name}, starting a new record",
        file=sys.stderr,
    )
    return {"sessions": []}


def command_line() -> str:
    """The command that started this process, as one can type it again: `python -m MODULE` for
    a module run as a program (translator, or translator.recipe, whose members train in it);
    torchrun runs the package's __main__.py."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name:
        program = f"python -m {spec.name.removesuffix('.__main__')}"
    else:
        name = Path(sys.argv[0]).name
        program = "python -m translator" if name == "__main__.py" else name
    return " ".join([program, *map(shlex.quote, sys.argv[1:])])
