"""A checkpoint's model ready to decode: on a device, in a dtype (int8 on the CPU), or several
checkpoints of one direction as an ensemble, or reverse-direction ones as a reranking channel.

Each refusal (another direction, another vocabulary) names the checkpoint at fault.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from translator import checkpoint
from translator.config import Config, DataConfig, DecodeConfig
from translator.data.tokenizer import Tokenizer
from translator.device import int8_device, resolve_device, resolve_dtype
from translator.errors import TranslatorError
from translator.model.ensemble import Ensemble
from translator.model.inference import for_cpu_decoding
from translator.model.transformer import Transformer
from translator.rerank import Channel


def load(
    ckpt: str | Path, device: str | None = None, dtype: str | None = None
) -> tuple[Transformer, Config, Tokenizer]:
    """A checkpoint's model (eval mode) on `device` in `dtype`; None: the checkpoint's decode.*.

    dtype `int8`: the fp32 model on the CPU with its linear layers in dynamic int8. On the CPU the
    model is converted for searching (model/inference.py: packed oneDNN weights), so it is for
    decoding only: its state_dict lacks the linear weights; checkpoint.load gives the plain model
    (to train, save or copy). Decoding is read-only except with alignments, which hook the
    model's cross-attention: do not decode with alignments from two threads on one model.
    """
    model, cfg, tokenizer = checkpoint.load(ckpt, "cpu")
    dtype = dtype or cfg.decode.dtype
    int8 = dtype == "int8"  # dynamic int8 linear layers, made from the fp32 model; CPU only
    device = device or cfg.decode.device
    torch_device = int8_device(device) if int8 else resolve_device(device)
    model.to(torch_device, torch.float32 if int8 else resolve_dtype(dtype, torch_device))
    if torch_device.type == "cpu":
        for_cpu_decoding(model, int8)  # faster kernels for a search, and int8 if asked (logged)
    return model, cfg, tokenizer


Checkpoints = str | Path | Sequence[str | Path]  # one, or several decoded as an ensemble


def checkpoint_list(ckpt: Checkpoints) -> list[Path]:
    return [Path(ckpt)] if isinstance(ckpt, (str, Path)) else [Path(c) for c in ckpt]


def load_models(
    ckpt: Checkpoints, device: str | None = None, dtype: str | None = None
) -> tuple[Transformer | Ensemble, Config, Tokenizer]:
    """One checkpoint's model, or several decoded as one ensemble (model/ensemble.py); the config
    (decode.* defaults) and tokenizer are the first checkpoint's."""
    ckpts = checkpoint_list(ckpt)
    loaded = [load(ckpt, device, dtype) for ckpt in ckpts]
    if len(loaded) == 1:
        return loaded[0]
    model, cfg, tokenizer = loaded[0]
    direction = (cfg.data.src_lang, cfg.data.tgt_lang)
    for ckpt, (_, other_cfg, other) in zip(ckpts[1:], loaded[1:]):
        # a joint vocabulary can be shared by both directions: the languages tell them apart
        if (other_cfg.data.src_lang, other_cfg.data.tgt_lang) != direction:
            raise TranslatorError(
                f"it translates {other_cfg.data.src_lang}->{other_cfg.data.tgt_lang}, "
                f"{ckpts[0]} {'->'.join(direction)}",
                str(ckpt),
                "ensemble only checkpoints of one direction",
            )
        if other.checksum() != tokenizer.checksum():
            raise TranslatorError(
                f"its SentencePiece model differs from {ckpts[0]}'s",
                str(ckpt),
                "ensemble only checkpoints trained on the same prepared vocabulary",
            )
    return Ensemble([m for m, _, _ in loaded]), cfg, tokenizer


def load_channel(
    ckpt: Checkpoints,
    direct: DataConfig,
    decode: DecodeConfig,
    device: str | None = None,
    dtype: str | None = None,
) -> Channel:
    """The reverse-direction model(s) of `ckpt` for reranking the n-best of a model of `direct`'s
    languages (translator/rerank.py), on the same device and dtype, weighed as `decode` (the
    direct model's, as the caller overrode it) says; its length penalty normalises the channel's
    score too."""
    model, cfg, tokenizer = load_models(ckpt, device, dtype)
    langs, reverse = (cfg.data.src_lang, cfg.data.tgt_lang), (direct.tgt_lang, direct.src_lang)
    if langs != reverse:
        raise TranslatorError(
            f"the channel model translates {'->'.join(langs)}, not {'->'.join(reverse)}",
            str(checkpoint_list(ckpt)[0]),
            "give a checkpoint of the reverse direction to --channel",
        )
    return Channel(
        model,
        tokenizer,
        decode.channel_weight,
        decode.length_penalty,
        decode.channel_candidates,
        decode.batch_tokens,
    )
