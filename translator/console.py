"""What the commands print on stderr beside their results: a progress bar over sentences or lines
(only for bulk work watched on a terminal), warnings, and log lines."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from translator.data.progress import StatsColumn, live_terminal


def show_progress(quiet: bool, stdin: TextIO | None, stdout: TextIO, stderr: TextIO) -> bool:
    """A bar only for bulk work watched on a terminal: input (stdin, or files: None) and output
    redirected, stderr a terminal.

    Interactive input, or output on the same screen, would interleave with a live bar.
    """
    piped = stdin is None or not stdin.isatty()
    return not quiet and stderr.isatty() and piped and not stdout.isatty()


@contextmanager
def sentence_progress(
    label: str, quiet: bool, unit: str = "sentences"
) -> Iterator[Callable[[int, int], None]]:
    """A rich bar on stderr over decoded sentences or input lines (`unit`; count, rate, ETA)
    -> its `progress(done, total)`.

    Invisible when quiet, and when stderr is not a terminal (a log gets no bar). stdout is left
    alone (not routed above the bar): it may carry the translations.
    """
    console = Console(stderr=True)
    bar = Progress(
        TextColumn(label),
        BarColumn(),
        TimeElapsedColumn(),
        StatsColumn(),
        TextColumn(unit),
        console=console,
        disable=quiet or not live_terminal(console.file),
        transient=True,
        redirect_stdout=False,
    )
    with bar:
        task = bar.add_task(label, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total, bar=True)


def advice_once(warn: Callable[[str], None]) -> Callable[[str], None]:
    """`warn`, but a warning's advice (what follows its last "; ", such as how to avoid <unk>)
    is given the first time only: a long stream repeats its warnings per chunk."""
    given: set[str] = set()

    def once(message: str) -> None:
        what, _, advice = message.rpartition("; ")
        if what and advice in given:
            message = f"{what} (see above)"
        given.add(advice)
        warn(message)

    return once


def warn_stderr(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def log(message: str) -> None:
    print(message, file=sys.stderr)
