"""Joining the translations of an over-long line's pieces the way their script is written.

`translate` joins the pieces' texts with `join_pieces`, and `diagnostics.alignment` counts the
joined line's words through the same function, so the two cannot disagree about where a word
ends.
"""

from __future__ import annotations

from translator.scripts import UNSPACED, UNSPACED_WORDS, char_class


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


def no_word_spaces(char: str) -> bool:
    """Whether `char` is of a script that writes words without spaces between them."""
    return _unspaced(char) or any(low <= ord(char) <= high for low, high in UNSPACED_WORDS)


def no_word_spaces_class() -> str:
    """The characters no_word_spaces holds, as the inside of a regular expression's [...]."""
    return char_class(UNSPACED + UNSPACED_WORDS)
