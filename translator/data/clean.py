"""Cleaning rules for training pairs; every dropped pair is counted under its rule's name."""

from __future__ import annotations

import re
import unicodedata
from collections import Counter

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b\ufeff]")
_SPACE = re.compile(r"\s+")  # TAB, NO-BREAK SPACE and other Unicode spaces included


def normalize(text: str) -> str:
    """NFC, control characters removed, any run of whitespace turned into one space, trimmed."""
    return _SPACE.sub(" ", _CONTROL.sub("", unicodedata.normalize("NFC", text))).strip()


def is_debris(text: str) -> bool:
    """A side with no letter or digit at all (e.g. Multi30k's `@@` lines) carries no sentence."""
    return not any(ch.isalnum() for ch in text)


def clean_pairs(src: list[str], tgt: list[str], held_out: set[str]) -> tuple[list[str], list[str], Counter]:
    """Normalise and filter training pairs; `held_out` holds normalised valid/test sentences.

    Length rules need token counts and run after SentencePiece (see `length_filter`).
    """
    drops: Counter = Counter()
    seen: set[tuple[str, str]] = set()
    out_src, out_tgt = [], []
    for s, t in zip(src, tgt):
        s, t = normalize(s), normalize(t)
        if not s or not t:
            drops["empty side"] += 1
        elif is_debris(s) or is_debris(t):
            drops["markup debris"] += 1
        elif s in held_out or t in held_out:
            drops["in valid/test"] += 1
        elif (s, t) in seen:
            drops["duplicate pair"] += 1
        else:
            seen.add((s, t))
            out_src.append(s)
            out_tgt.append(t)
    return out_src, out_tgt, drops


def length_filter(src_ids: list[list[int]], tgt_ids: list[list[int]], max_tokens: int,
                  max_ratio: float) -> tuple[list[int], Counter]:
    """Indices of pairs within the token-length limits, and the drops per rule."""
    keep, drops = [], Counter()
    for i, (s, t) in enumerate(zip(src_ids, tgt_ids)):
        if len(s) > max_tokens or len(t) > max_tokens:
            drops["too long"] += 1
        elif max_ratio and max(len(s), len(t)) > max_ratio * max(1, min(len(s), len(t))):
            drops["length ratio"] += 1
        else:
            keep.append(i)
    return keep, drops
