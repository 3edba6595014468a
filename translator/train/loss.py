"""The training loss: label-smoothed cross-entropy summed over target tokens, and the plain NLL.

Used by `train_step` and by the Hugging Face peer of bench/train_peer.py alike. A hand-written
gradient (fewer passes over the logits) was tried and did not pay once freed memory is kept
(train/allocator.py; docs/benchmarks/train.md).
"""

from __future__ import annotations

import torch

from translator.data.tokenizer import PAD_ID


def token_loss(
    logits: torch.Tensor, target: torch.Tensor, label_smoothing: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """logits (..., V), target (...) ids -> (smoothed loss sum, NLL sum), PAD targets left out.

    One log-softmax serves both: smoothed = (1 - eps) * NLL + eps * the mean of -log p over the
    vocabulary, which is F.cross_entropy's label smoothing; perplexity comes from the NLL.
    """
    log_probs = logits.flatten(0, -2).float().log_softmax(dim=-1)  # (N, V)
    target = target.flatten()  # (N,)
    real = target != PAD_ID
    nll = -log_probs.gather(1, target[:, None]).squeeze(1).masked_fill(~real, 0.0).sum()
    if not label_smoothing:
        return nll, nll.detach()
    uniform = -log_probs.mean(dim=-1).masked_fill(~real, 0.0).sum()
    return (1 - label_smoothing) * nll + label_smoothing * uniform, nll.detach()
