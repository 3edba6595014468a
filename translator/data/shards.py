"""Token-id storage: one flat memory-mapped array per split and side, plus row offsets.

`{prefix}.ids.npy` holds every sequence back to back (uint16 when the vocabulary fits, else
int32); `{prefix}.offsets.npy` (int64, n+1) marks where row i starts and ends. Training reads
rows through the memory map, so a 4.5M-pair corpus opens in milliseconds.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np

from translator.errors import TranslatorError

PREPARE_AGAIN = "prepare it again: `translator prepare CONFIG --force`, with the same --set/--data"


def id_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= np.iinfo(np.uint16).max + 1 else np.dtype(np.int32)


def write_ids(prefix: Path, seqs: list[list[int]], vocab_size: int) -> int:
    """Write all rows at once (small splits); returns the token count."""
    with IdWriter(prefix, vocab_size) as writer:
        writer.append(seqs)
    return writer.tokens


class IdWriter:
    """Appends rows of ids to `{prefix}.ids.npy` + `.offsets.npy` without holding them in memory.

    Rows go to a raw file as they come; `close` copies it, in chunks, behind an .npy header (whose
    shape is known only then) and writes the offsets.
    """

    CHUNK = 1 << 24  # ids copied at a time when closing

    def __init__(self, prefix: Path, vocab_size: int) -> None:
        self.prefix, self.dtype = Path(prefix), id_dtype(vocab_size)
        self.raw_path = Path(f"{prefix}.ids.raw")
        self.raw = open(self.raw_path, "wb")
        self.lengths: list[np.ndarray] = []
        self.tokens = 0

    def append(self, rows: list[list[int]]) -> None:
        lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        count = int(lengths.sum())
        np.fromiter(itertools.chain.from_iterable(rows), dtype=self.dtype, count=count).tofile(
            self.raw
        )
        self.lengths.append(lengths)
        self.tokens += count

    def close(self) -> None:
        self.raw.close()
        raw = (
            np.memmap(self.raw_path, dtype=self.dtype, mode="r")
            if self.tokens
            else np.zeros(0, self.dtype)
        )
        out = np.lib.format.open_memmap(
            f"{self.prefix}.ids.npy", mode="w+", dtype=self.dtype, shape=(self.tokens,)
        )
        for start in range(0, self.tokens, self.CHUNK):
            out[start : start + self.CHUNK] = raw[start : start + self.CHUNK]
        out.flush()
        del out, raw
        self.raw_path.unlink()
        lengths = np.concatenate(self.lengths) if self.lengths else np.zeros(0, dtype=np.int64)
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        np.save(f"{self.prefix}.offsets.npy", offsets)

    def __enter__(self) -> IdWriter:
        return self

    def __exit__(self, kind, value, traceback) -> None:
        if kind is None:
            self.close()
        else:
            self.raw.close()


class TokenArray:
    """Read-only rows of token ids backed by a memory map."""

    def __init__(self, prefix: Path) -> None:
        self.ids = _load(Path(f"{prefix}.ids.npy"), mmap_mode="r")
        self.offsets = _load(Path(f"{prefix}.offsets.npy"))
        end = int(self.offsets[-1]) if len(self.offsets) else None
        if end != len(self.ids):  # the two files are not of one prepare
            raise TranslatorError(
                f"damaged token ids: the offsets end at {end} but {prefix}.ids.npy holds "
                f"{len(self.ids)} ids",
                f"{prefix}.offsets.npy",
                PREPARE_AGAIN,
            )
        self.lengths = np.diff(self.offsets)  # (N,) tokens per row, without BOS/EOS

    @classmethod
    def from_rows(cls, rows: list[list[int]]) -> TokenArray:
        """Rows held in memory (one epoch's sampled segmentation), read the same way."""
        array = cls.__new__(cls)
        array.lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))  # (N,)
        array.offsets = np.concatenate([[0], np.cumsum(array.lengths)])  # (N + 1,)
        flat = itertools.chain.from_iterable(rows)
        array.ids = np.fromiter(flat, dtype=np.int32, count=int(array.offsets[-1]))
        return array

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> list[int]:
        return self.ids[self.offsets[i] : self.offsets[i + 1]].tolist()


def _load(path: Path, mmap_mode: str | None = None) -> np.ndarray:
    """An .npy array; a missing or truncated file is one line naming it, not numpy's traceback."""
    try:
        return np.load(path, mmap_mode=mmap_mode)
    except (OSError, ValueError, EOFError) as err:  # truncated: "mmap length is greater than..."
        what = "missing" if isinstance(err, FileNotFoundError) else f"damaged token ids ({err})"
        raise TranslatorError(what, str(path), PREPARE_AGAIN) from None
