"""Cleaning rules for training pairs, applied batch by batch; every dropped pair is counted under
its rule.

Text rules (`Cleaner`) run while the corpus streams in; duplicates are found afterwards from 8-byte
digests (`Cleaner.first_occurrences`), and length rules need token counts, so they run on the
SentencePiece ids (`length_filter`). Memory stays bounded: 8 bytes per pair, not the text.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable
from functools import cache

import numpy as np

from translator.config import DataConfig

# rule names as the report shows them, in the order they are applied
EMPTY, DEBRIS, HELD_OUT, DUPLICATE, TOO_LONG, RATIO = (
    "empty side",
    "markup debris",
    "in valid/test",
    "duplicate pair",
    "too long",
    "length ratio",
)
RULES = (EMPTY, DEBRIS, HELD_OUT, DUPLICATE, TOO_LONG, RATIO)

# C0/C1 controls that are not whitespace (CR, VT, FF, \x1c-\x1f and NEL separate words: \s makes
# them a space)
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1b\x7f-\x84\x86-\x9f\u200b\ufeff]")
_SPACE = re.compile(r"\s+")  # Python's \s: TAB, NO-BREAK SPACE and every other Unicode space
_ALNUM = re.compile(r"[^\W_]")  # a letter or digit in any script (str.isalnum)
_MARKUP = re.compile(r"<[^<>]*>|&#?\w+;")  # an HTML/XML tag or entity


def normalize(text: str, nfc: bool = True, spaces: bool = True) -> str:
    """Control characters removed; each whitespace run (CR and the like too) one space; trimmed;
    then NFC.

    Never a newline; a whitespace-like control becomes a space, so `foo\\rbar` is two words, not
    one.

    NFC comes last: removing a control character can bring a letter and a combining mark together.
    """
    if not spaces:
        text = text.replace("\n", " ")  # one sentence per line, whatever the other rules say
    # fast path: a printable string has no control character and no space but U+0020
    elif not text.isprintable() or "  " in text:
        text = _SPACE.sub(" ", _CONTROL.sub("", text)).strip()
    else:
        text = text.strip()
    return unicodedata.normalize("NFC", text) if nfc else text


def holds_removed(text: str) -> bool:
    """Whether `normalize` (with its whitespace rule on) removes characters of `text`: controls,
    zero-width spaces, byte-order marks. A model trained on cleaned text never writes them."""
    return _CONTROL.search(text) is not None


def is_debris(text: str) -> bool:
    """A non-empty side that is only markup: no letter or digit once tags and entities are gone
    (`@@`, `<br/>`).

    An empty side is the empty rule's business, so that each rule can be switched off alone.
    """
    if "<" in text or "&" in text:
        text = _MARKUP.sub(" ", text)
    return bool(text) and _ALNUM.search(text) is None


# what rules_digest feeds the rules: each code point below U+3100 (the controls, spaces, Latin,
# combining marks, Greek, Cyrillic, ... CJK punctuation, kana) between letters and spaces, plus
# markup and bare-symbol sides
_PROBES = tuple(f"a{chr(c)}b" for c in range(0x3100)) + tuple(
    f" a  {chr(c)} b\t" for c in range(0x3100)
)
_DEBRIS_PROBES = ("@@", "<br/>", "&amp;", "&#39;", "<b>x</b>", "a &amp; b", "<>", "-", "1", "")


@cache
def rules_digest(nfc: bool = True, spaces: bool = True) -> str:
    """What the text rules do, not which version wrote them: a sha256 of normalize's output on
    every probe, is_debris on markup, and a pair digest. Data cleaned by rules that differ on any
    probe records another digest (prepared.py), whether or not anyone remembered to bump a
    version."""
    digest = hashlib.sha256()
    for probe in _PROBES:
        digest.update(normalize(probe, nfc, spaces).encode("utf-8", "surrogatepass") + b"\0")
    digest.update(bytes(is_debris(p) for p in _DEBRIS_PROBES))
    digest.update(pair_digest("a b", "c"))
    return digest.hexdigest()[:16]


def pair_digest(src: str, tgt: str) -> bytes:
    """8-byte blake2b of a pair; the length prefix keeps ("a b", "c") apart from ("a", "b c")."""
    return hashlib.blake2b(f"{len(src)}:{src}{tgt}".encode(), digest_size=8).digest()


class Cleaner:
    """Normalises and filters training pairs batch by batch; `drops` counts each dropped pair by
    rule."""

    def __init__(self, data: DataConfig, held_out: Iterable[str] = ()) -> None:
        self.data = data
        self.held_out = {self.normalize(s) for s in held_out} if data.drop_held_out else set()
        self.drops = Counter(dict.fromkeys(RULES, 0))  # every rule shows in the report, zeros too
        self.pairs_in = 0
        # joined per batch: one bytes object per batch, not per pair
        self._digests: list[bytes] = []

    def normalize(self, text: str) -> str:
        return normalize(text, self.data.nfc, self.data.normalize_spaces)

    def __call__(self, src: list[str], tgt: list[str]) -> tuple[list[str], list[str]]:
        """The normalised pairs of one batch that pass the text rules."""
        data, held_out, drops = self.data, self.held_out, self.drops
        out_src, out_tgt = [], []
        for s, t in zip(map(self.normalize, src), map(self.normalize, tgt)):
            if data.drop_empty and (not s or not t):
                drops[EMPTY] += 1
            elif data.drop_debris and (is_debris(s) or is_debris(t)):
                drops[DEBRIS] += 1
            elif s in held_out or t in held_out:
                drops[HELD_OUT] += 1
            else:
                out_src.append(s)
                out_tgt.append(t)
        self.pairs_in += len(src)
        if data.dedup:
            self._digests.append(b"".join(map(pair_digest, out_src, out_tgt)))
        return out_src, out_tgt

    def first_occurrences(self, count: int) -> np.ndarray:
        """(count,) bool over the pairs that passed: True unless an earlier pair was identical."""
        keep = np.ones(count, dtype=bool)
        if self.data.dedup and count:
            digests = np.frombuffer(b"".join(self._digests), dtype=np.uint64)
            # index of each digest's first occurrence
            _, first = np.unique(digests, return_index=True)
            keep[:] = False
            keep[first] = True
            self.drops[DUPLICATE] += count - len(first)
        self._digests = []
        return keep


def length_filter(
    src_lens: np.ndarray, tgt_lens: np.ndarray, max_tokens: int, max_ratio: float, drops: Counter
) -> np.ndarray:
    """(N,) bool: pairs within the token-length limits (0 = no limit); adds the dropped ones to
    `drops`."""
    too_long = np.zeros(len(src_lens), dtype=bool)
    if max_tokens:
        too_long = (src_lens > max_tokens) | (tgt_lens > max_tokens)
    skewed = np.zeros(len(src_lens), dtype=bool)
    if max_ratio:
        skewed = np.maximum(src_lens, tgt_lens) > max_ratio * np.maximum(
            1, np.minimum(src_lens, tgt_lens)
        )
        skewed &= ~too_long
    drops[TOO_LONG] += int(too_long.sum())
    drops[RATIO] += int(skewed.sum())
    return ~(too_long | skewed)


def source_text(line: str, data: DataConfig | None) -> str:
    """One input line as the tokenizer gets it (see translate.translate_lines)."""
    if data is None:
        return line.strip()
    return normalize(line, data.nfc, data.normalize_spaces).strip()
