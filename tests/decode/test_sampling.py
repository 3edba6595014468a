"""Sampling (decode/sampling.py): the truncated distribution against a hand-built one, draws
against their probabilities, and a sentence's draws independent of its batch."""

from __future__ import annotations

import math

import pytest
import torch

from translator.decode.greedy import greedy_search
from translator.decode.sampling import Sampling, piece_keys, truncated

PROBS = [0.05, 0.4, 0.1, 0.25, 0.2]  # one row over a vocabulary of 5
CPU = torch.device("cpu")


def kept(sampling: Sampling) -> list[float]:
    """The distribution `truncated` leaves, as probabilities."""
    log_probs = torch.tensor([PROBS]).log()
    return truncated(log_probs, sampling).softmax(-1)[0].tolist()


def test_top_k_keeps_the_k_most_likely_renormalised():
    # by hand: the 3 most likely are 0.4, 0.25, 0.2 (ids 1, 3, 4), summing to 0.85
    assert kept(Sampling(top_k=3)) == pytest.approx([0, 0.4 / 0.85, 0, 0.25 / 0.85, 0.2 / 0.85])


@pytest.mark.parametrize(
    "top_p, ids",
    [
        (0.0, [1]),  # the most likely always stays
        (0.3, [1]),  # 0.4 alone reaches 0.3
        (0.39, [1]),
        (0.6, [1, 3]),  # 0.4 < 0.6, then 0.65
        (0.9, [1, 3, 4, 2]),  # 0.85 < 0.9, then 0.95
        (0.99, [0, 1, 2, 3, 4]),
    ],
)
def test_top_p_keeps_the_smallest_set_of_most_likely_reaching_p(top_p, ids):
    total = sum(PROBS[i] for i in ids)
    expected = [PROBS[i] / total if i in ids else 0.0 for i in range(len(PROBS))]
    assert kept(Sampling(top_p=top_p)) == pytest.approx(expected, abs=1e-6)


def test_temperature_raises_the_probabilities_to_1_over_t():
    t = 0.5
    powered = [p ** (1 / t) for p in PROBS]
    assert kept(Sampling(temperature=t)) == pytest.approx([p / sum(powered) for p in powered])


def test_draws_follow_the_truncated_probabilities():
    rows = 20_000
    log_probs = torch.tensor([PROBS]).log().expand(rows, -1)
    sampler = Sampling(top_k=4, seed=3).rows([(line, 0) for line in range(rows)], CPU)
    counts = torch.bincount(sampler.draw(log_probs), minlength=5).double() / rows
    # by hand: the 4 most likely of PROBS hold 0.95
    expected = torch.tensor([0, 0.4, 0.1, 0.25, 0.2], dtype=torch.double) / 0.95
    assert counts[0] == 0  # outside the top 4: never drawn
    # binomial standard error at 20,000 draws is under 0.0035: 4 of them
    torch.testing.assert_close(counts, expected, atol=0.014, rtol=0)


def test_top_k_1_is_greedy(make_model, src_batch):
    model = make_model()
    src, src_mask = src_batch
    greedy = greedy_search(model, src, src_mask, max_len_a=0.0, max_len_b=12)
    sampler = Sampling(top_k=1, seed=9).rows([(i, 0) for i in range(len(src))], CPU)
    drawn = greedy_search(model, src, src_mask, max_len_a=0.0, max_len_b=12, sampler=sampler)
    assert [h.tokens for h in drawn] == [h.tokens for h in greedy]
    assert [h.score for h in drawn] == pytest.approx([h.score for h in greedy], abs=1e-5)


def test_a_sentences_draws_do_not_depend_on_its_batch(make_model, src_batch):
    """Each row keeps its own generator, also when finished rows leave the batch."""
    model = make_model()
    src, src_mask = src_batch
    sampling = Sampling(temperature=1.5, seed=4)
    keys = [(10 + i, 0) for i in range(len(src))]
    together = greedy_search(
        model, src, src_mask, max_len_a=0.0, max_len_b=12, sampler=sampling.rows(keys, CPU)
    )
    for i in range(len(src)):
        length = int(src_mask[i].sum())
        alone = greedy_search(
            model,
            src[i : i + 1, :length],
            src_mask[i : i + 1, ..., :length],
            max_len_a=0.0,
            max_len_b=12,
            sampler=sampling.rows([keys[i]], CPU),
        )
        assert alone[0].tokens == together[i].tokens
    other = greedy_search(
        model,
        src,
        src_mask,
        max_len_a=0.0,
        max_len_b=12,
        sampler=Sampling(temperature=1.5, seed=5).rows(keys, CPU),
    )
    assert [h.tokens for h in other] != [h.tokens for h in together]  # the seed matters


def test_a_drawn_hypothesis_is_scored_by_the_models_own_log_probs(make_model, src_batch):
    """The score sums the untempered log-probabilities of the drawn tokens (what `score` gives)."""
    from translator.decode.forced import target_log_probs

    model = make_model()
    src, src_mask = src_batch
    sampler = Sampling(temperature=2.0, seed=1).rows([(i, 0) for i in range(4)], CPU)
    drawn = greedy_search(model, src, src_mask, max_len_a=0.0, max_len_b=12, sampler=sampler)
    src_ids = [row[: int(m.sum()) - 1] for row, m in zip(src.tolist(), src_mask)]
    forced = target_log_probs(model, src_ids, [h.tokens for h in drawn])
    # EOS included, also where the length limit forced it
    assert all(math.isclose(h.score, f, abs_tol=1e-4) for h, f in zip(drawn, forced))


def test_translate_lines_draws_each_line_alike_in_any_chunks_and_batches(tiny):
    """Piped input arrives in chunks whose size depends on timing: a line's draw must not."""
    import dataclasses

    from tests.conftest import SENTENCES
    from translator.translate import translate_lines

    lines = SENTENCES[:6]
    sampling = Sampling(temperature=1.3, seed=2)
    quiet = {"warn": None}  # a random model writes <unk>s
    whole = translate_lines(
        tiny.model, tiny.tokenizer, lines, tiny.cfg.decode, sampling=sampling, **quiet
    )
    small = dataclasses.replace(tiny.cfg.decode, batch_tokens=20)  # other batches
    pieces = translate_lines(
        tiny.model, tiny.tokenizer, lines[:2], small, sampling=sampling, **quiet
    ) + translate_lines(
        tiny.model, tiny.tokenizer, lines[2:], small, first_line=3, sampling=sampling, **quiet
    )
    assert [h[0][0] for h in pieces] == [h[0][0] for h in whole]
    again = translate_lines(
        tiny.model,
        tiny.tokenizer,
        lines,
        tiny.cfg.decode,
        sampling=Sampling(temperature=1.3, seed=3),
        **quiet,
    )
    assert [h[0][0] for h in again] != [h[0][0] for h in whole]


def test_top_k_keeps_exactly_k_where_logits_tie():
    """bf16 logits tie often: the k-th's equals must not widen the draw."""
    log_probs = torch.tensor([[-1.0, -2.0, -2.0, -2.0, -3.0]])
    kept_ids = torch.isfinite(truncated(log_probs, Sampling(top_k=2)))[0]
    assert int(kept_ids.sum()) == 2 and bool(kept_ids[0])


@pytest.mark.parametrize(
    "settings",
    [
        {"temperature": 0.0},
        {"temperature": -1.0},
        {"temperature": float("inf")},
        {"temperature": float("nan")},
        {"temperature": 1e-39},
        {"top_p": -0.1},
        {"top_p": 1.5},
        {"top_k": -1},
        {"seed": -2},
    ],
)
def test_settings_that_leave_nothing_to_draw_are_refused(settings):
    from translator.errors import TranslatorError

    with pytest.raises(TranslatorError):
        Sampling(**settings)


def test_different_keys_never_share_a_stream():
    """(seed, line) pairs that a linear mix would map to one generator seed."""
    a = Sampling(seed=1).rows([(5, 0)], CPU).generators[0]
    b = Sampling(seed=0).rows([(5 + 1_000_003, 0)], CPU).generators[0]
    assert a.initial_seed() != b.initial_seed()


def test_a_split_lines_pieces_draw_from_streams_of_their_own():
    # lines 7 (one piece), 8 (three pieces), 9 (one), numbered from first_line 7
    assert piece_keys([0, 1, 1, 1, 2], 7) == [(7, 0), (8, 0), (8, 1), (8, 2), (9, 0)]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_cuda_draws_are_reproducible_per_line_and_follow_top_k(make_model, src_batch):
    """The generators live on the GPU: the same keys draw alike, in any batch, within top-k."""
    model = make_model().cuda()
    src, src_mask = (t.cuda() for t in src_batch)
    sampling = Sampling(temperature=1.5, top_k=3, seed=4)
    keys = [(i, 0) for i in range(len(src))]
    device = torch.device("cuda")
    first = greedy_search(
        model, src, src_mask, max_len_a=0.0, max_len_b=12, sampler=sampling.rows(keys, device)
    )
    again = greedy_search(
        model, src, src_mask, max_len_a=0.0, max_len_b=12, sampler=sampling.rows(keys, device)
    )
    assert [h.tokens for h in first] == [h.tokens for h in again]
    log_probs = torch.randn(64, 50, device="cuda").log_softmax(-1)
    drawn = sampling.rows([(i, 0) for i in range(64)], device).draw(log_probs)
    top3 = (log_probs / 1.5).topk(3, dim=-1).indices
    assert bool((top3 == drawn[:, None]).any(dim=1).all())


def test_an_nbest_of_draws_holds_the_single_draw_and_is_sorted(tiny):
    """Draw d of a line has its own stream: the n-best's draws do not depend on n, so the single
    draw (d = 0) is among the three, which come best first."""
    from translator.translate import translate_lines

    # short lines: an over-long one is split and gets one (joined) translation, as with a beam
    lines = ["A dog runs.", "Two men play chess.", "A girl in a red dress."]
    sampling = Sampling(temperature=1.3, seed=6)
    args = (tiny.model, tiny.tokenizer, lines, tiny.cfg.decode)
    one = translate_lines(*args, 1, warn=None, sampling=sampling)
    three = translate_lines(*args, 3, warn=None, sampling=sampling)
    for single, draws in zip(one, three):
        # the same text; its score to float precision (a batch of 3 draws is another shape of
        # products than a batch of 1, which moves fp32 scores in the 6th digit on some CPUs)
        text, score = single[0]
        assert len(draws) == 3 and text in [t for t, _ in draws]
        assert score == pytest.approx(dict(draws)[text], rel=1e-5)
        assert [s for _, s in draws] == sorted((s for _, s in draws), reverse=True)
    assert any(len({t for t, _ in draws}) > 1 for draws in three)  # not one draw three times
