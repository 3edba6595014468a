"""The decoder's key/value cache, owned by the decoding loop and passed into `Transformer.decode`.

Self-attention K/V are preallocated for `max_len` positions and written in place, one slice per
step; `length` is the number of positions written so far and is advanced by the caller.
Cross-attention K/V are projected once from the encoder output, one copy per source sentence,
and shared by all beams of that sentence: `reorder` never touches them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class LayerKV:
    self_k: torch.Tensor  # (N, G, T_max, K), a transposed view of (N, G, K, T_max) storage
    self_v: torch.Tensor  # (N, G, T_max, K)
    cross_k: torch.Tensor | None = None  # (B, G, S, K), filled on first use
    cross_v: torch.Tensor | None = None


def _empty_keys(shape: tuple[int, int, int, int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """An uninitialised (N, G, T_max, K) key buffer.

    On CPU it is a transposed view of (N, G, K, T_max) storage: decoding steps there take the
    written-out attention, whose q @ k^T then reads the prefix k^T[..., :L] as a row-major matrix,
    in place; over (N, G, T_max, K) storage that matmul copies the whole prefix of every layer at
    every step (~1 ms per layer per step at 128 rows, bf16). CUDA's fused attention kernels want
    the last dimension contiguous, so there the storage is (N, G, T_max, K).
    """
    N, G, T_max, K = shape
    if device.type == "cpu":
        return torch.empty(N, G, K, T_max, dtype=dtype, device=device).transpose(2, 3)
    return torch.empty(shape, dtype=dtype, device=device)


@dataclass
class KVCache:
    layers: list[LayerKV] = field(default_factory=list)
    length: int = 0  # positions already written

    @staticmethod
    def allocate(n_layers: int, rows: int, n_kv_heads: int, max_len: int, d_head: int,
                 dtype: torch.dtype, device: torch.device | str) -> KVCache:
        shape = (rows, n_kv_heads, max_len, d_head)
        device = torch.device(device)
        return KVCache([LayerKV(_empty_keys(shape, dtype, device), torch.empty(shape, dtype=dtype, device=device))
                        for _ in range(n_layers)])

    @property
    def max_len(self) -> int:
        return self.layers[0].self_k.shape[2]

    def reorder(self, origin: torch.Tensor) -> None:
        """Beam search: row i continues the hypothesis that was row origin[i] (N,).

        Only the rows whose origin changed are moved (in a typical beam step most rows continue
        themselves), in place, so the buffers stay the preallocated ones. A moved row is copied
        whole, T_max positions, as one block of memory: index_select and index_put move such rows
        much faster than the strided slice of the written prefix [:length + 1], which they used to
        copy (micro-benchmark: as fast at a prefix of a quarter of T_max, ~1.5x faster from half
        of it). Positions past the prefix are unread until written, so moving them is harmless and
        reordering before or after the caller advances `length` gives the same cache.
        """
        moved = (origin != torch.arange(len(origin), device=origin.device)).nonzero().squeeze(1)  # (M,)
        if len(moved) == 0:
            return
        sources = origin.index_select(0, moved)
        for layer in self.layers:
            for buffer in (layer.self_k, layer.self_v):  # (N, G, T_max, K)
                rows = buffer if buffer.is_contiguous() else buffer.transpose(2, 3)  # keys: their storage
                # gather first (a copy), then write: a row may be both a source and a destination
                rows[moved] = rows.index_select(0, sources)
