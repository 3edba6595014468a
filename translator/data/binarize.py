"""The streaming passes of `prepare` over the training split, each in bounded memory.

1. `clean_to_scratch`: Arrow batches -> text rules -> normalised pairs in two scratch text files
   (one sentence per line), plus the pair digests for deduplication.
2. `sample_lines`: a seeded sample of the kept pairs' sentences, fed to SentencePiece.
3. `encode_to_ids`: the kept pairs in chunks -> ids -> length rules -> flat id arrays (IdWriter).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from translator.data.clean import Cleaner, length_filter
from translator.data.corpus import pair_batches
from translator.data.shards import IdWriter
from translator.data.tokenizer import UNK_ID, Tokenizer

CHUNK = 20_000  # pairs per batch: large enough for vectorised work, small enough to stay in cache
Advance = Callable[[int], None]


def clean_to_scratch(
    table, src_lang: str, tgt_lang: str, cleaner: Cleaner, scratch: Path, advance: Advance
) -> int:
    """Write the pairs that pass the text rules to scratch/clean.{src,tgt}; returns their count."""
    count = 0
    with (
        open(scratch / "clean.src", "w", encoding="utf-8", newline="\n") as out_src,
        open(scratch / "clean.tgt", "w", encoding="utf-8", newline="\n") as out_tgt,
    ):
        for raw_src, raw_tgt in pair_batches(table, src_lang, tgt_lang, CHUNK):
            src, tgt = cleaner(raw_src, raw_tgt)
            if src:
                out_src.write("\n".join(src) + "\n")
                out_tgt.write("\n".join(tgt) + "\n")
            count += len(src)
            advance(len(raw_src))
    return count


def scratch_chunks(
    scratch: Path, keep: np.ndarray, size: int = CHUNK
) -> Iterator[tuple[list[str], list[str]]]:
    """The kept (`keep` mask) pairs of the scratch files, `size` lines read at a time."""
    with (
        open(scratch / "clean.src", encoding="utf-8", newline="\n") as f_src,
        open(scratch / "clean.tgt", encoding="utf-8", newline="\n") as f_tgt,
    ):
        for start in range(0, len(keep), size):
            src = [line[:-1] for line in itertools.islice(f_src, size)]
            tgt = [line[:-1] for line in itertools.islice(f_tgt, size)]
            mask = keep[start : start + len(src)]
            if not mask.all():
                src = list(itertools.compress(src, mask))
                tgt = list(itertools.compress(tgt, mask))
            yield src, tgt


def sample_mask(keep: np.ndarray, size: int, seed: int) -> np.ndarray:
    """(N,) bool: a seeded random choice of at most `size` of the kept rows (all of them when size
    is 0)."""
    kept = np.flatnonzero(keep)
    if not size or size >= len(kept):
        return keep.copy()
    take = np.zeros(len(keep), dtype=bool)
    take[np.random.default_rng(seed).choice(kept, size, replace=False)] = True
    return take


def sample_lines(
    scratch: Path, take: np.ndarray, sides: tuple[str, ...], advance: Advance
) -> Iterator[str]:
    """Sentences of the sampled pairs, for SentencePiece: each pair gives one line per side in
    `sides`."""
    for src, tgt in scratch_chunks(scratch, take):
        for side in sides:
            yield from src if side == "src" else tgt
        advance(len(src) * len(sides))


def encode_to_ids(
    scratch: Path,
    keep: np.ndarray,
    out: Path,
    tokenizers: dict[str, Tokenizer],
    max_tokens: int,
    max_ratio: float,
    drops: Counter,
    advance: Advance,
) -> dict[str, int]:
    """Encode the kept pairs into out/train.{src,tgt}.{ids,offsets}.npy; returns pair and token
    counts, and per side the <unk> and all tokens of the pairs not too long for
    max_tokens_per_side, counted before the ratio rule (a vocabulary that lacks the text's script
    turns a side into short <unk> runs, which that rule may drop; a pair too long is dropped
    whatever its pieces, and one junk line of a megabyte would outweigh the corpus)."""
    writers = {
        side: IdWriter(out / f"train.{side}", tokenizers[side].vocab_size)
        for side in ("src", "tgt")
    }
    pairs = 0
    unk = {side: {"unk": 0, "tokens": 0} for side in ("src", "tgt")}
    for src, tgt in scratch_chunks(scratch, keep):
        ids = {"src": tokenizers["src"].encode(src), "tgt": tokenizers["tgt"].encode(tgt)}
        lengths = {
            side: np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
            for side, rows in ids.items()
        }
        fits = length_filter(lengths["src"], lengths["tgt"], max_tokens, max_ratio, drops)
        short = np.ones(len(src), dtype=bool)  # not too long for max_tokens_per_side
        if max_tokens:
            short = (lengths["src"] <= max_tokens) & (lengths["tgt"] <= max_tokens)
        for side, rows in ids.items():
            unk[side]["unk"] += sum(row.count(UNK_ID) for row in itertools.compress(rows, short))
            unk[side]["tokens"] += int(lengths[side][short].sum())
            writers[side].append(rows if fits.all() else list(itertools.compress(rows, fits)))
        pairs += int(fits.sum())
        advance(len(src))
    for writer in writers.values():
        writer.close()
    return {
        "pairs": pairs,
        "src_tokens": writers["src"].tokens,
        "tgt_tokens": writers["tgt"].tokens,
        "unk": unk,
    }
