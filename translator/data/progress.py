"""Progress bars (count, rate, ETA) and the final table for long data jobs, on stderr; silent when quiet."""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Column, Table
from rich.text import Text


class StatsColumn(ProgressColumn):
    """`done/total rate eta` for a bar, e.g. `1,200,000/4,500,000 52.1k/s eta 0:01:03`; blank for a spinner."""

    def render(self, task: Task) -> Text:
        if not task.fields.get("bar"):
            return Text("")
        speed = task.finished_speed or task.speed or 0.0
        rate = f"{speed / 1e6:.1f}M/s" if speed >= 1e6 else f"{speed / 1e3:.1f}k/s" if speed >= 1e3 else f"{speed:.0f}/s"
        left = task.time_remaining
        eta = "-:--:--" if left is None else time.strftime("%-H:%M:%S", time.gmtime(left))
        return Text(f"{task.completed:,.0f}/{task.total:,.0f} {rate} eta {eta}", style="progress.data.speed")


class Step:
    """One line of the display: a bar over `total` items, or a spinner when total is None."""

    def __init__(self, progress: Progress, description: str, total: int | None, seconds: dict[str, float]) -> None:
        self.progress, self.id = progress, progress.add_task(description, total=total, bar=total is not None)
        self.description, self.seconds, self.started = description, seconds, time.time()

    def advance(self, n: int = 1) -> None:
        self.progress.advance(self.id, n)

    def finish(self) -> None:
        """Show the step complete (a bar at 100 %, elapsed time frozen)."""
        task = self.progress.tasks[self.id]
        done = task.completed if task.total is not None else 1
        self.progress.update(self.id, total=done, completed=done)
        self.progress.stop_task(self.id)
        self.seconds[self.description] = round(time.time() - self.started, 2)

    def __enter__(self) -> Step:
        return self

    def __exit__(self, *exc) -> None:
        self.finish()


class Bars:
    """One rich progress display (count, rate, ETA, elapsed) for a whole job, on stderr."""

    def __init__(self, quiet: bool) -> None:
        self.seconds: dict[str, float] = {}  # step -> wall-clock seconds, once finished
        self.console = Console(stderr=True, quiet=quiet)
        self.progress = Progress(
            SpinnerColumn(), TextColumn("{task.description:<18}"), BarColumn(bar_width=12), TimeElapsedColumn(),
            StatsColumn(table_column=Column(no_wrap=True)),
            console=self.console, disable=quiet,
        )

    def __enter__(self) -> Bars:
        self.progress.start()
        return self

    def __exit__(self, kind, value, traceback) -> None:
        if kind is not None:  # failed: no final render (a log then holds the error line alone)
            self.console.quiet = True
        self.progress.stop()

    def step(self, description: str, total: int | None = None) -> Step:
        """A new line: a bar when `total` is known, else a spinner with elapsed time (a library call)."""
        return Step(self.progress, description, total, self.seconds)

    def print(self, renderable) -> None:
        self.console.print(renderable)


def summary_table(title: str, rows: list[tuple[str, str]]) -> Table:
    """A two-column table: what, value."""
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column(justify="right")
    for name, value in rows:
        table.add_row(name, value)
    return table
