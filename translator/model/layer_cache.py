"""One decoder layer's part of a KVCache (model/cache.py), in each of its three layouts: dense
(N, G, T_max, K) rows (`LayerCache`), a sentence's beams side by side in its slots
(`BeamSlotsCache`, CPU decoding) and a ring of W slots for a sliding window (`RingCache`). Why
each: cache.py's docstring.
"""

from __future__ import annotations

import torch


class Written:
    """What a KVCache shares with its layers: the host-side count of written positions and,
    with beam slots, each row's ancestry (KVCache.__init__).

    Layers hold this rather than their KVCache: no reference cycle, so a search's cache is freed
    when the search returns, not at the next garbage collection.
    """

    def __init__(self, max_len: int, fixed_shapes: bool) -> None:
        self.length, self.max_len, self.fixed_shapes = 0, max_len, fixed_shapes
        self.ancestry: torch.Tensor | None = None

    def n_keys(self, T: int) -> int:
        return self.max_len if self.fixed_shapes else self.length + T


class LayerCache:
    """One decoder layer's part of a KVCache: self-attention K/V, cross-attention K/V."""

    def __init__(
        self,
        written: Written,
        shape: tuple[int, int, int, int],
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> None:
        self.written_positions = written
        # (B, G, S, K) each, set on first use
        self.cross: tuple[torch.Tensor, torch.Tensor] | None = None
        # zeros, not empty: a masked slot gets weight 0, and 0 * NaN (garbage) is NaN
        self.k, self.v = (torch.zeros(shape, dtype=dtype, device=device) for _ in range(2))

    def update(
        self, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k, v (N, G, T, K) at `positions` (T,) -> the K, V attention reads (N, G, L, K)."""
        # under autocast k, v come in the autocast dtype; the cache keeps the model's
        self.k.index_copy_(2, positions, k.to(self.k.dtype))
        self.v.index_copy_(2, positions, v.to(self.v.dtype))
        n = self.written_positions.n_keys(k.shape[2])
        return self.k[:, :, :n], self.v[:, :, :n]

    def reorder(self, origin: torch.Tensor) -> None:
        """Row i continues row origin[i] (N' <= N: rows not named are dropped)."""
        if origin.shape[0] < self.k.shape[0]:  # rows dropped: smaller buffers
            self.k, self.v = self.k.index_select(0, origin), self.v.index_select(0, origin)
            return
        for buffer in (self.k, self.v):
            written = buffer[:, :, : self.written_positions.length]  # (N, G, L, K)
            written.copy_(written.index_select(0, origin))

    def written(self) -> tuple[torch.Tensor, torch.Tensor]:
        """K, V (N, G, L, K) of the `length` positions written."""
        L = self.written_positions.length
        return self.k[:, :, :L], self.v[:, :, :L]


class BeamSlotsCache:
    """One decoder layer's part of a beam-slots KVCache: (B, G, T_max * beams, K) K and V.

    Beam j of a sentence writes its key at position p into slot p * beams + j, and no key ever
    moves: a reorder changes only the rows' ancestry (KVCache), unless whole sentences leave
    (`keep`).
    Attention reads a sentence's written slots in place for all its beams; each beam scores
    `beams` times the keys it keeps, and the mask sets the others' weights to 0.
    """

    def __init__(
        self,
        written: Written,
        shape: tuple[int, int, int, int],
        beams: int,
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> None:
        self.written_positions, self.beams = written, beams
        self.cross: tuple[torch.Tensor, torch.Tensor] | None = None  # (B, G, S, K) each
        # every slot attention reads is written first (all beams write each position)
        self.k, self.v = (torch.empty(shape, dtype=dtype, device=device) for _ in range(2))

    def update(
        self, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k, v (N, G, T, K) -> K, V (B, G, L * beams, K): the sentences' written slots."""
        N, G, T, K = k.shape
        start = self.written_positions.length * self.beams
        end = start + T * self.beams
        for buffer, new in ((self.k, k), (self.v, v)):
            # (B, beams, G, T, K) -> (B, G, T, beams, K): position p of beam j in slot p * beams + j
            new = new.view(-1, self.beams, G, T, K).permute(0, 2, 3, 1, 4)
            buffer[:, :, start:end] = new.reshape(-1, G, T * self.beams, K)
        return self.k[:, :, :end], self.v[:, :, :end]

    def keep(self, sentences: torch.Tensor) -> None:
        """Only these sentences' slots (B',), in this order (KVCache.reorder)."""
        self.k, self.v = self.k.index_select(0, sentences), self.v.index_select(0, sentences)

    def written(self) -> tuple[torch.Tensor, torch.Tensor]:
        """K, V (N, G, L, K) of each row's own history: the slots its ancestors wrote."""
        L, ancestry = self.written_positions.length, self.written_positions.ancestry
        N, device = self.k.shape[0] * self.beams, self.k.device
        if ancestry is None:  # one beam: its own slots
            ancestry = torch.zeros(N, L, dtype=torch.long, device=device)
        rows = torch.arange(N, device=device)[:, None]
        slots = torch.arange(L, device=device) * self.beams + ancestry[:, :L]  # (N, L)
        # advanced indices around a slice: (N, L, G, K) -> (N, G, L, K)
        k, v = (x[rows // self.beams, :, slots].transpose(1, 2) for x in (self.k, self.v))
        return k, v


class RingCache:
    """One decoder layer's part of a sliding-window KVCache: W slots, position p in slot p % W."""

    def __init__(
        self,
        written: Written,
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
