"""Multi-head attention (self or cross; MHA, GQA, MQA), its mask, and rotary position embeddings."""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from translator.model.layer_cache import LayerCache

# q (N, H, T, K), k and v (N, G, L, K), mask, is_causal, dropout_p -> (N, H, T, K)
Tensor = torch.Tensor
Kernel = Callable[[Tensor, Tensor, Tensor, Tensor | None, bool, float], Tensor]


class MultiHeadAttention(nn.Module):
    """softmax(Q K^T / sqrt(d_k)) V over H query heads sharing G key/value heads (Vaswani 3.2).

    forward: project, get keys and values (from the cache when decoding), attend under one mask
    (bool, True = may attend, broadcastable to (N, H, T, L); with relative positions the additive
    float mask model/relative.py makes of it), merge the heads. `kernel` computes the attention
    itself and is chosen once: `sdpa_attention` (one fused call), `linear_attention`
    (model.attention), or the written-out `attention`, the fused call's tested reference (the
    diagnostics record its weights: diagnostics/capture.py).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int | None = None,
        dropout: float = 0.0,
        rotary: RotaryEmbedding | None = None,
        kernel: Kernel | None = None,
    ) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads or n_heads
        self.d_head = d_model // n_heads
        self.q_proj = nn.Linear(d_model, n_heads * self.d_head)
        self.k_proj = nn.Linear(d_model, self.n_kv_heads * self.d_head)
        self.v_proj = nn.Linear(d_model, self.n_kv_heads * self.d_head)
        self.out_proj = nn.Linear(n_heads * self.d_head, d_model)
        self.dropout, self.rotary = dropout, rotary
        self.kernel: Kernel = kernel or sdpa_attention

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        mask: Tensor | None = None,
        *,
        is_causal: bool = False,
        positions: Tensor | None = None,
        cache: LayerCache | None = None,
    ) -> Tensor:
        """x (N, T, D) queries at `positions` (T,); memory (B, S, D) for cross-attention, else None.

        N = B * beams: the beams of a sentence share its memory. With a cache, self-attention
        writes this call's K/V into it and attends to every position written; cross-attention
        projects `memory` once. is_causal: SDPA's causal mask, for a whole sequence without cache.
        """
        q = self._heads(self.q_proj(x), self.n_heads)  # (N, H, T, K)
        if memory is None:
            k = self._heads(self.k_proj(x), self.n_kv_heads)  # (N, G, T, K)
            v = self._heads(self.v_proj(x), self.n_kv_heads)
            if self.rotary is not None:
                q, k = self.rotary(q, positions), self.rotary(k, positions)
            if cache is not None:
                k, v = cache.update(k, v, positions)  # (N, G, L, K): every position written so far
        else:
            k, v = self._memory_keys_values(memory, cache)  # (B, G, S, K)
        dropout = self.dropout if self.training else 0.0
        out = shared_key_attention(self.kernel, q, k, v, mask, is_causal, dropout)
        N, _, T, _ = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(N, T, -1))  # (N, H, T, K) -> (N, T, D)

    def _heads(self, x: torch.Tensor, heads: int) -> torch.Tensor:
        B, L, _ = x.shape
        # (B, L, heads*K) -> (B, heads, L, K)
        return x.view(B, L, heads, self.d_head).transpose(1, 2)

    def _memory_keys_values(
        self, memory: torch.Tensor, cache: LayerCache | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if cache is not None and cache.cross is not None:
            return cache.cross
        k = self._heads(self.k_proj(memory), self.n_kv_heads)  # (B, G, S, K)
        v = self._heads(self.v_proj(memory), self.n_kv_heads)
        # made contiguous once, or every step's matrix products would copy them
        if cache is not None:
            cache.cross = k.contiguous(), v.contiguous()
            return cache.cross
        return k, v


def shared_key_attention(
    kernel: Kernel,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    is_causal: bool,
    dropout_p: float,
) -> Tensor:
    """q (B*beams, H, T, K), k and v (B, G, L, K) -> (B*beams, H, T, K): beams share their keys.

    The beams' queries are folded into one query axis, so K/V are read once per sentence
    (beams = 1, the usual case, folds nothing): cross-attention's memory, and self-attention's
    keys in a beam-slots cache (model/layer_cache.py). Masks broadcast over the folded axis, or come
    folded (KVCache.own_keys).
    """
    N, H, T, K = q.shape
    beams = N // k.shape[0]
    q = q.view(-1, beams, H, T, K).transpose(1, 2).flatten(2, 3)  # (B, H, beams*T, K)
    out = kernel(q, k, v, mask, is_causal, dropout_p)
    return out.view(-1, H, beams, T, K).transpose(1, 2).flatten(0, 1)  # (B*beams, H, T, K)


def attention_mask(
    q_positions: torch.Tensor, k_positions: torch.Tensor, *, causal: bool, window: int = 0
) -> torch.Tensor:
    """(T, L) bool: may the query at absolute position i attend to the key at position j?

    causal: only j <= i. window > 0: only |i - j| < window (a sliding window, Longformer's and
    Mistral's). Self-attention's one mask builder: a decoder chunk after a cached prefix
    (is_causal would be aligned at the upper left), a fixed-shape cache's unwritten slots (they
    lie after every query) and a window cache's stale slots (too far back) are all hidden by it.
    Source padding is the caller's (B, 1, 1, S) src_mask.
    """
    offsets = q_positions[:, None] - k_positions[None, :]  # (T, L): i - j
    allowed = offsets >= 0 if causal else torch.ones_like(offsets, dtype=torch.bool)
    if window:
        allowed = allowed & (offsets.abs() < window)
    return allowed


# SDPA's kernels on CUDA: all but cuDNN's (see sdpa_attention)
CUDA_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def sdpa_kernels(on_cuda: bool) -> AbstractContextManager:
    """The SDPA kernels this model uses: on CUDA `CUDA_BACKENDS`, elsewhere torch's choice. The
    benchmarks put their peers under it too, so that ratios compare the models alone."""
    return sdpa_kernel(CUDA_BACKENDS) if on_cuda else nullcontext()


def recompute_under_same_kernels() -> tuple[AbstractContextManager, AbstractContextManager]:
    """torch.utils.checkpoint's `context_fn`: recompute a layer under the SDPA kernels its forward
    was allowed. A caller's `sdpa_kernel` choice (training's on CPU) has ended by the backward
    pass, and another kernel would save other tensors (a CheckpointError)."""
    allowed = [
        backend
        for backend, enabled in (
            (SDPBackend.FLASH_ATTENTION, torch.backends.cuda.flash_sdp_enabled()),
            (SDPBackend.EFFICIENT_ATTENTION, torch.backends.cuda.mem_efficient_sdp_enabled()),
            (SDPBackend.CUDNN_ATTENTION, torch.backends.cuda.cudnn_sdp_enabled()),
            (SDPBackend.MATH, torch.backends.cuda.math_sdp_enabled()),
        )
        if enabled
    ]
    return nullcontext(), sdpa_kernel(allowed)


def sdpa_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
) -> torch.Tensor:
    """softmax(Q K^T / sqrt(d_k)) V in one fused call (flash / memory-efficient kernels on CUDA).

    q (N, H, T, K); k, v (N, G, L, K) -> (N, H, T, K). Every query must have a key to attend to:
    CUDA's memory-efficient kernel returns NaN for a row with none (pytorch#110213). The model's
    masks always leave one (the query itself; a source's EOS).

    On CUDA cuDNN's kernel is left out: it builds an execution plan for every new shape, and
    shapes keep changing here (a new key length at every decoding step, a new batch shape at
    most training steps); docs/benchmarks/decode.md has the cost.
    """
    with sdpa_kernels(q.is_cuda):
        return F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            dropout_p=dropout_p,
            is_causal=is_causal,
            enable_gqa=k.shape[1] != q.shape[1],
        )


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
) -> torch.Tensor:
    """The written-out softmax(Q K^T / sqrt(d_k)) V: `attention_weights`' output alone."""
    return attention_weights(q, k, v, mask, is_causal, dropout_p)[0]


def attention_weights(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(Q K^T / sqrt(d_k)) V step by step, returning (output, weights).

    q (N, H, T, K); k, v (N, G, L, K) -> (N, H, T, K), (N, H, T, L). Masked keys get exactly
    zero weight (-inf before the softmax, never a large finite negative that leaks in fp16/bf16);
    a row with every key masked gets all-zero weights and a zero output instead of NaN.
    """
    H, G = q.shape[1], k.shape[1]
    if G != H:  # each group of H/G query heads reads one key/value head
        # (N, G, L, K) -> (N, H, L, K)
        k, v = k.repeat_interleave(H // G, dim=1), v.repeat_interleave(H // G, dim=1)
    # (N, H, T, L); scaled first: no fp16 overflow
    scores = (q / math.sqrt(q.shape[-1])) @ k.transpose(-2, -1)
    if is_causal:  # upper-left aligned, as in SDPA
        causal = torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device).tril()
        mask = causal if mask is None else mask & causal
    # an additive float mask (relative positions): -inf = hidden
    if mask is not None and mask.dtype != torch.bool:
        scores, mask = scores + mask, mask != float("-inf")
    elif mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    # PyTorch's softmax computes in fp32 for fp16/bf16 input (CPU and CUDA), then rounds: the same
    # weights as an upcast first, without two extra passes. A fully masked row is NaN here.
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    if dropout_p:
        weights = F.dropout(weights, dropout_p)
    return weights @ v, weights


def linear_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
) -> torch.Tensor:
    """phi(Q) (phi(K)^T V) / (phi(Q) sum_j phi(K_j)), phi = elu + 1 (Katharopoulos et al. 2020).

    The softmax's exp(q.k) replaced by the kernel phi(q).phi(k), so the sums over keys can be
    taken once, before any query: O((T + L) K^2) instead of O(T L K), and no (T, L) weights
    exist (the diagnostics have none to show; attention dropout has none to drop). q (N, H, T, K);
    k, v (N, G, L, K) -> (N, H, T, K). mask: a key mask (N, 1, 1, L) only; no causal form here.
    """
    if is_causal or (mask is not None and mask.shape[-2] != 1):
        raise ValueError("linear attention takes a key padding mask (N, 1, 1, L) only")
    H, G = q.shape[1], k.shape[1]
    if G != H:  # each group of H/G query heads reads one key/value head
        k, v = k.repeat_interleave(H // G, dim=1), v.repeat_interleave(H // G, dim=1)
    q, k = F.elu(q) + 1, F.elu(k) + 1  # phi > 0: every weight positive, as softmax's
    if mask is not None:  # a masked key adds nothing to either sum
        k = k * mask.transpose(-2, -1)  # (N, 1, L, 1)
    kv = k.transpose(-2, -1) @ v  # (N, H, K, K): sum_j phi(k_j) v_j^T
    normaliser = q @ k.sum(dim=-2)[..., None]  # (N, H, T, 1): phi(q_i) . sum_j phi(k_j)
    # a row with no key (never in the model: a source has its EOS) gets 0, not 0/0
    return (q @ kv) / normaliser.clamp_min(torch.finfo(normaliser.dtype).tiny)


class RotaryEmbedding(nn.Module):
    """RoPE: rotate each (even, odd) feature pair by an angle proportional to the position.

    A pair (a, b) at angle t becomes (a cos t - b sin t, a sin t + b cos t); for all pairs at once
    x * cos + swap(x) * sin, with swap(x) = (b, a) per pair and the tables laid out per feature,
    (cos t, cos t) and (-sin t, sin t) per pair. Whole-tensor products in x's own layout: the
    same values as products over strided (even, odd) views, which run several times slower on
    CPU (docs/benchmarks/train.md).
    """

    def __init__(self, d_head: int, max_positions: int, base: float = 10000.0) -> None:
        super().__init__()
        inv_freq = base ** (-torch.arange(0, d_head, 2).float() / d_head)  # (K/2,)
        angles = torch.outer(torch.arange(max_positions).float(), inv_freq)  # (P, K/2)
        cos, sin = angles.cos(), angles.sin()
        # (P, K): each angle twice, side by side, for the pair (a, b) it rotates
        self.register_buffer("cos", torch.stack((cos, cos), -1).flatten(-2), persistent=False)
        self.register_buffer("sin", torch.stack((-sin, sin), -1).flatten(-2), persistent=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x (N, heads, T, K) at absolute `positions` (T,)."""
        cos, sin = self.cos[positions].to(x.dtype), self.sin[positions].to(x.dtype)  # (T, K) each
        swapped = x.unflatten(-1, (-1, 2)).flip(-1).flatten(-2)  # (b, a) for each pair (a, b)
        return x * cos + swapped * sin
