"""Commands that make a model: prepare, train, average, info, keys."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from translator.cli.options import (
    ConfigArg,
    DataOpt,
    QuietOpt,
    SetOpt,
    load_config,
)
from translator.cli.stdout import print_result, require_stdout
from translator.errors import TranslatorError, counted


def prepare(
    config: ConfigArg,
    set: SetOpt = None,
    data: DataOpt = None,
    force: Annotated[
        bool, typer.Option("--force", help="Prepare again even if up to date.")
    ] = False,
    quiet: QuietOpt = False,
) -> None:
    """Clean the corpus, train SentencePiece, write token ids.

    Everything goes to data/<name>/, cached by the data config.

    A rerun with the same data config is a cache hit (a directory with a file missing, cut
    short or changed is prepared again). `train` does this itself when the data is
    missing; run it alone to prepare on one machine and train on another.

    \b
    Example: translator prepare configs/multi30k.yaml \\
      --data ../shared/data/multi30k \\
      --set data.splits.valid=valid --set data.splits.test=test2016
    """
    from translator import prepare as prepare_mod

    prepare_mod.run(load_config(config, set, data), force=force, quiet=quiet)


def train(
    config: ConfigArg, set: SetOpt = None, data: DataOpt = None, quiet: QuietOpt = False
) -> None:
    """Train a Transformer.

    Checkpoints, log and TensorBoard events go to train.run_dir. Prepares the data first (as
    `translator prepare` does) when data/<name>/ has none; data prepared with other data settings
    is refused, never replaced.

    Resumes exactly from run_dir/last.pt when it exists; Ctrl-C or SIGTERM saves last.pt and exits
    with 130 or 143, as an interrupted program does.

    Fine-tune with --set train.init_from=CKPT: its weights, architecture and SentencePiece
    model(s). Several GPUs (or CPU processes), rank 0 preparing while the others wait:

    \b
      torchrun --nproc_per_node 4 -m translator train CONFIG

    \b
    Example: translator train configs/multi30k.yaml \\
      --data ../shared/data/multi30k \\
      --set data.splits.valid=valid --set data.splits.test=test2016
    """
    from translator.train import loop

    try:
        cfg = load_config(config, set, data)
    except TranslatorError as err:
        err.every_rank = True  # each torchrun process reads the same config: rank 0 prints it
        raise
    loop.run(cfg, quiet=quiet)


def average(
    ckpts: Annotated[
        list[Path],
        typer.Argument(
            help="Checkpoints of one run, or with --last its run directory.", show_default=False
        ),
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Averaged checkpoint to write.")],
    last: Annotated[
        Optional[int],
        typer.Option(
            "--last", min=1, help="Average the newest N step-*.pt of the run directory given."
        ),
    ] = None,
    quiet: QuietOpt = False,
) -> None:
    """Average the parameters of several checkpoints.

    Writes one checkpoint holding their mean; the optimizer state is dropped.

    \b
    Example: translator average runs/multi30k --last 3 -o runs/multi30k/avg.pt
    """
    from translator import averaging
    from translator.console import sentence_progress

    if last is not None and len(ckpts) != 1:
        raise TranslatorError(
            "--last takes one run directory", "average", "give the run directory alone"
        )
    paths = averaging.latest_steps(ckpts[0], last) if last is not None else ckpts
    with sentence_progress("averaging", quiet, unit="checkpoints") as progress:
        count = averaging.average([str(p) for p in paths], out, progress)
    typer.echo(f"averaged {counted(count, 'checkpoint')} into {out}")


def info(
    source: Annotated[
        Path, typer.Argument(help="A YAML config or a checkpoint.", show_default=False)
    ],
    set: SetOpt = None,
) -> None:
    """Print the model architecture and its parameter count.

    \b
    Example: translator info configs/base.yaml --set model.vocab_size=37000
    """
    from translator import summary

    require_stdout("info")
    print_result(summary.describe(str(source), set or []), "the summary")


def keys(
    text: Annotated[
        Optional[str],
        typer.Argument(
            help="Only the keys whose name or doc holds this text (e.g. train. or dropout; "
            "KEY=VALUE as --set takes it finds KEY).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """List every config key with its type, default and doc.

    \b
    Example: translator keys dropout
    """
    from translator.config import Config, reference

    found = [
        (section, doc, [k for k in keys if reference.matching(k, text or "")])
        for section, doc, keys in reference.sections(Config())
    ]
    if not any(keys for _, _, keys in found):
        raise TranslatorError(
            f"no config key's name or doc holds {text!r}",
            "keys",
            "run `translator keys` to list them all",
        )
    require_stdout("keys")
    print_result(reference.render(found), "the keys")
