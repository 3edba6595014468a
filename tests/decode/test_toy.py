"""Searches over a toy scorer whose distributions, and so whose best outputs, are known by hand."""

from __future__ import annotations

import math
import random

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.decode.test_search import reference_beam_search
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
        assert [h.score for h in hyps] == pytest.approx(
            [math.log(p) for p in (0.36, 0.24, 0.21)], abs=1e-4
        )
    assert scorer.calls == 3  # every beam has ended after step 2: no more steps up to the limit


def test_length_penalty_can_prefer_the_longer_hypothesis(toy):
    src, src_mask = source([3])
    for alpha in (0.0, 1.0, 5.0):
        # floor 0: with 1e-6 side paths, at alpha = 5 a long run of them outscores these (rightly)
        hyps = beam_search(
            toy(GARDEN_PATH, floor=0.0), src, src_mask, beam_size=3, alpha=alpha, nbest=3
        )[0]
        # GNMT normalisation counts the EOS: |B EOS| = 2, |A A EOS| = 3
        expected = {
            (B,): math.log(0.36) / float(length_penalty(torch.tensor(2), alpha)),
            (A,): math.log(0.24) / float(length_penalty(torch.tensor(2), alpha)),
            (A, A): math.log(0.21) / float(length_penalty(torch.tensor(3), alpha)),
            (A, C): math.log(0.15) / float(length_penalty(torch.tensor(3), alpha)),
        }
        ranking = sorted(expected, key=lambda tokens: -expected[tokens])[:3]
        assert [tuple(h.tokens) for h in hyps] == ranking
        assert [h.score for h in hyps] == pytest.approx([expected[t] for t in ranking], abs=1e-4)
    assert ranking == [(A, A), (A, C), (B,)]  # at alpha = 5 the long ones win


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
    assert [hyps[0].tokens for hyps in beam_search(scorer, src, src_mask, beam_size=4)] == [
        [C, C],
        [C, C],
    ]
    # far below the limit (1.2 * 29 + 10); 1e-6 side paths may take a step more
    assert scorer.calls <= 4


@pytest.mark.parametrize("beam_size", [1, 3])
def test_max_len_is_a_times_source_plus_b(toy, beam_size):
    never_ends = {C: 0.9, EOS_ID: 1e-4}  # every prefix: EOS is very unlikely
    src, src_mask = source([4, 11, 1])  # 3, 10 and 0 tokens + EOS
    expected = [int(1.5 * 3 + 2), int(1.5 * 10 + 2), 2]
    scorer = toy({}, default=never_ends)
    if beam_size == 1:
        found = [g.tokens for g in greedy_search(scorer, src, src_mask, max_len_a=1.5, max_len_b=2)]
    else:
        found = [
            hyps[0].tokens
            for hyps in beam_search(
                scorer, src, src_mask, beam_size=beam_size, max_len_a=1.5, max_len_b=2
            )
        ]
    assert [len(tokens) for tokens in found] == expected
    assert scorer.calls == max(expected) + 1  # the last step only emits EOS


@pytest.mark.parametrize("beam_size", [1, 3])
def test_min_len_delays_eos_but_never_past_the_limit(toy, beam_size):
    wants_to_end = {EOS_ID: 0.9, C: 0.05, UNK_ID: 0.05 - 1e-5}
    src, src_mask = source([3, 3])

    def lengths(min_len: int, max_len_b: int) -> list[int]:
        scorer = toy({}, default=wants_to_end)
        if beam_size == 1:
            hyps = [
                [g]
                for g in greedy_search(
                    scorer, src, src_mask, max_len_a=0.0, max_len_b=max_len_b, min_len=min_len
                )
            ]
        else:
            hyps = beam_search(
                scorer,
                src,
                src_mask,
                beam_size=beam_size,
                max_len_a=0.0,
                max_len_b=max_len_b,
                min_len=min_len,
            )
        assert all(h[0].score > float("-inf") for h in hyps)
        return [len(h[0].tokens) for h in hyps]

    assert lengths(0, 10) == [0, 0]
    assert lengths(4, 10) == [4, 4]
    assert lengths(8, 5) == [5, 5]  # the length limit wins over min_len


def test_beams_without_a_real_hypothesis_are_dropped_at_once(toy):
    # every other token has probability 0
    only_two = {(): {A: 0.5, EOS_ID: 0.5}, (A,): {EOS_ID: 1.0}}
    src, src_mask = source([30])
    scorer = toy(only_two, floor=0.0)
    hyps = beam_search(scorer, src, src_mask, beam_size=6, nbest=6, alpha=0.0)[0]
    assert sorted((h.tokens, round(h.score, 4)) for h in hyps) == [
        ([], round(math.log(0.5), 4)),
        ([A], round(math.log(0.5), 4)),
    ]
    assert scorer.calls == 2  # the four empty beams do not run on to the length limit


def test_beams_at_minus_infinity_end_even_where_the_model_would_go_on(toy):
    """Only A A EOS has probability; elsewhere the toy keeps offering C, which an empty beam must
    not chase."""
    one_path = {(): {A: 1.0}, (A,): {A: 1.0}, (A, A): {EOS_ID: 1.0}}
    src, src_mask = source([30])
    scorer = toy(one_path, default={C: 1.0}, floor=0.0)
    hyps = beam_search(scorer, src, src_mask, beam_size=4, nbest=4, alpha=0.0)[0]
    assert [h.tokens for h in hyps] == [[A, A]]
    # the search ends with the one real hypothesis, not at the length limit
    assert scorer.calls == 3


def test_a_finished_hypothesis_is_kept_when_open_beams_outscore_it(toy):
    """Issue 17's example, k = 2, at most 4 tokens: "B EOS" finishes at the second step (-2.30),
    while "A C" and "A D" (-0.80) take both open slots; every continuation of those ends lower
    (-3.10), so B must win, on raw and normalised scores alike."""
    D, uniform = 7, {token: 0.1 for token in range(8, 18)}  # 10 tokens, EOS not among them
    table = {
        (): {A: 0.9, B: 0.1},
        (A,): {C: 0.5, D: 0.5},
        (B,): {EOS_ID: 1.0},
        (A, C): uniform,
        (A, D): uniform,
    }
    src, src_mask = source([3])
    # what the search returned when B was dropped
    for alpha, dropped in ((0.0, -3.10), (0.6, -2.43)):
        hyps = beam_search(
            toy(table, vocab=18, floor=0.0),
            src,
            src_mask,
            beam_size=2,
            alpha=alpha,
            max_len_a=0.0,
            max_len_b=4,
        )[0]
        assert [h.tokens for h in hyps] == [[B]]
        assert (
            hyps[0].score == pytest.approx(math.log(0.1) / (7 / 6) ** alpha, abs=1e-4)
            and hyps[0].score > dropped
        )


def test_an_eos_among_a_beams_best_does_not_cost_an_open_slot(toy):
    """k = 2. Step 0: EOS .45, A .3, B .25; then A -> {A .5, EOS .5}, B -> {EOS 1}. The empty
    output finishes at once (.45); the two open beams must be A and B, the best two other
    continuations, so "B" (.25) is found, beating "A" (.15). Proposing only each beam's 2 best
    (EOS and A) left one slot empty and lost B."""
    table = {(): {EOS_ID: 0.45, A: 0.3, B: 0.25}, (A,): {A: 0.5, EOS_ID: 0.5}, (B,): {EOS_ID: 1.0}}
    src, src_mask = source([3])
    hyps = beam_search(toy(table, floor=0.0), src, src_mask, beam_size=2, alpha=0.0, nbest=2)[0]
    assert [h.tokens for h in hyps] == [[], [B]]
    assert [h.score for h in hyps] == pytest.approx([math.log(0.45), math.log(0.25)], abs=1e-4)


def test_an_eos_outside_a_beams_k_plus_1_best_is_not_proposed(toy):
    """The rule's other side, k = 2: at step 0 EOS is the 4th token (.05), outside the k + 1 = 3
    proposed, so the empty output is never finished, though it would outscore every output that
    is (A then one of 12 tokens: .45 / 12 = .0375). fairseq's cut is alike (EOS among its top
    candidates only)."""
    uniform = {token: 1 / 12 for token in range(6, 18)}  # EOS not among them
    table = {(): {A: 0.45, B: 0.35, C: 0.15, EOS_ID: 0.05}, (A,): uniform, (B,): uniform}
    src, src_mask = source([3])
    hyps = beam_search(toy(table, vocab=18, floor=0.0), src, src_mask, beam_size=2, alpha=0.0)
    assert hyps[0][0].tokens[0] == A and len(hyps[0][0].tokens) == 2
    assert hyps[0][0].score == pytest.approx(math.log(0.45 / 12), abs=1e-4)


def test_a_beam_as_wide_as_the_vocabulary_still_searches(toy):
    """k + 1 proposals a beam cannot exceed the vocabulary: k = 8 over 8 tokens finds the garden
    path's outputs in order."""
    src, src_mask = source([3])
    hyps = beam_search(
        toy(GARDEN_PATH, vocab=8, floor=0.0), src, src_mask, beam_size=8, alpha=0.0, nbest=3
    )[0]
    assert [h.tokens for h in hyps] == [[B], [A], [A, A]]


def _random_table(seed: int, depth: int) -> dict[tuple[int, ...], dict[int, float]]:
    """Every prefix over tokens 4-6 up to `depth` gets a random distribution over 1-4 of EOS, 4, 5,
    6."""
    rng = random.Random(seed)
    table, prefixes = {}, [()]
    for _ in range(depth):
        grown = []
        for prefix in prefixes:
            tokens = rng.sample([EOS_ID, 4, 5, 6], rng.randint(1, 4))
            weights = [rng.random() + 0.05 for _ in tokens]
            table[prefix] = {t: w / sum(weights) for t, w in zip(tokens, weights)}
            grown += [prefix + (t,) for t in tokens if t != EOS_ID]
        prefixes = grown
    return table


def _exhaustive(table, max_len: int, alpha: float) -> list[tuple[list[int], float]]:
    """Every output of probability > 0 within max_len tokens, with its normalised score, best
    first."""
    out = []

    def walk(prefix: list[int], log_p: float) -> None:
        for token, p in table.get(tuple(prefix), {EOS_ID: 1.0}).items():
            if token == EOS_ID:
                out.append((prefix, (log_p + math.log(p)) / ((5 + len(prefix) + 1) / 6) ** alpha))
            elif len(prefix) < max_len:
                walk(prefix + [token], log_p + math.log(p))

    walk([], 0.0)
    return sorted(out, key=lambda hyp: -hyp[1])


def _table_log_probs(table, vocab: int, max_len: int):
    """next_log_probs for reference_beam_search: the table's distributions, only EOS at the
    limit."""

    def next_log_probs(prefixes, step):
        rows = torch.full((len(prefixes), vocab), float("-inf"))
        for row, prefix in zip(rows, prefixes):
            for token, p in table.get(tuple(prefix[1:]), {EOS_ID: 1.0}).items():
                if token == EOS_ID or step < max_len:
                    row[token] = math.log(p)
        return rows

    return next_log_probs


# a class
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    seed=st.integers(0, 10**6),
    k=st.sampled_from([1, 2, 3]),
    alpha=st.sampled_from([0.0, 0.6, 2.0]),
    max_len=st.integers(1, 3),
)
def test_beam_never_returns_less_than_a_hypothesis_it_finished(toy, seed, k, alpha, max_len):
    """Against an exhaustive search and the plain-list search (which records every hypothesis the
    algorithm finishes, running to the end): the returned best is the best finished one, never
    better than the true best, and with a beam as wide as the tree it is the true best."""
    table, (src, src_mask) = _random_table(seed, max_len), source([3])
    every = _exhaustive(table, max_len, alpha)
    finished = reference_beam_search(_table_log_probs(table, 32, max_len), max_len, k, alpha)
    limits = dict(max_len_a=0.0, max_len_b=max_len, alpha=alpha)
    best = beam_search(toy(table, vocab=32, floor=0.0), src, src_mask, beam_size=k, **limits)[0][0]
    assert best.score == pytest.approx(finished[0][1], abs=1e-5)
    assert best.score <= every[0][1] + 1e-5
    wide = beam_search(
        toy(table, vocab=32, floor=0.0), src, src_mask, beam_size=27, nbest=27, **limits
    )[0]
    assert [h.score for h in wide] == pytest.approx([score for _, score in every[:27]], abs=1e-5)
