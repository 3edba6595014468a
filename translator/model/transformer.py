"""The encoder-decoder Transformer: encode(), decode(), forward() -> logits. No loss, no search."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from translator.config import ModelConfig
from translator.model.attention import (
    MultiHeadAttention,
    attention_mask,
    recompute_under_same_kernels,
)
from translator.model.cache import KVCache
from translator.model.layers import DecoderLayer, Embeddings, EncoderLayer, FeedForward
from translator.model.relative import RelativePositionBias


class Transformer(nn.Module):
    """Vaswani et al. (2017), pre-LN by default (with a final LayerNorm on each stack) or post-LN.

    With `tie_embeddings`, target embeddings and the output projection share one (V, D) matrix,
    and with a joint vocabulary (src_vocab_size 0) the source embeddings share it too. Each stack
    builds its self-attention mask once per call (padding or causality, and the sliding window);
    with relative positions its bias tables turn it into each layer's additive float mask.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        if cfg.vocab_size <= 0:
            raise ValueError("ModelConfig.vocab_size must be set before building the model")
        self.cfg = cfg
        joint = cfg.src_vocab_size == 0  # one vocabulary for both sides
        tgt_token = nn.Embedding(cfg.vocab_size, cfg.d_model)
        src_token = (
            tgt_token
            if cfg.tie_embeddings and joint
            else nn.Embedding(cfg.vocab_size if joint else cfg.src_vocab_size, cfg.d_model)
        )
        self.src_embed, self.tgt_embed = Embeddings(src_token, cfg), Embeddings(tgt_token, cfg)
        self.encoder = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.n_encoder_layers))
        self.decoder = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_decoder_layers))
        final_norm = nn.LayerNorm if cfg.norm == "pre" else nn.Identity  # post-LN ends normalised
        self.encoder_norm, self.decoder_norm = final_norm(cfg.d_model), final_norm(cfg.d_model)
        relative = cfg.positions == "relative"
        self.encoder_bias = (
            RelativePositionBias(cfg, cfg.n_encoder_layers, bidirectional=True)
            if relative
            else None
        )
        self.decoder_bias = (
            RelativePositionBias(cfg, cfg.n_decoder_layers, bidirectional=False)
            if relative
            else None
        )
        # Training's full target: SDPA's own causal mask (flash kernels on CUDA) unless a window or
        # a bias needs the mask written out.
        self.sdpa_causal = cfg.attention_window == 0 and not relative
        self.out_proj = nn.Linear(cfg.d_model, cfg.vocab_size, bias=cfg.output_bias)
        if cfg.tie_embeddings:
            self.out_proj.weight = tgt_token.weight
        self.beam_slots_cache = False  # the KV cache layout for CPU decoding (model/inference.py)
        self.init_weights()

    def init_weights(self) -> None:
        """Embeddings ~ N(0, D^-1/2); linear layers Xavier-uniform; Q, K and V share one range; a
        gated FFN's two halves each get their own."""
        d = self.cfg.d_model
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        # Embeddings after the linear layers: a tied output projection is an nn.Linear too, and
        # Xavier over (V, D) would otherwise overwrite the shared matrix with a 5x smaller range.
        for module in self.modules():
            if isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, mean=0.0, std=d**-0.5)
        bound = math.sqrt(6.0 / (2 * d))  # Xavier for a square D x D map, also under GQA
        for module in self.modules():
            if isinstance(module, MultiHeadAttention):
                for proj in (module.q_proj, module.k_proj, module.v_proj):
                    nn.init.uniform_(proj.weight, -bound, bound)
            if isinstance(module, FeedForward) and module.gated:  # two (F, D) maps side by side
                for half in module.up.weight.chunk(2):
                    nn.init.xavier_uniform_(half)

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        """src (B, S) ids, src_mask (B, 1, 1, S) -> memory (B, S, D)."""
        S, window = src.shape[1], self.cfg.attention_window
        positions = torch.arange(S, device=src.device)  # (S,)
        mask = src_mask
        if window:  # (B, 1, S, S)
            band = attention_mask(positions, positions, causal=False, window=window)
            # a padding query a window past the sentence's end would see no key, and a row
            # without keys is NaN in fused kernels (NaN * weight 0 = NaN downstream): it sees itself
            mask = src_mask & band | torch.eye(S, dtype=torch.bool, device=src.device)
        x = self.src_embed(src, positions)
        masks = _layer_masks(self.encoder_bias, mask, positions, positions, len(self.encoder))
        for layer, layer_mask in zip(self.encoder, masks):
            if self.cfg.gradient_checkpointing and self.training:
                x = checkpoint(
                    layer,
                    x,
                    layer_mask,
                    positions,
                    use_reentrant=False,
                    context_fn=recompute_under_same_kernels,
                )
            else:
                x = layer(x, layer_mask, positions)
        return self.encoder_norm(x)

    def decode(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        src_mask: torch.Tensor,
        cache: KVCache | None = None,
        rows: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """tgt (N, T) ids -> logits (N, T, V); N is B or B * beams (beams share memory rows).

        With a cache, `tgt` holds only the new positions, which start at the cache's length;
        the caller advances the cache afterwards. rows: (n,) indices into the N * T positions
        whose logits are wanted -> logits (n, V) (training leaves padding's out of the output
        projection, the largest product of a step).
        """
        T = tgt.shape[1]
        if cache is None:  # the whole target
            positions = key_positions = torch.arange(T, device=tgt.device)
        else:  # (T,) and (L,), on the device (a CUDA graph reads no host value)
            positions, key_positions = cache.positions(T), cache.key_positions(T)
        tgt_mask = None  # None: SDPA's own causal mask over the whole target
        if cache is not None or not self.sdpa_causal:  # (T, L)
            tgt_mask = attention_mask(
                positions, key_positions, causal=True, window=self.cfg.attention_window
            )
            if cache is not None:  # beams sharing slots: each row's own keys
                tgt_mask = cache.own_keys(tgt_mask)
        x = self.tgt_embed(tgt, positions)
        masks = _layer_masks(
            self.decoder_bias, tgt_mask, positions, key_positions, len(self.decoder)
        )
        for i, (layer, mask) in enumerate(zip(self.decoder, masks)):
            kv = cache.layers[i] if cache is not None else None
            if self.cfg.gradient_checkpointing and self.training:
                x = checkpoint(
                    layer,
                    *(x, memory, src_mask, mask, positions, kv),
                    use_reentrant=False,
                    context_fn=recompute_under_same_kernels,
                )
            else:
                x = layer(x, memory, src_mask, mask, positions, kv)
        if rows is not None:
            x = x.flatten(0, 1).index_select(0, rows)  # (N, T, D) -> (N*T, D) -> (n, D)
        return self.out_proj(self.decoder_norm(x))

    def forward(
        self,
        src: torch.Tensor,
        tgt_in: torch.Tensor,
        src_mask: torch.Tensor,
        rows: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Teacher forcing: src (B, S), tgt_in (B, T) -> logits (B, T, V), or (n, V) for `rows`
        of the B * T positions (see `decode`)."""
        return self.decode(tgt_in, self.encode(src, src_mask), src_mask, rows=rows)

    def new_cache(
        self,
        rows: int,
        max_len: int,
        dtype: torch.dtype,
        device: torch.device,
        fixed_shapes: bool = False,
        beams: int = 1,
    ) -> KVCache:
        """An empty KV cache for `rows` decoder rows and at most `max_len` target positions.

        fixed_shapes: the layout CUDA graphs replay; otherwise the one `beam_slots_cache` names.
        beams: rows per sentence (consecutive), for beam slots.
        """
        cfg = self.cfg
        return KVCache(
            cfg.n_decoder_layers,
            rows,
            cfg.n_kv_heads or cfg.n_heads,
            min(max_len, cfg.max_positions),
            cfg.d_model // cfg.n_heads,
            dtype,
            device,
            fixed_shapes=fixed_shapes,
            beam_slots=self.beam_slots_cache and not fixed_shapes,
            beams=beams,
            window=cfg.attention_window,
        )


def _layer_masks(
    bias: RelativePositionBias | None,
    mask: torch.Tensor | None,
    q_positions: torch.Tensor,
    k_positions: torch.Tensor,
    n_layers: int,
) -> list[torch.Tensor | None]:
    """Each layer's self-attention mask: the stack's bool mask, or its float masks with the bias."""
    if bias is None:
        return [mask] * n_layers
    return bias(mask, q_positions, k_positions)


def count_parameters(model: nn.Module) -> int:
    """Distinct trainable parameters (a tied matrix counts once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
