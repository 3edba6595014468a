"""Progress bars (count, rate, ETA) and the final table for long data jobs, on stderr; silent when
quiet.

Off a terminal (a log file, a pipe, a batch job) there is nothing live to redraw: each finished step
and each summary row is one plain line instead, never wrapped at the console's width.
`live_terminal` decides which, for train's and translate's bars too.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from rich.console import Console
from rich.filesize import decimal
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


def live_terminal(stream: TextIO | None) -> bool:
    """Can `stream` show a bar redrawn in place: a terminal that moves its cursor?

    Asks the descriptor, not rich's `Console.is_terminal`: that says yes to a log file under
    FORCE_COLOR or TTY_COMPATIBLE (for colour, which may stay), and a file then fills with a
    redraw per refresh. On TERM=dumb rich draws nothing until the end, so plain lines instead.
    """
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # None, or a stream of a test runner
        return False
    return os.isatty(fd) and os.environ.get("TERM", "").lower() not in ("dumb", "unknown")


def clock(seconds: float) -> str:
    """`H:MM:SS`, past 24 hours too (strftime's `%-H` is not portable; gmtime wraps a day)."""
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}"


class StatsColumn(ProgressColumn):
    """`done/total rate eta` for a bar, e.g. `1,200,000/4,500,000 52.1k/s eta 0:01:03` (or in bytes,
    `310.2 MB/1.3 GB 41.0 MB/s eta 0:00:24`); blank for a spinner."""

    def render(self, task: Task) -> Text:
        if not task.fields.get("bar"):
            return Text("")
        # rich's speed needs two samples a moment apart; a step that ends at once has only the mean
        speed = (
            task.finished_speed
            or task.speed
            or (task.completed / task.elapsed if task.elapsed else 0.0)
        )
        if task.fields.get("unit") == "B":
            counts, rate = (
                f"{decimal(int(task.completed))}/{decimal(int(task.total or 0))}",
                f"{decimal(int(speed))}/s",
            )
        else:
            counts = f"{task.completed:,.0f}/{task.total:,.0f}"
            rate = (
                f"{speed / 1e6:.1f}M/s"
                if speed >= 1e6
                else f"{speed / 1e3:.1f}k/s"
                if speed >= 1e3
                else f"{speed:.0f}/s"
            )
        left = task.time_remaining
        eta = "-:--:--" if left is None else clock(left)
        return Text(f"{counts} {rate} eta {eta}", style="progress.data.speed")


class Step:
    """One line of the display: a bar over `total` items (or bytes, unit "B"), or a spinner while
    total is None."""

    def __init__(
        self,
        progress: Progress,
        description: str,
        total: int | None,
        seconds: dict[str, float],
        unit: str = "",
        done: Callable[[str], None] | None = None,
    ) -> None:
        self.progress = progress
        self.id = progress.add_task(description, total=total, bar=total is not None, unit=unit)
        self.description, self.seconds, self.started = description, seconds, time.time()
        self.done = done  # gets the finished step as one line (off a terminal)

    def advance(self, n: int = 1) -> None:
        self.progress.advance(self.id, n)

    def update(self, completed: int, total: int | None = None) -> None:
        """Set the count; a total turns a spinner into a bar (thread-safe: rich locks its tasks)."""
        if total is not None:
            self.progress.update(self.id, completed=completed, total=total, bar=True)
        else:
            self.progress.update(self.id, completed=completed)

    def finish(self) -> None:
        """Show the step complete (a bar at 100 %, elapsed time frozen)."""
        task = self.progress.tasks[self.id]
        done = task.completed if task.total is not None else 1
        self.progress.update(self.id, total=done, completed=done)
        self.progress.stop_task(self.id)
        if self.done:
            # count and rate; the ETA is past
            stats = StatsColumn().render(task).plain.split(" eta ")[0]
            self.done(
                f"{self.description}: "
                f"{time.time() - self.started:.1f} s{', ' + stats if stats else ''}"
            )
            self.done = None  # one line, however many times it is finished
        self.seconds[self.description] = round(time.time() - self.started, 2)

    def __enter__(self) -> Step:
        return self

    def __exit__(self, kind, value, traceback) -> None:
        if kind is None:
            self.finish()
        else:  # failed: neither drawn complete nor logged as done; the error says what happened
            self.progress.stop_task(self.id)
            self.done = None


class Bars:
    """One rich progress display (count, rate, ETA, elapsed) for a whole job, on stderr."""

    def __init__(self, quiet: bool) -> None:
        self.seconds: dict[str, float] = {}  # step -> wall-clock seconds, once finished
        self.quiet = quiet
        self.console = Console(stderr=True, quiet=quiet)
        self.terminal = live_terminal(self.console.file)  # else plain lines
        self.live = not quiet and self.terminal
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description:<18}"),
            BarColumn(bar_width=12),
            TimeElapsedColumn(),
            StatsColumn(table_column=Column(no_wrap=True)),
            console=self.console,
            disable=not self.live,
        )

    def __enter__(self) -> Bars:
        self.progress.start()
        return self

    def __exit__(self, kind, value, traceback) -> None:
        # failed: a log holds the error line alone
        if kind is not None and not self.terminal:
            self.console.quiet = True
        self.progress.stop()  # on a terminal the steps stay on screen, the error goes below them

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Take the display off the screen while a library draws its own bars, then bring it back
        below them.

        Off a terminal there is no live display to take away (and stopping would print it).
        """
        if not self.terminal:
            yield
            return
        self.progress.stop()
        try:
            yield
        finally:
            self.progress.start()

    def step(self, description: str, total: int | None = None, unit: str = "") -> Step:
        """A new line: a bar when `total` is known, else a spinner with elapsed time until `update`
        gives one."""
        return Step(
            self.progress, description, total, self.seconds, unit, None if self.live else self.print
        )

    def print(self, line: str) -> None:
        """One line as given (brackets are not markup), wrapped only on a terminal."""
        self.console.print(Text(line), soft_wrap=not self.terminal)

    def summary(self, title: str, rows: list[tuple[str, str]]) -> None:
        """The final table on a terminal; elsewhere the title and a `what: value` line per row."""
        if self.terminal:
            self.console.print(summary_table(title, rows))
            return
        for line in [title, *(f"{name}: {value}" for name, value in rows)]:
            self.print(line)


def summary_table(title: str, rows: list[tuple[str, str]]) -> Table:
    """A two-column table: what, value."""
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column(justify="right")
    for name, value in rows:
        table.add_row(name, value)
    return table


@contextmanager
def bytes_read(
    paths: list[Path], report: Callable[[int], None], every_s: float = 0.25
) -> Iterator[None]:
    """While a library reads `paths` inside this block, report how many of their bytes it has read.

    `datasets` offers no progress hook, but on Linux the read offset of every open file is in
    /proc/self/fdinfo; a thread polls it for our files (for .gz, the compressed bytes). Elsewhere
    nothing is reported until the end, when the total is.
    """
    wanted = {os.path.realpath(p): 0 for p in paths}  # path -> furthest offset seen
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(every_s):
            for fd, path in _open_files():
                if path in wanted:
                    wanted[path] = max(wanted[path], _offset(fd))
            report(sum(wanted.values()))

    watcher = threading.Thread(target=poll, daemon=True)
    if Path("/proc/self/fdinfo").is_dir():
        watcher.start()
    try:
        yield
    finally:
        stop.set()
        if watcher.is_alive():
            watcher.join()
    report(sum(Path(p).stat().st_size for p in paths))


def _open_files() -> list[tuple[str, str]]:
    """(fd, real path) of this process's open files."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            found.append((fd, os.readlink(f"/proc/self/fd/{fd}")))
        except OSError:  # closed meanwhile
            pass
    return found


def _offset(fd: str) -> int:
    try:
        for line in Path(f"/proc/self/fdinfo/{fd}").read_text().splitlines():
            if line.startswith("pos:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0
