"""Token-id storage: one flat memory-mapped array per split and side, plus row offsets.

`{prefix}.ids.npy` holds every sequence back to back (uint16 when the vocabulary fits, else
int32); `{prefix}.offsets.npy` (int64, n+1) marks where row i starts and ends. Training reads
rows through the memory map, so a 4.5M-pair corpus opens in milliseconds.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def id_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= np.iinfo(np.uint16).max + 1 else np.dtype(np.int32)


def write_ids(prefix: Path, seqs: list[list[int]], vocab_size: int) -> None:
    lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
    offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.fromiter((t for s in seqs for t in s), dtype=id_dtype(vocab_size), count=int(offsets[-1]))
    np.save(f"{prefix}.ids.npy", flat)
    np.save(f"{prefix}.offsets.npy", offsets)


class TokenArray:
    """Read-only rows of token ids backed by a memory map."""

    def __init__(self, prefix: Path) -> None:
        self.ids = np.load(f"{prefix}.ids.npy", mmap_mode="r")
        self.offsets = np.load(f"{prefix}.offsets.npy")

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def __getitem__(self, i: int) -> list[int]:
        return self.ids[self.offsets[i]:self.offsets[i + 1]].tolist()
