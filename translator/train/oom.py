"""Out-of-memory recovery: a batch that does not fit is halved by sentences and the update redone.

Gradients accumulate in place, so a backward pass that fails half-way leaves some of them
partly summed; the update therefore starts again from cleared gradients, with the batch that
failed cut in two (the others as they were). Losses are sums over tokens, divided by the
update's token count fixed beforehand, so the halves give the same gradient as the whole.
A single sentence that still does not fit is dropped, counted and logged; training continues.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from translator.data.batching import Batch
from translator.data.tokenizer import PAD_ID
from translator.errors import TranslatorError
from translator.train.session import Session


def halves(batch: Batch) -> list[Batch]:
    """The first and second half of the batch's sentences, each cut to its own longest row."""
    middle = len(batch.src) // 2
    out = []
    for rows in (slice(0, middle), slice(middle, None)):
        src, tgt_in, tgt_out = batch.src[rows], batch.tgt_in[rows], batch.tgt_out[rows]
        s_len = int((src != PAD_ID).sum(1).max())  # columns past every row's end are padding only
        t_len = int((tgt_out != PAD_ID).sum(1).max())
        out.append(
            Batch(
                src[:, :s_len],
                tgt_in[:, :t_len],
                tgt_out[:, :t_len],
                batch.src_mask[rows, ..., :s_len],
            )
        )
    return out


def accumulate(
    s: Session, batches: list[Batch], backward: Callable[[Batch, bool], torch.Tensor]
) -> torch.Tensor:
    """Sum of `backward(batch, last)` (forward + backward, returning (loss, nll)) over the update's
    batches.

    On torch.OutOfMemoryError: gradients cleared, the failing batch halved (or dropped if it is one
    sentence), everything redone. With several processes an OOM stops the run (a TranslatorError):
    the others would wait in the gradient all-reduce for a backward pass that is not coming.
    """
    pieces = list(batches)
    while True:
        failed = None
        try:
            sums = torch.zeros(2, device=s.dist.device)
            for i, batch in enumerate(pieces):
                failed = i
                sums += backward(batch, i == len(pieces) - 1)
            return sums
        except torch.OutOfMemoryError:
            if s.dist.world_size > 1:
                raise TranslatorError(
                    f"out of memory in update {s.state.step + 1} (with several processes a batch "
                    "cannot be split: the others wait for its gradients)",
                    f"rank {s.dist.rank}",
                    f"lower train.max_tokens (now {s.cfg.train.max_tokens}) and resume",
                ) from None
        # out of the except block: its traceback no longer holds the failed pass's tensors
        s.optimizer.zero_grad(set_to_none=True)
        if s.dist.device.type == "cuda":
            torch.cuda.empty_cache()
        batch, state = pieces[failed], s.state
        if len(batch.src) > 1:
            pieces[failed : failed + 1] = halves(batch)
            state.oom_splits += 1
            s.metrics.line(
                f"update {state.step + 1}: out of memory on a batch of {len(batch.src)} sentences; "
                f"split in two and the update redone ({state.oom_splits} splits so far)"
            )
        else:
            del pieces[failed]
            state.oom_skipped += 1
            s.metrics.line(
                f"update {state.step + 1}: out of memory on a single sentence of "
                f"{batch.src.shape[1]} + {batch.tgt_out.shape[1]} tokens; skipped "
                f"({state.oom_skipped} skipped so far)"
            )
