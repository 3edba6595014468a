"""Cutting an over-long source line into pieces the model can translate (translate.py's rule).

Once a line has more than `piece_limit` tokens it is cut after every sentence end (. ! ?), as
single-sentence models translate one sentence at a time best; a sentence still over the limit is
cut at the last clause end (; :) that fits, else at the last word start, else mid-word.
"""

from __future__ import annotations

import math

from translator.config import DecodeConfig
from translator.data.join import no_word_spaces

# Latin, CJK full-width, Devanagari danda, Arabic question mark and Urdu full stop
SENTENCE_END = (".", "!", "?", "。", "！", "？", "．", "।", "॥", "؟", "۔")
# Chinese and Japanese: the next sentence follows unspaced ("．" is also a decimal point)
UNSPACED_END = ("。", "！", "？")
# what SentencePiece's default normalisation (nmt_nfkc) makes of "！" and "？": ends too where an
# unspaced script's character follows them
NORMALISED_ENDS = ("!", "?")
CLAUSE_END = (";", ":")  # where a sentence over the limit is best cut
CLOSERS = "\"')]}»”’"  # may follow a sentence end: `"Stop." Then` ends at `."`
# fewer source tokens than this lose too much context; an output that then hits the length
# limit is warned about
MIN_PIECE_TOKENS = 16


def piece_limit(max_positions: int, decode: DecodeConfig) -> int:
    """Most source tokens one translated sequence may have: with its EOS it fits the positions,
    and so does the longest output max_len_a * tokens + max_len_b allows (else that output would be
    cut at max_positions - 1). Never under MIN_PIECE_TOKENS (or the positions, if fewer)."""
    positions = max_positions - 1  # beside the source's EOS or the output's BOS
    if decode.max_len_a == 0:  # the output limit does not grow with the source
        return positions
    fits = math.floor((positions - decode.max_len_b) / decode.max_len_a)
    return min(positions, max(fits, MIN_PIECE_TOKENS))


def split_long(ids: list[int], limit: int, pieces: list[str]) -> list[list[int]]:
    """Cut `ids` (with SentencePiece `pieces`) after every sentence end, then each sentence over
    `limit` into runs of <= limit, preferring clause ends, then word starts."""
    starts = [0, *(i for i in range(1, len(ids)) if _after_sentence_end(pieces, i)), len(ids)]
    return [
        run
        for start, end in zip(starts, starts[1:])
        for run in _split_sentence(ids[start:end], limit, pieces[start:end])
    ]


def _split_sentence(ids: list[int], limit: int, pieces: list[str]) -> list[list[int]]:
    """Cut one sentence into runs of <= limit, each cut at the best place _cut_rank finds."""
    out, start = [], 0  # cut by index: slicing off the rest at each cut is quadratic in length
    while len(ids) - start > limit:
        cut = max(range(start + 1, start + limit + 1), key=lambda i: _cut_rank(pieces, i))
        out.append(ids[start:cut])
        start = cut
    return [*out, ids[start:]]


def _word_start(piece: str) -> bool:
    return piece.startswith("\u2581")  # SentencePiece marks a preceding space with U+2581


def _after_sentence_end(pieces: list[str], i: int) -> bool:
    """Whether a sentence starts at piece i: a word start after a SENTENCE_END (and any closing
    quote), or any piece after a full-width one (no space follows it) or after "!" or "?" before
    Chinese or Japanese, not followed by a lower-case letter ("e.g. the", "approx. five")."""
    before = "".join(pieces[max(i - 3, 0) : i]).rstrip(CLOSERS)  # a quote may be a piece
    after = "".join(pieces[i : i + 2]).lstrip("\u2581")  # "▁" may be a piece of its own
    starts = (
        _word_start(pieces[i])
        or before.endswith(UNSPACED_END)
        or (before.endswith(NORMALISED_ENDS) and no_word_spaces(after[:1] or " "))
    )
    return starts and before.endswith(SENTENCE_END) and not after[:1].islower()


def _cut_rank(pieces: list[str], i: int) -> tuple[bool, bool, int]:
    """How good a cut before piece i is: after a clause end, at a word start, then the latest."""
    word_start = _word_start(pieces[i])
    return word_start and pieces[i - 1].endswith(CLAUSE_END), word_start, i
