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


# Scripts whose words have no spaces between them, though their phrases do: Thai, Lao, Burmese,
# Khmer (joined with a space above, as their phrases are)
UNSPACED_WORDS = ((0x0E00, 0x0EFF), (0x1000, 0x109F), (0x1780, 0x17FF))


def _unspaced(char: str) -> bool:
    return any(low <= ord(char) <= high for low, high in UNSPACED)


def no_word_spaces(char: str) -> bool:
    """Whether `char` is of a script that writes words without spaces between them."""
    return _unspaced(char) or any(low <= ord(char) <= high for low, high in UNSPACED_WORDS)


def no_word_spaces_class() -> str:
    """The characters no_word_spaces holds, as the inside of a regular expression's [...]."""
    return "".join(f"\\U{low:08x}-\\U{high:08x}" for low, high in UNSPACED + UNSPACED_WORDS)
