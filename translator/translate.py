"""Lines in, lines out: encode, sort by length, batch by tokens, search, restore order, detokenize.

Rule for over-long input: a source longer than the model's `max_positions - 1` tokens is cut into
consecutive pieces of that length, each piece is translated, and the outputs are joined with a
space; a warning names the line. Nothing is silently truncated.
"""

from __future__ import annotations

import os
import select
import sys
from collections.abc import Iterable, Iterator
from typing import TextIO

import torch

from translator.config import DecodeConfig
from translator.data.batching import pad, padding_mask
from translator.data.tokenizer import EOS_ID, Tokenizer
from translator.decode import Hypothesis
from translator.decode.beam import beam_search
from translator.decode.greedy import greedy_search
from translator.model.transformer import Transformer


def resolve_device(name: str) -> torch.device:
    """`auto` -> CUDA when present, else CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """`auto` -> bf16 on CUDA that supports it (else fp16), fp32 on CPU."""
    if name == "auto":
        if device.type != "cuda":
            return torch.float32
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


def search(model: Transformer, src_ids: list[list[int]], decode: DecodeConfig, nbest: int = 1) -> list[list[Hypothesis]]:
    """Decode one batch of id lists (no EOS) on the model's device -> nbest hypotheses each."""
    device = next(model.parameters()).device
    src = pad(src_ids, suffix=[EOS_ID]).to(device)  # (B, S)
    src_mask = padding_mask(src)
    if decode.beam_size == 1 and nbest == 1:
        hyps = greedy_search(model, src, src_mask, max_len_a=decode.max_len_a, max_len_b=decode.max_len_b,
                             min_len=decode.min_len)
        return [[h] for h in hyps]
    return beam_search(model, src, src_mask, beam_size=max(decode.beam_size, nbest), alpha=decode.length_penalty,
                       max_len_a=decode.max_len_a, max_len_b=decode.max_len_b, min_len=decode.min_len, nbest=nbest)


def length_batches(lengths: list[int], batch_tokens: int) -> Iterator[list[int]]:
    """Indices sorted by length (longest first), cut so rows * longest <= batch_tokens."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batch: list[int] = []
    for i in order:
        if batch and (len(batch) + 1) * (lengths[batch[0]] + 1) > batch_tokens:
            yield batch
            batch = []
        batch.append(i)
    if batch:
        yield batch


def translate_lines(model: Transformer, tokenizer: Tokenizer, lines: list[str], decode: DecodeConfig,
                    nbest: int = 1, warn=None) -> list[list[tuple[str, float]]]:
    """Translate `lines`; returns, per input line and in input order, (text, score) best first.

    An empty (or whitespace-only) line gives one empty translation with score 0.
    """
    limit = model.cfg.max_positions - 1
    pieces: list[list[int]] = []  # sub-sequences to decode
    owner: list[int] = []  # which line each piece belongs to
    for number, ids in enumerate(tokenizer.encode([line.strip() for line in lines])):
        if len(ids) > limit and warn is not None:
            warn(f"line {number + 1}: {len(ids)} tokens exceed the model's {limit}; translated in pieces")
        for start in range(0, len(ids), limit):
            pieces.append(ids[start:start + limit])
            owner.append(number)
    results: list[list[Hypothesis]] = [[]] * len(pieces)
    for batch in length_batches([len(p) for p in pieces], decode.batch_tokens):
        for i, hyps in zip(batch, search(model, [pieces[i] for i in batch], decode, nbest)):
            results[i] = hyps
    by_line: list[list[list[Hypothesis]]] = [[] for _ in lines]
    for hyps, line in zip(results, owner):
        by_line[line].append(hyps)
    out = []
    for pieces_hyps in by_line:
        if not pieces_hyps:  # empty line
            out.append([("", 0.0)])
        elif len(pieces_hyps) == 1:
            texts = tokenizer.decode([h.tokens for h in pieces_hyps[0]])
            out.append([(text, h.score) for text, h in zip(texts, pieces_hyps[0])])
        else:  # an over-long line: join the best output of each piece
            texts = tokenizer.decode([hyps[0].tokens for hyps in pieces_hyps])
            out.append([(" ".join(texts), sum(hyps[0].score for hyps in pieces_hyps))])
    return out


def read_chunks(stream: TextIO, max_lines: int = 2000) -> Iterator[list[str]]:
    """Lines from `stream` in chunks: everything already available, up to `max_lines`.

    Piped bulk input fills whole chunks (so it is batched); an interactive user, whose next line
    is not yet there, gets each line translated as soon as it is entered.
    """
    try:
        fd = stream.fileno()
    except (OSError, AttributeError, ValueError):
        fd = None
    if fd is None:  # no real file descriptor (e.g. a test runner's stream)
        lines = stream.read().splitlines()
        for start in range(0, len(lines), max_lines):
            yield lines[start:start + max_lines]
        return
    pending, lines = b"", []
    while True:
        data = os.read(fd, 1 << 16)
        if data:
            pending += data
            *complete, pending = pending.split(b"\n")
            lines += [raw.decode("utf-8", errors="replace").rstrip("\r") for raw in complete]
        if lines and (not data or len(lines) >= max_lines or not _ready(fd)):
            yield lines[:max_lines]
            lines = lines[max_lines:]
        if not data:
            break
    if pending:
        yield [pending.decode("utf-8", errors="replace").rstrip("\r")]


def _ready(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


def run(model: Transformer, tokenizer: Tokenizer, decode: DecodeConfig, lines_in: Iterable[list[str]],
        out: TextIO, nbest: int = 1) -> int:
    """Translate chunks of lines, writing each chunk as soon as it is done; returns the line count."""
    count = 0
    for chunk in lines_in:
        for hyps in translate_lines(model, tokenizer, chunk, decode, nbest, warn=_warn):
            if nbest == 1:
                out.write(hyps[0][0] + "\n")
            else:
                out.write("".join(f"{count}\t{text}\t{score:.4f}\n" for text, score in hyps))
            count += 1
        out.flush()
    return count


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)
