"""Multi-head attention (self or cross, MHA / GQA / MQA) and rotary position embeddings."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from translator.model.cache import LayerKV, StaticLayerKV, rows_at
from translator.model.linear import Linear


class MultiHeadAttention(nn.Module):
    """softmax(Q K^T / sqrt(d_k)) V over H query heads sharing G key/value heads.

    Masks are bool with True = may attend, broadcastable to (B, H, T, L). The fast path is one
    `F.scaled_dot_product_attention` (flash / memory-efficient kernels on CUDA); `need_weights`
    takes the written-out path and also returns the weights (N, H, T, L).
    """

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int | None = None,
                 dropout: float = 0.0, rotary: RotaryEmbedding | None = None) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads or n_heads
        self.d_head = d_model // n_heads
        self.q_proj = Linear(d_model, n_heads * self.d_head)
        self.k_proj = Linear(d_model, self.n_kv_heads * self.d_head)
        self.v_proj = Linear(d_model, self.n_kv_heads * self.d_head)
        self.out_proj = Linear(n_heads * self.d_head, d_model)
        self.dropout, self.rotary = dropout, rotary

    def _split(self, x: torch.Tensor, heads: int) -> torch.Tensor:
        B, L, _ = x.shape
        return x.view(B, L, heads, self.d_head).transpose(1, 2)  # (B, L, D') -> (B, heads, L, K)

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None = None,
                mask: torch.Tensor | None = None, *, is_causal: bool = False,
                kv: LayerKV | StaticLayerKV | None = None, start: int | torch.Tensor = 0,
                need_weights: bool = False):
        """x (N, T, D) queries; memory (B, S, D) for cross-attention (N = B * beams), else None.

        With `kv`, self-attention writes this call's K/V at positions [start, start+T) of the cache
        and attends to [0, start+T); cross-attention projects `memory` once and reuses it.
        Returns (N, T, D), or ((N, T, D), weights) when need_weights.
        """
        N, T, _ = x.shape
        q = self._split(self.q_proj(x), self.n_heads)  # (N, H, T, K)
        if memory is None:  # self-attention
            k = self._split(self.k_proj(x), self.n_kv_heads)  # (N, G, T, K)
            v = self._split(self.v_proj(x), self.n_kv_heads)
            if self.rotary is not None:
                q, k = self.rotary(q, start), self.rotary(k, start)
            if kv is not None:
                k, v = kv.append(k, v, start)  # (N, G, start + T, K), or a static cache's T_max slots
                if kv.key_mask is not None:  # a static cache: only its written slots
                    mask = kv.key_mask
                if T == 1:  # one new query sees every cached key
                    is_causal = False
                elif is_causal and start > 0:  # is_causal is upper-left aligned
                    mask, is_causal = _shifted_causal_mask(T, start, x.device), False
        else:  # cross-attention; beams of one sentence share its K/V
            if kv is not None and kv.cross_k is not None:
                k, v = kv.cross_k, kv.cross_v
            else:
                k = self._split(self.k_proj(memory), self.n_kv_heads)  # (B, G, S, K)
                v = self._split(self.v_proj(memory), self.n_kv_heads)
                if kv is not None:  # made contiguous once, or every step's matmuls would copy them
                    k, v = kv.cross_k, kv.cross_v = k.contiguous(), v.contiguous()
            beams = N // k.shape[0]
            # fold beams into the query axis: (B*beams, H, T, K) -> (B, H, beams*T, K)
            q = q.view(-1, beams, self.n_heads, T, self.d_head).transpose(1, 2).flatten(2, 3)

        p = self.dropout if self.training else 0.0
        # A decoding step's few queries: on CPU the fused kernel is ~6x slower there than the
        # written-out path in bf16 (3.9 vs 0.6 ms per call measured), so search takes the latter.
        few_queries = q.shape[-2] <= 8 and q.device.type == "cpu" and not torch.is_grad_enabled()
        if need_weights or few_queries:
            out, weights = attention_weights(q, k, v, mask, is_causal, p)
        else:  # decoding (a cache) never has a query without keys: the first target position, the source's EOS
            out = sdpa_attention(q, k, v, mask, is_causal, p, every_query_has_a_key=kv is not None)
        if memory is not None:  # unfold beams: (B, H, beams*T, K) -> (B*beams, H, T, K)
            out = out.view(-1, self.n_heads, beams, T, self.d_head).transpose(1, 2).flatten(0, 1)
            if need_weights:
                weights = weights.view(-1, self.n_heads, beams, T, weights.shape[-1]).transpose(1, 2).flatten(0, 1)
        out = self.out_proj(out.transpose(1, 2).reshape(N, T, -1))  # (N, H, T, K) -> (N, T, D)
        return (out, weights) if need_weights else out


def sdpa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
                   is_causal: bool = False, dropout_p: float = 0.0, every_query_has_a_key: bool = False
                   ) -> torch.Tensor:
    """The fast path: one fused softmax(Q K^T / sqrt(d_k)) V. q (N, H, T, K); k, v (N, G, L, K) -> (N, H, T, K).

    every_query_has_a_key: the caller knows no mask row is all False, so the guard below (five
    small kernels per call, which a decoding step on CUDA would launch 6-12 times) is skipped.
    """
    gqa = k.shape[1] != q.shape[1]
    if mask is None or every_query_has_a_key:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal,
                                              enable_gqa=gqa)
    # A query row with no key to attend to (an all-padding sentence) has no softmax; CUDA's
    # memory-efficient kernel returns NaN there (pytorch#110213) and its backward spreads it.
    # Let such rows attend everywhere inside the kernel, then zero them: the same on every backend.
    has_key = mask.any(dim=-1, keepdim=True)  # (..., T, 1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask | ~has_key, dropout_p=dropout_p,
                                         is_causal=is_causal, enable_gqa=gqa)
    return out.masked_fill(~has_key, 0.0)


def attention_weights(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
                      is_causal: bool = False, dropout_p: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """The written-out path: softmax(Q K^T / sqrt(d_k)) V, returning (output, weights).

    q (N, H, T, K); k, v (N, G, L, K) -> (N, H, T, K), (N, H, T, L). Masked keys get exactly
    zero weight (-inf before the softmax, never a large finite negative that leaks in fp16/bf16);
    a row with every key masked gets all-zero weights and a zero output instead of NaN.
    """
    H, G = q.shape[1], k.shape[1]
    if G != H:  # each group of H/G query heads reads one key/value head
        k, v = k.repeat_interleave(H // G, dim=1), v.repeat_interleave(H // G, dim=1)  # (N, H, L, K)
    scores = (q / math.sqrt(q.shape[-1])) @ k.transpose(-2, -1)  # (N, H, T, L); scale first: no fp16 overflow
    if is_causal:  # upper-left aligned, as in SDPA
        causal = torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device).tril()
        mask = causal if mask is None else mask & causal
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    # PyTorch's softmax computes in fp32 for fp16/bf16 input (CPU and CUDA), then rounds: the same
    # weights as an upcast first, without two extra passes. A fully masked row is NaN here.
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    if dropout_p:
        weights = F.dropout(weights, dropout_p)
    return weights @ v, weights


def _shifted_causal_mask(T: int, start: int, device) -> torch.Tensor:
    """(T, start+T) bool: query t (at absolute position start+t) sees keys <= start+t."""
    keys = torch.arange(start + T, device=device)
    return keys[None, :] <= (start + torch.arange(T, device=device))[:, None]


class RotaryEmbedding(nn.Module):
    """RoPE: rotate each (even, odd) feature pair by an angle proportional to the position."""

    def __init__(self, d_head: int, max_positions: int, base: float = 10000.0) -> None:
        super().__init__()
        inv_freq = base ** (-torch.arange(0, d_head, 2).float() / d_head)  # (K/2,)
        angles = torch.outer(torch.arange(max_positions).float(), inv_freq)  # (P, K/2)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x: torch.Tensor, start: int | torch.Tensor = 0) -> torch.Tensor:
        """x (N, heads, T, K) at absolute positions [start, start+T)."""
        T = x.shape[-2]
        cos, sin = rows_at(self.cos, start, T).to(x.dtype), rows_at(self.sin, start, T).to(x.dtype)
        x1, x2 = x[..., 0::2], x[..., 1::2]  # (N, heads, T, K/2) each
        rotated = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
        return rotated.flatten(-2)  # interleave back to (N, heads, T, K)
