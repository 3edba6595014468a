"""The training loss: label-smoothed cross-entropy summed over target tokens, and the plain NLL.

`token_loss` is the loss as written; `chunked_token_loss` computes the same values and gradients a
chunk of rows at a time, and is what training runs on CPU, where the plain form's (N, V) fp32
temporaries, fresh memory far outside the caches at every step, cost more than its arithmetic
(docs/benchmarks/train.md). The Hugging Face peer of bench/train_peer.py runs `token_loss`, the
loss as MarianMTModel computes it.
"""

from __future__ import annotations

import torch

from translator.data.tokenizer import PAD_ID

# logits per chunk: the fp32 copy of ~2M elements (8 MiB) stays in the CPU's caches
CHUNK_ELEMENTS = 1 << 21


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


def chunked_token_loss(
    logits: torch.Tensor, target: torch.Tensor, label_smoothing: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """`token_loss`, computed over chunks of rows in fp32 without any (N, V) fp32 tensor.

    With lse = logsumexp(x) per row, -log p_t = lse - x_t and the mean of -log p = lse - mean(x):
    the forward pass keeps three numbers per row. The gradient of the smoothed loss is
    softmax(x) - (1 - eps) onehot(t) - eps / V per real row, written chunk by chunk in the
    logits' dtype.
    """
    return _ChunkedTokenLoss.apply(logits.flatten(0, -2), target.flatten(), label_smoothing)


def _row_chunks(n_rows: int, vocab: int) -> list[slice]:
    step = max(1, CHUNK_ELEMENTS // vocab)
    return [slice(start, start + step) for start in range(0, n_rows, step)]


class _ChunkedTokenLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, eps: float):
        N, V = logits.shape
        lse, picked, mean = (logits.new_empty(N, dtype=torch.float32) for _ in range(3))
        for rows in _row_chunks(N, V):
            x = logits[rows].float()  # (rows, V)
            torch.logsumexp(x, dim=-1, out=lse[rows])
            picked[rows] = x.gather(1, target[rows, None]).squeeze(1)
            torch.mean(x, dim=-1, out=mean[rows])
        real = target != PAD_ID
        nll = (lse - picked).masked_fill(~real, 0.0).sum()
        loss = nll
        if eps:
            loss = (1 - eps) * nll + eps * (lse - mean).masked_fill(~real, 0.0).sum()
        ctx.save_for_backward(logits, target, lse)
        ctx.eps = eps
        nll = nll.clone()  # an output of its own, the metric: no gradient flows through it
        ctx.mark_non_differentiable(nll)
        return loss, nll

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor, _grad_nll: torch.Tensor):
        logits, target, lse = ctx.saved_tensors
        N, V = logits.shape
        eps = ctx.eps
        weight = (target != PAD_ID).float() * grad_loss  # (N,): 0 for PAD rows
        grad = torch.empty_like(logits)
        for rows in _row_chunks(N, V):
            w = weight[rows, None]  # (rows, 1)
            # a copy even in fp32: the saved logits must not change
            x = logits[rows].to(torch.float32, copy=True)
            x.sub_(lse[rows, None]).exp_().sub_(eps / V).mul_(w)  # (softmax - eps / V) w
            x.scatter_add_(1, target[rows, None], -(1 - eps) * w)
            grad[rows] = x
        return grad, None, None
