"""A fairseq checkpoint's training settings read as ours: the ModelConfig (sizes from the
weights), the options our model cannot express (refused by name), and the language pair."""

from __future__ import annotations

from typing import Any

import torch

from translator.config import ModelConfig
from translator.data.tokenizer import Tokenizer
from translator.errors import TranslatorError
from translator.fairseq_files import SPECIALS
from translator.fairseq_layers import output_projection

ACTIVATIONS = {"relu": "relu", "gelu": "gelu"}


def model_config(
    settings: dict[str, Any], w: dict[str, torch.Tensor], tokenizer: Tokenizer, where: str
) -> ModelConfig:
    """Our ModelConfig for fairseq's settings, sizes read from the weights; what we cannot express
    is refused by name (_unsupported)."""
    if problems := _unsupported(settings, w):
        raise TranslatorError(
            f"unsupported fairseq option: {', '.join(problems)}",
            where,
            "import a standard fairseq Transformer (--arch transformer, transformer_wmt_en_de...)",
        )
    d_model = w["encoder.embed_tokens.weight"].shape[1]
    n_heads = settings.get("encoder_attention_heads")
    if not isinstance(n_heads, int) or n_heads < 1 or d_model % n_heads:
        raise TranslatorError(
            f"encoder_attention_heads={n_heads!r} is not recorded as a divisor of {d_model}",
            where,
            "is it a fairseq Transformer checkpoint?",
        )
    layers = {
        side: len({k.split(".")[2] for k in w if k.startswith(f"{side}.layers.")})
        for side in ("encoder", "decoder")
    }
    positions = [
        settings.get(key) or 1024 for key in ("max_source_positions", "max_target_positions")
    ]
    if "encoder.embed_positions.weight" in w:  # learned tables: padding_idx + 1 rows unused
        positions += [
            w[f"{side}.embed_positions.weight"].shape[0] - SPECIALS.index("<pad>") - 1
            for side in ("encoder", "decoder")
        ]
    return ModelConfig(
        vocab_size=tokenizer.target_vocab_size,
        src_vocab_size=tokenizer.vocab_size,
        d_model=d_model,
        n_heads=n_heads,
        d_ff=w["encoder.layers.0.fc1.weight"].shape[0],
        n_encoder_layers=layers["encoder"],
        n_decoder_layers=layers["decoder"],
        dropout=settings.get("dropout", 0.1),
        attention_dropout=settings.get("attention_dropout", 0.0),
        activation_dropout=settings.get("activation_dropout", 0.0) or 0.0,
        activation=ACTIVATIONS[settings.get("activation_fn", "relu")],
        output_bias=True,
        positions="learned",
        norm="pre" if "encoder.layer_norm.weight" in w else "post",
        max_positions=min(positions),
        scale_embeddings=not settings.get("no_scale_embedding", False),
        # shared in fairseq, shared here: the rows of both are gathered alike (fairseq._row_ids)
        tie_embeddings=torch.equal(output_projection(w), w["decoder.embed_tokens.weight"]),
    )


def _unsupported(settings: dict[str, Any], w: dict[str, torch.Tensor]) -> list[str]:
    """The fairseq options of this checkpoint that our model cannot express."""
    sides = ("encoder", "decoder")
    widths = {w[f"{side}.embed_tokens.weight"].shape[1] for side in sides}
    ffn = {w[f"{side}.layers.0.fc1.weight"].shape[0] for side in sides}
    heads = {settings.get(f"{side}_attention_heads") for side in sides}
    # pre-norm as the settings say, else as the final LayerNorms show (a pre-norm stack has one)
    pre_norm = [
        bool(settings.get(f"{side}_normalize_before", f"{side}.layer_norm.weight" in w))
        for side in sides
    ]
    learned = {f"{side}.embed_positions.weight" in w for side in sides}
    activation = settings.get("activation_fn", "relu")
    problems = [
        f"activation_fn={activation!r}" if activation not in ACTIVATIONS else "",
        "layernorm_embedding" if "encoder.layernorm_embedding.weight" in w else "",
        "adaptive_softmax" if settings.get("adaptive_softmax_cutoff") else "",
        "no_token_positional_embeddings" if settings.get("no_token_positional_embeddings") else "",
        "cross_self_attention" if settings.get("cross_self_attention") else "",
        "encoder and decoder of different widths"
        if max(len(widths), len(ffn), len(heads)) > 1
        else "",
        "pre-norm on one side, post-norm on the other" if len(set(pre_norm)) > 1 else "",
        # a pre-norm decoder without its final LayerNorm: ours always has one
        "no_decoder_final_norm" if pre_norm[1] and "decoder.layer_norm.weight" not in w else "",
        "learned positions on one side only" if len(learned) > 1 else "",
    ]
    return [p for p in problems if p]


def languages(
    settings: dict[str, Any], src_lang: str | None, tgt_lang: str | None, where: str
) -> tuple[str, str]:
    """The given codes, else the checkpoint's source_lang/target_lang."""
    codes = []
    for flag, given, key in (
        ("--src-lang", src_lang, "source_lang"),
        ("--tgt-lang", tgt_lang, "target_lang"),
    ):
        code = given or settings.get(key)
        if not isinstance(code, str) or not code:
            raise TranslatorError(
                f"the checkpoint does not record its {key.replace('_', ' ')}",
                where,
                f"give {flag}, as the dict files are named (dict.{{LANG}}.txt)",
            )
        codes.append(code)
    if codes[0] == codes[1]:
        raise TranslatorError(
            f"source and target language are both {codes[0]!r}",
            where,
            "give two different codes with --src-lang and --tgt-lang",
        )
    return codes[0], codes[1]
