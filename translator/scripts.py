"""Scripts written without spaces between words, as Unicode code point ranges: one table for
where translated pieces join without a space (data/join.py), where a term needs no word boundary
(terminology.py), and which BLEU tokenizer references need (bleu.py)."""

from __future__ import annotations

# Han, kana, CJK punctuation and full-width forms: no spaces between words or sentences
UNSPACED = (
    (0x2E80, 0x2FDF),
    (0x3000, 0x312F),
    (0x31A0, 0x31FF),
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xF900, 0xFAFF),
    (0xFE30, 0xFE4F),
    (0xFF00, 0xFF9F),
    (0x20000, 0x3FFFF),
)
# Thai, Lao, Burmese, Khmer: no spaces between words, though their phrases have them
UNSPACED_WORDS = ((0x0E00, 0x0EFF), (0x1000, 0x109F), (0x1780, 0x17FF))
# Hangul: Korean puts spaces between words (not unspaced), but BLEU tokenizes it as its own
HANGUL = ((0x1100, 0x11FF), (0x3130, 0x318F), (0xAC00, 0xD7AF))


def char_class(ranges: tuple[tuple[int, int], ...]) -> str:
    """`ranges` as the inside of a regular expression's [...]."""
    return "".join(f"\\U{low:08x}-\\U{high:08x}" for low, high in ranges)
