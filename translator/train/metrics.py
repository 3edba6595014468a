"""Where training numbers go: TensorBoard, a log file, and a progress bar. Only importer of
tensorboard.

Events go to `run_dir/tensorboard/` (`tensorboard --logdir runs` shows every run), the scalars
whose step is training seconds (`scalar_vs_seconds`) to `run_dir/tensorboard/by_seconds/`: a resume
hides what a killed session logged after the last save by step, and updates and seconds need their
own cut. On ranks other than 0 every method is a no-op. Off a terminal (a log file, a pipe, a
batch job) the console gets the log lines only, one record per line: no bar, no wrapping at the
console's width.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import datetime, timedelta
from pathlib import Path
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, Task, TextColumn, TimeElapsedColumn
from rich.text import Text
from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import hparams

from translator.data.progress import live_terminal
from translator.files import open_own, silence_stdout


class SessionRemaining(ProgressColumn):
    """Time left at the mean rate since the session's first update, validations and saves
    included: rich's own estimate reads the last 30 s of updates, which leave them out, so it
    promised an end that each validation then pushed back."""

    def __init__(self, begun: int, clock=time.monotonic) -> None:
        super().__init__()
        self.begun, self.clock = begun, clock  # the update the session starts at
        self.first: tuple[float, int] | None = None  # (time, update) at its first update's end

    def reached(self, step: int) -> None:
        if self.first is None and step > self.begun:
            self.first = (self.clock(), step)

    def render(self, task: Task) -> Text:
        if self.first is None or task.total is None or task.completed <= self.first[1]:
            return Text("-:--:--", style="progress.remaining")
        when, update = self.first
        seconds_per_update = (self.clock() - when) / (task.completed - update)
        left = max(task.total - task.completed, 0) * seconds_per_update
        return Text(str(timedelta(seconds=round(left))), style="progress.remaining")


# what Markdown reads as markup (TensorBoard's text tab renders its strings as Markdown, with
# tables): escaped with a backslash; <, > and & as the HTML entities they would become
MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+\-.!|])")
ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def literal(text: str) -> str:
    """`text` as TensorBoard's text tab should show it, character for character: a sentence's *, _
    or <...> is not emphasis or a tag."""
    escaped = MARKDOWN.sub(r"\\\1", text)
    return re.sub("[&<>]", lambda m: ENTITIES[m.group()], escaped)


def open_log(path: Path) -> TextIO:
    """`path` for appending, never through a symlink (files.open_own)."""
    return open(open_own(path, os.O_WRONLY | os.O_APPEND), "a", encoding="utf-8")


class Metrics:
    """Scalars and text to TensorBoard, lines to `train.log` (a session's first: `session started
    DATE`), a live progress bar unless quiet."""

    def __init__(
        self,
        run_dir: Path,
        total_updates: int,
        start: int,
        quiet: bool,
        enabled: bool = True,
        saved: tuple[int, float] | None = None,
    ) -> None:
        """saved: the (update, training seconds) of the checkpoint a resume starts from; None for a
        fresh start. TensorBoard then hides what was logged after that point (a killed session's
        updates, done again), or everything logged before (an earlier attempt in this run_dir),
        so the curves neither double back nor show two runs."""
        self.enabled, self.quiet = enabled, quiet
        # the log first: an unwritable run_dir then fails here, before TensorBoard's writer thread
        # starts (which would print its own traceback beside our one-line error)
        self.log_file = open_log(run_dir / "train.log") if enabled else None
        self.events = run_dir / "tensorboard"
        self.writer = self.by_seconds = None
        self.console = Console()  # stdout
        self.console.on_broken_pipe = self._console_gone  # rich's hook for a closed stdout
        self.terminal = live_terminal(self.console.file)  # else plain lines
        self.remaining = SessionRemaining(start)
        self.progress = Progress(
            TextColumn("train"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            self.remaining,
            console=self.console,
            disable=quiet or not enabled or not self.terminal,
        )
        self.task = self.progress.add_task("train", total=total_updates, completed=start, status="")
        self.progress.start()
        self.started = time.time()
        # each session's times count from its start: this line tells the sessions apart, so it
        # comes first, before what setup says about the session (a resume, files it removed)
        self.line(f"session started {datetime.now().astimezone():%Y-%m-%d %H:%M:%S %z}")
        if enabled:
            with self._events():
                self._open_writers(saved)

    def _open_writers(self, saved: tuple[int, float] | None) -> None:
        # step -> the first step hidden; int() as scalar_vs_seconds logs them keeps the saved ones
        update, seconds = (saved[0] + 1, int(saved[1]) + 1) if saved else (0, 0)
        _quiet_writer_threads()
        self.writer = SummaryWriter(str(self.events), purge_step=update)
        self.by_seconds = SummaryWriter(str(self.events / "by_seconds"), purge_step=seconds)

    @contextmanager
    def _events(self) -> Iterator[None]:
        """Around TensorBoard calls. The first that fails (its directory unwritable: permissions,
        a quota, a disk of its own filling; the writer thread's error comes out of the next call)
        turns TensorBoard off for the session with one warning, and training goes on: its
        checkpoints matter more than event files. (Where run_dir's own disk is full, the warning's
        line in train.log fails too, and the run ends with that error, as its next save would.)"""
        try:
            yield
        except OSError as err:
            writers, self.writer, self.by_seconds = (self.writer, self.by_seconds), None, None
            for writer in filter(None, writers):
                with suppress(OSError):  # flushes what it can; its thread has stopped
                    writer.close()
            self.warning(
                f"{self.events}: cannot write TensorBoard events ({err.strerror or err}); "
                "TensorBoard is off for the rest of this session, training goes on (free space "
                "on its disk or fix its permissions, then resume to log again)"
            )

    def scalars(self, step: int, values: dict[str, float], prefix: str) -> None:
        if self.writer:
            with self._events():
                for name, value in values.items():
                    self.writer.add_scalar(f"{prefix}/{name}", value, step)

    def scalar_vs_seconds(self, seconds: float, tag: str, value: float) -> None:
        """A scalar whose step is training seconds (whole ones, rounded down), in its own folder."""
        if self.by_seconds:
            with self._events():
                self.by_seconds.add_scalar(tag, value, int(seconds))

    def image(self, step: int, tag: str, image) -> None:
        """An RGB image (3, H, W) uint8."""
        if self.writer:
            with self._events():
                self.writer.add_image(tag, image, step)

    def text(self, step: int, tag: str, body: str) -> None:
        if self.writer:
            with self._events():
                self.writer.add_text(tag, body, step)

    def hparams(self, step: int, flat: dict[str, object], metric_tags: list[str]) -> None:
        """Hyperparameters for TensorBoard's HParams tab, tied to scalar tags logged during
        training.

        Written at the start (not with `add_hparams` at the end), so an interrupted run has them
        too, and at the current update: an event older than the latest would make TensorBoard drop
        the earlier session's points as orphaned.
        """
        if self.writer:
            clean = {
                k: v if isinstance(v, int | float | str | bool) else str(v) for k, v in flat.items()
            }
            with self._events():
                for summary in hparams(clean, dict.fromkeys(metric_tags, 0.0)):
                    self.writer.file_writer.add_summary(summary, step)

    def expect_total(self, updates: int) -> None:
        """The update the run is now expected to end at (the bar's total, hence its ETA)."""
        self.progress.update(self.task, total=updates)

    def advance(self, step: int, status: str) -> None:
        self.progress.update(self.task, completed=step, status=status)
        self.remaining.reached(step)

    def line(self, message: str) -> None:
        """A log line: into train.log always, onto the console unless quiet."""
        if not self.enabled:
            return
        self._log(message)
        if not self.quiet:  # Text: brackets (the sacreBLEU signature) are not markup
            self.console.print(Text(message), soft_wrap=not self.terminal)

    def _console_gone(self) -> None:
        """stdout's reader left (`| head`, a `tee` that died): training goes on, logging to
        train.log alone. rich's default there is to exit 1, silently, losing every update since
        the last save."""
        self.quiet = self.console.quiet = True
        silence_stdout()
        self.warning(  # quiet now: into train.log and onto stderr
            "stdout was closed by its reader; training goes on, its log lines go to "
            f"{self.log_file.name} only"
        )

    def record(self, message: str) -> None:
        """A line into train.log alone (what the command prints itself, such as its error)."""
        if self.enabled:
            self._log(message)

    def warning(self, message: str) -> None:
        """A warning: into train.log, and onto stderr even when quiet."""
        if self.enabled:
            self.line(f"warning: {message}")
            if self.quiet:
                print(f"warning: {message}", file=sys.stderr)

    def last_word(self, message: str) -> None:
        """A line into train.log and onto stderr, quiet or not, below the stopped progress bar: the
        process ends on it."""
        if self.enabled:
            self.progress.stop()
            self._log(message)
            print(message, file=sys.stderr)

    def _log(self, message: str) -> None:
        stamp = f"[{time.time() - self.started:7.0f}s] "
        try:
            self.log_file.write(stamp + message + "\n")
            self.log_file.flush()
        except OSError as err:  # a full disk: name the file (the error alone has no path)
            raise OSError(err.errno, err.strerror, self.log_file.name) from None

    def close(self) -> None:
        self.progress.stop()
        if self.writer:
            with self._events():
                # a flush first: close() alone would drop an error the writer thread kept
                for writer in (self.writer, self.by_seconds):
                    writer.flush()
                    writer.close()
        if self.enabled:
            self.log_file.close()


def _quiet_writer_threads() -> None:
    """TensorBoard's writer thread keeps a write error for the next call in ours to raise, and also
    re-raises it, which Python prints as a 15-line thread traceback; ours is the one reported."""
    previous = threading.excepthook
    if getattr(previous, "quiets_tensorboard", False):
        return

    def hook(args) -> None:
        if type(args.thread).__module__ != "tensorboard.summary.writer.event_file_writer":
            previous(args)

    hook.quiets_tensorboard = True
    threading.excepthook = hook
