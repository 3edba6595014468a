"""Search over the model's output distribution: greedy and beam search with a KV cache."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Hypothesis:
    tokens: list[int]  # output ids, without BOS / EOS / PAD
    score: float  # sum of log-probs (beam: divided by the length penalty)


def max_lengths(src_mask: torch.Tensor, max_len_a: float, max_len_b: int, limit: int) -> torch.Tensor:
    """(B,) longest allowed output per sentence: a * |src| + b tokens (|src| without EOS), capped.

    `limit` is the model's own bound (max_positions - 1: BOS takes a position). Computed in float64
    and capped before the conversion to integers, so no a or b overflows; the 1e-6 makes a * |src|
    land on the integer it means when `a` is a decimal binary floats cannot hold (0.7 * 90 = 63,
    not 62.99999999999999).
    """
    src_lens = src_mask.sum(dim=(1, 2, 3)) - 1
    lengths = (max_len_a * src_lens.double() + float(max_len_b) + 1e-6).floor()
    return lengths.clamp(min=1, max=limit).long()


def eos_allowed_from(max_lens: torch.Tensor, min_len: int) -> torch.Tensor:
    """(B,) first step at which EOS may be emitted: min_len, but never after the length limit."""
    return max_lens.clamp(max=min_len)


def strip(row: list[int], eos_id: int) -> list[int]:
    """Ids up to (not including) the first EOS, without BOS."""
    row = row[1:]
    return row[: row.index(eos_id)] if eos_id in row else row


def log_softmax_into(out: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """torch.log_softmax(logits, -1, dtype=torch.float32) for logits (N, V), written into `out` (N, V) fp32.

    A search calls this at every step with the same `out`. A fresh (N, V) fp32 tensor per step (two
    for bf16 logits: the upcast, then the result) is big enough that malloc returns it to the OS when
    it is freed and the next step pays the page faults of getting it back: ~3000 a step and 5-10 ms
    in a 32 x beam 4 batch with V = 32000 (docs/benchmarks/decode.md).
    """
    if logits.dtype != out.dtype:
        logits = out.copy_(logits)  # upcast in place: the kernel reads a whole row before writing it
    return torch.log_softmax(logits, dim=-1, out=out)
