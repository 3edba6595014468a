"""Pieces to words, merged maps and Pharaoh alignments on hand-made attention."""

from __future__ import annotations

import torch
from hypothesis import given
from hypothesis import strategies as st

from tests.data.conftest import multi30k_lines
from translator.data.tokenizer import Tokenizer, train_sentencepiece
from translator.diagnostics.words import alignment, merge_words, pharaoh, word_ids, word_labels

W = "\u2581"


def test_words_start_at_the_space_mark_and_specials_stand_alone():
    pieces = ["<s>", f"{W}Ein", f"{W}Hund", "e", f"{W}läuft", ".", "</s>"]
    assert word_ids(pieces) == [0, 1, 2, 2, 3, 3, 4]
    assert word_labels(pieces) == ["<s>", "Ein", "Hunde", "läuft.", "</s>"]
    # a first piece without the mark is still a word
    assert word_ids(["un", f"{W}do", "ne"]) == [0, 1, 1]


def test_words_of_sentencepiece_pieces_are_the_lines_whitespace_words(tmp_path):
    # characters the vocabulary lacks become <unk> pieces inside their word, not words of their own
    lines = multi30k_lines("train", "en", 1000)
    tokenizer = Tokenizer(train_sentencepiece(lines, tmp_path / "spm", vocab_size=300))
    odd = ["A dog \u263a runs on the beach.", "A <dog> runs.", "\u263a", "x \u263a\u263a y"]
    for line in odd + lines[:200]:
        pieces = tokenizer.sp.id_to_piece(tokenizer.encode([line])[0])
        assert max(word_ids(pieces)) + 1 == len(line.split()), (line, pieces)


def char_level_words(pieces: list[str]) -> list[int]:
    """The reference: the pieces' text (U+2581 a space) split at spaces; each piece is in the word
    of its first non-space character, a piece of spaces alone in the next word (else the last)."""
    text = "".join(p.replace(W, " ") for p in pieces)
    word_of, word, inside = [], -1, False  # per character
    for ch in text:
        if ch != " " and not inside:
            word += 1
        inside = ch != " "
        word_of.append(word if inside else None)
    out, at = [], 0
    for p in pieces:  # the word of its first non-space character, or of the next one
        later = [w for w in word_of[at:] if w is not None]
        out.append(later[0] if later else max(word, 0))
        at += len(p)
    return out


@given(
    # SentencePiece's pieces carry U+2581 at their start only
    st.lists(st.sampled_from([W, f"{W}a", "b", f"{W}cd", "e", f"{W}{W}"]), max_size=9)
)
def test_a_piece_of_spaces_alone_starts_no_word(pieces):
    # a model can emit a bare U+2581 anywhere: the text then has a double or trailing space
    assert word_ids(pieces) == char_level_words(pieces)
    if pieces and "".join(pieces).strip(W):
        text = "".join(pieces).replace(W, " ")
        assert max(word_ids(pieces)) + 1 == len(text.split())


def test_merge_sums_key_pieces_and_averages_query_pieces():
    rows, cols = [f"{W}a", "b", f"{W}c"], [f"{W}x", f"{W}y", "z"]
    weights = torch.tensor([[0.1, 0.2, 0.7], [0.5, 0.25, 0.25], [1.0, 0.0, 0.0]])
    merged = merge_words(weights, rows, cols)
    expected = torch.tensor([[(0.1 + 0.5) / 2, (0.9 + 0.5) / 2], [1.0, 0.0]])
    torch.testing.assert_close(merged, expected)
    # leading dims kept
    torch.testing.assert_close(merge_words(weights[None, None], rows, cols)[0, 0], expected)


def test_alignment_picks_the_source_word_with_most_mass():
    src = [f"{W}A", f"{W}bl", "ue", f"{W}car"]  # words: A, blue, car
    tgt = [f"{W}Ein", f"{W}blau", "es", f"{W}Auto"]  # words: Ein, blaues, Auto
    cross = torch.tensor(
        [
            [0.8, 0.1, 0.0, 0.1],
            [0.1, 0.3, 0.3, 0.3],  # "bl"+"ue" = 0.6 beats "car" 0.3 only once pieces are summed
            [0.0, 0.2, 0.2, 0.6],  # with its word "blau": (0.6 + 0.4) / 2 against (0.3 + 0.6) / 2
            [0.1, 0.0, 0.1, 0.8],
        ]
    )
    pairs = alignment(cross, src, tgt)
    assert pairs == [(0, 0), (1, 1), (2, 2)]
    assert pharaoh(pairs) == "0-0 1-1 2-2"
    reordered = alignment(
        torch.eye(4).flip(0), [f"{W}{c}" for c in "abcd"], [f"{W}{c}" for c in "wxyz"]
    )
    assert pharaoh(reordered) == "3-0 2-1 1-2 0-3"


def test_alignment_ignores_eos_and_padding_beyond_the_pieces():
    cross = torch.zeros(5, 6)
    cross[:, 4] = 0.9  # all the mass on the source EOS (and padding) columns, which are cut off
    cross[0, 1], cross[1, 0] = 0.05, 0.05
    assert alignment(cross, [f"{W}a", f"{W}b"], [f"{W}x", f"{W}y"]) == [(1, 0), (0, 1)]
    assert alignment(cross, [f"{W}a"], []) == [] and pharaoh([]) == ""


def test_alignments_count_only_the_words_the_text_shows():
    """Tokenizer.decode drops <unk>: a word of <unk> pieces alone is not in the text, so its pair
    goes and the words after it are numbered as the text has them."""
    from translator.data.tokenizer import UNK_ID
    from translator.diagnostics.alignment import printed

    pieces = ["<unk>", "\u2581auf", "<unk>", "\u2581", "<unk>", "\u2581dem"]
    ids = [UNK_ID, 10, UNK_ID, 5, UNK_ID, 11]
    # words: <unk> | ▁auf <unk> (shown: "auf") | ▁ <unk> (nothing shown) | ▁dem
    pairs = [(9, 0), (0, 1), (4, 2), (3, 3)]
    assert printed(pairs, pieces, ids) == [(0, 0), (3, 1)]
    assert printed(pairs, pieces, [10, 10, 11, 5, 12, 11]) == pairs  # no <unk>: as they were
