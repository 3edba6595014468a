"""Token-bounded, length-bucketed batches: deterministic per (seed, epoch), resumable, shardable.

A batch holds at most `max_tokens` tokens per side, padding included. Sequences are built as
src = x + EOS, tgt_in = BOS + y, tgt_out = y + EOS.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from translator.data.tokenizer import BOS_ID, EOS_ID, PAD_ID


@dataclass
class Batch:
    src: torch.Tensor  # (B, S) source ids + EOS, right-padded with PAD
    tgt_in: torch.Tensor  # (B, T) BOS + target ids
    tgt_out: torch.Tensor  # (B, T) target ids + EOS; PAD is ignored by the loss
    src_mask: torch.Tensor  # (B, 1, 1, S) bool, True = may attend

    @property
    def n_tgt_tokens(self) -> int:
        return int((self.tgt_out != PAD_ID).sum())

    def target_rows(self) -> torch.Tensor:
        """(n,) indices of the real (not PAD) positions of tgt_out.flatten(): the loss's rows."""
        return (self.tgt_out.flatten() != PAD_ID).nonzero().squeeze(1)

    def to(self, device: torch.device | str) -> Batch:
        move = lambda t: t.to(device, non_blocking=True)  # noqa: E731
        return Batch(move(self.src), move(self.tgt_in), move(self.tgt_out), move(self.src_mask))


def padding_mask(src: torch.Tensor) -> torch.Tensor:
    """(B, S) ids -> (B, 1, 1, S) bool key mask, True where a real token may be attended."""
    return (src != PAD_ID)[:, None, None, :]


def pad(seqs: list[list[int]], prefix: list[int] = (), suffix: list[int] = ()) -> torch.Tensor:
    """Right-pad id lists (with optional prefix/suffix tokens) into a (B, L) long tensor."""
    rows = [list(prefix) + list(s) + list(suffix) for s in seqs]
    out = torch.full((len(rows), max(map(len, rows))), PAD_ID, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out


def make_batch(src_ids: list[list[int]], tgt_ids: list[list[int]]) -> Batch:
    src = pad(src_ids, suffix=[EOS_ID])
    return Batch(
        src, pad(tgt_ids, prefix=[BOS_ID]), pad(tgt_ids, suffix=[EOS_ID]), padding_mask(src)
    )


def token_batches(
    src_lens: np.ndarray,
    tgt_lens: np.ndarray,
    max_tokens: int,
    seed: int,
    epoch: int,
    rank: int = 0,
    world_size: int = 1,
) -> list[np.ndarray]:
    """Index arrays of one epoch's batches for this rank, in training order.

    Pairs are shuffled, stably sorted by length (so equal lengths mix across epochs) and cut
    greedily so that rows * longest side (+1 for EOS/BOS) <= max_tokens. Neighbouring batches of
    that sorted order are grouped world_size at a time (similar lengths, so similar sizes), the
    groups are shuffled, and rank r takes the r-th batch of each group: disjoint batches, the same
    count on every rank. The result depends only on (seed, epoch), so training resumes mid-epoch
    by index. With one rank every pair is in exactly one batch.
    """
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(src_lens))
    width = np.maximum(src_lens, tgt_lens)[order] + 1
    by_width = np.argsort(width, kind="stable")
    order, width = order[by_width], width[by_width]
    batches = np.split(order, cut_points(width, max_tokens))
    if len(src_lens) == 0:
        batches = []
    if extra := len(batches) % world_size:  # drop a random few so that every rank gets as many
        dropped = set(rng.choice(len(batches), extra, replace=False).tolist())
        batches = [b for i, b in enumerate(batches) if i not in dropped]
    groups = rng.permutation(len(batches) // world_size)
    return [batches[g * world_size + rank] for g in groups]


def cut_points(width: np.ndarray, max_tokens: int) -> list[int]:
    """Where greedy batching cuts rows of non-decreasing `width`:
    (rows so far + 1) * width <= max_tokens.

    Row j fits in a batch starting at s iff (j - s + 1) * width[j] <= max_tokens, i.e.
    j + 1 - max_tokens // width[j] <= s; that left side rises strictly with j, so each batch's end
    is one binary search (a loop over batches, not rows). A row wider than max_tokens is alone.
    """
    reach = np.arange(1, len(width) + 1) - max_tokens // np.maximum(width, 1)  # (N,) increasing
    cuts, start = [], 0
    while start < len(width):
        start = max(int(np.searchsorted(reach, start, side="right")), start + 1)
        cuts.append(start)
    return cuts[:-1]
