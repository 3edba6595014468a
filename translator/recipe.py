"""`python -m translator.recipe` (`make multi30k`): one results row, end to end, with its manifest.

Prepare; train within a wall-clock budget; average the newest checkpoints; pick the average or
best.pt by valid BLEU; score the test split once (sacreBLEU, chrF and lowercased tokenized BLEU).
Everything lands in train.run_dir: avg.pt, the hypotheses, scores.txt, and recipe.json (commit,
data sha256s, the resolved config, seed, sacreBLEU signatures, hardware, each stage's wall-clock).

The budget counts what the results table calls training time: the training sessions (validations
and saves included) and the averaging; preparing and scoring are not counted. A rerun after an
interrupted training goes on with the rest of the budget; a finished recipe is not run over,
except that a choosing run (`--valid-only`) that is taken has its test split scored, once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import multiprocessing
import os
import platform
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Optional

import torch
import typer

from translator import checkpoint, config, evaluate, prepare
from translator.cli import run_command
from translator.config import Config
from translator.data.corpus import source_files
from translator.data.tokenizer import sha256_file
from translator.device import cpu_name, cpu_native_bf16
from translator.errors import TranslatorError
from translator.files import atomic_write
from translator.train import loop
from translator.train.manifest import data_checksums, git_state, versions

MANIFEST = "recipe.json"
# the channel model's weights tried on valid (translator/rerank.py); the plain search competes too
CHANNEL_WEIGHTS = (0.1, 0.2, 0.3, 0.5)
Chosen = str | list[str] | dict[str, Any]  # a checkpoint, an ensemble's, or either with a channel
FINISHED = ("max_minutes", "max_updates", "max_epochs", "early stopping")  # not run again


def run(
    cfg: Config,
    budget_minutes: float,
    average_last: int,
    reserve_minutes: float = 1.0,
    quiet: bool = False,
    score_test: bool = True,
    members: int = 1,
    channel: Config | None = None,
) -> dict[str, Any]:
    """The recipe; returns the manifest it writes to run_dir/recipe.json.

    Training gets `budget_minutes - reserve_minutes` (less the sessions already trained): the
    reserve covers the validation and save after the time limit, and the averaging. Without
    `score_test` (runs that make a choice), the test split is not looked at; a finished choosing
    run, run again with it, has the checkpoint it chose scored on test and trains nothing.

    members > 1: an ensemble. That many models (seeds seed, seed + 1, ...) train at the same time
    in run_dir/member-1, member-2, ..., the CPU threads split between them, within the same
    budget; each keeps its average or best.pt by valid BLEU, and the ensemble of those is scored.

    channel: the reverse direction's config. A model of it trains beside the others in
    run_dir/channel, within the same budget, and the translations are chosen from an n-best by
    adding its score of the source (noisy-channel reranking, translator/rerank.py), with the
    weight chosen on valid.
    """
    run_dir = Path(cfg.train.run_dir)
    if score_test and (run_dir / MANIFEST).is_file():
        return score_chosen_on_test(run_dir, quiet)
    check_start(run_dir, cfg, average_last, budget_minutes, reserve_minutes)
    code = git_state()  # the code that runs: the checkout may move on during an hour-long recipe
    seconds: dict[str, float] = {}
    with stage(seconds, "prepare"):
        prepare.run(cfg, quiet=quiet)
        if channel is not None:
            channel = channel_config(cfg, channel)
            prepare.run(channel, quiet=quiet)
    configs = member_configs(cfg, members)
    member_dirs = [Path(c.train.run_dir) for c in configs]  # [run_dir] for one model
    channel_dirs = [] if channel is None else [Path(channel.train.run_dir)]
    with stage(seconds, "train"):
        train_members(
            configs + ([channel] if channel else []), budget_minutes - reserve_minutes, quiet
        )
    for member_dir in member_dirs + channel_dirs:
        if training_minutes(member_dir, budget_minutes - reserve_minutes) > 0:  # stopped early
            raise TranslatorError(
                "training stopped before its budget was spent (interrupted?)",
                str(member_dir / "manifest.json"),
                "run the recipe again: it resumes with the rest of the budget",
            )
    with stage(seconds, "average"):
        averaged = {}  # per run directory, the step checkpoints in its avg.pt
        for member_dir in member_dirs + channel_dirs:
            averaged[member_dir] = checkpoint.step_files(member_dir)[-average_last:]
            checkpoint.average(averaged[member_dir], member_dir / "avg.pt")
    if channel is not None:
        valid, chosen, test = rerank_on_valid(
            run_dir, member_dirs, channel_dirs[0], seconds, quiet, score_test
        )
    elif members == 1:
        valid, chosen, test = choose_on_valid(run_dir, seconds, quiet, score_test)
    else:
        valid, chosen, test = ensemble_on_valid(run_dir, member_dirs, seconds, quiet, score_test)
    manifest = {
        "command": command_line(),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "git": code,
        "data": data_files(cfg),
        # as trained (vocabulary sizes filled in, the last session's max_minutes)
        "config": checkpoint.read(run_dir / first(chosen))["config"],
        "seed": cfg.train.seed,
        "members": members,
        "hardware": hardware(),
        "versions": versions(),
        **budget_record(
            member_dirs + channel_dirs, budget_minutes, reserve_minutes, seconds["average"]
        ),
        "averaged": [p.name for p in averaged[member_dirs[0]]],  # the first member's
        "valid": {name: dataclasses.asdict(s) for name, s in valid.items()},
        "chosen": chosen,
        "test": dataclasses.asdict(test) if test else None,
        "stage_seconds": seconds,
    }
    write_results(run_dir, manifest, valid, chosen, test)
    return manifest


def first(chosen: Chosen) -> str:
    """The chosen checkpoint, or an ensemble's first member's."""
    if isinstance(chosen, dict):
        chosen = chosen["checkpoints"]
    return chosen[0] if isinstance(chosen, list) else chosen


def described(chosen: Chosen) -> str:
    """The chosen checkpoint(s), as scores.txt names them."""
    if isinstance(chosen, dict):
        checkpoints = described(chosen["checkpoints"])
        return f"{checkpoints} reranked by {chosen['channel']}, weight {chosen['channel_weight']}"
    return " + ".join(chosen) if isinstance(chosen, list) else chosen


def score_chosen_on_test(run_dir: Path, quiet: bool) -> dict[str, Any]:
    """A finished choosing run, taken: its chosen checkpoint on test, added to recipe.json."""
    manifest = json.loads((run_dir / MANIFEST).read_text())
    if manifest["test"] is not None:
        raise finished_already(run_dir, "test scored")
    seconds = manifest["stage_seconds"]
    with stage(seconds, "eval_test"):
        test = score(run_dir, manifest["chosen"], "test", quiet)
    manifest["test"] = dataclasses.asdict(test)
    # the training above was made by manifest["command"] at manifest["git"]; the test score by:
    manifest["test_scored"] = {
        "command": command_line(),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "git": git_state(),
    }
    valid = {name: evaluate.Scores(**scores) for name, scores in manifest["valid"].items()}
    write_results(run_dir, manifest, valid, manifest["chosen"], test)
    return manifest


def command_line() -> str:
    """How this process was started: `python -m translator.recipe` (or the script) and its args."""
    name = Path(sys.argv[0]).name
    return " ".join(["python -m translator.recipe" if name == "recipe.py" else name, *sys.argv[1:]])


def finished_already(run_dir: Path, detail: str) -> TranslatorError:
    """The one-line refusal to run a finished recipe's run directory over."""
    return TranslatorError(
        f"this recipe has finished already, {detail}",
        str(run_dir / MANIFEST),
        "move the run directory away (or set another train.run_dir) to run it again",
    )


def check_start(
    run_dir: Path, cfg: Config, average_last: int, budget_minutes: float, reserve_minutes: float
) -> None:
    """Refuse a finished recipe's run directory, keep_last too small to average, and a budget
    with no training time left after the reserve."""
    if (run_dir / MANIFEST).is_file():
        raise finished_already(run_dir, "a choosing run is scored on test without --valid-only")
    if cfg.train.keep_last < average_last:
        raise TranslatorError(
            f"--average {average_last} needs that many step checkpoints kept",
            "train.keep_last",
            f"set train.keep_last to at least {average_last}",
        )
    if budget_minutes <= reserve_minutes:  # else nothing trains, and averaging finds nothing
        raise TranslatorError(
            f"the budget ({budget_minutes:g} min) must exceed the reserve ({reserve_minutes:g} "
            "min), or nothing trains",
            "--budget",
            f"give a --budget above {reserve_minutes:g}, or a smaller --reserve",
        )


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


@contextlib.contextmanager
def stage(seconds: dict[str, float], name: str) -> Iterator[None]:
    """Time the block into seconds[name] (rounded to 0.1 s)."""
    began = time.time()
    yield
    seconds[name] = round(time.time() - began, 1)


def train_sessions(run_dir: Path) -> list[dict[str, Any]]:
    """The training sessions in run_dir/manifest.json (train/manifest.py); [] before any."""
    path = run_dir / "manifest.json"
    return json.loads(path.read_text())["sessions"] if path.is_file() else []


def training_minutes(run_dir: Path, budget_minutes: float) -> float:
    """Minutes left to train: the budget less the sessions trained; 0 once a session finished."""
    sessions = train_sessions(run_dir)
    if sessions and sessions[-1]["end_reason"] in FINISHED:
        return 0.0
    return budget_minutes - sum(s["seconds"] for s in sessions) / 60


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


def member_configs(cfg: Config, members: int) -> list[Config]:
    """The recipe's one config, or one per ensemble member: run_dir/member-i, seed + i - 1."""
    if members == 1:
        return [cfg]
    return [
        dataclasses.replace(
            cfg,
            train=dataclasses.replace(
                cfg.train,
                run_dir=str(Path(cfg.train.run_dir) / f"member-{i}"),
                seed=cfg.train.seed + i - 1,
            ),
        )
        for i in range(1, members + 1)
    ]


def train_members(configs: list[Config], budget_minutes: float, quiet: bool) -> None:
    """Train each config for the rest of its budget; several at once in their own processes.

    Two processes of one thread each do more work on two cores than one process of two threads
    (docs/experiments.md), which is what makes an ensemble worth its budget on a small CPU.
    """
    todo = []  # the configs with budget left, given its rest as max_minutes
    for c in configs:
        if (minutes := training_minutes(Path(c.train.run_dir), budget_minutes)) > 0:
            c.train.max_minutes = minutes
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
    for process in processes:
        process.join()
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


def ensemble_on_valid(
    run_dir: Path,
    member_dirs: list[Path],
    seconds: dict[str, float],
    quiet: bool,
    score_test: bool = True,
) -> tuple[dict[str, evaluate.Scores], list[str], evaluate.Scores | None]:
    """Each member keeps avg.pt or best.pt by valid BLEU; the ensemble of those on valid (and,
    only it, on test)."""
    valid: dict[str, evaluate.Scores] = {}
    chosen = []
    with stage(seconds, "eval_valid"):
        for name in (d.name for d in member_dirs):
            scores = {
                f"{name}/{ckpt}": score(run_dir, f"{name}/{ckpt}", "valid", quiet)
                for ckpt in ("avg.pt", "best.pt")
            }
            valid |= scores
            chosen.append(max(scores, key=lambda n: scores[n].bleu))
        valid["ensemble"] = score(run_dir, chosen, "valid", quiet)
    if not score_test:
        return valid, chosen, None
    with stage(seconds, "eval_test"):
        test = score(run_dir, chosen, "test", quiet)
    return valid, chosen, test


def rerank_on_valid(
    run_dir: Path,
    member_dirs: list[Path],
    channel_dir: Path,
    seconds: dict[str, float],
    quiet: bool,
    score_test: bool = True,
) -> tuple[dict[str, evaluate.Scores], Chosen, evaluate.Scores | None]:
    """The direct model(s) keep their checkpoints as without a channel; the channel model keeps
    avg.pt or best.pt by its own valid BLEU; then each of CHANNEL_WEIGHTS reranks the direct
    search's n-best on valid, and the best of those and of the plain search (only it) is scored
    on test."""
    if len(member_dirs) == 1:
        valid, direct, _ = choose_on_valid(run_dir, seconds, quiet, score_test=False)
    else:
        valid, direct, _ = ensemble_on_valid(run_dir, member_dirs, seconds, quiet, False)
    plain = valid["ensemble" if isinstance(direct, list) else direct]
    with stage(seconds, "eval_valid_channel"):
        channel_valid = {
            f"{channel_dir.name}/{ckpt}": score(
                run_dir, f"{channel_dir.name}/{ckpt}", "valid", quiet
            )
            for ckpt in ("avg.pt", "best.pt")
        }
        valid |= channel_valid
        channel = max(channel_valid, key=lambda n: channel_valid[n].bleu)
        reranked = {}
        for weight in CHANNEL_WEIGHTS:
            option = {"checkpoints": direct, "channel": channel, "channel_weight": weight}
            valid[described(option)] = score(run_dir, option, "valid", quiet)
            reranked[described(option)] = option
    best = max(reranked, key=lambda n: valid[n].bleu)
    chosen = reranked[best] if valid[best].bleu > plain.bleu else direct
    if not score_test:
        return valid, chosen, None
    with stage(seconds, "eval_test"):
        test = score(run_dir, chosen, "test", quiet)
    return valid, chosen, test


def choose_on_valid(
    run_dir: Path, seconds: dict[str, float], quiet: bool, score_test: bool = True
) -> tuple[dict[str, evaluate.Scores], str, evaluate.Scores | None]:
    """Score avg.pt and best.pt on valid; the better one (avg.pt on a tie), and only it, on test."""
    with stage(seconds, "eval_valid"):
        valid = {name: score(run_dir, name, "valid", quiet) for name in ("avg.pt", "best.pt")}
    chosen = max(valid, key=lambda name: valid[name].bleu)
    if not score_test:
        return valid, chosen, None
    with stage(seconds, "eval_test"):
        test = score(run_dir, chosen, "test", quiet)
    return valid, chosen, test


def score(run_dir: Path, chosen: Chosen, split: str, quiet: bool) -> evaluate.Scores:
    """`translator eval CKPT --split SPLIT --lc-tok`, hypotheses to run_dir/SPLIT.CKPT-STEM.hyp
    (a member's beside it, SPLIT.ensemble.hyp for a list of checkpoints: the ensemble); with a
    channel model `... --channel C --channel-weight W`, to SPLIT.CKPT-STEM.channel-W.hyp."""
    channel, weight, suffix = None, None, ""
    if isinstance(chosen, dict):
        channel, weight = run_dir / chosen["channel"], chosen["channel_weight"]
        chosen, suffix = chosen["checkpoints"], f".channel-{weight}"
    if isinstance(chosen, list):
        ckpts, hyp_file = [run_dir / n for n in chosen], run_dir / f"{split}.ensemble{suffix}.hyp"
    else:
        ckpts = run_dir / chosen
        hyp_file = ckpts.parent / f"{split}.{ckpts.stem}{suffix}.hyp"
    return evaluate.run(
        ckpts,
        split=split,
        hyp_file=hyp_file,
        lc_tok=True,
        channel=channel,
        channel_weight=weight,
        quiet=quiet,
    )


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
    valid: dict[str, evaluate.Scores],
    chosen: Chosen,
    test: evaluate.Scores | None,
) -> None:
    """scores.txt (what eval prints, for each checkpoint scored) and recipe.json, atomically."""
    lines = [f"valid, {name}:\n  " + "\n  ".join(s.lines()) for name, s in valid.items()]
    if test:
        lines.append(
            f"test, {described(chosen)} (the better on valid):\n  " + "\n  ".join(test.lines())
        )
    with atomic_write(run_dir / "scores.txt") as handle:
        handle.write("\n".join(lines) + "\n")
    with atomic_write(run_dir / MANIFEST) as handle:  # last: its presence marks a finished recipe
        handle.write(json.dumps(manifest, indent=2) + "\n")


app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.command()
def main(
    config_path: Annotated[Path, typer.Argument(metavar="CONFIG", help="YAML config.")],
    budget: Annotated[
        float, typer.Option("--budget", min=0.1, help="Minutes of training and averaging.")
    ],
    average: Annotated[int, typer.Option("--average", min=1, help="Checkpoints to average.")],
    reserve: Annotated[
        float,
        typer.Option("--reserve", min=0, help="Minutes of the budget kept for the last steps."),
    ] = 1.0,
    data: Annotated[Optional[str], typer.Option("--data", help="Data source (as train).")] = None,
    set: Annotated[
        Optional[list[str]], typer.Option("--set", "-s", metavar="KEY=VALUE", help="Override.")
    ] = None,
    valid_only: Annotated[
        bool,
        typer.Option(
            "--valid-only",
            help="Score valid only (runs that make a choice; run again without it to score test).",
        ),
    ] = False,
    members: Annotated[
        int,
        typer.Option(
            "--members",
            min=1,
            help="Models trained side by side (seeds seed, seed + 1, ...) and decoded as one "
            "ensemble.",
        ),
    ] = 1,
    channel: Annotated[
        Optional[Path],
        typer.Option(
            "--channel",
            metavar="CONFIG",
            help="Also train a model of the reverse direction (its YAML config; --data and the "
            "data.* overrides apply to it too) and rerank each n-best with it.",
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress or log lines.")] = False,
) -> None:
    """Prepare, train within --budget minutes, average, pick on valid, score test; see recipe.json.

    Example: python -m translator.recipe configs/multi30k-en-de.yaml --data ../shared/data/multi30k
    --set data.splits.valid=valid --set data.splits.test=test2016 --budget 48 --average 1
    """
    cfg = config.load(config_path, set or [])
    reverse = None
    if channel is not None:
        reverse = config.load(channel, [s for s in set or [] if s.startswith("data.")])
    for c in (cfg, reverse):
        if data and c is not None:  # taken literally, as `translator train --data`
            c.data = dataclasses.replace(c.data, source=data)
    manifest = run(
        cfg, budget, average, reserve, quiet, not valid_only, members=members, channel=reverse
    )
    typer.echo((Path(cfg.train.run_dir) / "scores.txt").read_text().rstrip())
    typer.echo(f"manifest: {Path(cfg.train.run_dir) / MANIFEST} (chosen: {manifest['chosen']})")


if __name__ == "__main__":
    run_command(app)
