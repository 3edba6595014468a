"""Decoding from the model's output distribution: greedy and beam search with a KV cache,
sampling, and forced decoding of given targets; the helpers they share are here."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import torch

from translator.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID

F = TypeVar("F", bound=Callable)


def in_eval_mode(function: F) -> F:
    """Runs `function(model, ...)` with `model` in eval mode (no dropout), then leaves it as it
    was: a Python caller may hand in a model it is training (a back-translation loop)."""

    @functools.wraps(function)
    def with_model_in_eval_mode(model, *args, **kwargs):
        was_training = model.training
        model.eval()
        try:
            return function(model, *args, **kwargs)
        finally:
            model.train(was_training)

    return with_model_in_eval_mode  # type: ignore[return-value]


@dataclass
class Hypothesis:
    tokens: list[int]  # output ids, without BOS / EOS / PAD
    score: float  # sum of log-probs (beam: divided by the length penalty)


def max_lengths(
    src_mask: torch.Tensor, max_len_a: float, max_len_b: int, limit: int
) -> torch.Tensor:
    """(B,) longest allowed output per sentence: a * |src| + b tokens (|src| without EOS), capped
    at `limit`, the model's own bound (max_positions - 1: BOS takes a position)."""
    return output_limits(src_mask.sum(dim=(1, 2, 3)) - 1, max_len_a, max_len_b, limit)


def output_limits(
    src_lens: torch.Tensor, max_len_a: float, max_len_b: int, limit: int
) -> torch.Tensor:
    """max_lengths from the source lengths (B,) (without EOS): what callers compare an output's
    length with to tell that the limit, not the model, ended it.

    Computed in float64 and capped before the conversion to integers, so no a or b overflows; the
    1e-6 makes a * |src| land on the integer it means when `a` is a decimal binary floats cannot
    hold (0.7 * 90 = 63, not 62.99999999999999).
    """
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
    """torch.log_softmax(logits, -1, dtype=torch.float32) for logits (N, V), written into
    `out` (N, V) fp32.

    A search calls this at every step with the same `out`, allocated before its loop. A fresh
    (N, V) fp32 tensor per step (two for bf16 logits: the upcast, then the result) is big enough
    that malloc returns it to the OS when it is freed, and the next step pays the page faults of
    getting it back (docs/benchmarks/decode.md, stop 8).
    """
    if logits.dtype != out.dtype:
        # upcast in place: the kernel reads a whole row before writing it
        logits = out.copy_(logits)
    return torch.log_softmax(logits, dim=-1, out=out)


def prefix_rows(
    prefixes: list[list[int]] | None, max_lens: torch.Tensor, limit: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each sentence's forced output prefix (None: none) and its length limits (B,) -> (B, P) ids,
    PAD after a short one, (B,) prefix lengths, and the limits raised to hold each prefix.

    A prefix may be as long as `limit`, the model's (then only EOS can follow it).
    """
    rows, device = len(max_lens), max_lens.device
    if prefixes is None:
        prefixes = [[]] * rows
    if len(prefixes) != rows:
        raise ValueError(f"{len(prefixes)} prefixes for {rows} sentences")
    if any(token in (PAD_ID, BOS_ID, EOS_ID) for ids in prefixes for token in ids):
        raise ValueError("a prefix holds PAD, BOS or EOS: give output ids only")
    if any(len(ids) > limit for ids in prefixes):
        raise ValueError(f"a prefix is longer than the model's {limit} output positions")
    width = max(map(len, prefixes), default=0)
    ids = torch.full((rows, width), PAD_ID, dtype=torch.long)
    for row, prefix in enumerate(prefixes):
        ids[row, : len(prefix)] = torch.tensor(prefix, dtype=torch.long)
    lengths = torch.tensor([len(prefix) for prefix in prefixes], dtype=torch.long).to(device)
    return ids.to(device), lengths, torch.maximum(max_lens, lengths)


def force_prefix_(
    log_probs: torch.Tensor, step: int, prefix: torch.Tensor, prefix_lens: torch.Tensor
) -> torch.Tensor:
    """log_probs (N, V), in place: a row still inside its prefix (step < prefix_lens (N,)) may
    only take its prefix token prefix[:, step] (N, P), at the model's log-prob for it, so the
    prefix is scored as any output is."""
    if step >= prefix.shape[1]:
        return log_probs
    forced = prefix[:, step : step + 1]  # (N, 1)
    kept = log_probs.gather(1, forced)
    log_probs.masked_fill_((step < prefix_lens)[:, None], float("-inf"))
    # a row past its prefix gets its own value back (PAD's, already banned)
    return log_probs.scatter_(1, forced, kept)


def ban_repeated_ngrams_(
    log_probs: torch.Tensor, tokens: torch.Tensor, step: int, n: int, free: torch.Tensor
) -> torch.Tensor:
    """log_probs (N, V), in place: in the rows where `free` (N,) is True, every token that would
    end an n-gram already in the row's output gets -inf (fairseq's --no-repeat-ngram-size).

    tokens (N, T) holds BOS and then the outputs so far, tokens[:, 1 : step + 1]. The last n - 1
    outputs are compared with every earlier (n - 1)-gram; the token that followed a match is
    banned. A row inside its forced prefix is not `free`: a prefix may repeat itself.
    """
    output = tokens[:, 1 : step + 1]  # (N, L)
    if n < 1 or output.shape[1] < n:  # no n-gram can have been completed yet
        return log_probs
    if n == 1:
        followers, match = output, torch.ones_like(output, dtype=torch.bool)
    else:
        starts = output[:, :-1].unfold(1, n - 1, 1)  # (N, L - n + 1, n - 1): each earlier window
        match = (starts == output[:, None, -(n - 1) :]).all(dim=2)  # (N, L - n + 1)
        followers = output[:, n - 1 :]  # (N, L - n + 1): the token after each window
    # counted, not scattered as booleans: one token may follow several windows
    hits = torch.zeros_like(log_probs, dtype=torch.int32)
    hits.scatter_add_(1, followers, (match & free[:, None]).int())
    return log_probs.masked_fill_(hits > 0, float("-inf"))


def ban_tokens_(
    log_probs: torch.Tensor, step: int, eos_from: torch.Tensor, unk_penalty: float = 0.0
) -> torch.Tensor:
    """log_probs (N, V), in place: PAD, BOS never generated; EOS not before step eos_from (N,);
    `unk_penalty` taken from <unk>'s log-prob (fairseq's --unkpen)."""
    # one scalar index each: a list index is a host tensor, copied to the device at every step
    log_probs[:, PAD_ID] = float("-inf")
    log_probs[:, BOS_ID] = float("-inf")
    log_probs[:, EOS_ID] = log_probs[:, EOS_ID].masked_fill(step < eos_from, float("-inf"))
    if unk_penalty:
        log_probs[:, UNK_ID] -= unk_penalty
    return log_probs
