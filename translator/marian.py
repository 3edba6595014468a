"""Import a MarianMT model in Hugging Face format (every OPUS-MT release) as a translator
checkpoint.

An OPUS-MT directory holds `config.json`, the weights (`model.safetensors` or `pytorch_model.bin`),
`source.spm`, `target.spm` and `vocab.json`, which maps pieces to the model's ids (one table for
both sides, `</s>` = 0, `<pad>` last; models with separate vocabularies,
`share_encoder_decoder_embeddings: false`, map the target side with `target_vocab.json`). Our ids
are SentencePiece ids with PAD, UNK, BOS, EOS = 0..3, so the import rewrites each SentencePiece
model into that order and gathers the embedding rows (and the logits bias) by piece. Marian
decodes from `<pad>`: our BOS row is Marian's pad row.

Marian's position table puts all sines before all cosines; ours interleaves them. Every sublayer
of a Transformer commutes with a permutation of the residual stream's dimensions (LayerNorm
included), so the import permutes those dimensions in every weight instead of adding a position
layout to the model: the logits come out the same.

Marian has one `<pad>` class, and our BOS row holds it; our PAD row would be a second copy of it in
the softmax (a loss Hugging Face's would not equal), so it gets a zero row and a logit of PAD_LOGIT.

The language pair comes from `tokenizer_config.json` (OPUS-MT's `source_lang`/`target_lang`) or
from the caller; it becomes the checkpoint's data.src_lang/tgt_lang, which fine-tuning checks.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from translator import checkpoint
from translator.config import Config, DataConfig, ModelConfig
from translator.data.spm_files import with_our_ids
from translator.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer
from translator.errors import TranslatorError
from translator.fairseq_layers import layer_weights
from translator.marian_files import (
    DAMAGED,
    is_count,
    model_directory,
    read_json,
    read_spm,
    read_vocab,
    read_weights,
)
from translator.model.transformer import Transformer

ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "silu", "silu": "silu"}
# PAD's logit: exp(-100) is below fp32's smallest normal number relative to any real logit, yet
# finite, so that label smoothing's mean of -log p over the vocabulary stays finite in fine-tuning
PAD_LOGIT = -100.0
LANG_CODE = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")  # what data file suffixes and columns can be
# config.json's sizes that have no default here: every config.json that HF writes has them
SIZES = (
    "d_model",
    "encoder_attention_heads",
    "encoder_ffn_dim",
    "encoder_layers",
    "decoder_layers",
)


def languages(directory: Path, src_lang: str | None, tgt_lang: str | None) -> tuple[str, str]:
    """The language pair: the given codes, else tokenizer_config.json's source_lang/target_lang."""
    meta_path = directory / "tokenizer_config.json"
    meta = read_json(meta_path) if meta_path.is_file() else {}
    codes = []
    for flag, given, key in (
        ("--src-lang", src_lang, "source_lang"),
        ("--tgt-lang", tgt_lang, "target_lang"),
    ):
        code = given if given is not None else meta.get(key)
        if code is None:
            raise TranslatorError(
                f"the model's {key.replace('_lang', '')} language is not recorded "
                f"(no {key} in tokenizer_config.json)",
                str(directory),
                f"give {flag}, e.g. {flag} {'en' if flag == '--src-lang' else 'de'}",
            )
        if not isinstance(code, str) or not LANG_CODE.fullmatch(code):
            raise TranslatorError(
                f"{code!r} is not a language code",
                flag if given is not None else f"{meta_path} ({key})",
                "use a code such as en or de, spelt as the data's file suffixes or columns are",
            )
        codes.append(code)
    if codes[0] == codes[1]:
        raise TranslatorError(
            f"source and target language are both {codes[0]!r}",
            "--tgt-lang" if tgt_lang is not None else str(meta_path),
            "give two different codes with --src-lang and --tgt-lang",
        )
    return codes[0], codes[1]


def import_marian(
    directory: str | Path,
    out: str | Path,
    src_lang: str | None = None,
    tgt_lang: str | None = None,
) -> Config:
    """Read a MarianMT directory (or `hf:NAME`, a hub model, downloaded) and write an equivalent
    translator checkpoint to `out`; the languages default to its tokenizer_config.json."""
    checkpoint.refuse_replacing_another_kind(out)
    directory = model_directory(directory)
    hf = read_json(directory / "config.json")
    if hf.get("model_type", "marian") != "marian":  # BART, mBART, T5...: other layers, other names
        raise TranslatorError(
            f"a {hf['model_type']!r} model, not MarianMT",
            str(directory / "config.json"),
            "import-hf reads MarianMT (OPUS-MT) models only",
        )
    vocab = read_vocab(directory / "vocab.json")
    shared = hf.get("share_encoder_decoder_embeddings", True)
    target_vocab = vocab if shared else read_vocab(directory / "target_vocab.json")
    codes = sorted(p for p in vocab if p.startswith(">>") and p.endswith("<<"))
    if codes:  # MarianTokenizer puts one in front of a source; our tokenizers would spell it out
        raise TranslatorError(
            f"a multi-target model: its target-language tokens ({', '.join(codes[:3])}"
            f"{', ...' if len(codes) > 3 else ''}; {len(codes)} in all) are not supported",
            str(directory / "vocab.json"),
            "import a single-target OPUS-MT model (one target language)",
        )
    weights, read = read_weights(directory)
    src_proto = with_our_ids(read_spm(directory / "source.spm"))
    # every piece it can emit, as MarianTokenizer spells a piece its SentencePiece model lacks
    tgt_proto = with_our_ids(read_spm(directory / "target.spm"), list(target_vocab))
    tokenizer = Tokenizer.from_proto(src_proto, tgt_proto)

    model_cfg = model_config(hf, tokenizer, str(directory / "config.json"))
    src_lang, tgt_lang = languages(directory, src_lang, tgt_lang)
    data = DataConfig(
        name=checkpoint.imported_data_name(out),
        src_lang=src_lang,
        tgt_lang=tgt_lang,
        joint_vocab=False,
    )
    cfg = Config(data=data, model=model_cfg)
    model = Transformer(cfg.model)
    vocabs = (vocab, target_vocab)
    try:
        model.load_state_dict(our_weights(weights, cfg.model, vocabs, hf, tokenizer))
    except KeyError as err:  # a weight that config.json's layers need is not in the file
        raise TranslatorError(
            f"no weight named {err.args[0]!r} for its config.json", str(read), DAMAGED
        ) from None
    except (RuntimeError, IndexError) as err:  # shapes that config.json or vocab.json do not give
        lines = str(err).splitlines()
        detail = next((line.strip() for line in lines if "size mismatch" in line), lines[0])
        raise TranslatorError(
            f"weights do not fit its config.json ({detail})", str(read), DAMAGED
        ) from None
    checkpoint.save(out, model, cfg, tokenizer, {"imported_from": "marian"})
    return cfg


def model_config(hf: dict[str, Any], tokenizer: Tokenizer, where: str) -> ModelConfig:
    """Our ModelConfig for a Marian config.json; options we cannot express are refused by name."""
    missing = [key for key in SIZES if not is_count(hf.get(key))]
    if missing:
        raise TranslatorError(
            f"missing or not a positive integer: {', '.join(missing)}", where, DAMAGED
        )
    activation = hf.get("activation_function", "gelu")  # MarianConfig's defaults, here and below
    problems = [
        f"activation_function={activation!r}" if activation not in ACTIVATIONS else "",
        "normalize_before=true" if hf.get("normalize_before") else "",
        "normalize_embedding=true" if hf.get("normalize_embedding") else "",
        "static_position_embeddings=false" if hf.get("static_position_embeddings") is False else "",
        "add_final_layer_norm=true" if hf.get("add_final_layer_norm") else "",
        # an output projection of its own: ours is the target embedding
        "tie_word_embeddings=false" if hf.get("tie_word_embeddings") is False else "",
    ]
    if hf.get("encoder_attention_heads") != hf.get("decoder_attention_heads") or hf.get(
        "encoder_ffn_dim"
    ) != hf.get("decoder_ffn_dim"):
        problems.append("encoder and decoder of different widths")
    if any(problems):
        raise TranslatorError(
            f"unsupported Marian option: {', '.join(p for p in problems if p)}",
            where,
            "import a standard OPUS-MT (MarianMT) model",
        )
    return ModelConfig(
        vocab_size=tokenizer.target_vocab_size,
        src_vocab_size=tokenizer.vocab_size,
        d_model=hf["d_model"],
        n_heads=hf["encoder_attention_heads"],
        d_ff=hf["encoder_ffn_dim"],
        n_encoder_layers=hf["encoder_layers"],
        n_decoder_layers=hf["decoder_layers"],
        dropout=hf.get("dropout", 0.1),
        attention_dropout=hf.get("attention_dropout", 0.0),
        activation_dropout=hf.get("activation_dropout", 0.0),
        activation=ACTIVATIONS[activation],
        output_bias=True,
        positions="sinusoidal",
        norm="post",
        max_positions=hf.get("max_position_embeddings", 1024),
        scale_embeddings=hf.get("scale_embedding", False),
        tie_embeddings=True,
    )


def marian_ids(sp, vocab: dict[str, int], pad_id: int) -> torch.Tensor:
    """(V,) for each of our ids, the Marian id whose row it takes (pieces it lacks take <unk>'s)."""
    ids = [vocab.get(sp.id_to_piece(i), vocab["<unk>"]) for i in range(sp.get_piece_size())]
    ids[PAD_ID] = ids[BOS_ID] = pad_id  # Marian starts decoding from <pad>
    ids[EOS_ID] = vocab["</s>"]
    return torch.tensor(ids)


def our_weights(
    hf_weights: dict[str, torch.Tensor],
    cfg: ModelConfig,
    vocabs: tuple[dict[str, int], dict[str, int]],
    hf: dict[str, Any],
    tokenizer: Tokenizer,
) -> dict[str, torch.Tensor]:
    """Marian's state dict renamed to ours, embedding rows gathered by piece (source rows through
    the source vocabulary, target rows through the target one: the same table unless separate),
    residual dims permuted."""
    w = {k.removeprefix("model."): v.float() for k, v in hf_weights.items()}
    shared = w.get("shared.weight", w.get("decoder.embed_tokens.weight"))
    src_vocab, tgt_vocab = vocabs
    pad_id = hf.get("pad_token_id", len(src_vocab) - 1)  # one id for both sides, as in Marian
    src_rows, tgt_rows = (
        marian_ids(tokenizer.sp, src_vocab, pad_id),
        marian_ids(tokenizer.target_sp, tgt_vocab, pad_id),
    )
    perm = residual_permutation(cfg.d_model)  # our residual dim j holds Marian's dim perm[j]
    bias = w.get("final_logits_bias", torch.zeros(1, len(tgt_vocab)))[0]

    out = {
        "src_embed.token.weight": w.get("encoder.embed_tokens.weight", shared)[src_rows][:, perm],
        "tgt_embed.token.weight": w.get("decoder.embed_tokens.weight", shared)[tgt_rows][:, perm],
        "out_proj.bias": bias[tgt_rows],
    }
    out["tgt_embed.token.weight"][PAD_ID] = 0.0  # see PAD_LOGIT (as input, PAD is never read)
    out["out_proj.bias"][PAD_ID] = PAD_LOGIT
    out["out_proj.weight"] = out["tgt_embed.token.weight"]  # tied, as in Marian
    out.update(layer_weights(w, cfg, perm))
    return out


def residual_permutation(d_model: int) -> torch.Tensor:
    """(D,) perm with marian_table[:, perm] == our sinusoid table: our dim 2i is Marian's sine i
    (column i), our dim 2i+1 its cosine i (column D/2 + i)."""
    half = torch.arange(d_model // 2)
    return torch.stack([half, half + d_model // 2], dim=1).flatten()
