"""Beam search with fixed (B, k) shapes, a KV cache, a finished buffer and a GNMT length penalty.

Each step, every open beam proposes its k + 1 best next tokens (a beam of one its best: greedy).
A proposal that ends with EOS goes, with its normalised score, into the sentence's finished
buffer, which keeps the k best and which no open beam can evict (fairseq, Marian); the k best
other proposals are the next open beams. A sentence stops when no open beam can still beat its
n-th best finished hypothesis; the loop stops when every sentence has, or at the length limit,
where only EOS is allowed. A sentence's shapes never change (Sockeye): an empty slot holds score
-inf. A sentence that is done leaves the batch (CTranslate2): in a large batch much of the work
would otherwise go to sentences already done (docs/benchmarks/decode.md). Under CUDA graphs the
batch keeps its shape.
"""

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
from translator.decode.step import decoding_step, use_cuda_graph
from translator.model.transformer import Transformer


def length_penalty(length: torch.Tensor | int, alpha: float) -> torch.Tensor | float:
    """GNMT (Wu et al. 2016): ((5 + |Y|) / 6) ** alpha; alpha = 0 means no normalisation."""
    return ((5.0 + length) / 6.0) ** alpha


@torch.inference_mode()
def beam_search(
    model: Transformer,
    src: torch.Tensor,
    src_mask: torch.Tensor,
    *,
    beam_size: int = 4,
    alpha: float = 0.6,
    max_len_a: float = 1.2,
    max_len_b: int = 10,
    min_len: int = 0,
    nbest: int = 1,
    cuda_graphs: bool = True,
    drop_finished: bool = True,
    prefixes: list[list[int]] | None = None,
    no_repeat_ngram: int = 0,
    unk_penalty: float = 0.0,
    completion: WordCompletion | None = None,
) -> list[list[Hypothesis]]:
    """src (B, S), src_mask (B, 1, 1, S) -> per sentence its min(nbest, k) best hypotheses, best
    first.

    A score is the summed log-prob divided by length_penalty(tokens + EOS, alpha). On CUDA, with
    `cuda_graphs`, the decoder steps are one replayed CUDA graph each (decode/step.py). With
    `drop_finished` (and no graphs) the batch sheds each sentence as it is done, so the steps
    after it no longer compute its beams; without, every row is stepped to the end (the tested
    reference). `prefixes` (output ids per sentence): every hypothesis starts with its sentence's
    prefix, scored as the rest; the length limit is raised to hold it. `no_repeat_ngram` n > 0:
    no hypothesis holds an n-gram twice (decode/__init__.py's ban_repeated_ngrams_).
    `unk_penalty` is taken from <unk>'s log-prob at every step, in the scores too. `completion`:
    after its prefix every hypothesis spells the characters typed after it
    (decode/completion.py); the limit is raised to hold them.
    """
    B, k, n, device = src.shape[0], beam_size, min(nbest, beam_size), src.device
    # how many tokens each beam proposes (step 2); a beam of one proposes its best alone, as
    # greedy search does, and ends at EOS
    m = min(k + 1, model.cfg.vocab_size) if k > 1 else 1
    limit = model.cfg.max_positions - 1
    max_lens = max_lengths(src_mask, max_len_a, max_len_b, limit)  # (B,)
    prefix, prefix_lens, max_lens = prefix_rows(prefixes, max_lens, limit)  # (B, P), (B,), (B,)
    if completion is not None:
        max_lens = torch.maximum(max_lens, completion.lengths().to(device).clamp(max=limit))
        completion = completion.rows([b for b in range(B) for _ in range(k)])  # (B*k,) rows
    # while a sentence is in its prefix its beams have one continuation: only slot 0 stays open
    prefix, prefix_lens = prefix.repeat_interleave(k, 0), prefix_lens.repeat_interleave(k)
    eos_from = eos_allowed_from(max_lens, min_len).repeat_interleave(k)  # (B*k,)
    steps = int(max_lens.max()) + 1  # the last step can only emit EOS
    shortest_limit = int(max_lens.min())  # before this step no sentence is at its limit
    # (B,) an output of the limit's length, EOS included
    longest_penalty = length_penalty(max_lens + 1, alpha)

    # 0. Encode once. Beams share their sentence's memory: decoder rows are B*k, memory rows B,
    #    and the cache projects each sentence's cross-attention K/V once. Every buffer is made here.
    memory = model.encode(src, src_mask)  # (B, S, D)
    fixed_shapes = cuda_graphs and use_cuda_graph(device)  # for CUDA graphs
    cache = model.new_cache(B * k, steps, memory.dtype, device, fixed_shapes=fixed_shapes, beams=k)
    # on CUDA a replayed graph (decode/step.py)
    next_logits = decoding_step(model, memory, src_mask, cache)
    # BOS + open beams' outputs
    tokens = torch.full((B * k, steps + 1), PAD_ID, dtype=torch.long, device=device)
    tokens[:, 0] = BOS_ID
    # open beams' summed log-probs; -inf: empty slot
    scores = torch.full((B, k), float("-inf"), dtype=torch.float32, device=device)
    scores[:, 0] = 0.0  # all beams start equal: let only the first one expand at step 0
    # the log-probs of every step, written in place (why: log_softmax_into)
    vocab_buffer = torch.empty(B * k, model.cfg.vocab_size, device=device, dtype=torch.float32)
    finished_scores = torch.full(
        (B, k), float("-inf"), dtype=torch.float32, device=device
    )  # normalised, best first
    # finished outputs, EOS-filled: an empty slot reads as the empty output ""
    finished_tokens = torch.full((B, k, steps + 1), EOS_ID, dtype=torch.long, device=device)
    row_offset = torch.arange(B, device=device)[:, None] * k  # (B, 1): first row of each sentence
    sentence = torch.arange(B, device=device)  # (B,) each row's sentence in the caller's batch
    # what is returned, per sentence of the caller's batch: written as sentences leave it
    out_scores, out_tokens = finished_scores.clone(), finished_tokens.clone()

    for step in range(steps):
        # 1. Next-token log-probs of every beam (the newest token goes in: the cache has the rest).
        logits = next_logits(tokens[:, step : step + 1])  # (B*k, 1, V)
        cache.advance(1)
        # (B*k, V)
        log_probs = log_softmax_into(vocab_buffer, logits[:, -1])
        ban_tokens_(log_probs, step, eos_from, unk_penalty)
        if step >= shortest_limit:  # at its length limit a sentence's only continuation is EOS
            only_eos_(log_probs, (step >= max_lens).repeat_interleave(k))
        force_prefix_(log_probs, step, prefix, prefix_lens)
        if completion is not None:
            completion.ban_(log_probs, tokens, step)
        if no_repeat_ngram:
            ban_repeated_ngrams_(log_probs, tokens, step, no_repeat_ngram, step >= prefix_lens)

        # 2. Every beam proposes its m = k + 1 best tokens, running score added: (B, k, m), not
        #    (B, k, V). One more than k: with EOS among them, k others remain, so the open beams
        #    (step 4) are the k best non-EOS continuations of all k * V.
        values, proposed = top_k(log_probs, m)  # (B*k, m) each
        proposals, proposed = scores[..., None] + values.view(B, k, m), proposed.view(B, k, m)
        is_eos = proposed == EOS_ID

        # 3. A beam's EOS proposal (step + 1 tokens with the EOS) goes to the finished buffer.
        ended = tokens.view(B, k, -1).clone()  # (B*k, T) -> (B, k, T)
        ended[..., step + 1] = EOS_ID
        eos_scores = proposals.masked_fill(~is_eos, float("-inf")).amax(dim=2)  # (B, k)
        normalised = eos_scores / length_penalty(step + 1, alpha)
        finished_scores, finished_tokens = keep_best(
            finished_scores, finished_tokens, normalised, ended
        )

        # 4. The k best other proposals are the open beams: gather their tokens by origin; the cache
        #    reorders its self-attention K/V.
        # (B, k)
        scores, index = proposals.masked_fill(is_eos, float("-inf")).flatten(1).topk(k, dim=1)
        origin, token = index // m, proposed.flatten(1).gather(1, index)  # (B, k) each
        rows = (row_offset + origin).view(-1)  # (B*k,)
        tokens = tokens.index_select(0, rows)
        tokens[:, step + 1] = token.view(-1)
        cache.reorder(rows)

        # 5. A sentence is done when no open beam can beat its n-th best finished one. Log-probs
        #    are <= 0, so the best an open beam can reach is its score now over the largest penalty
        #    of a length it may still get (the penalty is monotone: one of the two ends).
        # (B, k)
        reachable = scores / longest_penalty.clamp(min=length_penalty(step + 2, alpha))[:, None]
        done = reachable.amax(dim=1) <= finished_scores[:, n - 1]  # (B,)
        scores = scores.masked_fill(done[:, None], float("-inf"))
        n_done = int(done.sum())  # the host sync of each step (and nonzero's below)
        if n_done == len(done):
            break

        # 6. Done sentences leave the batch (CTranslate2 does the same): their finished buffers go
        #    to the results, every per-sentence tensor keeps the others' rows, and so does the
        #    cache. A CUDA graph replays fixed shapes, so it steps done sentences along instead.
        if n_done and drop_finished and not fixed_shapes:
            out_scores[sentence[done]] = finished_scores[done]
            out_tokens[sentence[done]] = finished_tokens[done]
            keep = (~done).nonzero().squeeze(1)  # (B',)
            rows = (keep[:, None] * k + torch.arange(k, device=device)).view(-1)  # (B'*k,)
            sentence, scores, max_lens = sentence[keep], scores[keep], max_lens[keep]
            finished_scores, finished_tokens = finished_scores[keep], finished_tokens[keep]
            longest_penalty, memory, src_mask = longest_penalty[keep], memory[keep], src_mask[keep]
            tokens, eos_from, row_offset = tokens[rows], eos_from[rows], row_offset[: len(keep)]
            prefix, prefix_lens = prefix[rows], prefix_lens[rows]
            if completion is not None:
                completion = completion.rows(rows.tolist())
            B, vocab_buffer = len(keep), vocab_buffer[: len(rows)]
            cache.reorder(rows, sentences=keep)
            next_logits = decoding_step(model, memory, src_mask, cache)

    out_scores[sentence], out_tokens[sentence] = finished_scores, finished_tokens
    best, rows = out_scores.tolist(), out_tokens.tolist()
    return [
        [
            Hypothesis(strip(rows[b][i], EOS_ID), best[b][i])
            for i in range(n)
            # a sentence without any hypothesis still gets one
            if best[b][i] > float("-inf") or i == 0
        ]
        for b in range(len(best))
    ]


def top_k(x: torch.Tensor, k: int, block: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """x (N, V) -> each row's k largest values, best first, and their indices (N, k), as x.topk(k).

    Two exact stages: the k blocks of `block` columns with the largest maxima hold the k largest
    values (any other value is at most the k-th largest block maximum, itself one of k values at
    least as large), so one vectorised amax over x and a top-k over k * block candidates replace
    torch.topk's serial walk along each row (why: docs/benchmarks/decode.md). Among exactly equal
    values the index chosen may differ from torch.topk's, whose choice is unspecified too.
    Other shapes (V not a multiple of `block`, fewer
    than k blocks) take x.topk.
    """
    N, V = x.shape
    if V % block or V // block < k:
        return x.topk(k, dim=-1)
    blocks = x.view(N, V // block, block)  # (N, V/block, block)
    best = blocks.amax(dim=-1).topk(k, dim=-1).indices  # (N, k) block numbers
    candidates = blocks.gather(1, best[..., None].expand(N, k, block))  # (N, k, block)
    values, index = candidates.flatten(1).topk(k, dim=-1)  # (N, k) over the k * block candidates
    return values, best.gather(1, index // block) * block + index % block


def keep_best(
    scores: torch.Tensor, tokens: torch.Tensor, new_scores: torch.Tensor, new_tokens: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The finished buffer, (B, k) scores and (B, k, L) tokens, merged with (B, k') new ones.

    -> its k best, best first.

    The buffer's entries come first, so among equal scores the earlier hypothesis stays.
    """
    k = scores.shape[1]
    # (B, k + k')
    merged, pick = torch.cat([scores, new_scores], dim=1).sort(dim=1, descending=True, stable=True)
    pick = pick[:, :k, None].expand(-1, -1, tokens.shape[-1])  # (B, k, L)
    return merged[:, :k], torch.cat([tokens, new_tokens], dim=1).gather(1, pick)


def only_eos_(log_probs: torch.Tensor, rows: torch.Tensor) -> None:
    """log_probs (N, V), in place: where `rows` (N,) is True every token but EOS gets -inf."""
    eos = log_probs[:, EOS_ID].clone()
    log_probs.masked_fill_(rows[:, None], float("-inf"))
    log_probs[:, EOS_ID] = eos
