"""Beam search with fixed (B, k) shapes, a KV cache and a GNMT length penalty.

Shapes never change (Sockeye): a finished beam stays in its slot and may only extend itself with
PAD at cost 0, so it competes with open beams on its raw score and drops out only when k open
continuations score higher. Nothing is re-batched when a sentence ends; the loop stops when
every beam of every sentence has ended, or at the length limit, where only EOS is allowed.

The best k of a sentence's k*V continuations are found in two exact stages: each beam's top k
over V, then the top k of those k*k. Everything after the first stage is (B, k, k), so the
per-step work over the vocabulary is one log_softmax and one top-k (on CPU the rest of a
(B, k, V) pass, masks and adds, cost as much as a decoder layer).
"""

from __future__ import annotations

import torch

from translator.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from translator.decode import Hypothesis, eos_allowed_from, log_softmax_into, max_lengths, strip
from translator.decode.step import decoding_step, use_cuda_graph
from translator.model.transformer import Transformer


def length_penalty(length: torch.Tensor, alpha: float) -> torch.Tensor:
    """GNMT (Wu et al. 2016): ((5 + |Y|) / 6) ** alpha; alpha = 0 means no normalisation."""
    return ((5.0 + length.float()) / 6.0) ** alpha


def top_k(x: torch.Tensor, k: int, block: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """x (N, V) -> each row's k largest values, best first, and their indices (N, k), as x.topk(k).

    Two exact stages: the k blocks of `block` columns with the largest maxima hold the k largest
    values (any other value is at most the k-th largest block maximum, itself one of k values at
    least as large), so one vectorised amax over x and a top-k over k * block candidates replace
    torch.topk's serial walk along each row: ~4x faster at V = 32000 on CPU. Among exactly equal
    values the index chosen may differ from torch.topk's, whose choice is unspecified too. Other
    shapes (V not a multiple of `block`, fewer than k blocks) take x.topk.
    """
    N, V = x.shape
    if V % block or V // block < k:
        return x.topk(k, dim=-1)
    blocks = x.view(N, V // block, block)
    best = blocks.amax(dim=-1).topk(k, dim=-1).indices  # (N, k) block numbers
    candidates = blocks.gather(1, best[..., None].expand(N, k, block))  # (N, k, block)
    values, index = candidates.flatten(1).topk(k, dim=-1)  # (N, k) over the k * block candidates
    return values, best.gather(1, index // block) * block + index % block


def top_k_over_beams(candidates: torch.Tensor, tokens: torch.Tensor, k: int
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """candidates, tokens (B, k', c) -> best k scores (B, k), their beam `origin` and `token` (B, k) each."""
    c = candidates.shape[-1]
    scores, index = candidates.flatten(1).topk(k, dim=1)  # over the k' * c continuations
    return scores, index // c, tokens.flatten(1).gather(1, index)


@torch.inference_mode()
def beam_search(model: Transformer, src: torch.Tensor, src_mask: torch.Tensor, *, beam_size: int = 4,
                alpha: float = 0.6, max_len_a: float = 1.2, max_len_b: int = 10, min_len: int = 0,
                nbest: int = 1, cuda_graphs: bool = True) -> list[list[Hypothesis]]:
    """src (B, S), src_mask (B, 1, 1, S) -> per sentence its min(nbest, k) best hypotheses, best first.

    A score is the summed log-prob divided by length_penalty(tokens + EOS, alpha). On CUDA, with
    `cuda_graphs`, the decoder steps are one replayed CUDA graph each (decode/step.py).
    """
    B, k, device = src.shape[0], beam_size, src.device
    max_lens = max_lengths(src_mask, max_len_a, max_len_b, model.cfg.max_positions - 1)  # (B,)
    eos_from = eos_allowed_from(max_lens, min_len)[:, None]  # (B, 1)
    steps = int(max_lens.max()) + 1  # the last step can only emit EOS
    shortest_limit = int(max_lens.min())  # before this step no sentence is at its limit

    # 0. Encode once. Beams share their sentence's memory: decoder rows are B*k, memory rows B,
    #    and the cache projects each sentence's cross-attention K/V once, on the first step.
    memory = model.encode(src, src_mask)  # (B, S, D)
    cache = model.new_cache(B * k, steps, memory.dtype, device, static=cuda_graphs and use_cuda_graph(device))
    next_logits = decoding_step(model, memory, src_mask, cache)  # on CUDA a replayed graph (decode/step.py)
    tokens = torch.full((B * k, steps + 1), PAD_ID, dtype=torch.long, device=device)  # BOS + outputs
    tokens[:, 0] = BOS_ID
    scores = torch.full((B, k), float("-inf"), device=device)
    scores[:, 0] = 0.0  # all beams start equal: let only the first one expand at step 0
    finished = torch.zeros(B, k, dtype=torch.bool, device=device)
    lengths = torch.zeros(B, k, dtype=torch.long, device=device)  # tokens so far, EOS included
    row_offset = torch.arange(B, device=device)[:, None] * k  # (B, 1): first row of each sentence

    first_slot = torch.arange(k, device=device) == 0  # (k,): where a forced continuation goes
    any_finished = False  # known on the host, so the PAD rule costs nothing until a beam ends
    for step in range(steps):
        # 1. Next-token log-probs for every beam (only the newest token goes in: the cache has the rest).
        logits = next_logits(tokens[:, step:step + 1])  # (B*k, 1, V)
        cache.length += 1
        if step == 0:  # written in place at every step (see log_softmax_into)
            vocab_buffer = logits.new_empty(B * k, logits.shape[-1], dtype=torch.float32)  # (B*k, V)
        log_probs = log_softmax_into(vocab_buffer, logits[:, -1])  # (B*k, V), fp32
        log_probs[:, [PAD_ID, BOS_ID]] = float("-inf")  # never chosen (PAD only continues ended beams, below)
        log_probs[:, EOS_ID] = log_probs[:, EOS_ID].masked_fill((step < eos_from).repeat_interleave(k), float("-inf"))

        # 2. Each beam's k best tokens: the best k continuations of a sentence are among them, and
        #    what follows works on (B, k, k), not (B, k, V). At the length limit the only
        #    continuation is EOS; an ended beam's is PAD, at cost 0. Add the running scores.
        eos_log_probs = log_probs[:, EOS_ID].view(B, k, 1)
        log_probs, top_tokens = top_k(log_probs, k)  # (B*k, k)
        log_probs, top_tokens = log_probs.view(B, k, k), top_tokens.view(B, k, k)
        if step >= shortest_limit:
            at_limit = (step >= max_lens)[:, None, None]  # (B, 1, 1)
            eos = torch.where(first_slot, eos_log_probs, float("-inf"))  # (B, k, k)
            log_probs, top_tokens = log_probs.where(~at_limit, eos), top_tokens.masked_fill(at_limit, EOS_ID)
        if any_finished:
            pad = torch.where(first_slot, 0.0, float("-inf"))  # (k,)
            log_probs = log_probs.where(~finished[..., None], pad)
            top_tokens = top_tokens.masked_fill(finished[..., None], PAD_ID)
        candidates = scores[..., None] + log_probs  # (B, k, k)

        # 3. Best k of the k*k continuations of each sentence (= the best k of all k*V).
        scores, origin, token = top_k_over_beams(candidates, top_tokens, k)  # (B, k) each

        # 4. Gather the surviving beams' state by origin; the cache reorders its self-attention K/V.
        rows = (row_offset + origin).view(-1)  # (B*k,)
        tokens = tokens.index_select(0, rows)
        tokens[:, step + 1] = token.view(-1)
        was_finished = finished.gather(1, origin)
        lengths = lengths.gather(1, origin) + (~was_finished).long()
        cache.reorder(rows)

        # 5. Mark ended beams; stop when every beam has ended (the limit forces that at the last step).
        #    A beam at -inf (fewer than k possible continuations) holds no hypothesis: it ends too.
        finished = was_finished | (token == EOS_ID) | scores.isneginf()
        done = int(finished.sum())  # the one host sync per step
        if done == B * k:
            break
        any_finished = done > 0

    final = scores / length_penalty(lengths, alpha)  # (B, k)
    final, order = final.sort(dim=1, descending=True)
    rows, final = tokens.view(B, k, -1).tolist(), final.tolist()
    return [[Hypothesis(strip(rows[b][j], EOS_ID), final[b][i]) for i, j in enumerate(order[b].tolist()[:nbest])
             if final[b][i] > float("-inf") or i == 0]  # a beam that never got a real score is no hypothesis
            for b in range(B)]
