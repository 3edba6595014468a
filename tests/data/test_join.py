"""Over-long lines' pieces joined as their script is written, and where each piece's words land."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from translator.data.join import first_words, join_pieces

WORDS = st.sampled_from(["dog", "Hund.", "日本語", "第3句。", "。", "ok", "猫が", "a1"])
TEXTS = st.lists(st.lists(WORDS, max_size=4).map(" ".join), min_size=1, max_size=5)


def word_index_in_line(texts: list[str]) -> list[list[int]]:
    """Per piece, each of its words' index among the whitespace-separated words of the joined
    line, found by locating the piece in the line's characters (not through `first_words`)."""
    line, pos, out = join_pieces(texts), 0, []
    for text in texts:
        start = line.index(text, pos)
        out.append(
            [len(line[: start + m.start() + 1].split()) - 1 for m in re.finditer(r"\S+", text)]
        )
        pos = start + len(text)
    return out


def test_a_join_without_a_space_glues_the_words_on_either_side():
    texts = ["Hallo Welt。", "你好 世界", "ok"]
    assert join_pieces(texts) == "Hallo Welt。你好 世界ok"
    assert first_words(texts) == [0, 1, 2]  # Welt。你好 and 世界ok are one word each
    assert first_words(["dog runs", "Hund"]) == [0, 2]


@given(TEXTS)
def test_first_words_index_the_joined_line(texts):
    expected = word_index_in_line(texts)
    for text, first, indices in zip(texts, first_words(texts), expected):
        assert [first + j for j in range(len(text.split()))] == indices
