"""The model section: the Transformer's architecture, and which settings only training reads."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from translator.config.checks import check_range
from translator.errors import TranslatorError


@dataclass(kw_only=True)
class ModelConfig:
    vocab_size: int = 0
    """Target (or joint) vocabulary size; 0 = take it from the prepared data's SentencePiece
    model (any other value must match it: the size to change is data.vocab_size)."""
    src_vocab_size: int = 0
    """Source vocabulary size when the vocabularies are separate; 0 = take it from the prepared
    data (it stays 0 with a joint vocabulary). The size to change is data.vocab_size."""
    d_model: int = 512
    """Width of embeddings and residual stream."""
    n_heads: int = 8
    """Attention heads; d_head = d_model / n_heads."""
    n_kv_heads: int | None = None
    """Key/value heads for grouped-query attention (null = n_heads, 1 = multi-query)."""
    n_encoder_layers: int = 6
    """Encoder layers."""
    n_decoder_layers: int = 6
    """Decoder layers."""
    d_ff: int = 2048
    """Hidden width of the position-wise feed-forward network."""
    dropout: float = 0.1
    """Dropout on embeddings and sublayer outputs (the FFN's hidden layer has
    `activation_dropout`)."""
    attention_dropout: float = 0.0
    """Dropout on attention weights."""
    activation_dropout: float = 0.0
    """Dropout on the feed-forward hidden layer (after the activation), apart from `dropout`
    (fairseq's)."""
    positions: Literal["sinusoidal", "learned", "rope", "relative"] = "sinusoidal"
    """Position scheme: added sinusoids, learned embeddings, rotary (self-attention only), or
    relative: T5's learned bias on self-attention scores by bucketed distance i - j."""
    relative_buckets: int = 32
    """positions=relative: distance buckets per direction's table (T5: 32; the encoder splits them
    between keys before and after the query); half are exact distances, half log-spaced."""
    relative_max_distance: int = 128
    """positions=relative: distances from this on share the last bucket (T5: 128)."""
    relative_per_layer: bool = False
    """positions=relative: a bias table per layer, or (False, as T5) one shared by a stack's
    layers."""
    attention_window: int = 0
    """Self-attention sees only keys fewer than N positions away (N - 1 before the query in the
    decoder, plus N - 1 after it in the encoder), and the decoder's KV cache keeps the last N keys
    (a sliding window, as Longformer and Mistral use); 0 = full attention."""
    attention: Literal["softmax", "linear"] = "softmax"
    """Encoder self-attention: softmax, or linear (experimental: elu+1 feature maps, Katharopoulos
    et al. 2020; cost linear in source length, no attention weights to look at)."""
    activation: Literal["relu", "gelu", "silu"] = "relu"
    """Feed-forward activation: ReLU (the paper), GELU, or SiLU/swish (Marian's OPUS-MT models)."""
    gated_ffn: bool = False
    """A gated feed-forward network (GLU variants, Shazeer 2020): activation(x W) * (x V), then
    the down projection; SwiGLU with activation silu. d_ff is the gated width: two thirds of an
    ungated d_ff keep the parameters and the products' cost."""
    output_bias: bool = False
    """A learned bias on the output logits (Marian's final_logits_bias; imported models have
    one)."""
    norm: Literal["pre", "post"] = "pre"
    """LayerNorm placement: pre-LN (with a final norm) or post-LN (as in the original paper)."""
    max_positions: int = 1024
    """Longest sequence (tokens) the model accepts; sizes learned positions and the KV cache."""
    scale_embeddings: bool = True
    """Multiply embeddings by sqrt(d_model)."""
    tie_embeddings: bool = True
    """Share target embeddings and the output projection, and with a joint vocabulary the source
    embeddings too."""
    gradient_checkpointing: bool = False
    """Recompute each layer's activations in the backward pass to save memory."""

    def __post_init__(self) -> None:
        check_range("model", self, "vocab_size src_vocab_size", 0)
        check_range("model", self, "d_model n_heads n_encoder_layers n_decoder_layers d_ff", 1)
        check_range("model", self, "max_positions", 2)  # BOS and one token
        check_range(
            "model", self, "dropout attention_dropout activation_dropout", 0, 1, high_open=True
        )
        if self.d_model % self.n_heads:
            raise TranslatorError(
                f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}",
                "model",
                "pick n_heads dividing d_model",
            )
        if self.n_kv_heads is not None and (self.n_kv_heads < 1 or self.n_heads % self.n_kv_heads):
            raise TranslatorError(
                f"n_kv_heads={self.n_kv_heads} does not divide n_heads={self.n_heads}",
                "model.n_kv_heads",
                "use a divisor of n_heads (1 = multi-query)",
            )
        if self.positions == "rope" and (self.d_model // self.n_heads) % 2:
            raise TranslatorError("rotary positions need an even d_head", "model.positions")
        check_range("model", self, "attention_window", 0)
        check_range("model", self, "relative_buckets", 4)  # two exact and two log-spaced, at least
        if self.relative_max_distance <= self.relative_buckets // 2:  # log-spaced buckets need room
            raise TranslatorError(
                f"relative_max_distance={self.relative_max_distance} is within the "
                f"{self.relative_buckets // 2} exact distances of relative_buckets="
                f"{self.relative_buckets}",
                "model.relative_max_distance",
                "use a distance above relative_buckets / 2 (T5: 32 buckets, 128)",
            )
        self._check_linear_attention()

    def _check_linear_attention(self) -> None:
        """Linear attention has no score matrix: nothing to mask by window or to add a bias to."""
        if self.attention != "linear":
            return
        for clash, value in (
            ("attention_window", self.attention_window),
            ("positions", self.positions == "relative" and "relative"),
        ):
            if value:
                raise TranslatorError(
                    f"model.attention=linear has no scores for model.{clash}={value} to act on",
                    "model.attention",
                    f"use attention=softmax, or drop model.{clash}",
                )


# Model settings that may differ between sessions of one run (and between checkpoints that are
# averaged): they change how a model trains, not the parameters' shapes or what it computes.
TRAINING_ONLY = ("dropout", "attention_dropout", "activation_dropout", "gradient_checkpointing")


def with_training_settings(saved: ModelConfig, ours: ModelConfig) -> ModelConfig:
    """A checkpoint's model section with this config's TRAINING_ONLY fields: the model that a run
    started from the checkpoint (train.init_from) trains."""
    theirs, mine = dataclasses.asdict(saved), dataclasses.asdict(ours)
    return ModelConfig(**{**theirs, **{k: mine[k] for k in TRAINING_ONLY}})


def architecture_changes(before: dict[str, Any], after: dict[str, Any]) -> str:
    """Model sections (as dicts) compared outside TRAINING_ONLY -> `model.k: a -> b, ...`, empty if
    alike.

    A field missing from a dict (a checkpoint older than the field) has its default value: that is
    the model it was.
    """
    defaults = dataclasses.asdict(ModelConfig())
    before, after = {**defaults, **before}, {**defaults, **after}
    changed = sorted(
        k for k in {*before, *after} - set(TRAINING_ONLY) if before.get(k) != after.get(k)
    )
    return ", ".join(f"model.{k}: {before.get(k)!r} -> {after.get(k)!r}" for k in changed)
