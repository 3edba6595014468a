"""What the commands print on stdout: UTF-8 whatever the locale, refused up front when there is no
stdout, a reader that leaves early ends the command quietly, and a failed write names stdout."""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from translator.errors import TranslatorError
from translator.files import silence_stdout, write_errors


def use_utf8() -> None:
    """stdin and stdout as UTF-8, whatever the locale (LC_ALL=C, a Latin-1 terminal) says.

    The corpora, the SentencePiece model and sacreBLEU are UTF-8, and translate reads stdin's
    bytes as UTF-8 itself; a locale's encoding on stdout crashed on the first umlaut (ASCII: a C
    locale with Python's UTF-8 mode off, PYTHONUTF8=0) or wrote files that the next tool misread
    (Latin-1). Marian, sacreBLEU and CTranslate2 do the same. stdin's bad bytes become U+FFFD, as
    translate's do (attention echoes each sentence, so they show); a path from the command line
    whose bytes are not UTF-8 is written back as those bytes (surrogateescape), as Python does
    under a C locale. stderr keeps the locale, and Python's backslashreplace there never fails.
    """
    if isinstance(sys.stdin, io.TextIOWrapper):
        sys.stdin.reconfigure(encoding="utf-8", errors="replace")
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(encoding="utf-8", errors="surrogateescape")


def utf8_argument(text: str) -> str:
    """A command-line argument that is text, not a path, read as UTF-8.

    Where Python decodes arguments as ASCII (a C locale with UTF-8 mode off), other bytes come as
    lone surrogates, which SentencePiece cannot take; their bytes are the UTF-8 the user typed.
    Not UTF-8: U+FFFD. An argument the locale decoded (Latin-1: `Grüße`) is kept as it is.
    """
    if not any("\udc80" <= char <= "\udcff" for char in text):
        return text
    return os.fsencode(text).decode("utf-8", errors="replace")


def require_stdout(command: str) -> None:
    """Refuses to start when stdout is closed (`>&-`): the result would be lost, with exit 0."""
    if sys.stdout is None:
        raise TranslatorError(
            "stdout is closed, so the result would be lost",
            command,
            "give somewhere for stdout, e.g. > out.txt",
        )


@contextmanager
def reader_may_leave() -> Iterator[None]:
    """Around writes to stdout: a reader that left the pipe (`| head -1`) ends the command quietly
    with exit 0.

    0, not 141 (SIGPIPE's) or click's 1: whether a write meets the closed pipe depends on timing
    (output that fits in the pipe's buffer before `head` exits meets none, and exits 0), so only 0
    is the same every time. The reader chose to stop reading; that is no failure of ours.
    """
    try:
        yield
    except BrokenPipeError:
        silence_stdout()


def print_result(text: str, what: str) -> None:
    """`text` and a newline on stdout; a full disk (`> /dev/full`) is one error naming stdout."""
    with reader_may_leave(), write_errors("<stdout>", f"cannot write {what}"):
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
