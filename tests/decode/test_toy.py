"""Searches over a toy scorer whose distributions, and so whose best outputs, are known by hand."""

from __future__ import annotations

import math

import pytest
import torch

from translator.data.tokenizer import EOS_ID, UNK_ID
from translator.decode.beam import beam_search, length_penalty
from translator.decode.greedy import greedy_search

A, B, C = 4, 5, 6
# Greedy takes A (0.6) and then EOS (0.4): p = 0.24. The best output is B EOS: 0.4 * 0.9 = 0.36.
# Third is A A EOS: 0.6 * 0.35 = 0.21.
GARDEN_PATH = {
    (): {A: 0.6, B: 0.4},
    (A,): {EOS_ID: 0.4, A: 0.35, C: 0.25},
    (B,): {EOS_ID: 0.9, C: 0.1},
}


def source(lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Source batch of the given lengths (EOS included; the toy ignores the ids)."""
    src = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    for row, n in enumerate(lengths):
        src[row, :n] = 7
    return src, (src != 0)[:, None, None, :]


def test_beam_finds_the_best_sequence_that_greedy_misses(toy):
    src, src_mask = source([3, 5])
    greedy = greedy_search(toy(GARDEN_PATH), src, src_mask)
    assert [g.tokens for g in greedy] == [[A], [A]]
    assert greedy[0].score == pytest.approx(math.log(0.24), abs=1e-4)
    scorer = toy(GARDEN_PATH)
    beams = beam_search(scorer, src, src_mask, beam_size=3, alpha=0.0, nbest=3)
    for hyps in beams:
        assert [h.tokens for h in hyps] == [[B], [A], [A, A]]
        assert [h.score for h in hyps] == pytest.approx([math.log(p) for p in (0.36, 0.24, 0.21)], abs=1e-4)
    assert scorer.calls == 3  # every beam has ended after step 2: no more steps up to the limit


def test_length_penalty_can_prefer_the_longer_hypothesis(toy):
    src, src_mask = source([3])
    for alpha in (0.0, 1.0, 5.0):
        hyps = beam_search(toy(GARDEN_PATH), src, src_mask, beam_size=3, alpha=alpha, nbest=3)[0]
        # GNMT normalisation counts the EOS: |B EOS| = 2, |A A EOS| = 3
        expected = {(B,): math.log(0.36) / float(length_penalty(torch.tensor(2), alpha)),
                    (A,): math.log(0.24) / float(length_penalty(torch.tensor(2), alpha)),
                    (A, A): math.log(0.21) / float(length_penalty(torch.tensor(3), alpha))}
        ranking = sorted(expected, key=lambda tokens: -expected[tokens])
        assert [tuple(h.tokens) for h in hyps] == ranking
        assert [h.score for h in hyps] == pytest.approx([expected[t] for t in ranking], abs=1e-4)
    assert ranking[0] == (A, A)  # at alpha = 5 the long one wins


def test_length_penalty_formula():
    lengths = torch.tensor([1, 2, 10])
    assert length_penalty(lengths, 0.0).tolist() == [1.0, 1.0, 1.0]
    torch.testing.assert_close(length_penalty(lengths, 0.6), ((5 + lengths.float()) / 6) ** 0.6)


def test_eos_ends_each_sentence_and_the_search(toy):
    table = {(): {C: 1.0}, (C,): {C: 1.0}, (C, C): {EOS_ID: 1.0}}
    src, src_mask = source([20, 30])
    scorer = toy(table)
    assert [g.tokens for g in greedy_search(scorer, src, src_mask)] == [[C, C], [C, C]]
    assert scorer.calls == 3
    scorer = toy(table)
    assert [hyps[0].tokens for hyps in beam_search(scorer, src, src_mask, beam_size=4)] == [[C, C], [C, C]]
    assert scorer.calls <= 4  # far below the limit (1.2 * 29 + 10); 1e-6 side paths may take a step more


@pytest.mark.parametrize("beam_size", [1, 3])
def test_max_len_is_a_times_source_plus_b(toy, beam_size):
    never_ends = {C: 0.9, EOS_ID: 1e-4}  # every prefix: EOS is very unlikely
    src, src_mask = source([4, 11, 1])  # 3, 10 and 0 tokens + EOS
    expected = [int(1.5 * 3 + 2), int(1.5 * 10 + 2), 2]
    scorer = toy({}, default=never_ends)
    if beam_size == 1:
        found = [g.tokens for g in greedy_search(scorer, src, src_mask, max_len_a=1.5, max_len_b=2)]
    else:
        found = [hyps[0].tokens for hyps in beam_search(scorer, src, src_mask, beam_size=beam_size,
                                                         max_len_a=1.5, max_len_b=2)]
    assert [len(tokens) for tokens in found] == expected
    assert scorer.calls == max(expected) + 1  # the last step only emits EOS


@pytest.mark.parametrize("beam_size", [1, 3])
def test_min_len_delays_eos_but_never_past_the_limit(toy, beam_size):
    wants_to_end = {EOS_ID: 0.9, C: 0.05, UNK_ID: 0.05 - 1e-5}
    src, src_mask = source([3, 3])

    def lengths(min_len: int, max_len_b: int) -> list[int]:
        scorer = toy({}, default=wants_to_end)
        if beam_size == 1:
            hyps = [[g] for g in greedy_search(scorer, src, src_mask, max_len_a=0.0, max_len_b=max_len_b,
                                               min_len=min_len)]
        else:
            hyps = beam_search(scorer, src, src_mask, beam_size=beam_size, max_len_a=0.0, max_len_b=max_len_b,
                               min_len=min_len)
        assert all(h[0].score > float("-inf") for h in hyps)
        return [len(h[0].tokens) for h in hyps]

    assert lengths(0, 10) == [0, 0]
    assert lengths(4, 10) == [4, 4]
    assert lengths(8, 5) == [5, 5]  # the length limit wins over min_len


def test_beams_without_a_real_hypothesis_are_dropped_at_once(toy):
    only_two = {(): {A: 0.5, EOS_ID: 0.5}, (A,): {EOS_ID: 1.0}}  # every other token has probability 0
    src, src_mask = source([30])
    scorer = toy(only_two, floor=0.0)
    hyps = beam_search(scorer, src, src_mask, beam_size=6, nbest=6, alpha=0.0)[0]
    assert sorted((h.tokens, round(h.score, 4)) for h in hyps) == [([], round(math.log(0.5), 4)),
                                                                    ([A], round(math.log(0.5), 4))]
    assert scorer.calls == 2  # the four empty beams do not run on to the length limit


def test_beams_at_minus_infinity_end_even_where_the_model_would_go_on(toy):
    """Only A A EOS has probability; elsewhere the toy keeps offering C, which an empty beam must not chase."""
    one_path = {(): {A: 1.0}, (A,): {A: 1.0}, (A, A): {EOS_ID: 1.0}}
    src, src_mask = source([30])
    scorer = toy(one_path, default={C: 1.0}, floor=0.0)
    hyps = beam_search(scorer, src, src_mask, beam_size=4, nbest=4, alpha=0.0)[0]
    assert [h.tokens for h in hyps] == [[A, A]]
    assert scorer.calls == 3  # the search ends with the one real hypothesis, not at the length limit
