"""Ensembles (model/ensemble.py) in the searches, against an uncached mean of probabilities.

The reference averages the members' softmax outputs as plain probabilities over the whole prefix
(no cache, no log-sum-exp) and runs the uncached reference searches of test_search.py over it.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch

from tests.decode.test_search import (
    _assert_same_searches,
    _searches,
    assert_same,
    reference_beam,
    reference_greedy,
)
from translator.data.tokenizer import EOS_ID, PAD_ID
from translator.decode.beam import beam_search
from translator.decode.greedy import greedy_search
from translator.model.ensemble import Ensemble
from translator.model.inference import for_cpu_decoding


class MeanOfModels:
    """log(1/M sum_m softmax(logits_m)) over a whole prefix: what an ensemble step must equal."""

    def __init__(self, models) -> None:
        self.models = models
        self.cfg = SimpleNamespace(
            max_positions=min(m.cfg.max_positions for m in models),
            vocab_size=models[0].cfg.vocab_size,
        )

    def encode(self, src, src_mask):
        return [m.encode(src, src_mask) for m in self.models]

    def decode(self, tgt, memories, src_mask):
        probs = [
            torch.softmax(m.decode(tgt, memory, src_mask).double(), dim=-1)
            for m, memory in zip(self.models, memories)
        ]
        return torch.log(sum(probs) / len(probs)).float()


def members(make_model):
    """Two random models of one vocabulary, different in width, heads and positions."""
    torch.manual_seed(3)
    return [
        make_model(),
        make_model(d_model=48, n_heads=4, d_ff=96, positions="rope", n_kv_heads=2),
    ]


def test_greedy_of_an_ensemble_follows_the_mean_of_its_members_probabilities(make_model, src_batch):
    models, (src, src_mask) = members(make_model), src_batch
    found = greedy_search(Ensemble(models), src, src_mask)
    assert_same(found, reference_greedy(MeanOfModels(models), src, src_mask))
    # and is not simply one member's search
    alone = [greedy_search(m, src, src_mask) for m in models]
    assert all([h.tokens for h in found] != [h.tokens for h in a] for a in alone)


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_beam_of_an_ensemble_follows_the_mean_of_its_members_probabilities(
    make_model, src_batch, alpha
):
    models, (src, src_mask) = members(make_model), src_batch
    found = beam_search(Ensemble(models), src, src_mask, beam_size=3, alpha=alpha, nbest=3)
    expected = reference_beam(
        MeanOfModels(models), src, src_mask, beam_size=3, alpha=alpha, nbest=3
    )
    for hyps, want in zip(found, expected):
        assert_same(hyps, want)


def test_an_ensemble_of_one_model_twice_finds_what_the_model_finds(make_model, src_batch):
    model, (src, src_mask) = make_model(), src_batch
    _assert_same_searches(
        _searches(Ensemble([model, copy.deepcopy(model)]), src, src_mask),
        _searches(model, src, src_mask),
        1e-4,
    )


def test_an_ensemble_of_cpu_converted_members_drops_finished_sentences_consistently(make_model):
    """Members converted for CPU decoding (beam-slots caches, reordered together), with
    sentences leaving the batch, find what the plain members find stepping every row."""
    models = members(make_model)
    converted = [copy.deepcopy(m) for m in models]
    for m in converted:
        for_cpu_decoding(m)
    generator = torch.Generator().manual_seed(1)
    lengths = torch.randint(1, 10, (8,), generator=generator).tolist()
    src = torch.full((8, max(lengths) + 1), PAD_ID)
    for row, n in enumerate(lengths):
        src[row, :n] = torch.randint(4, models[0].cfg.vocab_size, (n,), generator=generator)
        src[row, n] = EOS_ID
    src_mask = (src != PAD_ID)[:, None, None, :]
    for search in (
        lambda model, drop: [[h] for h in greedy_search(model, src, src_mask, drop_finished=drop)],
        lambda model, drop: beam_search(
            model, src, src_mask, beam_size=3, nbest=3, drop_finished=drop
        ),
    ):
        _assert_same_searches(
            [[(h.tokens, h.score) for h in hyps] for hyps in search(Ensemble(converted), True)],
            [[(h.tokens, h.score) for h in hyps] for hyps in search(Ensemble(models), False)],
            1e-4,
        )


def test_models_of_different_vocabularies_are_refused(make_model):
    with pytest.raises(ValueError, match="one vocabulary"):
        Ensemble([make_model(), make_model(vocab_size=make_model().cfg.vocab_size + 1)])
