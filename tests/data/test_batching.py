"""Token batches: bounded by max_tokens with padding, deterministic, every pair once, disjoint
across ranks."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from translator.data.batching import cut_points, make_batch, token_batches
from translator.data.tokenizer import BOS_ID, EOS_ID, PAD_ID


def greedy_reference(width: np.ndarray, max_tokens: int) -> list[int]:
    """The greedy cut written as the plain row-by-row loop."""
    cuts, start = [], 0
    while start < len(width):
        end = start + 1
        while end < len(width) and (end + 1 - start) * width[end] <= max_tokens:
            end += 1
        cuts.append(end)
        start = end
    return cuts[:-1]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 80), max_size=300), st.integers(1, 400))
def test_cut_points_equal_the_row_by_row_greedy(widths, max_tokens):
    width = np.sort(np.array(widths, dtype=np.int64))
    assert cut_points(width, max_tokens) == greedy_reference(width, max_tokens)


def lengths(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    src = rng.integers(1, 60, n)
    return src, np.clip(src + rng.integers(-5, 6, n), 1, None)


def test_batches_fit_max_tokens_with_padding_and_cover_every_pair_once():
    src, tgt = lengths(5000)
    batches = token_batches(src, tgt, 600, seed=1, epoch=0)
    for rows in batches:
        widest = max(src[rows].max(), tgt[rows].max()) + 1  # + EOS (source) / BOS (target)
        assert len(rows) * widest <= 600 or len(rows) == 1
    assert np.array_equal(np.sort(np.concatenate(batches)), np.arange(5000))


def test_padded_batch_tensors_fit_max_tokens():
    src, tgt = lengths(400)
    ids = {"src": [[5] * n for n in src], "tgt": [[6] * n for n in tgt]}
    for rows in token_batches(src, tgt, 300, seed=0, epoch=0):
        batch = make_batch([ids["src"][i] for i in rows], [ids["tgt"][i] for i in rows])
        assert batch.src.numel() <= 300 and batch.tgt_in.numel() <= 300


def test_same_seed_and_epoch_same_batches_other_epoch_other_order():
    src, tgt = lengths(3000)
    first = token_batches(src, tgt, 500, seed=3, epoch=2)
    again = token_batches(src, tgt, 500, seed=3, epoch=2)
    assert all(np.array_equal(a, b) for a, b in zip(first, again)) and len(first) == len(again)
    # resuming mid-epoch = recomputing the epoch and skipping the batches already used
    assert all(
        np.array_equal(a, b)
        for a, b in zip(first[7:], token_batches(src, tgt, 500, seed=3, epoch=2)[7:])
    )
    other = token_batches(src, tgt, 500, seed=3, epoch=3)
    assert [len(b) for b in first] != [len(b) for b in other]


@pytest.mark.parametrize("world_size", [2, 3])
def test_ranks_get_disjoint_batches_of_similar_size_and_equal_count(world_size):
    src, tgt = lengths(6000)
    per_rank = [
        token_batches(src, tgt, 800, seed=5, epoch=1, rank=r, world_size=world_size)
        for r in range(world_size)
    ]
    assert len({len(batches) for batches in per_rank}) == 1
    seen = np.concatenate([rows for batches in per_rank for rows in batches])
    assert len(seen) == len(np.unique(seen))  # disjoint
    assert len(seen) > 0.95 * len(src)  # at most world_size - 1 batches are left out
    spread = []
    for step in zip(*per_rank):  # the batches the ranks train on at the same step
        padded = [len(rows) * (max(src[rows].max(), tgt[rows].max()) + 1) for rows in step]
        spread.append((max(padded) - min(padded)) / max(padded))
    assert np.median(spread) < 0.1


def test_fewer_batches_than_ranks_gives_none():
    src, tgt = lengths(3)
    assert token_batches(src, tgt, 10_000, seed=0, epoch=0, rank=1, world_size=4) == []


def test_make_batch_adds_eos_bos_and_masks_padding():
    batch = make_batch([[7, 8, 9], [7]], [[5], [5, 6]])
    assert batch.src.tolist() == [[7, 8, 9, EOS_ID], [7, EOS_ID, PAD_ID, PAD_ID]]
    assert batch.tgt_in.tolist() == [[BOS_ID, 5, PAD_ID], [BOS_ID, 5, 6]]
    assert batch.tgt_out.tolist() == [[5, EOS_ID, PAD_ID], [5, 6, EOS_ID]]
    assert batch.src_mask.shape == (2, 1, 1, 4)
    assert batch.src_mask[:, 0, 0].tolist() == [[True] * 4, [True, True, False, False]]


def test_target_rows_are_the_real_positions_of_the_flattened_targets():
    batch = make_batch([[7, 8, 9], [7], [9]], [[5], [5, 6], [6, 6, 5]])
    # tgt_out, 3 x 4, row by row: 5 EOS . . | 5 6 EOS . | 6 6 5 EOS  (. = PAD)
    assert batch.target_rows().tolist() == [0, 1, 4, 5, 6, 8, 9, 10, 11]


def test_pairs_of_equal_length_get_other_batch_partners_each_epoch():
    """Length bucketing sorts by length: a shuffle before the sort is what mixes equal lengths."""
    lengths = np.full(2000, 10)
    first, second = (
        {frozenset(b.tolist()) for b in token_batches(lengths, lengths, 110, seed=0, epoch=e)}
        for e in (0, 1)
    )
    assert len(first & second) < len(first) // 10
