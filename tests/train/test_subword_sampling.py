"""Subword regularisation (train.subword_alpha): each epoch a new segmentation of the same text."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import sentencepiece as spm
import torch

from tests.train.conftest import variant
from translator.data.batching import EOS_ID, PAD_ID
from translator.data.sampling import SubwordSampler
from translator.data.shards import TokenArray
from translator.errors import TranslatorError
from translator.prepared import prepared_dir
from translator.train.batches import TrainBatches
from translator.train.distributed import Dist
from translator.train.state import TrainState

CPU = Dist(torch.device("cpu"))


@pytest.fixture(scope="module")
def target_side(prepared):
    folder = prepared_dir(prepared.data)
    return str(folder / "spm.model"), TokenArray(folder / "train.tgt")


def test_a_sampled_epoch_segments_the_same_text_differently(target_side):
    model, rows = target_side
    sampled = SubwordSampler(model, rows, alpha=0.3, longest=10_000).epoch(seed=1, epoch=0, side=1)
    sp = spm.SentencePieceProcessor(model_file=model)
    prepared = [rows[i] for i in range(len(rows))]
    again = [sampled[i] for i in range(len(sampled))]
    assert sp.decode(again) == sp.decode(prepared)
    changed = sum(a != b for a, b in zip(again, prepared))
    assert changed > len(rows) // 4
    assert np.array_equal(sampled.lengths, [len(r) for r in again])
    # the greedy segmentation is the most probable one: samples are longer on average
    assert sampled.lengths.sum() > rows.lengths.sum()


def test_segmentations_depend_only_on_seed_epoch_and_side(target_side):
    model, rows = target_side

    def rows_of(sampler, seed, epoch, side):
        ids = sampler.epoch(seed, epoch, side)
        return [ids[i] for i in range(len(ids))]

    first = SubwordSampler(model, rows, 0.3, 10_000)
    reference = rows_of(first, 1, 3, 1)
    assert rows_of(first, 1, 4, 1) != reference
    assert rows_of(first, 1, 3, 0) != reference
    assert rows_of(first, 2, 3, 1) != reference
    # another sampler (another process, or a resumed run) after other draws
    assert rows_of(SubwordSampler(model, rows, 0.3, 10_000), 1, 3, 1) == reference


def test_a_sample_longer_than_the_positions_keeps_the_prepared_segmentation(target_side):
    model, rows = target_side
    longest = int(np.median(rows.lengths))
    sampled = SubwordSampler(model, rows, 0.05, longest).epoch(seed=1, epoch=0, side=1)
    assert sampled.lengths.max() <= max(longest, rows.lengths.max())
    for i in np.flatnonzero(sampled.lengths > longest):
        assert sampled[i] == rows[i]
    assert (sampled.lengths <= longest).sum() >= (rows.lengths <= longest).sum() // 2


def test_training_batches_are_cut_on_the_sampled_lengths_and_resume_exactly(prepared):
    cfg = variant(prepared, "unused", "train.max_tokens=1024", "train.subword_alpha=0.3")
    data, state = TrainBatches(cfg, CPU), TrainState()
    plain = TrainBatches(variant(prepared, "unused", "train.max_tokens=1024"), CPU)
    per_epoch = len(data.epoch(0))
    batches = data.take(state, per_epoch)
    for batch in batches:  # every batch within max_tokens per side, padding included
        assert batch.src.numel() <= 1024 and batch.tgt_out.numel() <= 1024
    # every pair exactly once, as a new segmentation of its prepared text
    sp = spm.SentencePieceProcessor(model_file=str(prepared_dir(cfg.data) / "spm.model"))

    def texts(ids: torch.Tensor) -> list[str]:
        return sp.decode([[t for t in row if t not in (PAD_ID, EOS_ID)] for row in ids.tolist()])

    seen = sorted(t for b in batches for t in texts(b.tgt_out))
    prepared_rows = [plain.tgt[i] for i in range(len(plain.tgt))]
    assert seen == sorted(sp.decode(prepared_rows))
    assert sum(b.n_tgt_tokens for b in batches) > plain.tgt.lengths.sum() + len(plain.tgt)

    data.take(state, per_epoch - 2)  # into epoch 1, two batches before its end
    saved = copy.deepcopy(state)
    straight = data.take(state, 4)  # rolls into epoch 2
    again = TrainBatches(cfg, CPU).take(saved, 4)
    for a, b in zip(straight, again):
        assert torch.equal(a.src, b.src) and torch.equal(a.tgt_out, b.tgt_out)


def test_a_negative_alpha_is_refused(prepared):
    with pytest.raises(TranslatorError, match="subword_alpha"):
        variant(prepared, "unused", "train.subword_alpha=-0.1")
