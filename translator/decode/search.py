"""The search the decode settings name, over one batch of id lists -> hypotheses (or sampling)."""

from __future__ import annotations

import torch

from translator.config import DecodeConfig
from translator.data.batching import pad, padding_mask
from translator.data.tokenizer import EOS_ID
from translator.decode import Hypothesis
from translator.decode.beam import beam_search, length_penalty
from translator.decode.completion import WordCompletion
from translator.decode.constrained import constrained_beam_search
from translator.decode.greedy import greedy_search
from translator.decode.sampling import RowSampler, Sampling
from translator.model.ensemble import Ensemble
from translator.model.transformer import Transformer


def search(
    model: Transformer | Ensemble,
    src_ids: list[list[int]],
    decode: DecodeConfig,
    nbest: int = 1,
    drop_finished: bool = True,
    sampler: RowSampler | None = None,
    prefixes: list[list[int]] | None = None,
    constraints: list[list[list[int]]] | None = None,
    completion: WordCompletion | None = None,
    word_inner: torch.Tensor | None = None,
) -> list[list[Hypothesis]]:
    """Decode one batch of id lists (no EOS) on the model's device -> nbest hypotheses each.

    `prefixes`: output ids each sentence's hypotheses start with (decode/__init__.py's
    prefix_rows), scored as the rest; `completion`: the characters typed after them, spelled as
    the model likes (decode/completion.py). `constraints`: per sentence, phrases (output ids) its
    hypotheses must hold (decode/constrained.py), at any beam size, none glued to a `word_inner`
    piece; not with prefixes or sampling.

    `drop_finished=False`: every row is stepped to the end (the searches' reference; benchmarks).
    A `sampler` (one generator per row) draws each token: one hypothesis per row, any beam size.
    """
    device = next(model.parameters()).device
    src = pad(src_ids, suffix=[EOS_ID]).to(device)  # (B, S)
    src_mask = padding_mask(src)  # (B, 1, 1, S)
    if constraints is not None:
        if prefixes is not None or completion is not None or sampler is not None:
            raise ValueError("constraints do not combine with prefixes or sampling")
        return constrained_beam_search(
            model,
            src,
            src_mask,
            constraints,
            beam_size=max(decode.beam_size, nbest),
            alpha=decode.length_penalty,
            max_len_a=decode.max_len_a,
            max_len_b=decode.max_len_b,
            min_len=decode.min_len,
            nbest=nbest,
            no_repeat_ngram=decode.no_repeat_ngram_size,
            unk_penalty=decode.unk_penalty,
            word_inner=word_inner,
        )
    if (decode.beam_size == 1 and nbest == 1) or sampler is not None:
        hyps = greedy_search(
            model,
            src,
            src_mask,
            max_len_a=decode.max_len_a,
            max_len_b=decode.max_len_b,
            min_len=decode.min_len,
            cuda_graphs=decode.cuda_graphs,
            drop_finished=drop_finished,
            sampler=sampler,
            prefixes=prefixes,
            no_repeat_ngram=decode.no_repeat_ngram_size,
            unk_penalty=decode.unk_penalty,
            completion=completion,
        )
        # scored as beam search scores (tokens + EOS under the length penalty): a score, as --nbest
        # prints it, means the same at any --beam
        alpha = decode.length_penalty
        return [
            [Hypothesis(h.tokens, h.score / length_penalty(len(h.tokens) + 1, alpha))] for h in hyps
        ]
    return beam_search(
        model,
        src,
        src_mask,
        beam_size=max(decode.beam_size, nbest),
        alpha=decode.length_penalty,
        max_len_a=decode.max_len_a,
        max_len_b=decode.max_len_b,
        min_len=decode.min_len,
        nbest=nbest,
        cuda_graphs=decode.cuda_graphs,
        drop_finished=drop_finished,
        prefixes=prefixes,
        no_repeat_ngram=decode.no_repeat_ngram_size,
        unk_penalty=decode.unk_penalty,
        completion=completion,
    )


def sample(
    model: Transformer | Ensemble,
    src_ids: list[list[int]],
    keys: list[tuple[int, int]],
    decode: DecodeConfig,
    sampling: Sampling,
    draws: int,
    prefixes: list[list[int]] | None = None,
    completion: WordCompletion | None = None,
) -> list[list[Hypothesis]]:
    """`draws` translations drawn for each of a batch's id lists (keys: their (line, piece)),
    best first, scored as `search` scores; each starts with its `prefixes` entry and then its
    `completion` (as search)."""
    rows = [(i, d) for i in range(len(src_ids)) for d in range(draws)]
    device = next(model.parameters()).device
    sampler = sampling.rows([(*keys[i], d) for i, d in rows], device)
    row_prefixes = None if prefixes is None else [prefixes[i] for i, _ in rows]
    found = search(
        model,
        [src_ids[i] for i, _ in rows],
        decode,
        sampler=sampler,
        prefixes=row_prefixes,
        completion=None if completion is None else completion.rows([i for i, _ in rows]),
    )
    out: list[list[Hypothesis]] = [[] for _ in src_ids]
    for (i, _), hyps in zip(rows, found):
        out[i] += hyps
    return [sorted(hyps, key=lambda h: -h.score) for hyps in out]
