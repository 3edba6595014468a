"""SentencePiece's training log, read for progress: its C++ code writes to file descriptor 2, which
`stderr_lines` captures line by line and `TrainingLog` turns into progress(done, total)."""

from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class TrainingLog:
    """SentencePiece's training log, line by line -> progress(done, total).

    Unigram prunes its seed pieces down to the vocabulary size over EM rounds (`EM sub_iter=..
    size=N`): done = pieces pruned so far. BPE merges up to the vocabulary size (`Merged: ..
    merges=N`): done = merges. An EM round's time and the pieces it prunes both scale with the
    current size, so the rate is steady enough for an ETA. Until the seed pieces are known there is
    no total (a spinner).
    """

    def __init__(self, vocab_size: int, progress: Callable[[int, int], None]) -> None:
        self.vocab_size, self.progress, self.seed = vocab_size, progress, 0

    def __call__(self, line: str) -> None:
        if found := re.search(r"Initialized (\d+) seed pieces", line):
            self.seed = int(found[1])
            self._report(0, self.seed - self.vocab_size)
        elif self.seed and (found := re.search(r"EM sub_iter=\d+ size=(\d+)", line)):
            self._report(self.seed - int(found[1]), self.seed - self.vocab_size)
        elif found := re.search(r"Merged: .*merges=(\d+)", line):
            self._report(int(found[1]), self.vocab_size)

    def _report(self, done: int, total: int) -> None:
        total = max(total, 1)
        self.progress(min(max(done, 0), total), total)


@contextmanager
def stderr_lines(on_line: Callable[[str], None]) -> Iterator[None]:
    """Inside the block, what C/C++ code writes to file descriptor 2 goes to `on_line`, line by
    line.

    Python's own writes (our progress display) keep going where they went: when sys.stderr is
    file descriptor 2, it is pointed at a copy of it for the duration.
    """
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    original = os.dup(2)
    python_stderr = sys.stderr
    if _fileno(python_stderr) == 2:
        sys.stderr = open(os.dup(original), "w", buffering=1, encoding="utf-8", errors="replace")  # noqa: SIM115
    os.dup2(write_end, 2)
    os.close(write_end)
    reader = threading.Thread(target=_read_lines, args=(read_end, on_line), daemon=True)
    reader.start()
    try:
        yield
    finally:
        os.dup2(original, 2)  # closes the pipe's last write end: the reader gets EOF and ends
        os.close(original)
        reader.join()
        if sys.stderr is not python_stderr:
            sys.stderr.close()
            sys.stderr = python_stderr


def _read_lines(fd: int, on_line: Callable[[str], None]) -> None:
    with open(fd, encoding="utf-8", errors="replace") as pipe:
        for line in pipe:
            try:
                on_line(line)
            except Exception:  # noqa: BLE001 - keep draining: a full pipe would block the writer for good
                on_line = _ignore


def _ignore(line: str) -> None:
    pass


def _fileno(stream) -> int:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        return -1
