"""The layers of an encoder-decoder Transformer as fairseq names their weights (Hugging Face's
Marian, BART and FSMT keep the names), mapped onto ours. translator/marian.py and
translator/fairseq.py import through it."""

from __future__ import annotations

import torch

from translator.config import ModelConfig


def layer_weights(
    w: dict[str, torch.Tensor], cfg: ModelConfig, perm: torch.Tensor | None = None
) -> dict[str, torch.Tensor]:
    """Every encoder and decoder layer's weights of `w` (fairseq names: `encoder.layers.0.fc1`,
    ...) under our names; with `perm` (D,), our residual dim j takes their dim perm[j] (Marian's
    positions: marian.residual_permutation). Layer norms a layer lacks (none) are skipped."""
    perm = torch.arange(cfg.d_model) if perm is None else perm
    out: dict[str, torch.Tensor] = {}
    for side, n_layers in (("encoder", cfg.n_encoder_layers), ("decoder", cfg.n_decoder_layers)):
        for i in range(n_layers):
            theirs, ours = f"{side}.layers.{i}", f"{side}.{i}"
            attentions = [("self_attn", "self_attn")] + (
                [("encoder_attn", "cross_attn")] if side == "decoder" else []
            )
            for their_name, our_name in attentions:
                for proj in ("q_proj", "k_proj", "v_proj"):  # read the residual stream
                    out[f"{ours}.{our_name}.{proj}.weight"] = w[
                        f"{theirs}.{their_name}.{proj}.weight"
                    ][:, perm]
                    out[f"{ours}.{our_name}.{proj}.bias"] = w[f"{theirs}.{their_name}.{proj}.bias"]
                out[f"{ours}.{our_name}.out_proj.weight"] = w[
                    f"{theirs}.{their_name}.out_proj.weight"
                ][perm]
                out[f"{ours}.{our_name}.out_proj.bias"] = w[f"{theirs}.{their_name}.out_proj.bias"][
                    perm
                ]
            out[f"{ours}.ff.up.weight"] = w[f"{theirs}.fc1.weight"][:, perm]
            out[f"{ours}.ff.up.bias"] = w[f"{theirs}.fc1.bias"]
            out[f"{ours}.ff.down.weight"] = w[f"{theirs}.fc2.weight"][perm]
            out[f"{ours}.ff.down.bias"] = w[f"{theirs}.fc2.bias"][perm]
            norms = {
                "self_attn_layer_norm": "self_block" if side == "decoder" else "attn_block",
                "encoder_attn_layer_norm": "cross_block",
                "final_layer_norm": "ff_block",
            }
            for their_norm, our_block in norms.items():
                if f"{theirs}.{their_norm}.weight" in w:
                    for p in ("weight", "bias"):
                        out[f"{ours}.{our_block}.norm.{p}"] = w[f"{theirs}.{their_norm}.{p}"][perm]
    return out


def output_projection(w: dict[str, torch.Tensor]) -> torch.Tensor:
    """The decoder's output matrix (its embeddings where fairseq shares them and saved none)."""
    output = w.get("decoder.output_projection.weight", w.get("decoder.embed_out"))
    return w["decoder.embed_tokens.weight"] if output is None else output
