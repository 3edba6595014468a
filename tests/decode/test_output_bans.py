"""--no-repeat-ngram-size (no output holds an n-gram twice) and --unk-penalty.

The vectorised n-gram ban is checked against a plain-Python scan of the output; the searches
that use the bans against the uncached searches of test_search.py with each ban in their own
code.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tests.decode.test_search import (
    _limit,
    _next_log_probs,
    assert_same,
    greedy_one,
    reference_beam_search,
)
from translator.data.tokenizer import BOS_ID, PAD_ID, UNK_ID
from translator.decode import ban_repeated_ngrams_
from translator.decode.beam import beam_search
from translator.decode.greedy import greedy_search

NEG_INF = float("-inf")


def repeats(output: list[int], n: int) -> set[int]:
    """The tokens that would end an n-gram already in `output`."""
    if len(output) < n:
        return set()
    last = output[len(output) - n + 1 :] if n > 1 else []
    return {output[i + n - 1] for i in range(len(output) - n + 1) if output[i : i + n - 1] == last}


@given(
    length=st.integers(0, 10),
    n=st.integers(1, 4),
    data=st.data(),
)
def test_the_ban_is_a_scan_for_repeated_ngrams(length, n, data):
    rows = data.draw(st.integers(1, 4))
    outputs = [data.draw(st.lists(st.integers(4, 7), min_size=length, max_size=length))]
    outputs += [
        data.draw(st.lists(st.integers(4, 7), min_size=length, max_size=length))
        for _ in range(rows - 1)
    ]
    free = data.draw(st.lists(st.booleans(), min_size=rows, max_size=rows))
    # BOS, the outputs of `length` steps, then the slots of the steps to come
    tokens = torch.tensor([[BOS_ID, *output, PAD_ID, PAD_ID] for output in outputs])
    log_probs = torch.zeros(rows, 8)
    ban_repeated_ngrams_(log_probs, tokens, length, n, torch.tensor(free))
    for row, (output, is_free) in enumerate(zip(outputs, free)):
        banned = {v for v in range(8) if log_probs[row, v] == NEG_INF}
        assert banned == (repeats(output, n) if is_free else set())


def _banned(row: torch.Tensor, output: list[int], n: int) -> torch.Tensor:
    row = row.clone()
    for token in repeats(output, n):
        row[token] = NEG_INF
    return row


@pytest.mark.parametrize("n", [1, 2, 3])
@torch.inference_mode()
def test_greedy_without_repeats_is_the_uncached_greedy_that_bans_them(make_model, src_batch, n):
    model, (src, src_mask) = make_model(tie_embeddings=True), src_batch
    found = greedy_search(model, src, src_mask, max_len_a=2.0, max_len_b=4, no_repeat_ngram=n)
    for b, hyp in enumerate(found):
        max_len = _limit(model, src_mask[b], 2.0, 4)
        expected = greedy_one(
            model, src, src_mask, b, max_len, adjust=lambda row, _, out: _banned(row, out, n)
        )
        assert_same([hyp], [expected])
        assert not any(repeats(hyp.tokens[:i], n) & {hyp.tokens[i]} for i in range(len(hyp.tokens)))


@pytest.mark.parametrize("n", [1, 2])
@torch.inference_mode()
def test_beam_without_repeats_is_the_plain_list_search_that_bans_them(make_model, src_batch, n):
    # tied embeddings: the random model likes to repeat its input tokens, so bans bite
    model, (src, src_mask) = make_model(tie_embeddings=True), src_batch
    found = beam_search(
        model, src, src_mask, beam_size=3, nbest=3, max_len_a=2.0, max_len_b=4, no_repeat_ngram=n
    )
    unbanned = beam_search(model, src, src_mask, beam_size=3, nbest=3, max_len_a=2.0, max_len_b=4)
    for b in range(src.shape[0]):
        memory = model.encode(src[b : b + 1], src_mask[b : b + 1])
        max_len = _limit(model, src_mask[b], 2.0, 4)

        def next_log_probs(outputs, step, b=b, memory=memory, max_len=max_len):
            rows = _next_log_probs(model, outputs, memory, src_mask[b : b + 1], step, max_len, 0)
            return torch.stack([_banned(row, out[1:], n) for row, out in zip(rows, outputs)])

        assert_same(found[b], reference_beam_search(next_log_probs, max_len, 3, 0.6)[:3])
    assert found != unbanned  # the ban changed some output


@torch.inference_mode()
def test_a_forced_prefix_may_repeat_itself_and_the_ban_counts_it_after(make_model, src_batch):
    model, (src, src_mask) = make_model(), src_batch
    prefix = [5, 6, 5, 6]  # repeats the bigram 5 6
    found = beam_search(
        model, src, src_mask, beam_size=3, nbest=3, no_repeat_ngram=2, prefixes=[prefix] * 4
    )
    for hyps in found:
        for h in hyps:
            assert h.tokens[:4] == prefix
            rest = range(4, len(h.tokens))
            assert not any(repeats(h.tokens[:i], 2) & {h.tokens[i]} for i in rest)


@pytest.mark.parametrize("penalty", [-2.0, 1.5, 1000.0])
@torch.inference_mode()
def test_an_unk_penalty_is_taken_from_unk_at_every_step(make_model, src_batch, penalty):
    model, (src, src_mask) = make_model(), src_batch
    # a model that says <unk> often: its output row is the favourite token's, stronger
    favourite = Counter(t for h in greedy_search(model, src, src_mask) for t in h.tokens)
    with torch.no_grad():
        model.out_proj.weight[UNK_ID] = model.out_proj.weight[favourite.most_common(1)[0][0]] * 1.2
    plain = greedy_search(model, src, src_mask)
    assert sum(h.tokens.count(UNK_ID) for h in plain) >= 4
    found = greedy_search(model, src, src_mask, unk_penalty=penalty)

    def penalised(row, step, output):
        row = row.clone()
        row[UNK_ID] -= penalty
        return row

    for b, hyp in enumerate(found):
        max_len = _limit(model, src_mask[b], 1.2, 10)
        assert_same([hyp], [greedy_one(model, src, src_mask, b, max_len, adjust=penalised)])
    beams = beam_search(model, src, src_mask, beam_size=3, nbest=3, unk_penalty=penalty)
    unks = sum(h.tokens.count(UNK_ID) for hyps in beams for h in hyps)
    if penalty == 1000.0:
        assert unks == 0 and not any(UNK_ID in h.tokens for h in found)
    if penalty < 0:
        assert sum(h.tokens.count(UNK_ID) for h in found) >= sum(
            h.tokens.count(UNK_ID) for h in plain
        )
