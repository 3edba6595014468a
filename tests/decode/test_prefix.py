"""Prefix-constrained decoding: every output starts with its sentence's given prefix.

Checked against searches that know nothing of prefixes: an exhaustive walk of a toy scorer's
tree, kept to the outputs that start with the prefix; the plain-list beam search and an uncached
greedy loop of test_search.py, each with the prefix's tokens forced in their own code; and forced
decoding (decode/forced.py), which scores a whole output in one teacher-forced pass.
"""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.decode.test_search import (
    _limit,
    _next_log_probs,
    assert_same,
    greedy_one,
    reference_beam_search,
)
from tests.decode.test_toy import _exhaustive, _random_table, source
from translator.data.tokenizer import BOS_ID, EOS_ID
from translator.decode.beam import beam_search, length_penalty
from translator.decode.forced import target_log_probs
from translator.decode.greedy import greedy_search
from translator.decode.sampling import Sampling

NEG_INF = float("-inf")


def _forced(row: torch.Tensor, prefix: list[int], step: int) -> torch.Tensor:
    """A (V,) row of log-probs with every token but the prefix's at `step` at -inf (no-op past
    the prefix)."""
    if step >= len(prefix):
        return row
    out = torch.full_like(row, NEG_INF)
    out[prefix[step]] = row[prefix[step]]
    return out


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    seed=st.integers(0, 10**6),
    alpha=st.sampled_from([0.0, 0.6, 2.0]),
    max_len=st.integers(2, 3),
    prefix_len=st.integers(1, 2),
)
def test_a_wide_beam_finds_every_output_that_starts_with_the_prefix(
    toy, seed, alpha, max_len, prefix_len
):
    table, (src, src_mask) = _random_table(seed, max_len), source([3])
    # a path through the tree: the prefix the model itself could have produced
    rng, prefix = random.Random(seed), []
    while len(prefix) < prefix_len:
        options = [t for t in table.get(tuple(prefix), {}) if t != EOS_ID]
        if not options:
            break
        prefix.append(rng.choice(options))
    expected = [
        (tokens, score)
        for tokens, score in _exhaustive(table, max_len, alpha)
        if tokens[: len(prefix)] == prefix
    ]
    limits = dict(max_len_a=0.0, max_len_b=max_len, alpha=alpha, prefixes=[prefix])
    wide = beam_search(
        toy(table, vocab=32, floor=0.0), src, src_mask, beam_size=27, nbest=27, **limits
    )
    assert [h.tokens for h in wide[0]] == [tokens for tokens, _ in expected[:27]]
    assert [h.score for h in wide[0]] == pytest.approx([s for _, s in expected[:27]], abs=1e-5)


def _reference_greedy_with_prefix(model, src, src_mask, prefixes, max_len_a=1.2, max_len_b=10):
    """Uncached greedy, the prefix's tokens taken while it lasts; the limit raised to the
    prefix's length."""
    return [
        greedy_one(
            model,
            src,
            src_mask,
            b,
            max(_limit(model, src_mask[b], max_len_a, max_len_b), len(prefix)),
            adjust=lambda row, step, _, prefix=prefix: _forced(row, prefix, step),
        )
        for b, prefix in enumerate(prefixes)
    ]


# per sentence of src_batch: a 2-token prefix, none, one longer than the length limit
# (1.2 * 2 + 2 = 4.4 -> 4 tokens), and one token
PREFIXES = [[5, 9], [], [7, 8, 6, 10, 11, 12], [4]]


LIMITS = dict(max_len_a=1.2, max_len_b=2)


@torch.inference_mode()
def test_greedy_with_prefixes_is_the_uncached_greedy_that_forces_them(make_model, src_batch):
    model, (src, src_mask) = make_model(), src_batch
    prefixes = PREFIXES
    found = greedy_search(model, src, src_mask, prefixes=prefixes, **LIMITS)
    expected = _reference_greedy_with_prefix(model, src, src_mask, prefixes, **LIMITS)
    assert_same(found, expected)
    for hyp, prefix in zip(found, prefixes):
        assert hyp.tokens[: len(prefix)] == prefix
    # a prefix longer than the limit is kept whole
    assert len(found[2].tokens) >= 6


@pytest.mark.parametrize("alpha", [0.0, 1.0])
@torch.inference_mode()
def test_beam_with_prefixes_is_the_plain_list_search_that_forces_them(make_model, src_batch, alpha):
    model, (src, src_mask) = make_model(), src_batch
    prefixes = PREFIXES
    found = beam_search(
        model, src, src_mask, beam_size=3, alpha=alpha, nbest=3, prefixes=prefixes, **LIMITS
    )
    for b, prefix in enumerate(prefixes):
        memory = model.encode(src[b : b + 1], src_mask[b : b + 1])
        max_len = max(_limit(model, src_mask[b], **LIMITS), len(prefix))

        def next_log_probs(outputs, step, b=b, memory=memory, max_len=max_len, prefix=prefix):
            rows = _next_log_probs(model, outputs, memory, src_mask[b : b + 1], step, max_len, 0)
            return torch.stack([_forced(row, prefix, step) for row in rows])

        expected = reference_beam_search(next_log_probs, max_len, 3, alpha)[:3]
        assert_same(found[b], expected)
        assert all(h.tokens[: len(prefix)] == prefix for h in found[b])


@torch.inference_mode()
def test_a_prefixed_output_scores_as_forced_decoding_scores_it(make_model, src_batch):
    """The prefix's tokens count in the score, as `translator score` counts them."""
    model, (src, src_mask) = make_model(), src_batch
    prefixes = PREFIXES
    src_ids = [[t for t in row if t > EOS_ID] for row in src.tolist()]
    greedy = greedy_search(model, src, src_mask, prefixes=prefixes, **LIMITS)
    beams = beam_search(model, src, src_mask, beam_size=3, alpha=0.6, prefixes=prefixes, **LIMITS)
    outputs = [h.tokens for h in greedy] + [hyps[0].tokens for hyps in beams]
    forced = target_log_probs(model, src_ids * 2, outputs)
    assert [h.score for h in greedy] == pytest.approx(forced[:4], abs=1e-4)
    penalties = [length_penalty(len(hyps[0].tokens) + 1, 0.6) for hyps in beams]
    normalised = [score / lp for score, lp in zip(forced[4:], penalties)]
    assert [hyps[0].score for hyps in beams] == pytest.approx(normalised, abs=1e-4)


@pytest.mark.parametrize("search", ["greedy", "beam"])
@torch.inference_mode()
def test_a_prefixed_sentence_alone_equals_it_in_a_batch(make_model, src_batch, search):
    """Sentences leave the batch as they end (drop_finished); their prefixes leave with them."""
    model, (src, src_mask) = make_model(), src_batch
    prefixes = PREFIXES

    def run(s, m, p):
        if search == "greedy":
            return [[h] for h in greedy_search(model, s, m, prefixes=p, **LIMITS)]
        return beam_search(model, s, m, beam_size=3, nbest=3, prefixes=p, **LIMITS)

    batched = run(src, src_mask, prefixes)
    for b in range(src.shape[0]):
        n = int(src_mask[b].sum())
        alone = run(src[b : b + 1, :n], src_mask[b : b + 1, ..., :n], [prefixes[b]])[0]
        assert_same(batched[b], [(h.tokens, h.score) for h in alone])


@torch.inference_mode()
def test_a_prefix_as_long_as_the_model_allows_is_the_whole_output(make_model, src_batch):
    model = make_model(max_positions=6)  # BOS + 5 tokens
    src, src_mask = src_batch
    src, src_mask = src[:, :5], src_mask[..., :5]
    prefix = [4, 5, 6, 7, 8]
    for hyps in beam_search(model, src, src_mask, beam_size=2, prefixes=[prefix] * 4):
        assert hyps[0].tokens == prefix
    with pytest.raises(ValueError, match="longer than the model's 5"):
        greedy_search(model, src, src_mask, prefixes=[prefix + [9]] * 4)


@pytest.mark.parametrize("bad", [[4, EOS_ID], [BOS_ID], [0, 5]])
def test_a_prefix_of_special_tokens_is_refused(make_model, src_batch, bad):
    model, (src, src_mask) = make_model(), src_batch
    with pytest.raises(ValueError, match="PAD, BOS or EOS"):
        greedy_search(model, src, src_mask, prefixes=[bad, [], [], []])


@torch.inference_mode()
def test_sampled_outputs_start_with_the_prefix(make_model, src_batch):
    from translator.config import DecodeConfig
    from translator.decode.search import sample

    model, (src, _) = make_model(), src_batch
    src_ids = [[t for t in row if t > EOS_ID] for row in src.tolist()]
    prefixes = PREFIXES
    keys = [(line, 0) for line in range(len(src_ids))]
    drawn = sample(
        model, src_ids, keys, DecodeConfig(**LIMITS), Sampling(seed=3), 4, prefixes=prefixes
    )
    for hyps, prefix in zip(drawn, prefixes):
        assert len(hyps) == 4
        assert all(h.tokens[: len(prefix)] == prefix for h in hyps)
