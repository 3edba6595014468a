"""The recipe's training: its models side by side, within what is left of the budget."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import sys
from pathlib import Path
from typing import Any

import torch
import typer

from translator.config import Config
from translator.device import resolve_device, resolve_dtype
from translator.errors import TranslatorError
from translator.train import loop

FINISHED = ("max_minutes", "max_updates", "max_epochs", "early stopping")  # not run again


def train_sessions(run_dir: Path) -> list[dict[str, Any]]:
    """The training sessions in run_dir/manifest.json (train/manifest.py); [] before any."""
    path = run_dir / "manifest.json"
    return json.loads(path.read_text())["sessions"] if path.is_file() else []


def training_code(run_dirs: list[Path]) -> list[dict[str, Any]]:
    """The code (commit, dirty) of every training session the runs kept, each state once."""
    states = []
    for run_dir in run_dirs:
        for session in train_sessions(run_dir):
            if not session.get("discarded") and session.get("git") not in states:
                states.append(session.get("git"))
    return states


def training_minutes(run_dir: Path, budget_minutes: float) -> float:
    """Minutes left to train: the budget less the sessions trained; 0 once a session finished."""
    sessions = [s for s in train_sessions(run_dir) if not s.get("discarded")]  # before a restart
    if sessions and sessions[-1]["end_reason"] in FINISHED:
        return 0.0
    return budget_minutes - sum(s["seconds"] for s in sessions) / 60


def trains_in_fp32(cfg: Config) -> bool:
    """Does the training resolve to plain fp32 here: train.precision fp32, or auto on a CPU
    without native bf16 (train/precision.py's rule)?"""
    device = resolve_device(cfg.train.device, "train.device")
    return resolve_dtype(cfg.train.precision, device) == torch.float32


def member_configs(cfg: Config, members: int) -> list[Config]:
    """The recipe's one config, or one per ensemble member: run_dir/member-i, seed + i - 1
    (modulo 2**32)."""
    if members == 1:
        return [cfg]
    return [
        dataclasses.replace(
            cfg,
            train=dataclasses.replace(
                cfg.train,
                run_dir=str(Path(cfg.train.run_dir) / f"member-{i}"),
                seed=(cfg.train.seed + i - 1) % 2**32,  # within train.seed's range
            ),
        )
        for i in range(1, members + 1)
    ]


def channel_config(cfg: Config, channel: Config) -> Config:
    """The reverse direction's config, trained in run_dir/channel; refused unless it is one."""
    if (channel.data.src_lang, channel.data.tgt_lang) != (cfg.data.tgt_lang, cfg.data.src_lang):
        raise TranslatorError(
            f"the channel model translates {channel.data.src_lang}->{channel.data.tgt_lang}, "
            f"not {cfg.data.tgt_lang}->{cfg.data.src_lang}",
            "--channel",
            "give the config of the reverse direction",
        )
    run_dir = str(Path(cfg.train.run_dir) / "channel")
    return dataclasses.replace(channel, train=dataclasses.replace(channel.train, run_dir=run_dir))


def train_members(configs: list[Config], budget_minutes: float, quiet: bool) -> None:
    """Train each config for the rest of its budget; several at once in their own processes.

    Two processes of one thread each do more work on two cores than one process of two threads
    (docs/experiments.md), which is what makes an ensemble worth its budget on a small CPU.
    """
    todo = []  # the configs with budget left, given the whole budget as max_minutes: the loop
    for c in configs:  # counts the training seconds of earlier sessions itself (state.seconds)
        if training_minutes(Path(c.train.run_dir), budget_minutes) > 0:
            c.train.max_minutes = budget_minutes
            todo.append(c)
    if len(configs) == 1:
        if todo:
            loop.run(todo[0], quiet=quiet)
        return
    threads = max(1, torch.get_num_threads() // len(configs))
    spawn = multiprocessing.get_context("spawn")  # no fork of a process holding torch threads
    processes = [
        spawn.Process(target=train_member, args=(c, threads, quiet or i > 0))
        for i, c in enumerate(todo)  # only the first shows progress
    ]
    for process in processes:
        process.start()
    try:
        for process in processes:
            process.join()
    except BaseException:  # Ctrl-C, or a SIGTERM sent to the recipe alone: stop the members too
        for process in processes:
            process.terminate()  # SIGTERM: each saves last.pt and exits, as `translator train`
        for process in processes:
            process.join()
        raise
    failed = [c.train.run_dir for c, p in zip(todo, processes) if p.exitcode != 0]
    if failed:
        raise TranslatorError(
            f"training of {len(failed)} ensemble member(s) failed",
            ", ".join(failed),
            "see their train.log; run the recipe again to resume",
        )


def train_member(cfg: Config, threads: int, quiet: bool) -> None:
    """One ensemble member's training, in its own process."""
    torch.set_num_threads(threads)
    try:
        loop.run(cfg, quiet=quiet)
    except TranslatorError as err:
        typer.echo(f"error: {err}", err=True)
        sys.exit(1)
