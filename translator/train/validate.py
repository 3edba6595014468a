"""Validation: loss and perplexity of the valid split, then BLEU/chrF of its decoded sources.

Decoding and scoring go through `translate.translate_lines` and `bleu.score`, the code the
`eval` command uses. A validation BLEU is what `eval --split valid` reports for the same checkpoint
only where both decode alike: by default validation decodes the first train.valid_bleu_sentences
sentences with train.valid_beam_size (greedy in the recipes), under training's autocast, where
eval decodes them all with decode.beam_size in decode.dtype; the log line names what it decoded.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import torch
import torch.nn.functional as F

from translator.bleu import score
from translator.config import Config
from translator.data.batching import make_batch, token_batches
from translator.data.shards import TokenArray
from translator.data.tokenizer import PAD_ID, Tokenizer
from translator.decode.forced import perplexity
from translator.files import read_lines
from translator.model.transformer import Transformer
from translator.prepared import prepared_dir
from translator.train.precision import autocast
from translator.translate import translate_lines


@dataclass
class Validation:
    loss: float  # cross-entropy per target token, no label smoothing
    ppl: float
    bleu: float
    chrf: float
    signature: str  # sacreBLEU's, so the number can be reproduced
    samples: list[tuple[str, str, str]]  # (source, hypothesis, reference), the first few sentences
    # pairs left out of the loss: longer than the model's positions (BLEU splits their sources)
    too_long: int = 0
    decoded: str = ""  # what BLEU and chrF scored, e.g. "300 of 1,014 sentences, greedy"

    def scalars(self) -> dict[str, float]:
        return {"loss": self.loss, "ppl": self.ppl, "bleu": self.bleu, "chrf": self.chrf}


def fitting_pairs(src: TokenArray, tgt: TokenArray, max_positions: int) -> np.ndarray:
    """Indices of the pairs whose source + EOS and BOS + target fit the model's positions."""
    return np.flatnonzero((src.lengths + 1 <= max_positions) & (tgt.lengths + 1 <= max_positions))


def too_long_pairs(cfg: Config) -> tuple[int, int]:
    """(pairs longer than model.max_positions, all pairs) of the prepared valid split: known before
    training."""
    folder = prepared_dir(cfg.data)
    src, tgt = TokenArray(folder / "valid.src"), TokenArray(folder / "valid.tgt")
    return len(src) - len(fitting_pairs(src, tgt, cfg.model.max_positions)), len(src)


class _Stopped(Exception):
    """A stop request seen between two of validation's batches."""


@torch.no_grad()
def validate(
    model: Transformer,
    tokenizer: Tokenizer,
    cfg: Config,
    dtype: torch.dtype | None,
    n_samples: int = 3,
    stop: Callable[[], bool] = lambda: False,
) -> Validation | None:
    """Score `model` (left in train mode afterwards) on the prepared valid split; None when
    `stop()` turned true between two batches, the rest abandoned (a stopped run saves at once)."""
    model.eval()
    try:
        return _validate(model, tokenizer, cfg, dtype, n_samples, stop)
    except _Stopped:
        return None
    finally:
        model.train()


def _validate(
    model: Transformer,
    tokenizer: Tokenizer,
    cfg: Config,
    dtype: torch.dtype | None,
    n_samples: int,
    stop: Callable[[], bool],
) -> Validation:
    """`validate`'s work: the loss over the valid split, then BLEU/chrF of its decoded sources."""

    def check(*progress: int) -> None:
        if stop():
            raise _Stopped

    device = next(model.parameters()).device
    folder = prepared_dir(cfg.data)
    src, tgt = TokenArray(folder / "valid.src"), TokenArray(folder / "valid.tgt")
    loss, tokens = 0.0, 0
    # a longer pair would not fit the position table
    fits = fitting_pairs(src, tgt, cfg.model.max_positions)
    for rows in token_batches(
        src.lengths[fits], tgt.lengths[fits], cfg.train.max_tokens, seed=0, epoch=0
    ):
        check()
        rows = fits[rows]
        batch = make_batch([src[i] for i in rows], [tgt[i] for i in rows]).to(device)
        with autocast(device, dtype):
            logits = model(batch.src, batch.tgt_in, batch.src_mask)  # (B, T, V)
        loss += F.cross_entropy(
            logits.flatten(0, 1).float(),
            batch.tgt_out.flatten(),
            ignore_index=PAD_ID,
            reduction="sum",
        ).item()
        tokens += batch.n_tgt_tokens
    sources = read_lines(folder / f"valid.{cfg.data.src_lang}")
    refs = read_lines(folder / f"valid.{cfg.data.tgt_lang}")
    limit = cfg.train.valid_bleu_sentences or len(sources)
    decode = replace(cfg.decode, beam_size=cfg.train.valid_beam_size or cfg.decode.beam_size)
    check()
    with autocast(device, dtype):
        # `progress` comes after each decoded batch: the stop request is checked there too; no
        # warnings: a model still learning runs into the length limit, noise for the training log
        translated = translate_lines(
            model, tokenizer, sources[:limit], decode, warn=None, progress=check, data=cfg.data
        )
        hyps = [h[0][0] for h in translated]
    scores = score(
        hyps, refs[:limit], tgt_lang=cfg.data.tgt_lang, tokenize=cfg.train.valid_bleu_tokenize
    )
    mean = loss / tokens if tokens else math.nan  # no pair fits: no loss to report
    return Validation(
        mean,
        perplexity(mean),
        scores.bleu,
        scores.chrf,
        scores.bleu_signature,
        list(zip(sources, hyps, refs))[:n_samples],
        len(src) - len(fits),
        f"{'all ' if limit >= len(sources) else f'{limit:,} of '}{len(sources):,} sentences, "
        + ("greedy" if decode.beam_size == 1 else f"beam {decode.beam_size}"),
    )
