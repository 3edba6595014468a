"""Greedy search: at every step take the most likely next token."""

from __future__ import annotations

import torch

from translator.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from translator.decode import Hypothesis, max_lengths, strip
from translator.model.transformer import Transformer


@torch.inference_mode()
def greedy_search(model: Transformer, src: torch.Tensor, src_mask: torch.Tensor, *,
                  max_len_a: float = 1.2, max_len_b: int = 10, min_len: int = 0) -> list[Hypothesis]:
    """src (B, S), src_mask (B, 1, 1, S) -> one hypothesis per sentence."""
    B = src.shape[0]
    max_lens = max_lengths(src_mask, max_len_a, max_len_b, model.cfg.max_positions - 1)  # (B,)
    memory = model.encode(src, src_mask)  # (B, S, D)
    cache = model.new_cache(B, int(max_lens.max()) + 1, memory.dtype, src.device)
    tokens = torch.full((B, 1), BOS_ID, dtype=torch.long, device=src.device)  # (B, 1 + step)
    scores = torch.zeros(B, device=src.device)
    finished = torch.zeros(B, dtype=torch.bool, device=src.device)
    for step in range(int(max_lens.max()) + 1):
        logits = model.decode(tokens[:, -1:], memory, src_mask, cache)  # (B, 1, V)
        cache.length += 1
        log_probs = torch.log_softmax(logits[:, -1].float(), dim=-1)  # (B, V)
        log_probs[:, [PAD_ID, BOS_ID]] = float("-inf")  # never generated
        if step < min_len:
            log_probs[:, EOS_ID] = float("-inf")
        token = log_probs.argmax(dim=-1)
        token = torch.where(step >= max_lens, EOS_ID, token)  # length limit reached: end here
        token = torch.where(finished, PAD_ID, token)
        scores += torch.where(finished, 0.0, log_probs.gather(1, token[:, None]).squeeze(1))
        tokens = torch.cat([tokens, token[:, None]], dim=1)
        finished |= token == EOS_ID
        if finished.all():
            break
    return [Hypothesis(strip(row, EOS_ID), float(s)) for row, s in zip(tokens.tolist(), scores.tolist())]
