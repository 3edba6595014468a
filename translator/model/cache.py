"""The decoder's key/value cache: owned by the decoding loop and passed into `Transformer.decode`.

One object on every device (nanochat's shape). Per decoder layer, self-attention K and V are
preallocated as (N, G, T_max, K) and written at the positions of each step; a beam reorder is
one `index_select` over the rows. The cache owns its position: `length` positions are written,
and the caller calls `advance` after each step. Cross-attention K/V are projected once from the
encoder output, one copy per source sentence (B rows, shared by its beams), and never reordered;
a search that drops its finished sentences keeps the rows of the others (a reorder to fewer rows)
and their cross-attention K/V.

Two layout choices, each made once when the cache is allocated:
- `fixed_shapes` (CUDA graphs): a replayed graph reruns the same kernels on the same shapes and
  addresses and reads nothing from the host. The position is also kept on the device
  (`position`, advanced in place), writes go to device-side positions (as they do without
  graphs: one code path), and attention reads all T_max slots; the causal mask
  (model/attention.py) hides the ones not yet written, which lie after every query.
- `dense_prefix` (CPU decoding, set by model/inference.py): a slice of the slots is not a dense
  batch of matrices, and oneDNN's CPU `bmm` copies such operands whole at every step. So each
  layer's K/V are kept as dense (N, G, L, K) tensors of exactly the written positions, and a
  step writes the prefix plus the new positions into a second buffer: one copy, which also
  applies a pending beam reorder (so `reorder` only composes an index). Why and how much:
  docs/benchmarks/decode.md. The slot layout is its tested reference (tests/model/test_cache.py).

With a sliding window (model.attention_window = W < T_max) a layer keeps only W slots, a ring:
position p lives in slot p % W, so memory stops growing with length. A step attends to the ring
as it was plus the new positions (the ring is written after it is read, so a chunk of new
positions never overwrites a key one of its own queries still sees); `key_positions` says which
position each key holds, and the window mask hides the stale ones. The ring has fixed shapes and
device-side positions, so CUDA graphs replay it as they do the slots.
"""

from __future__ import annotations

import torch


class KVCache:
    """Per decoder layer: self-attention K/V (N, G, T_max, K), cross-attention K/V (B, G, S, K)."""

    def __init__(
        self,
        n_layers: int,
        rows: int,
        n_kv_heads: int,
        max_len: int,
        d_head: int,
        dtype: torch.dtype,
        device: torch.device | str,
        *,
        fixed_shapes: bool = False,
        dense_prefix: bool = False,
        window: int = 0,
    ) -> None:
        if fixed_shapes and dense_prefix:
            raise ValueError("a dense-prefix cache changes shape: no CUDA graph replays it")
        # shared with the layers, which never see self
        self._written = _Written(max_len, fixed_shapes)
        self.slot_positions: torch.Tensor | None = None  # (W,) a ring's position in each slot
        if 0 < window < max_len:  # the ring is dense already: no dense-prefix layout
            # "never written" lies further back than any window reaches
            self.slot_positions = torch.full((window,), -(2**30), device=device)
            shape = (rows, n_kv_heads, window, d_head)
            self.layers = [RingCache(self._written, shape, dtype, device) for _ in range(n_layers)]
        else:
            shape = (rows, n_kv_heads, max_len, d_head)
            self.layers = [
                LayerCache(self._written, shape, dtype, device, dense_prefix)
                for _ in range(n_layers)
            ]
        self.max_len, self.fixed_shapes = max_len, fixed_shapes
        self.position = torch.zeros(1, dtype=torch.long, device=device)  # `length`, on the device
        self._offsets = torch.arange(max_len, device=device)  # (T_max,)

    @property
    def length(self) -> int:
        """Positions written so far (host), for slicing and reordering."""
        return self._written.length

    def positions(self, T: int) -> torch.Tensor:
        """(T,) absolute positions of the next T tokens, computed on the device (no host value)."""
        if self.length + T > self.max_len:
            end = self.length + T
            raise ValueError(f"KV cache holds {self.max_len} positions; writing up to {end}")
        return self.position + self._offsets[:T]

    def key_positions(self, T: int) -> torch.Tensor:
        """(L,) the absolute position of each key attention reads in a step of T new positions.

        The written slots (all of them with fixed shapes: the causal mask hides the rest), or a
        ring's slots followed by the T new positions.
        """
        if self.slot_positions is not None:
            return torch.cat([self.slot_positions, self.positions(T)])
        return self._offsets[: self._written.n_keys(T)]

    def advance(self, T: int) -> None:
        """The caller's step wrote T positions."""
        if self.slot_positions is not None:  # on the device, as the layers' writes were
            W = self.slot_positions.shape[0]
            written = self.positions(T)[-W:]
            self.slot_positions.index_copy_(0, written % W, written)
        self._written.length += T
        self.position += T

    def reorder(self, origin: torch.Tensor, sentences: torch.Tensor | None = None) -> None:
        """Beam search: row i continues the hypothesis of row origin[i] (N',). After `advance`.

        A search that drops its finished sentences names fewer rows (N' < N; never with fixed
        shapes) and gives `sentences` (B',): the source sentences whose cross-attention K/V stay.
        """
        if self.fixed_shapes and origin.shape[0] != self.layers[0].k.shape[0]:
            raise ValueError("a fixed-shape cache keeps its rows: a CUDA graph replays them")
        for layer in self.layers:
            layer.reorder(origin)
            if sentences is not None and layer.cross is not None:
                layer.cross = tuple(x.index_select(0, sentences) for x in layer.cross)


class _Written:
    """The host-side count of written positions, shared by a KVCache and its layers.

    Layers hold this rather than their KVCache: no reference cycle, so a search's cache is freed
    when the search returns, not at the next garbage collection.
    """

    def __init__(self, max_len: int, fixed_shapes: bool) -> None:
        self.length, self.max_len, self.fixed_shapes = 0, max_len, fixed_shapes

    def n_keys(self, T: int) -> int:
        return self.max_len if self.fixed_shapes else self.length + T


class LayerCache:
    """One decoder layer's part of a KVCache: self-attention K/V, cross-attention K/V."""

    def __init__(
        self,
        written: _Written,
        shape: tuple[int, int, int, int],
        dtype: torch.dtype,
        device: torch.device | str,
        dense_prefix: bool,
    ) -> None:
        self.written_positions = written
        # (B, G, S, K) each, set on first use
        self.cross: tuple[torch.Tensor, torch.Tensor] | None = None
        N, G, _, K = shape
        if dense_prefix:  # two flat buffers each for K and V: a step reads one and writes the other
            self._buffers = [
                torch.empty(shape, dtype=dtype, device=device).view(-1) for _ in range(4)
            ]
            # (N, G, L, K)
            self.k, self.v = (buffer[:0].view(N, G, 0, K) for buffer in self._buffers[:2])
            self._origin: torch.Tensor | None = None  # a reorder the next update applies
        else:  # zeros, not empty: a masked slot gets weight 0, and 0 * NaN (garbage) is NaN
            self._buffers = []
            self.k, self.v = (torch.zeros(shape, dtype=dtype, device=device) for _ in range(2))

    def update(
        self, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k, v (N, G, T, K) at `positions` (T,) -> the K, V attention reads (N, G, L, K)."""
        if self._buffers:
            return self._append_dense(k, v)
        # under autocast k, v come in the autocast dtype; the cache keeps the model's
        self.k.index_copy_(2, positions, k.to(self.k.dtype))
        self.v.index_copy_(2, positions, v.to(self.v.dtype))
        n = self.written_positions.n_keys(k.shape[2])
        return self.k[:, :, :n], self.v[:, :, :n]

    def reorder(self, origin: torch.Tensor) -> None:
        """Row i continues row origin[i] (N' <= N: rows not named are dropped): moved now, or
        (dense) by the next update."""
        if self._buffers:
            self._origin = origin if self._origin is None else self._origin.index_select(0, origin)
            return
        if origin.shape[0] < self.k.shape[0]:  # rows dropped: smaller buffers
            self.k, self.v = self.k.index_select(0, origin), self.v.index_select(0, origin)
            return
        for buffer in (self.k, self.v):
            written = buffer[:, :, : self.written_positions.length]  # (N, G, L, K)
            written.copy_(written.index_select(0, origin))

    def written(self) -> tuple[torch.Tensor, torch.Tensor]:
        """K, V (N, G, L, K) of the `length` positions written, any pending reorder applied."""
        L = self.written_positions.length
        k, v = self.k[:, :, :L], self.v[:, :, :L]
        if self._buffers and self._origin is not None:
            return k.index_select(0, self._origin), v.index_select(0, self._origin)
        return k, v

    def _append_dense(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        start, origin, self._origin = self.written_positions.length, self._origin, None
        spare_k, spare_v = self._buffers[2:]
        self.k = _extend(self.k, k, spare_k, start, origin)
        self.v = _extend(self.v, v, spare_v, start, origin)
        self._buffers = self._buffers[2:] + self._buffers[:2]
        return self.k, self.v


class RingCache:
    """One decoder layer's part of a sliding-window KVCache: W slots, position p in slot p % W."""

    def __init__(
        self,
        written: _Written,
        shape: tuple[int, int, int, int],
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> None:
        self.written_positions = written
        self.cross: tuple[torch.Tensor, torch.Tensor] | None = None  # (B, G, S, K) each
        # (N, G, W, K); zeros: a hidden slot gets weight 0, and 0 * NaN (garbage) is NaN
        self.k, self.v = (torch.zeros(shape, dtype=dtype, device=device) for _ in range(2))

    def update(
        self, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """k, v (N, G, T, K) at `positions` (T,) -> [ring; k], [ring; v] (N, G, W + T, K).

        The ring is read before the new positions are stored in it."""
        k, v = k.to(self.k.dtype), v.to(self.v.dtype)
        keys, values = torch.cat([self.k, k], dim=2), torch.cat([self.v, v], dim=2)
        W = self.k.shape[2]
        slots = positions[-W:] % W  # the last W new positions; distinct slots
        self.k.index_copy_(2, slots, k[:, :, -W:])
        self.v.index_copy_(2, slots, v[:, :, -W:])
        return keys, values

    def reorder(self, origin: torch.Tensor) -> None:
        """Row i continues row origin[i] (N' <= N: rows not named are dropped)."""
        if origin.shape[0] < self.k.shape[0]:
            self.k, self.v = self.k.index_select(0, origin), self.v.index_select(0, origin)
            return
        for buffer in (self.k, self.v):
            buffer.copy_(buffer.index_select(0, origin))

    def written(self) -> tuple[torch.Tensor, torch.Tensor]:
        """K, V (N, G, n, K) of the last n = min(length, W) positions, oldest first."""
        L, W = self.written_positions.length, self.k.shape[2]
        slots = torch.arange(max(L - W, 0), L, device=self.k.device) % W
        return self.k.index_select(2, slots), self.v.index_select(2, slots)


def _extend(
    old: torch.Tensor,
    new: torch.Tensor,
    buffer: torch.Tensor,
    start: int,
    origin: torch.Tensor | None,
) -> torch.Tensor:
    """[old[origin][:, :, :start]; new] written into `buffer` as one dense (N, G, start + T, K)
    tensor."""
    N, G, T, K = new.shape
    dense = buffer[: N * G * (start + T) * K].view(N, G, start + T, K)
    if origin is None:
        dense[:, :, :start] = old[:, :, :start]
    else:  # one copy both moves and reorders the prefix
        torch.index_select(old[:, :, :start], 0, origin, out=dense[:, :, :start])
    dense[:, :, start:] = new
    return dense
