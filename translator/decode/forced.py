"""Forced decoding: the log-probability a model gives a given target, teacher forced.

    log p(y | x) = sum_t log p(y_t | y_<t, x),   t over y's tokens and its EOS

in one forward pass per batch (no search, no cache). An ensemble's p is the mean of its members'
probabilities per token, as its searches use. `translator score` prints these; the noisy channel
(translator/rerank.py) reads the source back with them.
"""

from __future__ import annotations

import math

import torch

from translator.data.batching import make_batch
from translator.model.ensemble import Ensemble
from translator.model.transformer import Transformer


@torch.inference_mode()
def perplexity(nats_per_token: float) -> float:
    """exp(mean NLL); inf past what a float holds (a diverged model), never an OverflowError."""
    return math.exp(nats_per_token) if nats_per_token < 700 else math.inf


def target_log_probs(
    model: Transformer | Ensemble,
    src_ids: list[list[int]],
    tgt_ids: list[list[int]],
    batch_tokens: int = 4096,
) -> list[float]:
    """log p(tgt | src) per pair (natural log), summed over the target's ids and EOS.

    Ids without BOS/EOS; each side must fit the model's positions (with EOS, and BOS for the
    target): callers check. Batches are cut longest first so that rows * (longest + 1) <=
    batch_tokens.
    """
    members = model.members if isinstance(model, Ensemble) else [model]
    device = next(model.parameters()).device
    out = [0.0] * len(src_ids)
    longest = [max(len(s), len(t)) + 1 for s, t in zip(src_ids, tgt_ids)]
    order = sorted(range(len(src_ids)), key=lambda i: -longest[i])
    start = 0
    while start < len(order):
        pairs = order[start : start + max(1, batch_tokens // longest[order[start]])]
        start += len(pairs)
        batch = make_batch([src_ids[i] for i in pairs], [tgt_ids[i] for i in pairs]).to(device)
        rows = batch.target_rows()  # (n,) real positions of the (B, T) target: no padding's logits
        target = batch.tgt_out.flatten()[rows]  # (n,)
        token = None  # log sum_m p_m(target token), (n,) fp32
        for member in members:
            logits = member(batch.src, batch.tgt_in, batch.src_mask, rows).float()  # (n, V)
            picked = logits.gather(1, target[:, None]).squeeze(1) - logits.logsumexp(dim=1)
            token = picked if token is None else torch.logaddexp(token, picked)
        token = token - math.log(len(members))
        # (B, T) with zeros at padding, summed per row: index_add_ would be nondeterministic
        # on CUDA, and the same pairs must score the same every time
        per_position = token.new_zeros(batch.tgt_out.numel())
        per_position[rows] = token
        sums = per_position.view(batch.tgt_out.shape).sum(dim=1)  # (B,)
        for i, value in zip(pairs, sums.tolist()):
            out[i] = value
    return out
