"""Lines in, lines out: encode, sort by length, batch by tokens, search, restore order, detokenize.

Rule for over-long input: a line of more than `max_positions - 1` subword tokens (with its EOS
it would not fit the model's positions) is cut into consecutive pieces that fit, each cut made
at the last sentence end (. ! ? ; :) that fits, else at the last word start, else mid-word;
every piece is translated and the outputs are joined with a space. A warning on stderr names the line. Nothing is silently
truncated. (With --nbest such a line gets one hypothesis, the joined best.)
"""

from __future__ import annotations

import dataclasses
import os
import select
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

import torch
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from translator import checkpoint
from translator.config import Config, DecodeConfig
from translator.data.batching import pad, padding_mask
from translator.data.progress import StatsColumn
from translator.data.tokenizer import EOS_ID, Tokenizer
from translator.decode import Hypothesis
from translator.decode.beam import beam_search
from translator.decode.greedy import greedy_search
from translator.diagnostics.alignment import align_hypotheses, check_layer, join_alignments
from translator.diagnostics.words import pharaoh
from translator.errors import TranslatorError
from translator.model.transformer import Transformer

SENTENCE_END = (".", "!", "?", ";", ":")


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def resolve_device(name: str) -> torch.device:
    """`auto` -> CUDA when present, else CPU; asking for absent CUDA is a user error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise TranslatorError(f"unknown device {name!r}", "--device", "use auto, cpu, cuda or cuda:N") from None
    if device.type not in ("cpu", "cuda"):
        raise TranslatorError(f"unsupported device {name!r}", "--device", "use auto, cpu, cuda or cuda:N")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise TranslatorError("CUDA is not available on this machine", "--device", "use --device cpu or auto")
    return device


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """`auto` -> bf16 on CUDA that supports it (else fp16), fp32 on CPU."""
    if name == "auto":
        if device.type != "cuda":
            return torch.float32
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if name not in DTYPES:
        raise TranslatorError(f"unknown dtype {name!r}", "--dtype", "use auto, " + ", ".join(DTYPES))
    return DTYPES[name]


def load(ckpt: str | Path, device: str | None = None, dtype: str | None = None
         ) -> tuple[Transformer, Config, Tokenizer]:
    """A checkpoint's model (eval mode) on `device` in `dtype`; None takes the checkpoint's decode.* values."""
    model, cfg, tokenizer = checkpoint.load(ckpt, "cpu")
    torch_device = resolve_device(device or cfg.decode.device)
    model.to(torch_device, resolve_dtype(dtype or cfg.decode.dtype, torch_device))
    return model, cfg, tokenizer


def with_overrides(decode: DecodeConfig, **values) -> DecodeConfig:
    """`decode` with the values that are not None put in (command-line flags), checked again by DecodeConfig."""
    return dataclasses.replace(decode, **{k: v for k, v in values.items() if v is not None})


def search(model: Transformer, src_ids: list[list[int]], decode: DecodeConfig, nbest: int = 1) -> list[list[Hypothesis]]:
    """Decode one batch of id lists (no EOS) on the model's device -> nbest hypotheses each."""
    device = next(model.parameters()).device
    src = pad(src_ids, suffix=[EOS_ID]).to(device)  # (B, S)
    src_mask = padding_mask(src)  # (B, 1, 1, S)
    if decode.beam_size == 1 and nbest == 1:
        hyps = greedy_search(model, src, src_mask, max_len_a=decode.max_len_a, max_len_b=decode.max_len_b,
                             min_len=decode.min_len, cuda_graphs=decode.cuda_graphs)
        return [[h] for h in hyps]
    return beam_search(model, src, src_mask, beam_size=max(decode.beam_size, nbest), alpha=decode.length_penalty,
                       max_len_a=decode.max_len_a, max_len_b=decode.max_len_b, min_len=decode.min_len, nbest=nbest,
                       cuda_graphs=decode.cuda_graphs)


def length_batches(lengths: list[int], batch_tokens: int) -> Iterator[list[int]]:
    """Indices sorted by length (longest first, so memory peaks at once), cut so rows * (longest + EOS) <= batch_tokens."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batch: list[int] = []
    for i in order:
        if batch and (len(batch) + 1) * (lengths[batch[0]] + 1) > batch_tokens:
            yield batch
            batch = []
        batch.append(i)
    if batch:
        yield batch


def split_long(ids: list[int], limit: int, pieces: list[str]) -> list[list[int]]:
    """Cut `ids` (with SentencePiece `pieces`) into runs of <= limit, preferring sentence ends, then word starts."""
    out = []
    while len(ids) > limit:
        cut = max(range(1, limit + 1), key=lambda i, p=pieces: _cut_rank(p, i))
        out.append(ids[:cut])
        ids, pieces = ids[cut:], pieces[cut:]
    return [*out, ids]


def _cut_rank(pieces: list[str], i: int) -> tuple[bool, bool, int]:
    """How good a cut before piece i is: after a sentence end, at a word start, then the latest."""
    word_start = pieces[i].startswith("\u2581")  # SentencePiece marks a preceding space with U+2581
    return word_start and pieces[i - 1].endswith(SENTENCE_END), word_start, i


def translate_lines(model: Transformer, tokenizer: Tokenizer, lines: list[str], decode: DecodeConfig,
                    nbest: int = 1, warn: Callable[[str], None] | None = None,
                    progress: Callable[[int, int], None] | None = None, first_line: int = 1,
                    alignment_layer: int | None = None) -> list[list[tuple]]:
    """Translate `lines`; returns, per input line and in input order, (text, score) best first.

    With `alignment_layer` each tuple is (text, score, alignment): Pharaoh `src-tgt` word pairs read
    from that decoder layer's cross-attention (diagnostics/alignment.py).

    An empty (or whitespace-only) line gives one empty translation with score 0. `progress(done,
    total)` is called after each batch, counting sentences (pieces of over-long lines count apart).
    Warnings number lines from `first_line`.
    """
    if max(decode.beam_size, nbest) > model.cfg.vocab_size:
        raise TranslatorError(f"a beam of {max(decode.beam_size, nbest)} is wider than the vocabulary "
                              f"({model.cfg.vocab_size} tokens)", "--beam/--nbest", "use a smaller beam")
    if alignment_layer is not None:
        check_layer(model, alignment_layer)  # before any decoding
    limit = model.cfg.max_positions - 1  # source tokens; with EOS they fill the positions
    pieces: list[list[int]] = []  # sub-sequences to decode
    owner: list[int] = []  # which line each piece belongs to
    for number, ids in enumerate(tokenizer.encode([line.strip() for line in lines])):
        if len(ids) > limit:
            parts = split_long(ids, limit, tokenizer.sp.id_to_piece(ids))
            if warn is not None:
                warn(f"line {first_line + number}: {len(ids)} tokens exceed the model's {limit}; "
                     f"translated in {len(parts)} pieces, joined")
        else:
            parts = [ids] if ids else []
        pieces += parts
        owner += [number] * len(parts)
    results: list[list[Hypothesis]] = [[] for _ in pieces]
    aligned: list[list[list[tuple[int, int]]]] = [[] for _ in pieces]  # per piece, per hypothesis
    done = 0
    for batch in length_batches([len(p) for p in pieces], decode.batch_tokens):
        found = search(model, [pieces[i] for i in batch], decode, nbest)
        for i, hyps in zip(batch, found):
            results[i] = hyps
        if alignment_layer is not None:
            for i, pairs in zip(batch, align_hypotheses(model, tokenizer, [pieces[i] for i in batch], found,
                                                        alignment_layer)):
                aligned[i] = pairs
        done += len(batch)
        if progress is not None:
            progress(done, len(pieces))
    by_line: list[list[list[Hypothesis]]] = [[] for _ in lines]
    for hyps, line in zip(results, owner):
        by_line[line].append(hyps)
    out = [_detokenize(tokenizer, line_hyps) for line_hyps in by_line]
    if alignment_layer is None:
        return out
    parts: list[list[int]] = [[] for _ in lines]  # each line's pieces
    for k, line in enumerate(owner):
        parts[line].append(k)
    return [_with_alignments(tokenizer, translations, [pieces[k] for k in ks], [results[k] for k in ks],
                             [aligned[k] for k in ks]) for translations, ks in zip(out, parts)]


def _with_alignments(tokenizer: Tokenizer, translations: list[tuple[str, float]], src_parts: list[list[int]],
                     hyps: list[list[Hypothesis]], aligned: list[list[list[tuple[int, int]]]]
                     ) -> list[tuple[str, float, str]]:
    """One line's (text, score) list and its pieces' sources, hypotheses and alignments -> (text, score, alignment)."""
    if not src_parts:  # an empty line
        return [(text, score, "") for text, score in translations]
    if len(src_parts) == 1:
        return [(text, score, pharaoh(pairs)) for (text, score), pairs in zip(translations, aligned[0])]
    texts = tokenizer.decode([found[0].tokens for found in hyps])  # over-long: the best of each piece, joined
    joined = join_alignments(src_parts, texts, [pairs[0] for pairs in aligned], tokenizer)
    return [(*translations[0], pharaoh(joined))]


def _detokenize(tokenizer: Tokenizer, pieces_hyps: list[list[Hypothesis]]) -> list[tuple[str, float]]:
    """One line's hypotheses (one list per piece) -> [(text, score)] best first."""
    if not pieces_hyps:  # empty line
        return [("", 0.0)]
    if len(pieces_hyps) == 1:
        texts = tokenizer.decode([h.tokens for h in pieces_hyps[0]])
        return [(text, h.score) for text, h in zip(texts, pieces_hyps[0])]
    texts = tokenizer.decode([hyps[0].tokens for hyps in pieces_hyps])  # over-long: join the best of each
    return [(" ".join(texts), sum(hyps[0].score for hyps in pieces_hyps))]


def read_chunks(stream: TextIO, max_lines: int = 2000, warn: Callable[[str], None] | None = None
                ) -> Iterator[list[str]]:
    """Lines from `stream` in chunks: everything already available, up to `max_lines`.

    Piped bulk input fills whole chunks (so it is batched); an interactive user, whose next line
    is not yet there, gets each line translated as soon as it is entered. Reads the file
    descriptor directly: a buffered text stream would wait for more input before returning.
    Bytes that are not UTF-8 become U+FFFD with a warning naming the line; the line is still
    translated, so the output keeps one line per input line.
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
    pending, lines, count = b"", [], 0
    while True:
        data = os.read(fd, 1 << 16)
        if data:
            pending += data
            *complete, pending = pending.split(b"\n")
            lines += [_decode_line(raw, count + i, warn) for i, raw in enumerate(complete, 1)]
            count += len(complete)
        while lines and (not data or len(lines) >= max_lines or not _ready(fd)):
            yield lines[:max_lines]
            lines = lines[max_lines:]
        if not data:
            break
    if pending:  # a last line without a newline
        yield [_decode_line(pending, count + 1, warn)]


def _decode_line(raw: bytes, number: int, warn: Callable[[str], None] | None) -> str:
    """One input line's bytes -> text without a trailing CR; bytes that are not UTF-8 become U+FFFD, with a warning."""
    try:
        return raw.decode("utf-8").rstrip("\r")
    except UnicodeDecodeError as err:
        if warn is not None:
            warn(f"line {number}: invalid UTF-8 at byte {err.start}; undecodable bytes replaced with U+FFFD "
                 "(re-encode the input as UTF-8)")
        return raw.decode("utf-8", errors="replace").rstrip("\r")


def _ready(fd: int) -> bool:
    """Is more input waiting right now (without blocking)?"""
    return bool(select.select([fd], [], [], 0)[0])


def run(model: Transformer, tokenizer: Tokenizer, decode: DecodeConfig, lines_in: Iterable[list[str]],
        out: TextIO, nbest: int = 1, progress: Callable[[int, int], None] | None = None,
        alignment_layer: int | None = None) -> int:
    """Translate chunks of lines, writing each chunk as soon as it is done; returns the line count.

    With nbest > 1 each input line gives up to nbest TSV rows `line<TAB>text<TAB>score` (line from 0):
    one for an empty or over-long line, fewer when the search finds fewer distinct hypotheses.
    With `alignment_layer`, each line (or row) ends in a TAB and its Pharaoh word alignment.
    `progress(done, total)` counts sentences over all chunks; total is what has been read so far.
    """
    count, decoded = 0, 0  # lines written; sentences decoded in earlier chunks
    for chunk in lines_in:
        chunk_total = [0]  # this chunk's sentences, once its first batch is done

        def report(done: int, total: int, before: int = decoded, chunk_total: list[int] = chunk_total) -> None:
            chunk_total[0] = total
            progress(before + done, before + total)

        for hyps in translate_lines(model, tokenizer, chunk, decode, nbest, warn=warn_stderr, first_line=count + 1,
                                    progress=report if progress is not None else None, alignment_layer=alignment_layer):
            if nbest == 1 and alignment_layer is None:
                out.write(hyps[0][0] + "\n")
            elif nbest == 1:
                out.write(f"{hyps[0][0].replace(chr(9), ' ')}\t{hyps[0][2]}\n")
            else:
                out.write("".join(f"{count}\t{h[0].replace(chr(9), ' ')}\t{h[1]:.4f}{_tail(h)}\n" for h in hyps))
            count += 1
        out.flush()
        decoded += chunk_total[0]
    return count


def _tail(translation: tuple) -> str:
    """`<TAB>alignment` when the translation carries one, else nothing."""
    return f"\t{translation[2]}" if len(translation) > 2 else ""


def show_progress(quiet: bool, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> bool:
    """A bar only for bulk work watched on a terminal: input and output redirected, stderr a terminal.

    Interactive input, or output on the same screen, would interleave with a live bar.
    """
    return not quiet and stderr.isatty() and not stdin.isatty() and not stdout.isatty()


@contextmanager
def sentence_progress(label: str, quiet: bool) -> Iterator[Callable[[int, int], None]]:
    """A rich bar on stderr over decoded sentences (count, rate, ETA) -> its `progress(done, total)`.

    Invisible when quiet, and when stderr is not a terminal (a log gets no bar). stdout is left
    alone (not routed above the bar): it may carry the translations.
    """
    console = Console(stderr=True)
    bar = Progress(TextColumn(label), BarColumn(), TimeElapsedColumn(), StatsColumn(), TextColumn("sentences"),
                   console=console, disable=quiet or not console.is_terminal, transient=True, redirect_stdout=False)
    with bar:
        task = bar.add_task(label, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total, bar=True)


def warn_stderr(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)
