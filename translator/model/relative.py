"""T5's relative position bias (Raffel et al. 2020, 2.1): a learned scalar per head and distance.

Self-attention scores become q_i.k_j / sqrt(d_k) + b[h, bucket(j - i)]: the bias depends only on
the distance between query and key, so a model trained on short sentences sees the same function
of distance on long ones. Distances below half the buckets get a bucket each; longer ones share
log-spaced buckets up to `max_distance`, past which all share the last. The encoder splits its
buckets between keys before and after the query; the decoder sees only keys before it.

The bias enters attention as SDPA's additive float mask (bias where the bool mask is True, -inf
where it is False), so the fused kernel and the written-out one both apply it, and the KV cache
needs nothing new: a key's bias follows from its position.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from translator.config import ModelConfig


def relative_buckets(
    offsets: torch.Tensor, n_buckets: int, max_distance: int, bidirectional: bool
) -> torch.Tensor:
    """offsets (T, L) = j - i, key minus query position -> bucket ids (T, L) in [0, n_buckets).

    T5's `_relative_position_bucket`. Unidirectional (decoder): a key after the query shares
    bucket 0 with the query itself (the causal mask hides it anyway).
    """
    buckets = torch.zeros_like(offsets)
    if bidirectional:  # keys after the query use the upper half of the buckets
        n_buckets //= 2
        buckets = (offsets > 0).long() * n_buckets
        distance = offsets.abs()
    else:
        distance = (-offsets).clamp(min=0)
    exact = n_buckets // 2
    # clamped below at `exact`: rows that take the exact bucket would otherwise take log(0)
    spread = torch.log(distance.float().clamp(min=exact) / exact) / math.log(max_distance / exact)
    far = (exact + (spread * (n_buckets - exact)).long()).clamp(max=n_buckets - 1)
    return buckets + torch.where(distance < exact, distance, far)


class RelativePositionBias(nn.Module):
    """A stack's bias: one (buckets, H) table shared by its layers (as T5), or one per layer."""

    def __init__(self, cfg: ModelConfig, n_layers: int, bidirectional: bool) -> None:
        super().__init__()
        n_tables = n_layers if cfg.relative_per_layer else 1
        self.tables = nn.ModuleList(
            nn.Embedding(cfg.relative_buckets, cfg.n_heads) for _ in range(n_tables)
        )
        self.n_layers, self.bidirectional = n_layers, bidirectional
        self.n_buckets, self.max_distance = cfg.relative_buckets, cfg.relative_max_distance

    def forward(
        self, mask: torch.Tensor, q_positions: torch.Tensor, k_positions: torch.Tensor
    ) -> list[torch.Tensor]:
        """Bool mask (..., T, L), True = may attend -> per layer the float mask (..., H, T, L).

        q_positions (T,) and k_positions (L,) are absolute positions; only their differences count.
        The one place where the bool mask becomes a float one: bias where allowed, -inf elsewhere.
        """
        offsets = k_positions[None, :] - q_positions[:, None]  # (T, L): j - i
        buckets = relative_buckets(offsets, self.n_buckets, self.max_distance, self.bidirectional)
        masks = [
            torch.where(mask, table(buckets).permute(2, 0, 1), float("-inf"))  # (H, T, L) bias
            for table in self.tables
        ]
        return masks * (self.n_layers // len(masks))  # a shared table: the same mask each layer
