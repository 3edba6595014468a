"""Joining the translations of an over-long line's pieces the way their script is written.

`translate` joins the pieces' texts with `join_pieces`, and `diagnostics.alignment` counts the
joined line's words through the same function, so the two cannot disagree about where a word
ends.
"""

from __future__ import annotations

# Scripts written without spaces between words or sentences: Han, kana, CJK punctuation and
# full-width forms (code point ranges). Hangul is not among them: Korean puts spaces between words.
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


def join_pieces(texts: list[str]) -> str:
    """The translations of an over-long line's pieces as one line: a space between two pieces, none
    where the text on either side is in a script written without spaces."""
    out = texts[0]
    for text in texts[1:]:
        out += "" if out and text and (_unspaced(out[-1]) or _unspaced(text[0])) else " "
        out += text
    return out


def first_words(texts: list[str]) -> list[int]:
    """Per piece, the index in the joined line (`join_pieces(texts)`, split on whitespace) of the
    piece's first word. Without a space at a join, the word that ends one piece and the word that
    starts the next are one word of the line."""
    return [
        len(join_pieces(texts[: i + 1]).split()) - len(text.split()) for i, text in enumerate(texts)
    ]


def _unspaced(char: str) -> bool:
    return any(low <= ord(char) <= high for low, high in UNSPACED)
