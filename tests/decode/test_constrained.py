"""Lexically constrained beam search: every output holds each of its sentence's phrases.

Checked against references that know nothing of banks: an exhaustive walk of a toy scorer's tree
kept to the outputs that hold every phrase (a plain substring test), beam_search itself when there
are no constraints, and forced decoding for the scores.
"""

from __future__ import annotations

import copy
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.decode.test_search import assert_same
from tests.decode.test_toy import _exhaustive, _random_table, source
from translator.data.tokenizer import EOS_ID
from translator.decode.beam import beam_search, length_penalty
from translator.decode.constrained import (
    Beam,
    Proposal,
    allocate,
    constrained_beam_search,
    extend,
)
from translator.decode.forced import target_log_probs
from translator.model.ensemble import Ensemble
from translator.model.inference import for_cpu_decoding


def holds(output: list[int], phrase: list[int]) -> bool:
    """Whether `phrase` is a contiguous run of `output`."""
    n = len(phrase)
    return any(output[i : i + n] == phrase for i in range(len(output) - n + 1))


@settings(max_examples=200, deadline=None)
@given(
    output=st.lists(st.integers(4, 6), max_size=8),
    phrases=st.lists(st.lists(st.integers(4, 6), min_size=1, max_size=3), min_size=1, max_size=3),
)
def test_the_met_phrases_are_those_the_output_holds(output, phrases):
    """Tracked token by token (extend), as the search does, against a substring test."""
    phrases = [tuple(p) for p in phrases]
    beam = Beam(0.0, (), frozenset())
    for token in output:
        met, bank = extend(phrases, beam, token)
        beam = Beam(0.0, beam.output + (token,), met)
        assert met == {q for q, p in enumerate(phrases) if holds(list(beam.output), list(p))}
        assert sum(len(phrases[q]) for q in met) <= bank <= sum(map(len, phrases))


def _proposal(score: float, bank: int) -> Proposal:
    return Proposal(score, 0, 4, frozenset(), bank)


def test_each_bank_keeps_its_share_and_the_rest_go_by_score():
    # banks 0-2, k = 4: shares 1, 1, 2 (the remainder to the banks furthest along)
    proposals = [_proposal(-1.0, 0), _proposal(-2.0, 0), _proposal(-3.0, 0), _proposal(-9.0, 1)]
    proposals += [_proposal(-5.0, 2)]
    kept = allocate(proposals, 4, 3)
    # bank 0 keeps one (-1), bank 1 its one (-9), bank 2 one of two (-5): the free slot goes to
    # the bank furthest along that has proposals left, bank 0 (-2, its best left)
    assert [p.score for p in kept] == [-1.0, -2.0, -5.0, -9.0]
    # with bank 1 holding two (-7 in its share), its other (-9) takes the free slot, not -2
    kept = allocate(proposals + [_proposal(-7.0, 1)], 4, 3)
    assert [p.score for p in kept] == [-1.0, -5.0, -7.0, -9.0]
    assert [p.score for p in allocate(proposals, 1, 3)] == [-5.0]  # one slot: the furthest bank
    assert [p.score for p in allocate(proposals, 9, 3)] == sorted(
        [p.score for p in proposals], reverse=True
    )


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    alpha=st.sampled_from([0.0, 0.6, 2.0]),
    max_len=st.integers(2, 3),
    phrase_lens=st.lists(st.integers(1, 2), min_size=1, max_size=2),
)
def test_a_wide_beam_finds_every_output_that_holds_the_phrases(seed, alpha, max_len, phrase_lens):
    from tests.decode.conftest import ToyScorer

    rng = random.Random(seed)
    phrase_lens = phrase_lens[: 1 + (max_len > 2)]  # their tokens fit in the length limit
    phrases = [[rng.choice([4, 5, 6]) for _ in range(n)] for n in phrase_lens]
    table, (src, src_mask) = _random_table(seed, max_len), source([3])
    expected = [
        (tokens, score)
        for tokens, score in _exhaustive(table, max_len, alpha)
        if all(holds(tokens, p) for p in phrases)
    ]
    found = constrained_beam_search(
        ToyScorer(table, vocab=32, floor=0.0),
        src,
        src_mask,
        [phrases],
        beam_size=40,
        nbest=40,
        alpha=alpha,
        max_len_a=0.0,
        max_len_b=max_len,
    )[0]
    meeting = [h for h in found if all(holds(h.tokens, p) for p in phrases)]
    assert found[: len(meeting)] == meeting  # those that hold them come first
    assert_same(meeting, expected)


def test_a_phrase_the_model_dislikes_is_placed_where_it_costs_least(toy):
    A, B, C = 4, 5, 6
    table = {
        (): {A: 0.7, B: 0.2, C: 0.1},
        (A,): {EOS_ID: 0.9, C: 0.1},
        (B,): {EOS_ID: 0.5, C: 0.5},
        (C,): {A: 0.5, EOS_ID: 0.5},
        (A, C): {EOS_ID: 1.0},
        (B, C): {EOS_ID: 1.0},
        (C, A): {EOS_ID: 1.0},
    }
    src, src_mask = source([3])
    plain = beam_search(toy(table, floor=0.0), src, src_mask, beam_size=3, alpha=0.0)[0]
    assert plain[0].tokens == [A]  # 0.63
    # the outputs holding C: B C 0.1, A C 0.07, C 0.05, C A 0.05; B, the model's second choice at
    # the first step, gets the slot that C's bank leaves free
    found = constrained_beam_search(
        toy(table, floor=0.0), src, src_mask, [[[C]]], beam_size=3, alpha=0.0
    )[0]
    assert found[0].tokens == [B, C]
    assert found[0].score == pytest.approx(float(torch.tensor(0.1).log()), abs=1e-5)


LIMITS = dict(max_len_a=1.2, max_len_b=4)


@pytest.mark.parametrize("beam_size", [1, 3])
@pytest.mark.parametrize("alpha", [0.0, 0.6])
@torch.inference_mode()
def test_without_constraints_it_is_beam_search(make_model, src_batch, beam_size, alpha):
    model, (src, src_mask) = make_model(), src_batch
    settings_ = dict(beam_size=beam_size, alpha=alpha, nbest=beam_size, **LIMITS)
    expected = beam_search(model, src, src_mask, **settings_)
    found = constrained_beam_search(model, src, src_mask, [[]] * 4, **settings_)
    for hyps, want in zip(found, expected):
        assert_same(hyps, [(h.tokens, h.score) for h in want])


# per sentence of src_batch: two phrases, one of two tokens, none, one token
CONSTRAINTS = [[[9], [12, 7]], [[5, 6]], [], [[11]]]


@torch.inference_mode()
def test_the_best_output_holds_its_phrases_and_scores_as_forced_decoding(make_model, src_batch):
    model, (src, src_mask) = make_model(), src_batch
    found = constrained_beam_search(
        model, src, src_mask, CONSTRAINTS, beam_size=4, nbest=3, alpha=0.6, **LIMITS
    )
    # each limit grows by its constraints' tokens
    limits = [
        int(1.2 * (int(m.sum()) - 1) + 4) + sum(map(len, c)) for m, c in zip(src_mask, CONSTRAINTS)
    ]
    for hyps, phrases, limit in zip(found, CONSTRAINTS, limits):
        assert len(hyps) == 3
        meets = [all(holds(h.tokens, p) for p in phrases) for h in hyps]
        assert meets[0] and meets == sorted(meets, reverse=True)
        # one that misses a phrase was ended by the length limit, where only EOS may follow
        assert all(len(h.tokens) == limit for h, met in zip(hyps, meets) if not met)
    src_ids = [[t for t in row if t > EOS_ID] for row in src.tolist()]
    outputs = [hyps[0].tokens for hyps in found]
    forced = target_log_probs(model, src_ids, outputs)
    normalised = [s / length_penalty(len(o) + 1, 0.6) for s, o in zip(forced, outputs)]
    assert [hyps[0].score for hyps in found] == pytest.approx(normalised, abs=1e-4)


@torch.inference_mode()
def test_a_constrained_sentence_alone_equals_it_in_a_batch(make_model, src_batch):
    model, (src, src_mask) = make_model(), src_batch
    batched = constrained_beam_search(model, src, src_mask, CONSTRAINTS, beam_size=3, nbest=3)
    for b in range(src.shape[0]):
        n = int(src_mask[b].sum())
        alone = constrained_beam_search(
            model,
            src[b : b + 1, :n],
            src_mask[b : b + 1, ..., :n],
            [CONSTRAINTS[b]],
            beam_size=3,
            nbest=3,
        )[0]
        assert_same(batched[b], [(h.tokens, h.score) for h in alone])


@torch.inference_mode()
def test_the_length_limit_makes_room_for_the_constraints(make_model, src_batch):
    model, (src, src_mask) = make_model(), src_batch
    phrases = [[[4, 5, 6, 7, 8, 9, 10]]] * 4  # 7 tokens, over a * 1 + b for the short sentences
    found = constrained_beam_search(
        model, src, src_mask, phrases, beam_size=9, max_len_a=0.0, max_len_b=2
    )
    assert all(holds(hyps[0].tokens, phrases[0][0]) for hyps in found)


@pytest.mark.parametrize(
    "bad, message",
    [
        ([[[]], [], [], []], "empty"),
        ([[[4, EOS_ID]], [], [], []], "PAD, BOS or EOS"),
        ([[]] * 3, "3 constraint lists for 4"),
        ([[list(range(4, 40)) * 4], [], [], []], "longer than the model's"),
    ],
)
def test_bad_constraints_are_refused(make_model, src_batch, bad, message):
    model, (src, src_mask) = make_model(), src_batch
    with pytest.raises(ValueError, match=message):
        constrained_beam_search(model, src, src_mask, bad)


@torch.inference_mode()
def test_cpu_converted_models_and_ensembles_find_what_the_plain_model_finds(make_model, src_batch):
    """A model converted for CPU decoding (beam-slots cache, packed weights) and an ensemble of
    the model twice (mean of equal distributions) against the plain model."""
    model, (src, src_mask) = make_model(), src_batch
    converted = copy.deepcopy(model)
    for_cpu_decoding(converted)
    settings_ = dict(beam_size=4, nbest=2, **LIMITS)
    expected = constrained_beam_search(model, src, src_mask, CONSTRAINTS, **settings_)
    for other in (converted, Ensemble([model, copy.deepcopy(model)])):
        found = constrained_beam_search(other, src, src_mask, CONSTRAINTS, **settings_)
        for hyps, want in zip(found, expected):
            assert_same(hyps, [(h.tokens, h.score) for h in want])


def _glued(hyps, phrases, inner: torch.Tensor) -> list[list[int]]:
    """The outputs in which some occurrence of a phrase is followed by an `inner` id."""
    return [
        h.tokens
        for h in hyps
        for p in phrases
        for i in range(len(h.tokens) - len(p))
        if h.tokens[i : i + len(p)] == p and inner[h.tokens[i + len(p)]]
    ]


@torch.inference_mode()
def test_no_piece_inside_a_word_follows_a_phrase(make_model, src_batch):
    model, (src, src_mask) = make_model(), src_batch
    inner = torch.zeros(model.cfg.vocab_size, dtype=torch.bool)
    inner[4:] = True
    inner[4::5] = False  # most ids go on inside a word: unbanned, a phrase is followed by one
    settings_ = dict(beam_size=4, nbest=3, **LIMITS)
    found = constrained_beam_search(
        model, src, src_mask, CONSTRAINTS, word_inner=inner, **settings_
    )
    assert not [g for hyps, p in zip(found, CONSTRAINTS) for g in _glued(hyps, p, inner)]
    free = constrained_beam_search(model, src, src_mask, CONSTRAINTS, **settings_)
    assert [g for hyps, p in zip(free, CONSTRAINTS) for g in _glued(hyps, p, inner)]
