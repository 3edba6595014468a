"""Search over the model's output distribution: greedy and beam search with a KV cache."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Hypothesis:
    tokens: list[int]  # output ids, without BOS / EOS / PAD
    score: float  # sum of log-probs (beam: divided by the length penalty)


def max_lengths(src_mask: torch.Tensor, max_len_a: float, max_len_b: int, limit: int) -> torch.Tensor:
    """(B,) longest allowed output per sentence: a * |src| + b tokens (|src| without EOS), capped."""
    src_lens = src_mask.sum(dim=(1, 2, 3)) - 1
    return (max_len_a * src_lens + max_len_b).long().clamp(min=1, max=limit)


def strip(row: list[int], eos_id: int) -> list[int]:
    """Ids up to (not including) the first EOS, without BOS."""
    row = row[1:]
    return row[: row.index(eos_id)] if eos_id in row else row
