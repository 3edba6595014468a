"""The recipe's command line, run by `python -m translator.recipe` (recipe/__main__.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Optional

import typer

from translator import config
from translator.recipe import run
from translator.recipe.members import trains_in_fp32
from translator.recipe.results import MANIFEST

app = typer.Typer(
    rich_markup_mode=None,  # click's plain help: whole option names at any width, ASCII
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
    fp32_members: Annotated[
        Optional[int],
        typer.Option(
            "--fp32-members",
            min=1,
            help="Where training runs in fp32 (no native bf16): models to train instead of "
            "--members.",
        ),
    ] = None,
    fp32_set: Annotated[
        Optional[list[str]],
        typer.Option(
            "--fp32-set",
            metavar="KEY=VALUE",
            help="Where training runs in fp32: an override (the --set ones win over it).",
        ),
    ] = None,
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

    \b
    Example: python -m translator.recipe configs/multi30k-en-de.yaml \\
      --data ../shared/data/multi30k --set data.splits.valid=valid \\
      --set data.splits.test=test2016 --budget 48 --average 1
    """
    cfg = config.load(config_path, set or [])
    if (fp32_members or fp32_set) and trains_in_fp32(cfg):
        # about half the updates of bf16 in the budget: the recipe's fp32 settings, chosen apart
        members = fp32_members or members
        cfg = config.load(config_path, (fp32_set or []) + (set or []))
        if not quiet:
            overrides = "".join(f", {s}" for s in fp32_set or [])
            typer.echo(
                f"training in fp32 (no native bf16 here): {members} model(s){overrides}", err=True
            )
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
