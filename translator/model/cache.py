"""The decoder's key/value cache, owned by the decoding loop and passed into `Transformer.decode`.

Each layer keeps its self-attention K and V as dense (N, G, L, K) tensors of exactly the L
positions written so far: what attention's matrix products read in place (a slice of a longer
buffer is not a dense batch of matrices, and oneDNN's CPU `bmm` copies such operands whole, every
step). Appending a position therefore rewrites the prefix into a second preallocated buffer,
and that same copy applies a pending beam reorder, so reordering costs nothing of its own.
`length` is the number of positions written so far and is advanced by the caller.
Cross-attention K/V are projected once from the encoder output, one copy per source sentence,
and shared by all beams of that sentence: `reorder` never touches them.

A *static* cache (`StaticLayerKV`) is the layout a CUDA graph can replay: K/V of fixed shape
(N, G, T_max, K) at fixed addresses, written in place at a position held in a device tensor
(`length` is then a (1,) tensor, advanced in place), and read through a mask of the written slots.
"""

from __future__ import annotations

import torch


class LayerKV:
    """One decoder layer's cache: self-attention K/V (N, G, L, K) and cross-attention K/V (B, G, S, K)."""

    def __init__(self, shape: tuple[int, int, int, int], buffers: list[torch.Tensor]) -> None:
        N, G, self.max_len, K = shape
        # Two flat buffers each for K and V (each at least N * G * max_len * K long): a step reads
        # the prefix from one and writes the longer prefix into the other.
        self._buffers = buffers
        self.self_k, self.self_v = (buffer[:0].view(N, G, 0, K) for buffer in buffers[:2])
        self.origin: torch.Tensor | None = None  # (N,) reorder to apply on the next append
        self.key_mask: torch.Tensor | None = None  # K/V hold exactly the written positions: nothing to mask
        self.cross_k: torch.Tensor | None = None  # (B, G, S, K), filled on first use
        self.cross_v: torch.Tensor | None = None

    def append(self, k: torch.Tensor, v: torch.Tensor, start: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k, v (N, G, T, K) at positions [start, start+T) -> the layer's K, V (N, G, start+T, K).

        Positions [0, start) are copied from the current K/V, gathered by the pending `origin`.
        """
        end = start + k.shape[2]
        if end > self.max_len:
            raise ValueError(f"KV cache holds {self.max_len} positions; writing up to {end}")
        origin, self.origin = self.origin, None
        current, spare = self._buffers[:2], self._buffers[2:]
        self.self_k = _extend(self.self_k, k, spare[0], start, origin)
        self.self_v = _extend(self.self_v, v, spare[1], start, origin)
        self._buffers = spare + current
        return self.self_k, self.self_v

    def reorder(self, origin: torch.Tensor) -> None:
        """Row i continues what row origin[i] (N,) holds now; applied by the next `append`."""
        self.origin = origin if self.origin is None else self.origin.index_select(0, origin)

    def written(self) -> tuple[torch.Tensor, torch.Tensor]:
        """K, V (N, G, L, K) as they stand, any pending reorder applied (a copy when one is pending)."""
        if self.origin is None:
            return self.self_k, self.self_v
        return self.self_k.index_select(0, self.origin), self.self_v.index_select(0, self.origin)


def _extend(old: torch.Tensor, new: torch.Tensor, buffer: torch.Tensor, start: int,
            origin: torch.Tensor | None) -> torch.Tensor:
    """[old[origin][:, :, :start]; new] written into `buffer` as one dense (N, G, start + T, K) tensor."""
    N, G, T, K = new.shape
    dense = buffer[:N * G * (start + T) * K].view(N, G, start + T, K)
    if origin is None:
        dense[:, :, :start] = old[:, :, :start]
    else:  # one copy both moves and reorders the prefix
        torch.index_select(old[:, :, :start], 0, origin, out=dense[:, :, :start])
    dense[:, :, start:] = new
    return dense


class StaticLayerKV:
    """One layer's static cache: self-attention K/V (N, G, T_max, K) written in place, cross-attention K/V (B, G, S, K).

    Shapes, addresses and every value a step reads stay on the device, so a step can be captured
    once as a CUDA graph and replayed: attention reads all T_max slots through `key_mask`.
    """

    def __init__(self, shape: tuple[int, int, int, int], dtype: torch.dtype, device: torch.device | str) -> None:
        self.max_len = shape[2]
        # zeros, not empty: a masked slot gets weight 0, and 0 * (NaN from uninitialised memory) is NaN
        self.self_k, self.self_v = (torch.zeros(shape, dtype=dtype, device=device) for _ in range(2))
        self.slots = torch.arange(self.max_len, device=device).view(1, 1, 1, -1)  # (1, 1, 1, T_max)
        self.key_mask: torch.Tensor | None = None  # (1, 1, 1, T_max) bool: the slots written so far
        self.cross_k: torch.Tensor | None = None
        self.cross_v: torch.Tensor | None = None

    def append(self, k: torch.Tensor, v: torch.Tensor, start: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k, v (N, G, 1, K) at slot `start` ((1,) long tensor) -> all T_max slots, `key_mask` set."""
        if k.shape[2] != 1:
            raise ValueError("a static KV cache takes one position per step")
        self.self_k.index_copy_(2, start, k)
        self.self_v.index_copy_(2, start, v)
        self.key_mask = self.slots <= start
        return self.self_k, self.self_v

    def reorder(self, origin: torch.Tensor) -> None:
        """Row i continues what row origin[i] (N,) holds now: gathered in place, addresses unchanged."""
        self.self_k.copy_(self.self_k.index_select(0, origin))
        self.self_v.copy_(self.self_v.index_select(0, origin))

    def written(self) -> tuple[torch.Tensor, torch.Tensor]:
        """K, V (N, G, L, K) of the L positions written so far."""
        length = int(self.key_mask.sum()) if self.key_mask is not None else 0
        return self.self_k[:, :, :length], self.self_v[:, :, :length]


class KVCache:
    def __init__(self, layers: list[LayerKV] | list[StaticLayerKV], length: int | torch.Tensor = 0) -> None:
        self.layers = layers
        self.length = length  # positions already written: an int, or a (1,) device tensor for a static cache

    @staticmethod
    def allocate(n_layers: int, rows: int, n_kv_heads: int, max_len: int, d_head: int,
                 dtype: torch.dtype, device: torch.device | str, static: bool = False) -> KVCache:
        """An empty cache. Untouched capacity costs nothing: only the written prefix is ever paged in.

        static: fixed shapes and a device-side length, for CUDA graphs (see the module docstring).
        """
        shape, size = (rows, n_kv_heads, max_len, d_head), rows * n_kv_heads * max_len * d_head
        if static:
            return KVCache([StaticLayerKV(shape, dtype, device) for _ in range(n_layers)],
                           torch.zeros(1, dtype=torch.long, device=device))
        return KVCache([LayerKV(shape, [torch.empty(size, dtype=dtype, device=device) for _ in range(4)])
                        for _ in range(n_layers)])

    @property
    def static(self) -> bool:
        """Whether this is the CUDA-graph layout (StaticLayerKV, device-side length)."""
        return isinstance(self.length, torch.Tensor)

    @property
    def max_len(self) -> int:
        return self.layers[0].max_len

    def reorder(self, origin: torch.Tensor) -> None:
        """Beam search: row i continues the hypothesis that was row origin[i] (N,).

        Dense cache: nothing moves now; each layer gathers its rows by `origin` in the copy its
        next append makes anyway, so a reorder costs an index, not a pass over the cache. Static
        cache: the rows move now, in place. Reordering before or after the caller advances
        `length` is the same.
        """
        for layer in self.layers:
            layer.reorder(origin)


def rows_at(table: torch.Tensor, start: int | torch.Tensor, length: int) -> torch.Tensor:
    """table (P, ...) -> its rows for positions [start, start + length).

    A static cache's `start` is a (1,) device tensor: it is indexed on the device, never read on
    the host (a CUDA graph would keep the value it read at capture).
    """
    if isinstance(start, torch.Tensor):
        return table.index_select(0, start + torch.arange(length, device=start.device))
    return table[start:start + length]
