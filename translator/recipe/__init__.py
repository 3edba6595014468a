"""`python -m translator.recipe` (`make multi30k`): one results row, end to end, with its manifest.

Prepare; train within a wall-clock budget; average the newest checkpoints; pick the average or
best.pt by valid BLEU; score the test split once (sacreBLEU, chrF and lowercased tokenized BLEU).
Everything lands in train.run_dir: avg.pt, the hypotheses, scores.txt, and recipe.json (commit,
data sha256s, the resolved config, seed, sacreBLEU signatures, hardware, each stage's wall-clock).

The budget counts what the results table calls training time: the training sessions (validations
and saves included) and the averaging; preparing and scoring are not counted. A rerun after an
interrupted training goes on with the rest of the budget; a finished recipe is not run over,
except that a choosing run (`--valid-only`) that is taken has its test split scored, once.

Here the recipe's steps in order; members.py trains, choose.py picks on valid, results.py writes
scores.txt and recipe.json, command.py is the command line.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from translator import averaging, checkpoint, prepare
from translator.bleu import Scores
from translator.config import Config
from translator.errors import TranslatorError
from translator.recipe.choose import (
    choose_on_valid,
    ensemble_on_valid,
    first,
    on_test,
    rerank_on_valid,
    stage,
)
from translator.recipe.members import (
    channel_config,
    member_configs,
    train_members,
    training_code,
    training_minutes,
)
from translator.recipe.results import (
    MANIFEST,
    budget_record,
    command_line,
    data_files,
    hardware,
    write_results,
)
from translator.train.manifest import versions
from translator.versions import git_state


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
    check_same_layout(run_dir, members)
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
            averaging.average(averaged[member_dir], member_dir / "avg.pt")
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
        "git": code,  # this invocation's: averaging, decoding and scoring
        # the training sessions' (a recipe resumed under other code has several)
        "trained_by": training_code(member_dirs + channel_dirs),
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


def score_chosen_on_test(run_dir: Path, quiet: bool) -> dict[str, Any]:
    """A finished choosing run, taken: its chosen checkpoint on test, added to recipe.json."""
    manifest = json.loads((run_dir / MANIFEST).read_text())
    if manifest["test"] is not None:
        raise finished_already(run_dir, "test scored")
    seconds = manifest["stage_seconds"]
    test = on_test(run_dir, manifest["chosen"], seconds, quiet)
    manifest["test"] = dataclasses.asdict(test)
    # the training above was made by manifest["command"] at manifest["git"]; the test score by:
    manifest["test_scored"] = {
        "command": command_line(),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "git": git_state(),
    }
    valid = {name: Scores(**scores) for name, scores in manifest["valid"].items()}
    write_results(run_dir, manifest, valid, manifest["chosen"], test)
    return manifest


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


def check_same_layout(run_dir: Path, members: int) -> None:
    """Refuse to go on with another number of models than the run directory's training started
    with (a rerun on a CPU of the other kind, where the Makefile's FP32 settings switch it)."""
    started = [p for p in run_dir.glob("member-*") if p.is_dir()]
    trained = len(started) or (1 if (run_dir / "manifest.json").is_file() else 0)
    if trained and trained != members:
        raise TranslatorError(
            f"this run directory holds the training of {trained} model(s), and this run trains "
            f"{members}",
            str(run_dir),
            "run it again as it started (--members; `make multi30k FP32=` keeps the ensemble on "
            "any CPU), or set another train.run_dir",
        )


def finished_already(run_dir: Path, detail: str) -> TranslatorError:
    """The one-line refusal to run a finished recipe's run directory over."""
    return TranslatorError(
        f"this recipe has finished already, {detail}",
        str(run_dir / MANIFEST),
        "move the run directory away (or set another train.run_dir) to run it again",
    )
