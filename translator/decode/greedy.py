"""Greedy search: at every step take the most likely next token (or, with a sampler, a drawn one:
decode/sampling.py)."""

from __future__ import annotations

import torch

from translator.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from translator.decode import (
    Hypothesis,
    ban_repeated_ngrams_,
    ban_tokens_,
    eos_allowed_from,
    force_prefix_,
    log_softmax_into,
    max_lengths,
    prefix_rows,
    strip,
)
from translator.decode.completion import WordCompletion
from translator.decode.sampling import RowSampler
from translator.decode.step import decoding_step, use_cuda_graph
from translator.model.transformer import Transformer


@torch.inference_mode()
def greedy_search(
    model: Transformer,
    src: torch.Tensor,
    src_mask: torch.Tensor,
    *,
    max_len_a: float = 1.2,
    max_len_b: int = 10,
    min_len: int = 0,
    cuda_graphs: bool = True,
    drop_finished: bool = True,
    sampler: RowSampler | None = None,
    prefixes: list[list[int]] | None = None,
    no_repeat_ngram: int = 0,
    unk_penalty: float = 0.0,
    completion: WordCompletion | None = None,
) -> list[Hypothesis]:
    """src (B, S), src_mask (B, 1, 1, S) -> one hypothesis per sentence, scored by its summed
    log-probs.

    Sentence b gets at most max_lens[b] tokens before EOS (at that step only EOS is allowed) and at
    least min_len (unless the limit is smaller). The loop stops once every sentence has ended.
    On CUDA, with `cuda_graphs`, each decoder step is one replayed CUDA graph (decode/step.py).
    With `drop_finished` (and no graphs) a sentence leaves the batch when it ends, as in
    beam_search; without, every row is stepped to the end (the tested reference). With a
    `sampler` (one generator per sentence) each token is drawn instead of the most likely.
    `prefixes` (output ids per sentence): each output starts with its prefix, scored as the rest;
    the length limit is raised to hold it. `no_repeat_ngram` n > 0: no n-gram of outputs twice
    (decode/__init__.py's ban_repeated_ngrams_). `unk_penalty` is taken from <unk>'s log-prob
    at every step, in the scores too. `completion`: after its prefix each output spells the
    characters typed after it (decode/completion.py); the limit is raised to hold them.
    """
    B, device = src.shape[0], src.device
    limit = model.cfg.max_positions - 1
    max_lens = max_lengths(src_mask, max_len_a, max_len_b, limit)  # (B,)
    prefix, prefix_lens, max_lens = prefix_rows(prefixes, max_lens, limit)  # (B, P), (B,), (B,)
    if completion is not None:
        max_lens = torch.maximum(max_lens, completion.lengths().to(device).clamp(max=limit))
    eos_from = eos_allowed_from(max_lens, min_len)  # (B,)
    steps = int(max_lens.max()) + 1  # the last step can only emit EOS
    # (B, S, D); cross-attention K/V are projected from it once
    memory = model.encode(src, src_mask)
    fixed_shapes = cuda_graphs and use_cuda_graph(device)  # for CUDA graphs
    cache = model.new_cache(B, steps, memory.dtype, device, fixed_shapes=fixed_shapes)
    # on CUDA a replayed graph (decode/step.py)
    next_logits = decoding_step(model, memory, src_mask, cache)
    tokens = torch.full((B, steps + 1), PAD_ID, dtype=torch.long, device=device)  # BOS + outputs
    tokens[:, 0] = BOS_ID
    scores = torch.zeros(B, dtype=torch.float32, device=device)
    finished = torch.zeros(B, dtype=torch.bool, device=device)
    sentence = torch.arange(B, device=device)  # (B,) each row's sentence in the caller's batch
    out_tokens, out_scores = tokens.clone(), scores.clone()  # returned: written as rows leave
    # the log-probs of every step, written in place (why: log_softmax_into)
    vocab_buffer = torch.empty(B, model.cfg.vocab_size, device=device, dtype=torch.float32)
    pick = sampler if sampler is not None else MostLikely()  # how a token is chosen from log-probs
    for step in range(steps):
        logits = next_logits(tokens[:, step : step + 1])  # (B, 1, V)
        cache.advance(1)
        # (B, V) fp32
        log_probs = log_softmax_into(vocab_buffer, logits[:, -1])
        ban_tokens_(log_probs, step, eos_from, unk_penalty)
        force_prefix_(log_probs, step, prefix, prefix_lens)
        if completion is not None:
            completion.ban_(log_probs, tokens, step)
        if no_repeat_ngram:
            ban_repeated_ngrams_(log_probs, tokens, step, no_repeat_ngram, step >= prefix_lens)
        token = pick.draw(log_probs)  # (B,)
        token = torch.where(step >= max_lens, EOS_ID, token)  # length limit reached: end here
        token = torch.where(finished, PAD_ID, token)
        scores += torch.where(finished, 0.0, log_probs.gather(1, token[:, None]).squeeze(1))
        tokens[:, step + 1] = token
        finished |= token == EOS_ID
        n_finished = int(finished.sum())  # the host sync of each step (and nonzero's below)
        if n_finished == len(finished):
            break
        if n_finished and drop_finished and not fixed_shapes:  # ended rows leave the batch
            ended, keep = sentence[finished], (~finished).nonzero().squeeze(1)
            out_tokens[ended], out_scores[ended] = tokens[finished], scores[finished]
            sentence, tokens, scores = sentence[keep], tokens[keep], scores[keep]
            finished, max_lens, eos_from = finished[keep], max_lens[keep], eos_from[keep]
            prefix, prefix_lens = prefix[keep], prefix_lens[keep]
            if completion is not None:
                completion = completion.rows(keep.tolist())
            memory, src_mask, vocab_buffer = memory[keep], src_mask[keep], vocab_buffer[: len(keep)]
            cache.reorder(keep, sentences=keep)
            pick.keep(keep)
            next_logits = decoding_step(model, memory, src_mask, cache)
    out_tokens[sentence], out_scores[sentence] = tokens, scores
    return [
        Hypothesis(strip(row, EOS_ID), float(s))
        for row, s in zip(out_tokens.tolist(), out_scores.tolist())
    ]


class MostLikely:
    """Greedy search's choice: each row's most likely token. A RowSampler draws instead."""

    def draw(self, log_probs: torch.Tensor) -> torch.Tensor:
        return log_probs.argmax(dim=-1)  # (N, V) -> (N,)

    def keep(self, rows: torch.Tensor) -> None:
        """Rows leaving the batch change nothing here (a sampler drops their generators)."""
