"""The training loss: label-smoothed cross-entropy summed over target tokens, and the plain NLL.

`token_loss` is the written-out definition and the tested reference.
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


def fused_token_loss(
    logits: torch.Tensor, target: torch.Tensor, label_smoothing: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """`token_loss` with its gradient written by hand: fewer passes over the (N, V) logits.

    The gradient of the smoothed loss for a real row is softmax(z) - (1 - eps) onehot - eps / V.
    """
    flat = logits.flatten(0, -2)  # (N, V)
    return _SmoothedCrossEntropy.apply(flat, target.flatten(), label_smoothing)


class _SmoothedCrossEntropy(torch.autograd.Function):
    """(N, V) logits, (N,) targets -> (smoothed loss sum, NLL sum); saves the logits and the
    log-normaliser instead of an (N, V) log-softmax."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, eps: float):
        z = logits.float()  # (N, V), a copy only under autocast
        lse = torch.logsumexp(z, dim=-1)  # (N,)
        real = target != PAD_ID  # (N,)
        nll_rows = (lse - z.gather(1, target[:, None]).squeeze(1)) * real
        loss = (1 - eps) * nll_rows.sum()
        if eps:
            loss = loss + eps * ((lse - z.mean(dim=-1)) * real).sum()
        ctx.save_for_backward(logits, lse, target, real)
        ctx.eps = eps
        return loss, nll_rows.sum()

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor, grad_nll: torch.Tensor):
        logits, lse, target, real = ctx.saved_tensors
        eps, V = ctx.eps, logits.shape[-1]
        weight = (real * grad_loss)[:, None]  # (N, 1): padding rows get no gradient
        grad = logits.float().sub(lse[:, None]).exp_()  # (N, V) softmax
        if eps:
            grad.sub_(eps / V)
        grad.scatter_add_(1, target[:, None], torch.full_like(lse[:, None], eps - 1))
        return grad.mul_(weight).to(logits.dtype), None, None
