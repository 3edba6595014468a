"""Local line files (a text pair side, TSV) into Arrow: lines end at "\\n" only.

Python's universal newlines and `str.splitlines`, which `datasets`' text builder uses, also end
a line at a CR, form feed, U+0085 or U+2028: one such character inside a sentence splits it in
two and shifts every later pair. Here those characters stay text, for the cleaner.
"""

from __future__ import annotations

import errno
import gzip
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from translator.errors import TranslatorError, counted


def tsv_rows(path: Path, columns: list[str], skip: int) -> Iterator[dict[str, list[str]]]:
    """Column -> values, a block of rows at a time; quotes are text, a row with another field count
    is refused."""
    number = 0  # lines before this block
    for lines in line_blocks(path):
        # blank: an empty pair
        rows = [line.split("\t") if line else [""] * len(columns) for line in lines[skip:]]
        for i, row in enumerate(rows):
            if len(row) != len(columns):
                raise TranslatorError(
                    f"{counted(len(row), 'tab-separated field')}, but {len(columns)} columns "
                    "are named "
                    f"({', '.join(columns)})",
                    f"{path}:{number + skip + i + 1}",
                    "give every row one field per column (and no tab inside a sentence)",
                )
        number += len(lines)
        skip = 0
        yield {name: [row[j] for row in rows] for j, name in enumerate(columns)}


def line_blocks(path: Path, block_bytes: int = 1 << 24) -> Iterator[list[str]]:
    """A (possibly gzipped) UTF-8 file's lines, a block at a time, split on "\\n" only.

    A CR before the newline is the line ending (CRLF) and goes; any other CR is text, except in a
    file with no newline at all: lines that end in a CR alone (classic Mac OS) are refused, as
    they would be one long line. A byte-order mark at the start goes (Windows editors write it).
    """
    number, rest = 0, b""  # lines before this block; an unfinished last line
    with open_maybe_gz(path) as handle:
        while True:
            data = handle.read(block_bytes)
            block = rest + data
            cut = block.rfind(b"\n") + 1 if data else len(block)  # whole lines only, until the end
            block, rest = block[:cut], block[cut:]
            if block:
                try:
                    text = block.decode("utf-8")
                except UnicodeDecodeError as err:
                    line = number + block.count(b"\n", 0, err.start) + 1
                    raise TranslatorError(
                        "invalid UTF-8", f"{path}:{line}", "re-encode the file as UTF-8"
                    ) from None
                if not number:
                    text = text.removeprefix("\ufeff")
                    if not data and "\r" in text.removesuffix("\r"):  # the file, and no "\n"
                        raise TranslatorError(
                            "its lines end with CR alone (classic Mac OS); lines end at LF here",
                            str(path),
                            "convert the line ends to LF, e.g. with tr '\\r' '\\n'",
                        )
                lines = text.split("\n")
                if text.endswith("\n"):
                    lines.pop()
                lines = [line.removesuffix("\r") for line in lines]  # CRLF, or a CR ending the file
                number += len(lines)
                yield lines
            if not data:
                return


def lines_dataset(
    datasets,
    path: Path,
    blocks: Iterator[dict[str, list[str]]],
    columns: list[str],
    cache_dir: Path | None,
):
    """A `datasets.Dataset` of string columns from blocks of values: an Arrow file in `cache_dir`,
    memory-mapped (in memory without a cache_dir)."""
    import pyarrow as pa

    schema = pa.schema([(name, pa.string()) for name in columns])
    try:
        if cache_dir is None:
            batches = [pa.record_batch(block, schema=schema) for block in blocks]
            return datasets.Dataset(
                datasets.table.InMemoryTable(pa.Table.from_batches(batches, schema))
            )
        cache_dir.mkdir(parents=True, exist_ok=True)
        fd, arrow = tempfile.mkstemp(prefix=f"{path.name}.", suffix=".arrow", dir=cache_dir)
        with os.fdopen(fd, "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
            for block in blocks:
                writer.write_batch(pa.record_batch(block, schema=schema))
        return datasets.Dataset.from_file(arrow)
    except TranslatorError:
        raise
    except OSError as err:
        if write_failure(err) is not None:  # the cache ran out of room: not the input's fault
            raise TranslatorError(
                f"cannot write the datasets cache: {err.strerror}",
                str(cache_dir),
                "free some space (or point data.data_dir elsewhere)",
            ) from None
        raise TranslatorError(
            f"cannot read file: {err.strerror or err}", str(path), "check the file"
        ) from None
    except EOFError:  # a gzip file cut short
        raise TranslatorError(
            "the file ends early (truncated .gz?)", str(path), "check the file"
        ) from None


def write_failure(err: BaseException | None) -> OSError | None:
    """The OSError in an exception's chain that says the disk is full (or read-only), if any."""
    while err is not None:
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
            return err
        err = err.__cause__ or err.__context__
    return None


def open_maybe_gz(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")
