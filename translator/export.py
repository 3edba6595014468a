"""Export a checkpoint to a CTranslate2 model directory through ctranslate2's own spec API.

The spec names each weight by its role (CTranslate2 fuses self-attention's Q, K, V into one
matrix and cross-attention's K, V into another); `spec.save` writes the binary format, so no
byte of it is written here. The SentencePiece model(s) go beside it, as OPUS-MT exports ship them.
ctranslate2 is an optional extra: it is imported only when an export runs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from translator import checkpoint
from translator.config import ModelConfig
from translator.data.tokenizer import Tokenizer
from translator.errors import TranslatorError
from translator.files import atomic_dir, refuse_foreign_dir
from translator.model.layers import sinusoids
from translator.model.transformer import Transformer

# what an export writes: CTranslate2's spec.save (the vocabularies as .json, .txt in older
# versions) and our SentencePiece model(s)
EXPORTED = frozenset(
    ["config.json", "model.bin", "spm.model", "source.spm", "target.spm"]
    + [
        f"{side}_vocabulary.{ext}"
        for side in ("shared", "source", "target")
        for ext in ("json", "txt")
    ]
)
LAYER_NORM_EPS = 1e-5  # torch.nn.LayerNorm's default; CTranslate2 assumes 1e-6 unless told


def unsupported(cfg: ModelConfig) -> list[tuple[str, str]]:
    """The config's options that a CTranslate2 Transformer cannot express, each with the setting
    that a model to export trains with instead (empty: exportable)."""
    problems = []
    sinusoidal = "model.positions=sinusoidal"
    if cfg.positions == "rope":
        problems.append(
            (
                "model.positions=rope (CTranslate2's encoder-decoder has no rotary positions)",
                sinusoidal,
            )
        )
    if cfg.positions == "relative":  # CT2 has T5's bias, but not tested against ours: refused
        problems.append(
            ("model.positions=relative (not mapped to CTranslate2's T5 bias here)", sinusoidal)
        )
    if cfg.attention_window:
        problems.append(
            (
                f"model.attention_window={cfg.attention_window} "
                "(CTranslate2's encoder-decoder attends to every position)",
                "model.attention_window=0",
            )
        )
    if cfg.attention == "linear":
        problems.append(
            (
                "model.attention=linear (CTranslate2 has softmax attention only)",
                "model.attention=softmax",
            )
        )
    return problems


def export_ctranslate2(ckpt: str | Path, out: str | Path, quantization: str | None = None) -> Path:
    """Write `out/` (model.bin, config.json, vocabularies) plus the SentencePiece model(s); an
    existing `out` is replaced only if it is empty or an earlier export."""
    try:
        import ctranslate2  # noqa: F401  (an optional extra)
    except ImportError:
        raise TranslatorError(
            "ctranslate2 is not installed",
            "export",
            "pip install ctranslate2",
        ) from None
    from ctranslate2.specs.model_spec import ACCEPTED_MODEL_TYPES

    # spec.optimize checks it too, but only after the checkpoint is loaded and converted
    if quantization is not None and quantization not in ACCEPTED_MODEL_TYPES:
        raise TranslatorError(
            f"unknown quantization {quantization!r}",
            "--quantization",
            f"use one of {', '.join(ACCEPTED_MODEL_TYPES)}",
        )
    # replacing anything but an earlier export (spec.save's files) or an empty directory loses it
    refuse_foreign_dir(
        Path(out),
        ("model.bin", "config.json"),
        "not empty and not a CTranslate2 model directory: export will not replace it",
        "give a new or empty directory",
        only=EXPORTED,
    )
    model, cfg, tokenizer = checkpoint.load(ckpt)
    problems = unsupported(cfg.model)
    if problems:
        raise TranslatorError(
            f"cannot export {'; '.join(what for what, _ in problems)}",
            str(ckpt),
            "a model to deploy with CTranslate2 trains with "
            + " ".join(f"--set {setting}" for _, setting in problems),
        )
    spec = build_spec(model, tokenizer)
    spec.validate()
    spec.optimize(quantization=quantization)
    with atomic_dir(out) as tmp:
        spec.save(str(tmp))
        if tokenizer.joint:
            (tmp / "spm.model").write_bytes(tokenizer.proto())
        else:
            (tmp / "source.spm").write_bytes(tokenizer.proto())
            (tmp / "target.spm").write_bytes(tokenizer.target_proto())
    return Path(out)


def build_spec(model: Transformer, tokenizer: Tokenizer):
    """Our Transformer as a `ctranslate2.specs.TransformerSpec` holding its weights (fp32 numpy)."""
    from ctranslate2.specs import TransformerDecoderSpec, TransformerEncoderSpec, TransformerSpec
    from ctranslate2.specs.common_spec import Activation

    cfg = model.cfg
    activation = {"relu": Activation.RELU, "gelu": Activation.GELU, "silu": Activation.SWISH}[
        cfg.activation
    ]
    shape = dict(
        num_heads=cfg.n_heads,
        pre_norm=cfg.norm == "pre",
        num_heads_kv=cfg.n_kv_heads,
        activation=activation,
        ffn_glu=cfg.gated_ffn,
    )
    encoder = TransformerEncoderSpec(cfg.n_encoder_layers, **shape)
    decoder = TransformerDecoderSpec(cfg.n_decoder_layers, **shape)
    _set_inputs(encoder, model.src_embed, cfg)
    _set_inputs(decoder, model.tgt_embed, cfg)
    if cfg.norm == "pre":
        _set_norm(encoder.layer_norm, model.encoder_norm)
        _set_norm(decoder.layer_norm, model.decoder_norm)
    for spec, layer in zip(encoder.layer, model.encoder):
        _set_attention(spec.self_attention, layer.self_attn, layer.attn_block.norm, fused=3)
        _set_ffn(spec.ffn, layer.ff, layer.ff_block.norm)
    for spec, layer in zip(decoder.layer, model.decoder):
        _set_attention(spec.self_attention, layer.self_attn, layer.self_block.norm, fused=3)
        _set_attention(spec.attention, layer.cross_attn, layer.cross_block.norm, fused=2)
        _set_ffn(spec.ffn, layer.ff, layer.ff_block.norm)
    _set_linear(decoder.projection, model.out_proj)  # with the logits bias when there is one

    spec = TransformerSpec(encoder, decoder)
    src_pieces = _pieces(tokenizer.sp)
    tgt_pieces = _pieces(tokenizer.target_sp) if not tokenizer.joint else src_pieces
    spec.register_source_vocabulary(src_pieces)
    spec.register_target_vocabulary(tgt_pieces)
    spec.config.layer_norm_epsilon = LAYER_NORM_EPS
    return spec


def _pieces(sp) -> list[str]:
    """The vocabulary in id order: CTranslate2 maps tokens to ids by position in this list."""
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())]


def _array(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().float().cpu().numpy()


def _set_inputs(spec, embed, cfg: ModelConfig) -> None:
    """Token embedding, its sqrt(D) scale, and the position table added to it."""
    embeddings = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
    embeddings.weight = _array(embed.token.weight)
    spec.scale_embeddings = cfg.scale_embeddings
    if cfg.positions == "learned":
        spec.position_encodings.encodings = _array(embed.learned.weight)
    else:  # our sinusoid layout (sin, cos interleaved) differs from CTranslate2's built-in one
        spec.position_encodings.encodings = _array(sinusoids(cfg.max_positions, cfg.d_model))


def _set_attention(spec, attention, norm, fused: int) -> None:
    """fused=3: self-attention, [Q; K; V] in one matrix; fused=2: cross-attention, Q then [K; V]."""
    projections = [attention.q_proj, attention.k_proj, attention.v_proj]
    if fused == 3:
        _set_linear(spec.linear[0], *projections)
    else:
        _set_linear(spec.linear[0], projections[0])
        _set_linear(spec.linear[1], *projections[1:])
    _set_linear(spec.linear[-1], attention.out_proj)
    _set_norm(spec.layer_norm, norm)


def _set_ffn(spec, ff, norm) -> None:
    if ff.gated:  # CTranslate2's GLU: activation(linear_0(x)) * linear_0_noact(x)
        weight, bias = np.split(_array(ff.up.weight), 2), np.split(_array(ff.up.bias), 2)
        for half, w, b in zip((spec.linear_0, spec.linear_0_noact), weight, bias):
            half.weight, half.bias = w, b
    else:
        _set_linear(spec.linear_0, ff.up)
    _set_linear(spec.linear_1, ff.down)
    _set_norm(spec.layer_norm, norm)


def _set_linear(spec, *linears: torch.nn.Linear) -> None:
    """One LinearSpec from one or more nn.Linear stacked along the output axis."""
    spec.weight = np.concatenate([_array(linear.weight) for linear in linears])
    if linears[0].bias is not None:
        spec.bias = np.concatenate([_array(linear.bias) for linear in linears])


def _set_norm(spec, norm: torch.nn.LayerNorm) -> None:
    spec.gamma, spec.beta = _array(norm.weight), _array(norm.bias)
