"""A random MarianMT model in an OPUS-MT style directory, built offline (import-hf and fine-tuning).

Two SentencePiece models trained on Multi30k lines, a shared vocab.json (or, with `separate`,
vocab.json and target_vocab.json with embeddings of their own, as some OPUS-MT models have), random
weights with LayerNorms and the logits bias moved off their defaults, and the tokenizer saved by
Hugging Face (its tokenizer_config.json names the languages, en->de).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import sentencepiece as spm
import torch


def spm_model(lines: list[str]) -> bytes:
    """A unigram model with SentencePiece's default ids (unk 0, s 1, /s 2, no pad), as OPUS-MT's."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=model,
        vocab_size=300,
        model_type="unigram",
        minloglevel=2,
        num_threads=1,
    )
    return model.getvalue()


def marian_vocab(protos: list[bytes], pad_last: bool = True) -> dict[str, int]:
    """Piece -> Marian id over the pieces of `protos`: `</s>` 0, `<unk>` 1, then the pieces, with
    `<pad>` last (OPUS-MT's shared table) or at 2 (pad_last=False)."""
    pieces: dict[str, None] = {}
    for proto in protos:
        sp = spm.SentencePieceProcessor(model_proto=proto)
        pieces.update((sp.id_to_piece(i), None) for i in range(sp.get_piece_size()))
    words = [p for p in pieces if p not in ("<unk>", "<s>", "</s>")]
    if not pad_last:
        words.insert(0, "<pad>")
    vocab = {"</s>": 0, "<unk>": 1, **{p: i + 2 for i, p in enumerate(words)}}
    if pad_last:
        vocab["<pad>"] = len(vocab)
    return vocab


def build_opus(root: Path, multi30k: Path, transformers, separate: bool = False):
    """Write the model into `root`; returns (HF model, HF tokenizer)."""
    en = (multi30k / "train.en").read_text(encoding="utf-8").splitlines()[:600]
    de = (multi30k / "train.de").read_text(encoding="utf-8").splitlines()[:600]
    protos = {"source.spm": spm_model(en), "target.spm": spm_model(de)}
    for name, proto in protos.items():
        (root / name).write_bytes(proto)
    vocabs = {"vocab.json": marian_vocab(list(protos.values()))}
    if separate:  # Marian has one pad id for both sides: here 2 in both tables, of other sizes
        vocabs = {
            "vocab.json": marian_vocab([protos["source.spm"]], pad_last=False),
            "target_vocab.json": marian_vocab([protos["target.spm"]], pad_last=False),
        }
    for name, table in vocabs.items():
        (root / name).write_text(json.dumps(table), encoding="utf-8")
    vocab, target_vocab = vocabs["vocab.json"], vocabs.get("target_vocab.json")
    config = transformers.MarianConfig(
        vocab_size=len(vocab),
        decoder_vocab_size=len(target_vocab or vocab),
        share_encoder_decoder_embeddings=not separate,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        activation_function="swish",
        scale_embedding=True,
        max_position_embeddings=128,
        pad_token_id=vocab["<pad>"],
        eos_token_id=0,
        decoder_start_token_id=vocab["<pad>"],
        forced_eos_token_id=0,
        dropout=0.1,
    )
    torch.manual_seed(0)
    model = transformers.MarianMTModel(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "layer_norm" in name:
                param.add_(0.3 * torch.randn_like(param))
            elif "embed_tokens" in name or "shared" in name:
                param.mul_(20.0)  # random weights with a clear preference per step: no near-ties
        model.final_logits_bias.copy_(torch.randn_like(model.final_logits_bias))
    model.save_pretrained(root)
    tokenizer = transformers.MarianTokenizer(
        source_spm=str(root / "source.spm"),
        target_spm=str(root / "target.spm"),
        vocab=str(root / "vocab.json"),
        target_vocab_file=str(root / "target_vocab.json") if separate else None,
        separate_vocabs=separate,
        source_lang="en",
        target_lang="de",
    )
    tokenizer.save_pretrained(root)  # tokenizer_config.json names the languages, as OPUS-MT's does
    return model, tokenizer
