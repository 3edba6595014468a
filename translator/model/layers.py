"""Embeddings with positions, the feed-forward block, and encoder/decoder layers
(Vaswani et al. Fig. 1)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from translator.config import ModelConfig
from translator.model.attention import MultiHeadAttention, RotaryEmbedding, linear_attention
from translator.model.layer_cache import LayerCache


def sinusoids(max_positions: int, d_model: int) -> torch.Tensor:
    """(P, D) table: PE[p, 2i] = sin(p / 10000^(2i/D)), PE[p, 2i+1] = cos(...)."""
    position = torch.arange(max_positions).float()[:, None]  # (P, 1)
    inv_freq = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
    table = torch.zeros(max_positions, d_model)
    table[:, 0::2], table[:, 1::2] = torch.sin(position * inv_freq), torch.cos(position * inv_freq)
    return table


class Embeddings(nn.Module):
    """Token embedding (optionally * sqrt(D)) plus absolute positions, then dropout.

    With rotary or relative positions nothing is added here: positions enter through attention.
    """

    def __init__(self, token: nn.Embedding, cfg: ModelConfig) -> None:
        super().__init__()
        self.token = token
        self.scale = math.sqrt(cfg.d_model) if cfg.scale_embeddings else 1.0
        self.learned = (
            nn.Embedding(cfg.max_positions, cfg.d_model) if cfg.positions == "learned" else None
        )
        if cfg.positions == "sinusoidal":
            self.register_buffer(
                "table", sinusoids(cfg.max_positions, cfg.d_model), persistent=False
            )
        else:
            self.table = None
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """ids (N, L) at absolute `positions` (L,) -> (N, L, D)."""
        x = self.token(ids) * self.scale
        if self.table is not None:
            x = x + self.table[positions].to(x.dtype)  # (L, D), the same for every row
        elif self.learned is not None:
            x = x + self.learned(positions)
        return self.dropout(x)


def _activation(name: str) -> nn.Module:
    """model.activation's module."""
    match name:
        case "relu":
            return nn.ReLU()
        case "gelu":
            return nn.GELU()
        case "silu":
            return nn.SiLU()
    raise ValueError(f"unknown activation {name!r}")  # config checks it first


class FeedForward(nn.Module):
    """Position-wise FFN: Linear(D, F) -> activation (ReLU, GELU or SiLU) -> dropout ->
    Linear(F, D).

    Gated (GLU variants, Shazeer 2020; SwiGLU with SiLU): Linear(D, 2F) makes two halves, the
    activated first one scales the second, then dropout -> Linear(F, D).
    """

    def __init__(
        self, d_model: int, d_ff: int, dropout: float, activation: str = "relu", gated: bool = False
    ) -> None:
        super().__init__()
        self.up = nn.Linear(d_model, 2 * d_ff if gated else d_ff)  # gated: one product, two halves
        self.activation, self.gated = _activation(activation), gated
        self.down = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.up(x)
        if self.gated:
            gate, h = h.chunk(2, dim=-1)
            h = self.activation(gate) * h
        else:
            h = self.activation(h)
        return self.down(self.dropout(h))


class Residual(nn.Module):
    """One sublayer with its residual connection and LayerNorm.

    pre-LN:  x + dropout(f(norm(x)))     post-LN (the paper):  norm(x + dropout(f(x)))
    """

    def __init__(self, d_model: int, dropout: float, pre_norm: bool) -> None:
        super().__init__()
        self.norm, self.dropout, self.pre_norm = (
            nn.LayerNorm(d_model),
            nn.Dropout(dropout),
            pre_norm,
        )

    def forward(
        self, x: torch.Tensor, sublayer: Callable[[torch.Tensor], torch.Tensor]
    ) -> torch.Tensor:
        if self.pre_norm:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


def _rotary(cfg: ModelConfig) -> RotaryEmbedding | None:
    if cfg.positions != "rope":
        return None
    return RotaryEmbedding(cfg.d_model // cfg.n_heads, cfg.max_positions)


class EncoderLayer(nn.Module):
    """Self-attention (softmax, or linear: model.attention), then feed-forward, each residual."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        pre = cfg.norm == "pre"
        kernel = linear_attention if cfg.attention == "linear" else None
        self.self_attn = MultiHeadAttention(
            cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.attention_dropout, _rotary(cfg), kernel
        )
        self.ff = FeedForward(
            cfg.d_model, cfg.d_ff, cfg.activation_dropout, cfg.activation, cfg.gated_ffn
        )
        self.attn_block, self.ff_block = (Residual(cfg.d_model, cfg.dropout, pre) for _ in range(2))

    def forward(
        self, x: torch.Tensor, src_mask: torch.Tensor, positions: torch.Tensor
    ) -> torch.Tensor:
        """x (B, S, D) at `positions` (S,), src_mask (B, 1, 1 or S, S) -> (B, S, D).

        src_mask: source padding, with the window when there is one (bool), or with relative
        positions the layer's additive float mask (B, H, S, S).
        """
        x = self.attn_block(x, lambda h: self.self_attn(h, mask=src_mask, positions=positions))
        return self.ff_block(x, self.ff)


class DecoderLayer(nn.Module):
    """Causal self-attention, cross-attention over the encoder output, then feed-forward."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        pre = cfg.norm == "pre"
        self.self_attn = MultiHeadAttention(
            cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.attention_dropout, _rotary(cfg)
        )
        self.cross_attn = MultiHeadAttention(
            cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.attention_dropout
        )
        self.ff = FeedForward(
            cfg.d_model, cfg.d_ff, cfg.activation_dropout, cfg.activation, cfg.gated_ffn
        )
        self.self_block, self.cross_block, self.ff_block = (
            Residual(cfg.d_model, cfg.dropout, pre) for _ in range(3)
        )

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        src_mask: torch.Tensor,
        tgt_mask: torch.Tensor | None,
        positions: torch.Tensor,
        cache: LayerCache | None = None,
    ) -> torch.Tensor:
        """x (N, T, D) at `positions` (T,), memory (B, S, D), src_mask (B, 1, 1, S) -> (N, T, D).

        tgt_mask (T, L) from `attention_mask` (or, relative positions, its float form (H, T, L));
        None: causal over x itself (is_causal).
        """
        causal = tgt_mask is None
        # Fig. 1: self-attention, cross-attention, feed-forward, each in a residual block
        x = self.self_block(x, lambda h: self.self_attn(
            h, mask=tgt_mask, is_causal=causal, positions=positions, cache=cache))  # fmt: skip
        x = self.cross_block(x, lambda h: self.cross_attn(h, memory, src_mask, cache=cache))
        return self.ff_block(x, self.ff)
