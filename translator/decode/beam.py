"""Beam search with fixed (B, k) shapes, a KV cache and a GNMT length penalty."""

from __future__ import annotations

import torch

from translator.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from translator.decode import Hypothesis, max_lengths, strip
from translator.model.transformer import Transformer


def length_penalty(length: torch.Tensor, alpha: float) -> torch.Tensor:
    """GNMT (Wu et al. 2016): ((5 + |Y|) / 6) ** alpha; alpha = 0 means no normalisation."""
    return ((5.0 + length.float()) / 6.0) ** alpha


@torch.inference_mode()
def beam_search(model: Transformer, src: torch.Tensor, src_mask: torch.Tensor, *, beam_size: int = 4,
                alpha: float = 0.6, max_len_a: float = 1.2, max_len_b: int = 10, min_len: int = 0,
                nbest: int = 1) -> list[list[Hypothesis]]:
    """src (B, S), src_mask (B, 1, 1, S) -> for each sentence its `nbest` best hypotheses, best first."""
    B, k, device = src.shape[0], beam_size, src.device
    max_lens = max_lengths(src_mask, max_len_a, max_len_b, model.cfg.max_positions - 1)  # (B,)

    # 0. Encode once; beams share their sentence's memory, so decoder rows are B*k, memory rows B.
    memory = model.encode(src, src_mask)  # (B, S, D)
    cache = model.new_cache(B * k, int(max_lens.max()) + 1, memory.dtype, device)
    tokens = torch.full((B * k, 1), BOS_ID, dtype=torch.long, device=device)  # (B*k, 1 + step)
    scores = torch.full((B, k), float("-inf"), device=device)
    scores[:, 0] = 0.0  # all beams start equal: let only the first one expand at step 0
    finished = torch.zeros(B, k, dtype=torch.bool, device=device)
    lengths = torch.zeros(B, k, dtype=torch.long, device=device)  # tokens so far, EOS included
    batch_offset = torch.arange(B, device=device)[:, None] * k  # (B, 1)

    for step in range(int(max_lens.max()) + 1):
        # 1. Next-token log-probs for every beam.
        logits = model.decode(tokens[:, -1:], memory, src_mask, cache)  # (B*k, 1, V)
        cache.length += 1
        log_probs = torch.log_softmax(logits[:, -1].float(), dim=-1).view(B, k, -1)  # (B, k, V)
        V = log_probs.shape[-1]
        log_probs[..., BOS_ID] = float("-inf")  # never generated (PAD is handled in step 2)
        if step < min_len:
            log_probs[..., EOS_ID] = float("-inf")
        at_limit = (step >= max_lens)[:, None, None] & (torch.arange(V, device=device) != EOS_ID)
        log_probs = log_probs.masked_fill(at_limit, float("-inf"))  # at the length limit only EOS

        # 2. Finished beams may only emit PAD, at cost 0. Add the running scores.
        log_probs = log_probs.masked_fill(finished[..., None], float("-inf"))
        log_probs[..., PAD_ID] = torch.where(finished, 0.0, float("-inf"))
        candidates = scores[..., None] + log_probs  # (B, k, V)

        # 3. Best k of the k*V continuations of each sentence.
        scores, index = candidates.view(B, k * V).topk(k, dim=1)  # (B, k)
        origin, token = index // V, index % V

        # 4. Gather the surviving beams' state by origin, the cache too.
        rows = (batch_offset + origin).view(-1)  # (B*k,)
        tokens = torch.cat([tokens.index_select(0, rows), token.view(-1, 1)], dim=1)
        was_finished = finished.gather(1, origin)
        lengths = lengths.gather(1, origin) + (~was_finished).long()
        cache.reorder(rows)

        # 5. Mark ended beams; stop when every beam has ended.
        finished = was_finished | (token == EOS_ID)
        if finished.all():
            break

    final = scores / length_penalty(lengths, alpha)  # (B, k)
    order = final.argsort(dim=1, descending=True)[:, :nbest]
    rows, final = tokens.view(B, k, -1).tolist(), final.tolist()
    return [[Hypothesis(strip(rows[b][j], EOS_ID), final[b][j]) for j in order[b].tolist()] for b in range(B)]
