"""Completing a partly typed word: after its prefix an output spells the typed characters, in any
segmentation.

Checked against references that know nothing of WordCompletion: an exhaustive walk of a toy
scorer's tree kept to the outputs whose text starts with the typed characters, and an uncached
greedy loop that masks the pieces by a plain text comparison of its own.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.decode.conftest import ToyScorer
from tests.decode.test_search import _limit, assert_same, greedy_one
from tests.decode.test_toy import _exhaustive, _random_table, source
from translator.decode.beam import beam_search
from translator.decode.completion import Spelling, WordCompletion
from translator.decode.greedy import greedy_search
from translator.decode.sampling import Sampling

# the toy's tokens 4-6 spell "▁a", "b" and "▁ab": "▁ab" has two segmentations
TOY_PIECES = ["", "", "", "", "▁a", "b", "▁ab"] + [""] * 25


def text(pieces: list[str], tokens: list[int]) -> str:
    return "".join(pieces[t] for t in tokens)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    alpha=st.sampled_from([0.0, 0.6]),
    typed=st.sampled_from(["▁a", "▁ab", "▁abb", "▁a▁a", "b"]),
    prefix=st.sampled_from([[], [5]]),
)
def test_a_wide_beam_finds_every_output_that_spells_the_typed_text(seed, alpha, typed, prefix):
    max_len = 3
    table, (src, src_mask) = _random_table(seed, max_len), source([3])
    expected = [
        (tokens, score)
        for tokens, score in _exhaustive(table, max_len, alpha)
        if tokens[: len(prefix)] == prefix
        and text(TOY_PIECES, tokens[len(prefix) :]).startswith(typed)
    ]
    completion = WordCompletion(Spelling(TOY_PIECES), [typed], [len(prefix)])
    found = beam_search(
        ToyScorer(table, vocab=32, floor=0.0),
        src,
        src_mask,
        beam_size=27,
        nbest=27,
        alpha=alpha,
        max_len_a=0.0,
        max_len_b=max_len,
        prefixes=[prefix],
        completion=completion,
    )[0]
    found = [h for h in found if h.score > float("-inf")]
    assert_same(found, expected[:27])


# the tiny models' vocabulary (tests/decode/conftest.py): ids 4.. spell letter pairs, some of them
# starts of others, so that a typed text has several segmentations
def _pieces(vocab: int) -> list[str]:
    letters = "abcd"
    words = (
        [f"▁{x}" for x in letters] + [f"{x}{y}" for x in letters for y in letters] + list(letters)
    )
    return ["", "", "", ""] + [words[i % len(words)] for i in range(vocab - 4)]


TYPED = ["▁ab", "", "▁c", "d▁a"]  # per sentence of src_batch
LIMITS = dict(max_len_a=1.2, max_len_b=2)


def _mask(row: torch.Tensor, pieces: list[str], left: str) -> torch.Tensor:
    """row (V,) with every piece that disagrees with `left` at -inf (the reference's own check)."""
    out = torch.full_like(row, float("-inf"))
    for i, piece in enumerate(pieces):
        if piece and (left[: len(piece)] == piece or piece[: len(left)] == left):
            out[i] = row[i]
    return out


@torch.inference_mode()
def test_greedy_is_the_uncached_greedy_that_masks_by_text(make_model, src_batch):
    model, (src, src_mask) = make_model(), src_batch
    pieces = _pieces(model.cfg.vocab_size)
    completion = WordCompletion(Spelling(pieces), TYPED, [0] * 4)
    found = greedy_search(model, src, src_mask, completion=completion, **LIMITS)
    expected = []
    for b, typed in enumerate(TYPED):

        def adjust(row, step, outputs, typed=typed):
            spelled = text(pieces, outputs)
            left = typed[len(spelled) :] if len(spelled) < len(typed) else ""
            return _mask(row, pieces, left) if left else row

        max_len = max(_limit(model, src_mask[b], **LIMITS), len(typed))
        expected.append(greedy_one(model, src, src_mask, b, max_len, adjust=adjust))
    assert_same(found, expected)
    for hyp, typed in zip(found, TYPED):
        assert text(pieces, hyp.tokens).startswith(typed)


@pytest.mark.parametrize("search", ["greedy", "beam"])
@torch.inference_mode()
def test_a_sentence_completing_a_word_alone_equals_it_in_a_batch(make_model, src_batch, search):
    """Sentences leave the batch as they end (drop_finished); their typed texts leave with them."""
    model, (src, src_mask) = make_model(), src_batch
    pieces = _pieces(model.cfg.vocab_size)

    def run(s, m, rows):
        completion = WordCompletion(Spelling(pieces), [TYPED[b] for b in rows], [1] * len(rows))
        prefixes = [[4]] * len(rows)
        if search == "greedy":
            hyps = greedy_search(model, s, m, prefixes=prefixes, completion=completion, **LIMITS)
            return [[h] for h in hyps]
        return beam_search(
            model, s, m, beam_size=3, nbest=3, prefixes=prefixes, completion=completion, **LIMITS
        )

    batched = run(src, src_mask, range(4))
    for b in range(4):
        n = int(src_mask[b].sum())
        alone = run(src[b : b + 1, :n], src_mask[b : b + 1, ..., :n], [b])[0]
        assert_same(batched[b], [(h.tokens, h.score) for h in alone])
        assert all(text(pieces, h.tokens[1:]).startswith(TYPED[b]) for h in batched[b])


@torch.inference_mode()
def test_sampled_outputs_spell_the_typed_text(make_model, src_batch):
    from translator.config import DecodeConfig
    from translator.decode.search import sample

    model, (src, _) = make_model(), src_batch
    pieces = _pieces(model.cfg.vocab_size)
    src_ids = [[t for t in row if t > 3] for row in src.tolist()]
    keys = [(line, 0) for line in range(4)]
    completion = WordCompletion(Spelling(pieces), TYPED, [0] * 4)
    drawn = sample(
        model, src_ids, keys, DecodeConfig(**LIMITS), Sampling(seed=3), 3, completion=completion
    )
    for hyps, typed in zip(drawn, TYPED):
        assert len(hyps) == 3 and all(text(pieces, h.tokens).startswith(typed) for h in hyps)


@torch.inference_mode()
def test_the_length_limit_makes_room_for_the_typed_text(make_model, src_batch):
    model, (src, src_mask) = make_model(), src_batch
    pieces = _pieces(model.cfg.vocab_size)
    typed = "▁a" + "b" * 12  # 13 characters: more than a * 1 + b tokens for the short sentences
    completion = WordCompletion(Spelling(pieces), [typed] * 4, [0] * 4)
    for hyps in beam_search(
        model, src, src_mask, beam_size=2, completion=completion, max_len_a=0.0, max_len_b=2
    ):
        assert text(pieces, hyps[0].tokens).startswith(typed)


def test_pieces_of_scripts_without_word_spaces_never_go_on_inside_a_word():
    from translator.decode.completion import inside_word

    pieces = ["", "▁Hund", "e", "s", ",", "银行", "业", "です", "ก", "2"]
    assert inside_word(pieces).tolist() == [
        False,
        False,
        True,
        True,
        False,
        False,
        False,
        False,
        False,
        True,
    ]
