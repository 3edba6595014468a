"""Target prefixes: searches that must start each output with given tokens, against the uncached
reference searches of test_search.py run with the prefix forced by hand."""

from __future__ import annotations

import math

import pytest
import torch

from tests.decode.test_search import (
    NEG_INF,
    _limit,
    _next_log_probs,
    assert_same,
    reference_beam_search,
)
from tests.model.conftest import VOCAB
from translator.data.batching import pad
from translator.data.tokenizer import BOS_ID, EOS_ID
from translator.decode.beam import beam_search
from translator.decode.greedy import greedy_search
from translator.decode.sampling import Sampling

# one prefix per sentence of src_batch (8, 5, 2 and 3 source tokens): one token, none, 14 tokens
# (over the 2-token source's length limit, floor(1.2 * 2 + 10) = 12), three
PREFIXES = [[13], [], [5, 9, 7, 5, 11, 6, 8, 9, 10, 4, 12, 13, 5, 7], [4, 4, 10]]


def forced(next_log_probs, prefix: list[int]):
    """next_log_probs with every token but prefix[step] at -inf while the prefix lasts."""

    def wrapped(prefixes, step):
        lp = next_log_probs(prefixes, step)
        if step < len(prefix):
            keep = lp[:, prefix[step]].clone()
            lp[:] = NEG_INF
            lp[:, prefix[step]] = keep
        return lp

    return wrapped


@torch.inference_mode()
def reference(model, src, src_mask, prefixes, beam_size, alpha, nbest):
    """Per sentence the plain-list beam search with its prefix forced, the limit raised to it."""
    out = []
    for b, prefix in enumerate(prefixes):
        mask = src_mask[b : b + 1]
        memory = model.encode(src[b : b + 1], mask)
        limit = max(_limit(model, mask[0], 1.2, 10), len(prefix))

        def next_log_probs(rows, step, memory=memory, mask=mask, limit=limit):
            return _next_log_probs(model, rows, memory, mask, step, limit, 0)

        found = reference_beam_search(forced(next_log_probs, prefix), limit, beam_size, alpha)
        out.append(found[:nbest])
    return out


@pytest.mark.parametrize("drop_finished", [True, False])
@pytest.mark.parametrize("beam_size, alpha", [(1, 0.0), (3, 0.6), (4, 1.0)])
def test_beam_search_with_prefixes_finds_what_the_forced_reference_finds(
    make_model, src_batch, beam_size, alpha, drop_finished
):
    torch.manual_seed(0)
    model = make_model()
    src, src_mask = src_batch
    got = beam_search(
        model,
        src,
        src_mask,
        beam_size=beam_size,
        alpha=alpha,
        nbest=beam_size,
        prefix=pad(PREFIXES),
        drop_finished=drop_finished,
    )
    want = reference(model, src, src_mask, PREFIXES, beam_size, alpha, beam_size)
    for hyps, expected, prefix in zip(got, want, PREFIXES):
        assert_same(hyps, expected)
        assert all(h.tokens[: len(prefix)] == prefix for h in hyps)


@pytest.mark.parametrize("drop_finished", [True, False])
def test_greedy_search_with_prefixes_is_the_forced_reference(make_model, src_batch, drop_finished):
    torch.manual_seed(1)
    model = make_model()
    src, src_mask = src_batch
    got = greedy_search(model, src, src_mask, prefix=pad(PREFIXES), drop_finished=drop_finished)
    # greedy is a beam of one scored without the length penalty (alpha 0)
    want = reference(model, src, src_mask, PREFIXES, 1, 0.0, 1)
    assert_same(got, [w[0] for w in want])


def test_a_prefix_the_search_would_have_chosen_changes_nothing(make_model, src_batch):
    """Forcing greedy's own first tokens gives greedy's output and score back."""
    torch.manual_seed(2)
    model = make_model()
    src, src_mask = src_batch
    free = greedy_search(model, src, src_mask)
    own = [h.tokens[:2] for h in free]
    assert any(own), "the model ends every sentence at once: no prefix to test"
    again = greedy_search(model, src, src_mask, prefix=pad(own))
    assert [h.tokens for h in again] == [h.tokens for h in free]
    torch.testing.assert_close([h.score for h in again], [h.score for h in free])


def test_sampling_keeps_the_prefix_and_draws_after_it(make_model, src_batch):
    torch.manual_seed(3)
    model = make_model()
    src, src_mask = src_batch
    sampler = Sampling(seed=5, temperature=2.0).rows([(i, 0, 0) for i in range(4)], src.device)
    drawn = greedy_search(model, src, src_mask, prefix=pad(PREFIXES), sampler=sampler)
    for hyp, prefix in zip(drawn, PREFIXES):
        assert hyp.tokens[: len(prefix)] == prefix
        assert EOS_ID not in hyp.tokens and BOS_ID not in hyp.tokens
    assert all(0 <= t < VOCAB for h in drawn for t in h.tokens)


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_a_sentence_leaves_the_batch_while_another_is_still_forced(toy, search):
    """Toy scorer: unprefixed, EOS (0.9) at once; the prefix A B C forces A (0.1) and then two
    tokens of probability 1e-6 (an unlisted output ends with EOS, 1.0). The first sentence is
    done at step 0 and leaves the batch while the second's prefix has two steps to go."""
    A, B, C = 4, 5, 6
    src = torch.full((2, 3), 7)
    src_mask = torch.ones(2, 1, 1, 3, dtype=torch.bool)
    prefix = pad([[], [A, B, C]])
    scorer = toy({(): {EOS_ID: 0.9, A: 0.1}})
    if search == "greedy":
        got = [[h] for h in greedy_search(scorer, src, src_mask, prefix=prefix)]
    else:
        got = beam_search(scorer, src, src_mask, beam_size=2, alpha=0.0, prefix=prefix)
    assert [hyps[0].tokens for hyps in got] == [[], [A, B, C]]
    expected = [math.log(0.9), math.log(0.1) + 2 * math.log(1e-6)]
    assert [hyps[0].score for hyps in got] == pytest.approx(expected, abs=1e-3)
