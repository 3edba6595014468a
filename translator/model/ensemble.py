"""Several trained models decoded as one: at each step the mean of their next-token distributions.

p(y_t | y_<t, x) = 1/M sum_m p_m(y_t | y_<t, x), as fairseq's and OpenNMT's ensembles average
probabilities. Models of one vocabulary only (the same SentencePiece model); widths, depths and
positions may differ. The searches see one model: `encode` returns the members' memories joined
along the feature axis (so dropping a finished sentence, `memory[keep]`, drops it for all of
them), `decode` returns log p, which the search's log-softmax leaves as it is, and the cache is
one KV cache per member, advanced and reordered together.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch
from torch import nn

from translator.model.cache import KVCache
from translator.model.transformer import Transformer


class EnsembleCache:
    """The members' KV caches, moved as one (the interface the searches use of a KVCache)."""

    def __init__(self, caches: list[KVCache]) -> None:
        self.members = caches
        self.fixed_shapes = caches[0].fixed_shapes

    def advance(self, T: int) -> None:
        for cache in self.members:
            cache.advance(T)

    def reorder(self, origin: torch.Tensor, sentences: torch.Tensor | None = None) -> None:
        for cache in self.members:
            cache.reorder(origin, sentences=sentences)


class Ensemble(nn.Module):
    """M models with one vocabulary; `cfg` is the first one's, bounded by the shortest
    max_positions."""

    def __init__(self, models: list[Transformer]) -> None:
        super().__init__()
        vocab_sizes = {(m.cfg.vocab_size, m.cfg.src_vocab_size) for m in models}
        if len(vocab_sizes) != 1:
            raise ValueError(f"an ensemble's models share one vocabulary, not {vocab_sizes}")
        self.members = nn.ModuleList(models)
        self.widths = [m.cfg.d_model for m in models]
        self.cfg = replace(models[0].cfg, max_positions=min(m.cfg.max_positions for m in models))

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        """src (B, S) -> the members' memories side by side, (B, S, sum of their D)."""
        return torch.cat([m.encode(src, src_mask) for m in self.members], dim=-1)

    def decode(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        src_mask: torch.Tensor,
        cache: EnsembleCache,
    ) -> torch.Tensor:
        """tgt (N, T) new ids -> log of the mean next-token probability (N, T, V), fp32."""
        memories = memory.split(self.widths, dim=-1)
        total = None  # log sum_m p_m, accumulated in place
        for m, mem, kv in zip(self.members, memories, cache.members):
            logits = m.decode(tgt, mem, src_mask, kv).float()  # (N, T, V), a fresh tensor
            # in place, with no stacked (M, N, T, V) copy: on CPU every fresh (N, T, V) tensor
            # costs its page faults again (decode/__init__.py: log_softmax_into)
            log_p = torch.log_softmax(logits, dim=-1, out=logits)
            total = log_p if total is None else torch.logaddexp(total, log_p, out=total)
        return total.sub_(math.log(len(self.members)))

    def new_cache(
        self,
        rows: int,
        max_len: int,
        dtype: torch.dtype,
        device: torch.device,
        fixed_shapes: bool = False,
        beams: int = 1,
    ) -> EnsembleCache:
        return EnsembleCache(
            [m.new_cache(rows, max_len, dtype, device, fixed_shapes, beams) for m in self.members]
        )
