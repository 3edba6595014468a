"""Input read as it arrives: what is there now comes at once, bulk input in chunks, every line
kept whole and in order, bytes that are not UTF-8 replaced and their lines named."""

from __future__ import annotations

import io
import os
import signal

import pytest

from translator.errors import TranslatorError
from translator.files import read_lines
from translator.input_lines import read_chunks, wide_encoding


def _no_hang(signum, frame):
    raise TimeoutError("read_chunks waited for input that was never coming")


def test_read_chunks_yields_what_is_there_without_waiting_for_more():
    read_fd, write_fd = os.pipe()
    previous = signal.signal(signal.SIGALRM, _no_hang)
    signal.alarm(20)  # a reader that waits for more input would block this test forever
    try:
        with os.fdopen(read_fd, "r") as reader:
            chunks = read_chunks(reader, max_lines=3)
            os.write(write_fd, b"first\n")
            # the writer is still open: an interactive user gets an answer
            assert next(chunks) == ["first"]
            os.write(write_fd, b"a\nb\n\nc\nd")
            assert next(chunks) == ["a", "b", ""]  # bulk input is batched, max_lines at a time
            assert next(chunks) == ["c"]
            os.close(write_fd)
            assert list(chunks) == [["d"]]  # a last line without its newline
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_read_chunks_replaces_bytes_that_are_not_utf8_and_names_the_line():
    read_fd, write_fd = os.pipe()
    os.write(write_fd, b"caf\xc3\xa9\r\ncaf\xe9\n")  # line 1 UTF-8 (CRLF), line 2 Latin-1
    os.write(write_fd, b"ok\n\xff")  # line 4 without a newline: numbering goes on across reads
    os.close(write_fd)
    warnings: list[str] = []
    with os.fdopen(read_fd, "r") as reader:
        lines = [line for chunk in read_chunks(reader, warn=warnings.append) for line in chunk]
    # one line per input line, none dropped
    assert lines == ["caf\u00e9", "caf\ufffd", "ok", "\ufffd"]
    assert [w.split(":")[0] for w in warnings] == ["line 2", "line 4"]
    assert "invalid UTF-8 at byte 3" in warnings[0]


def test_read_chunks_from_a_stream_without_a_file_descriptor():
    assert list(read_chunks(io.StringIO("a\n\nb\r\nc\n"), max_lines=2)) == [
        ["a", ""],
        ["b", "c"],
    ]


def test_read_chunks_numbers_invalid_utf8_lines_across_reads(tmp_path):
    path = tmp_path / "big.txt"
    path.write_bytes(b"a\n" * 40000 + b"caf\xe9\n" + b"b\n")  # more than one 64 KiB os.read
    warnings = []
    with open(path) as reader:
        lines = [line for chunk in read_chunks(reader, warn=warnings.append) for line in chunk]
    assert len(lines) == 40002 and lines[40000] == "caf\ufffd" and lines[-1] == "b"
    assert [w.split(":")[0] for w in warnings] == ["line 40001"]


@pytest.mark.parametrize("ending", [b"\n", b""])
def test_read_chunks_keeps_lines_longer_than_many_reads_whole(tmp_path, ending):
    # "é" is two bytes: with 64 KiB reads some of them are cut in the middle
    long = "é" * 300_001
    path = tmp_path / "long.txt"
    path.write_bytes(b"short\n" + long.encode() + b"\n" + b"x" * 70_000 + ending)
    with open(path) as reader:
        lines = [line for chunk in read_chunks(reader) for line in chunk]
    assert lines == ["short", long, "x" * 70_000]


def test_invalid_utf8_warnings_name_ten_lines_then_count_the_rest(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes(b"".join(b"caf\xe9 %d\nok\n" % i for i in range(25)))  # lines 1, 3, ..., 49
    warnings = []
    with open(path) as reader:
        lines = [line for chunk in read_chunks(reader, warn=warnings.append) for line in chunk]
    assert len(lines) == 50 and lines[48] == "caf\ufffd 24"
    assert [w.split(":")[0] for w in warnings[:-1]] == [f"line {n}" for n in range(1, 21, 2)]
    assert warnings[-1].startswith("15 more lines had invalid UTF-8 (lines 21-49;")


@pytest.mark.parametrize("encoding, shown", [("utf-16-le", "UTF-16LE"), ("utf-16", "UTF-16LE")])
def test_input_in_utf16_is_refused_not_read_as_lines_of_nul_bytes(tmp_path, encoding, shown):
    """Read as UTF-8, its NUL bytes after the last newline made one line more than it has."""
    path = tmp_path / "in.txt"
    path.write_bytes("A dog runs.\nA cat sleeps.\n".encode(encoding))
    with open(path) as reader, pytest.raises(TranslatorError, match=f"looks like {shown}") as err:
        list(read_chunks(reader))
    assert err.value.where == "stdin" and "iconv" in err.value.fix
    with pytest.raises(TranslatorError, match=f"looks like {shown}"):  # --src, --ref, --tgt
        read_lines(path)


@pytest.mark.parametrize(
    "head, expected",
    [
        ("a\u4e00\nb\u4e00\n".encode("utf-16-le"), "UTF-16LE"),  # 3 NULs in a row: not UTF-32
        ("a\nb\n".encode("utf-32-be"), "UTF-32BE"),
        ("Ein Hund.\nZwei.\n".encode("utf-16-be"), "UTF-16BE"),
        (b"\x00\n\x00\n", None),  # lines of NUL in UTF-8 (controls the cleaner drops), no text
        (b"a dog\x00\nruns\n", None),  # one stray NUL
    ],
)
def test_wide_encoding_tells_utf16_and_utf32_from_utf8_with_nul_bytes(head, expected):
    assert wide_encoding(head) == expected
