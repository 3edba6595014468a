"""Input lines as they arrive: a file or a pipe read in chunks of what is already there (so an
interactive user's line is translated at once and bulk input is batched), its bytes decoded as
UTF-8 line by line, and the lines left in a regular file counted for a progress bar."""

from __future__ import annotations

import os
import re
import select
import stat
from collections.abc import Callable, Iterator
from typing import NoReturn, TextIO

from translator.errors import TranslatorError

BAD_LINES_NAMED = 10  # invalid-UTF-8 lines warned about one by one; the rest are counted


def lines_left(stream: TextIO) -> int | None:
    """How many lines are left to read in `stream` when it is a regular file (`< in.txt`), counted
    without moving its offset; None for a pipe or a terminal, whose end is unknown."""
    try:
        fd = stream.fileno()
        if not stat.S_ISREG(os.fstat(fd).st_mode) or not hasattr(os, "pread"):
            return None
        offset = os.lseek(fd, 0, os.SEEK_CUR)
        count, last = 0, b"\n"
        while block := os.pread(fd, 1 << 20, offset):
            count, last, offset = count + block.count(b"\n"), block[-1:], offset + len(block)
    except (OSError, AttributeError, ValueError):
        return None
    return count + (last != b"\n")  # a last line without its newline


def read_chunks(
    stream: TextIO, max_lines: int = 2000, warn: Callable[[str], None] | None = None
) -> Iterator[list[str]]:
    """Lines from `stream` in chunks: everything already available, up to `max_lines`.

    Piped bulk input fills whole chunks (so it is batched); an interactive user, whose next line
    is not yet there, gets each line translated as soon as it is entered. Reads the file
    descriptor directly: a buffered text stream would wait for more input before returning.
    Bytes that are not UTF-8 become U+FFFD with a warning naming the line (the first
    `BAD_LINES_NAMED`, then one count at the end: a file in another encoding would flood the
    terminal); the line is still translated, so the output keeps one line per input line.
    """
    try:
        fd = stream.fileno()
    except (OSError, AttributeError, ValueError):
        fd = None
    # no real file descriptor (e.g. a test runner's stream); "\n" ends a line, as below
    if fd is None:
        text = stream.read()
        lines = [line.rstrip("\r") for line in text.split("\n")]
        if not text or text.endswith("\n"):
            lines.pop()  # nothing after the last newline
        for start in range(0, len(lines), max_lines):
            yield lines[start : start + max_lines]
        return
    # the unfinished line's pieces, joined once its newline comes (joined at every read, a line of
    # many megabytes would be copied again and again)
    pending: list[bytes] = []
    lines, count, bad = [], 0, []  # bad: numbers of the lines that were not UTF-8

    def note(number: int, message: str) -> None:
        bad.append(number)
        if warn is not None and len(bad) <= BAD_LINES_NAMED:
            warn(message)

    first = True
    while True:
        data = os.read(fd, 1 << 16)
        if first and (encoding := wide_encoding(data)):
            refuse_wide(encoding, "stdin")
        first = False
        if b"\n" in data:
            *complete, last = b"".join([*pending, data]).split(b"\n")
            pending = [last]
            lines += [_decode_line(raw, count + i, note) for i, raw in enumerate(complete, 1)]
            count += len(complete)
        elif data:
            pending.append(data)
        while lines and (not data or len(lines) >= max_lines or not _ready(fd)):
            yield lines[:max_lines]
            lines = lines[max_lines:]
        if not data:
            break
    if last := b"".join(pending):  # a last line without a newline
        yield [_decode_line(last, count + 1, note)]
    if warn is not None and len(bad) > BAD_LINES_NAMED:
        warn(
            f"{len(bad) - BAD_LINES_NAMED} more lines had invalid UTF-8 (lines "
            f"{bad[BAD_LINES_NAMED]}-{bad[-1]}; re-encode the input as UTF-8, e.g. with iconv)"
        )


def _decode_line(raw: bytes, number: int, note: Callable[[int, str], None]) -> str:
    """One input line's bytes -> text without a trailing CR; bytes that are not UTF-8 become U+FFFD,
    with a note (line number, warning)."""
    try:
        return raw.decode("utf-8").rstrip("\r")
    except UnicodeDecodeError as err:
        note(
            number,
            f"line {number}: invalid UTF-8 at byte {err.start}; undecodable bytes replaced "
            "with U+FFFD (re-encode the input as UTF-8)",
        )
        return raw.decode("utf-8", errors="replace").rstrip("\r")


def wide_encoding(head: bytes) -> str | None:
    """'UTF-16LE', 'UTF-32BE'... when the start of a file looks like UTF-16/32 text: most of its
    newline bytes are whole newline code units of that width and byte order, aligned as such.
    UTF-8 text has a NUL only where one was put by mistake, which the cleaner removes (a control
    character): that is no reason to refuse the file."""
    newlines = [found.start() for found in re.finditer(rb"\n", head)]
    if len(newlines) < 2 or not head.translate(None, b"\x00\r\n"):  # no text: nothing to tell
        return None
    for width in (4, 2):  # UTF-32's newline units read as UTF-16 ones too: tried first
        for order, unit in (
            ("LE", b"\n".ljust(width, b"\x00")),
            ("BE", b"\n".rjust(width, b"\x00")),
        ):
            start = unit.index(b"\n")  # the newline byte's place in its code unit
            units = sum(
                (i - start) % width == 0 and head[i - start : i - start + width] == unit
                for i in newlines
            )
            # two at least, and most newlines: a byte 0x0A may also be part of another character
            if units >= 2 and 2 * units >= len(newlines):
                return f"UTF-{8 * width}{order}"
    return None


def refuse_wide(encoding: str, where: str) -> NoReturn:
    """Text in UTF-16 or UTF-32 (a Windows editor's "Unicode"): each of its lines would read as
    invalid UTF-8, and its NUL bytes make a line of their own, so the output would not keep one
    line per input line."""
    raise TranslatorError(
        f"looks like {encoding} (NUL bytes)",
        where,
        f"convert it to UTF-8 (iconv -f {encoding} -t UTF-8)",
    )


def _ready(fd: int) -> bool:
    """Is more input waiting right now (without blocking)?"""
    return bool(select.select([fd], [], [], 0)[0])
