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

# logits per chunk: a chunk's fp32 log-softmax or softmax (2 MiB) stays in the CPU's caches
CHUNK_ELEMENTS = 1 << 19


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

    The forward pass keeps two numbers per row from each chunk's fp32 log-softmax, -log p of the
    target and the mean of log p; the backward pass recomputes each chunk's fp32 softmax and
    writes the gradient of the smoothed loss, softmax(x) - (1 - eps) onehot(t) - eps / V per real
    row, in the logits' dtype.
    """
    return _ChunkedTokenLoss.apply(logits.flatten(0, -2), target.flatten(), label_smoothing)


def _row_chunks(n_rows: int, vocab: int) -> list[slice]:
    step = max(1, CHUNK_ELEMENTS // vocab)
    return [slice(start, start + step) for start in range(0, n_rows, step)]


class _ChunkedTokenLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, eps: float):
        N, V = logits.shape
        nll_rows, mean_log_p = (logits.new_empty(N, dtype=torch.float32) for _ in range(2))
        for rows in _row_chunks(N, V):
            log_p = torch.log_softmax(logits[rows], dim=-1, dtype=torch.float32)  # (rows, V)
            torch.neg(log_p.gather(1, target[rows, None]).squeeze(1), out=nll_rows[rows])
            torch.mean(log_p, dim=-1, out=mean_log_p[rows])
        real = target != PAD_ID
        nll = nll_rows.masked_fill(~real, 0.0).sum()
        loss = nll
        if eps:
            loss = (1 - eps) * nll - eps * mean_log_p.masked_fill(~real, 0.0).sum()
        ctx.save_for_backward(logits, target)
        ctx.eps = eps
        nll = nll.clone()  # an output of its own, the metric: no gradient flows through it
        ctx.mark_non_differentiable(nll)
        return loss, nll

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor, _grad_nll: torch.Tensor):
        logits, target = ctx.saved_tensors
        N, V = logits.shape
        eps = ctx.eps
        weight = (target != PAD_ID).float() * grad_loss  # (N,): 0 for PAD rows
        grad = torch.empty_like(logits)
        for rows in _row_chunks(N, V):
            w = weight[rows, None]  # (rows, 1)
            p = torch.softmax(logits[rows], dim=-1, dtype=torch.float32)  # (rows, V)
            p.scatter_add_(1, target[rows, None], p.new_full(w.shape, -(1 - eps)))
            torch.addcmul(w * (-eps / V), p, w, out=grad[rows])  # (p - eps / V) w, in grad's dtype
        return grad, None, None
