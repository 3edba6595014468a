"""On a model trained to copy, cross-attention sharpens and its alignments are the diagonal."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from tests.data.test_join import word_index_in_line
from tests.diagnostics.conftest import sentences
from translator import translate
from translator.data.join import join_pieces
from translator.diagnostics.alignment import align
from translator.errors import TranslatorError


def test_cross_attention_entropy_falls_during_training(copy_model):
    assert copy_model.entropy_before > 0.8  # a fresh model attends almost uniformly
    assert copy_model.entropy_after < 0.5 * copy_model.entropy_before


def test_alignments_of_a_copy_model_are_the_diagonal(copy_model):
    pairs = align(copy_model.model, copy_model.tokenizer, copy_model.probe, copy_model.probe)
    on_diagonal = sum(s == t for sentence in pairs for s, t in sentence)
    total = sum(len(sentence) for sentence in pairs)
    words = sum(len(line.split()) for line in sentences(16, seed=99))
    assert total == words  # one pair per target word
    assert on_diagonal >= 0.95 * total


@pytest.mark.parametrize(
    "beam_size,nbest,batch_tokens",
    [(1, 1, 4096), (3, 1, 12), (3, 3, 4096)],
    ids=["greedy", "beam-batched", "nbest"],
)
def test_translate_alignments_with_batches_beams_and_nbest(
    copy_model, beam_size, nbest, batch_tokens
):
    lines = sentences(12, seed=7) + [""]
    decode = dataclasses.replace(
        copy_model.cfg.decode, beam_size=beam_size, batch_tokens=batch_tokens
    )
    out = translate.translate_lines(
        copy_model.model, copy_model.tokenizer, lines, decode, nbest, alignment_layer=0
    )
    plain = translate.translate_lines(copy_model.model, copy_model.tokenizer, lines, decode, nbest)
    assert [[h[:2] for h in hyps] for hyps in out] == plain  # alignments change no translation
    assert out[-1] == [("", plain[-1][0][1], "")]  # an empty line: no words to align
    diagonal = 0
    for line, hyps in zip(lines[:-1], out):
        assert len(hyps) == nbest
        for text, _, pharaoh in hyps:  # every hypothesis, not only the best, gets its own alignment
            pairs = [tuple(map(int, p.split("-"))) for p in pharaoh.split()]
            assert [t for _, t in pairs] == list(range(len(text.split())))
            assert all(0 <= s < len(line.split()) for s, _ in pairs)
        best = hyps[0][2]
        diagonal += best == " ".join(f"{i}-{i}" for i in range(len(line.split())))
    assert diagonal >= 10  # the copies align word for word


def test_over_long_lines_join_their_alignments(copy_model):
    # the same weights, told it has 6 positions: lines of > 5 pieces split
    short = copy.copy(copy_model.model)
    short.cfg = dataclasses.replace(short.cfg, max_positions=6)
    lines = sentences(6, seed=3, lengths=(8, 9))
    out = translate.translate_lines(
        short, copy_model.tokenizer, lines, copy_model.cfg.decode, alignment_layer=-1
    )
    diagonal = total = 0
    for line, [(text, _, pharaoh)] in zip(lines, out):
        pairs = [tuple(map(int, p.split("-"))) for p in pharaoh.split()]
        assert [t for _, t in pairs] == list(range(len(text.split())))
        assert max(s for s, _ in pairs) < len(line.split())
        diagonal, total = diagonal + sum(s == t for s, t in pairs), total + len(pairs)
    assert diagonal >= 0.9 * total  # the later pieces' words are counted after the earlier pieces'


def test_over_long_lines_into_an_unspaced_script_count_the_joined_words(copy_model, monkeypatch):
    """Pieces translated into a script written without spaces are joined without one, so a piece's
    last word and the next piece's first are one word of the line: the alignment's target indices
    are the line's words, as counted independently on its characters."""
    short = copy.copy(copy_model.model)
    short.cfg = dataclasses.replace(short.cfg, max_positions=6)
    decode, decoded = copy_model.tokenizer.decode, []

    def decode_as_cjk(rows):
        # the same words in CJK ideographs, so each piece keeps its word count
        texts = ["".join(c if c == " " else chr(0x4E00 + ord(c)) for c in t) for t in decode(rows)]
        decoded.append(texts)
        return texts

    monkeypatch.setattr(copy_model.tokenizer, "decode", decode_as_cjk)
    lines = sentences(6, seed=3, lengths=(8, 9))
    out = translate.translate_lines(
        short, copy_model.tokenizer, lines, copy_model.cfg.decode, alignment_layer=-1
    )
    glued = 0
    for [(text, _, pharaoh)] in out:
        texts = next(t for t in decoded if len(t) > 1 and join_pieces(t) == text)
        expected = [i for piece in word_index_in_line(texts) for i in piece]
        assert [int(p.split("-")[1]) for p in pharaoh.split()] == expected
        glued += len(text.split()) < sum(len(t.split()) for t in texts)
    assert glued == len(lines)  # every line had a join without a space


def test_a_missing_layer_is_a_user_error(copy_model):
    with pytest.raises(
        TranslatorError, match="alignment layer 1 does not exist.*use 0 to 0, or -1"
    ):
        translate.translate_lines(
            copy_model.model,
            copy_model.tokenizer,
            ["ka lo"],
            copy_model.cfg.decode,
            alignment_layer=1,
        )
