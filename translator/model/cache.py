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
- `beam_slots` (CPU decoding, set by model/inference.py): a beam reorder copies every row's
  whole prefix, in every layer, at every step, and on CPU that copy was the largest cost of a
  step after the products. Here a sentence's beams write side by side into its slots and their
  keys never move; a reorder only rewrites each row's `ancestry` (which beam's slot holds its
  history at each position), and a mask (`own_keys`) hides the other beams' keys from it, as
  cross-attention's beams read their sentence's keys once (`shared_key_attention`). Why and how
  much: docs/benchmarks/decode.md. The slot layout is its tested reference
  (tests/model/test_cache.py).

With a sliding window (model.attention_window = W < T_max) a layer keeps only W slots, a ring:
position p lives in slot p % W, so memory stops growing with length. A step attends to the ring
as it was plus the new positions (the ring is written after it is read, so a chunk of new
positions never overwrites a key one of its own queries still sees); `key_positions` says which
position each key holds, and the window mask hides the stale ones. The ring has fixed shapes and
device-side positions, so CUDA graphs replay it as they do the slots.
"""

from __future__ import annotations

import torch

from translator.model.layer_cache import BeamSlotsCache, LayerCache, RingCache, Written


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
        beam_slots: bool = False,
        beams: int = 1,
        window: int = 0,
    ) -> None:
        """rows = sentences * beams; a search's beams of one sentence are consecutive rows."""
        if fixed_shapes and beam_slots:
            raise ValueError("a beam-slots cache changes shape: no CUDA graph replays it")
        if rows % beams:
            raise ValueError(f"{rows} rows are not whole sentences of {beams} beams")
        # shared with the layers, which never see self
        self._written = Written(max_len, fixed_shapes)
        self.slot_positions: torch.Tensor | None = None  # (W,) a ring's position in each slot
        self.beam_slots = False  # the layout chosen below (a window keeps its ring)
        if 0 < window < max_len:  # the ring keeps W slots per row: no beam slots
            # "never written" lies further back than any window reaches
            self.slot_positions = torch.full((window,), -(2**30), device=device)
            shape = (rows, n_kv_heads, window, d_head)
            self.layers = [RingCache(self._written, shape, dtype, device) for _ in range(n_layers)]
        elif beam_slots:
            self.beam_slots = True
            if beams > 1:  # (N, T_max): row i's key at position p is in beam ancestry[i, p]'s slot
                self._written.ancestry = torch.zeros(rows, max_len, dtype=torch.long, device=device)
            shape = (rows // beams, n_kv_heads, max_len * beams, d_head)
            self.layers = [
                BeamSlotsCache(self._written, shape, beams, dtype, device) for _ in range(n_layers)
            ]
        else:
            shape = (rows, n_kv_heads, max_len, d_head)
            self.layers = [LayerCache(self._written, shape, dtype, device) for _ in range(n_layers)]
        self.max_len, self.fixed_shapes, self.beams = max_len, fixed_shapes, beams
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

        The written slots (all of them with fixed shapes: the causal mask hides the rest), a
        ring's slots followed by the T new positions, or each position's beam slots.
        """
        if self.slot_positions is not None:
            return torch.cat([self.slot_positions, self.positions(T)])
        if self._written.ancestry is not None:  # slot p * beams + j holds position p
            return self._offsets[: self.length + T].repeat_interleave(self.beams)
        return self._offsets[: self._written.n_keys(T)]

    def own_keys(self, mask: torch.Tensor) -> torch.Tensor:
        """mask (T, L) over the keys of `key_positions` -> the self-attention mask.

        Unchanged, but where beams share their sentence's slots: there each row also hides the
        slots its history did not write, (B, 1, beams * T, L), the beams' queries folded as
        `shared_key_attention` folds them.
        """
        ancestry, beams = self._written.ancestry, self.beams
        if ancestry is None:
            return mask
        T, L = mask.shape
        N, device = ancestry.shape[0], mask.device
        # (N, L / beams): the beam whose slot row i reads at each position; its own for new ones
        own = torch.arange(N, device=device)[:, None].expand(N, T) % beams
        beam = torch.cat([ancestry[:, : self.length], own], dim=1)
        allowed = beam[..., None] == torch.arange(beams, device=device)  # (N, L / beams, beams)
        allowed = allowed.view(-1, beams, 1, L) & mask  # (B, beams, T, L)
        return allowed.view(-1, 1, beams * T, L)  # (B, 1, beams*T, L): beams' queries folded

    def advance(self, T: int) -> None:
        """The caller's step wrote T positions."""
        if self.slot_positions is not None:  # on the device, as the layers' writes were
            W = self.slot_positions.shape[0]
            written = self.positions(T)[-W:]
            self.slot_positions.index_copy_(0, written % W, written)
        ancestry, start = self._written.ancestry, self.length
        if ancestry is not None:  # each row wrote these positions into its own beam's slots
            N = ancestry.shape[0]
            ancestry[:, start : start + T] = (
                torch.arange(N, device=ancestry.device)[:, None] % self.beams
            )
        self._written.length += T
        self.position += T

    def reorder(self, origin: torch.Tensor, sentences: torch.Tensor | None = None) -> None:
        """Beam search: row i continues the hypothesis of row origin[i] (N',). After `advance`.

        A search that drops its finished sentences names fewer rows (N' < N; never with fixed
        shapes) and gives `sentences` (B',): the source sentences whose cross-attention K/V stay.
        """
        if self.fixed_shapes and origin.shape[0] != self.layers[0].k.shape[0]:
            raise ValueError("a fixed-shape cache keeps its rows: a CUDA graph replays them")
        if self.beam_slots:
            self._reorder_beam_slots(origin)
        else:
            for layer in self.layers:
                layer.reorder(origin)
        for layer in self.layers:
            if sentences is not None and layer.cross is not None:
                layer.cross = tuple(x.index_select(0, sentences) for x in layer.cross)

    def _reorder_beam_slots(self, origin: torch.Tensor) -> None:
        """Keys stay: each row takes its origin's history (a row of its own sentence), and the
        slots of sentences not named leave. Once per step, for all layers."""
        sentence = origin.view(-1, self.beams) // self.beams  # (B', beams)
        if not bool((sentence == sentence[:, :1]).all()):
            raise ValueError("in a beam-slots cache a beam continues one of its own sentence")
        if self._written.ancestry is not None:
            self._written.ancestry = self._written.ancestry.index_select(0, origin)
        kept = sentence[:, 0]
        if not torch.equal(kept, torch.arange(self.layers[0].k.shape[0], device=origin.device)):
            for layer in self.layers:
                layer.keep(kept)
