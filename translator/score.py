"""Scoring given translations (`translator score`): log p(target | source) per line pair.

Forced decoding (decode/forced.py): the model's log-probability of the target's SentencePiece
tokens and EOS, in natural log, summed; or per token; or divided by the GNMT length penalty, as
`translate --nbest` scores a hypothesis (the two agree where the search wrote the same tokens
that the target text encodes to). What users do with it: filter a crawled corpus by the model's
cross-entropy, read a test set's perplexity, rerank another system's n-best.

Input: two line-aligned files, or `source<TAB>target` lines on stdin (`paste src.txt tgt.txt`).
Output: one score a line, in input order. A pair too long for the model's positions is not
scored: `nan`, and a warning naming the line.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from translator.config import DataConfig
from translator.console import log, sentence_progress, show_progress, warn_stderr
from translator.data.tokenizer import UNK_ID, Tokenizer
from translator.decode import in_eval_mode
from translator.decode.beam import length_penalty
from translator.decode.forced import perplexity, target_log_probs
from translator.errors import TranslatorError, counted
from translator.files import read_aligned, write_errors
from translator.input_lines import read_chunks
from translator.line_warnings import (
    NOT_FINITE,
    line_list,
    source_unk_message,
    target_unk_message,
)
from translator.loading import Checkpoints, load_models
from translator.model.ensemble import Ensemble
from translator.model.transformer import Transformer
from translator.stream import model_precision
from translator.translate import python_warning, refuse_non_text, source_text

CHUNK_LINES = 2000  # pairs scored and written at a time


@dataclass
class PairScore:
    log_prob: float  # log p(target | source), natural log; nan: not scored (too long)
    tokens: int  # target tokens it sums over: SentencePiece pieces and EOS
    fits: bool = True  # within the model's positions (else not scored)

    def value(self, per_token: bool = False, alpha: float = 0.0) -> float:
        """The sum, or per token, or divided by the GNMT length penalty of `alpha`."""
        if per_token:
            return self.log_prob / self.tokens
        return self.log_prob / length_penalty(self.tokens, alpha) if alpha else self.log_prob


@in_eval_mode
def score_lines(
    model: Transformer | Ensemble,
    tokenizer: Tokenizer,
    sources: list[str],
    targets: list[str],
    data: DataConfig | None = None,
    batch_tokens: int = 4096,
    warn: Callable[[str], None] | None = python_warning,
    first_line: int = 1,
) -> list[PairScore]:
    """Score each (source, target) pair; in input order.

    `data`: the model's data settings, so that both sides are normalised as its training text
    was (see translate.translate_lines); None: only stripped. Warnings (pairs too long to score,
    pieces outside the vocabulary) number lines from `first_line` and go to `warn` (None: dropped).
    """
    refuse_non_text("score_lines", "sources", sources)
    refuse_non_text("score_lines", "targets", targets)
    if len(sources) != len(targets):
        raise TranslatorError(
            f"{counted(len(sources), 'source')} but {counted(len(targets), 'target')}",
            "score_lines",
            "give one target a source, line-aligned",
        )
    src_ids = tokenizer.encode([source_text(s, data) for s in sources])
    tgt_ids = tokenizer.target_sp.encode([source_text(t, data) for t in targets])
    positions = model.cfg.max_positions  # each side with its EOS (source) or BOS (target)
    fits = [len(s) < positions and len(t) < positions for s, t in zip(src_ids, tgt_ids)]
    kept = [i for i, ok in enumerate(fits) if ok]
    sums = target_log_probs(
        model, [src_ids[i] for i in kept], [tgt_ids[i] for i in kept], batch_tokens
    )
    out = [PairScore(math.nan, len(t) + 1, ok) for t, ok in zip(tgt_ids, fits)]
    for i, value in zip(kept, sums):
        out[i].log_prob = value
    if warn is not None:
        overflowed = [first_line + i for i in kept if not math.isfinite(out[i].log_prob)]
        for message in _warnings(src_ids, tgt_ids, fits, positions, first_line, overflowed):
            warn(message)
    return out


def _warnings(
    src_ids: list[list[int]],
    tgt_ids: list[list[int]],
    fits: list[bool],
    positions: int,
    first_line: int,
    overflowed: list[int],
) -> Iterator[str]:
    if long := [first_line + i for i, ok in enumerate(fits) if not ok]:
        yield (
            f"{line_list(long)}: over the model's {positions - 1} tokens a side "
            "(max_positions - 1), not scored (nan); shorten or split those pairs"
        )
    if overflowed:
        yield f"{line_list(overflowed)}: {NOT_FINITE}"
    if unknown := {first_line + i: n for i, ids in enumerate(src_ids) if (n := ids.count(UNK_ID))}:
        yield source_unk_message(unknown)
    if unknown := {first_line + i: n for i, ids in enumerate(tgt_ids) if (n := ids.count(UNK_ID))}:
        yield target_unk_message(unknown)


def run(
    ckpt: Checkpoints,
    *,
    src_file: Path | None = None,
    tgt_file: Path | None = None,
    per_token: bool = False,
    alpha: float = 0.0,
    batch_tokens: int | None = None,
    device: str | None = None,
    dtype: str | None = None,
    quiet: bool = False,
) -> int:
    """The `score` command (which has checked stdout): pairs from two files or stdin's TSV, one
    score a line to stdout; returns the line count. Unless quiet, the device line and a summary
    go to stderr."""
    if (src_file is None) != (tgt_file is None):
        raise TranslatorError(
            "--src and --tgt go together", "score", "give both, or neither to read stdin"
        )
    if per_token and alpha:
        raise TranslatorError(
            "--per-token and --length-penalty both normalise the score", "score", "give one"
        )
    if src_file is None and sys.stdin is None:
        raise TranslatorError("stdin is closed", "score", "give pairs on stdin or --src/--tgt")
    chunks, lines = _file_chunks(src_file, tgt_file) if src_file else (_tsv_chunks(sys.stdin), 0)
    model, cfg, tokenizer = load_models(ckpt, device, dtype)
    if not quiet:
        log(f"score: {model_precision(model, dtype or cfg.decode.dtype)}")
    batch_tokens = batch_tokens or cfg.decode.batch_tokens
    count, total, tokens, too_long, overflowed, tabs = 0, 0.0, 0, 0, 0, 0
    # a bar for bulk work only (console.show_progress): files or piped stdin, scores to a file
    stdin = sys.stdin if src_file is None else None  # None: files
    show = show_progress(quiet, stdin, sys.stdout, sys.stderr)
    with sentence_progress("score", not show) as progress:
        for sources, targets, ambiguous in chunks:
            scores = score_lines(
                model, tokenizer, sources, targets, cfg.data, batch_tokens, warn_stderr, count + 1
            )
            for i in ambiguous:  # scored as an empty pair, to keep the lines aligned
                scores[i].log_prob = math.nan
            with write_errors("<stdout>", "cannot write the scores"):
                sys.stdout.write("".join(f"{s.value(per_token, alpha):.4f}\n" for s in scores))
                sys.stdout.flush()
            count += len(scores)
            progress(count, max(count, lines))
            for i, s in enumerate(scores):
                if i in ambiguous:
                    tabs += 1
                elif not s.fits:
                    too_long += 1
                elif not math.isfinite(s.log_prob):
                    overflowed += 1
                else:
                    total, tokens = total + s.log_prob, tokens + s.tokens
    if not quiet:
        log(summary(count, too_long, total, tokens, overflowed, tabs))
    return count


def summary(
    pairs: int, too_long: int, log_prob: float, tokens: int, overflowed: int = 0, tabs: int = 0
) -> str:
    """One line: pairs, target tokens, cross-entropy per token and perplexity."""
    left_out = [f"{too_long:,} too long"] * bool(too_long)
    left_out += [f"{overflowed:,} not finite"] * bool(overflowed)
    left_out += [f"{tabs:,} with more than one TAB"] * bool(tabs)
    line = f"score: {pairs:,} pairs" + (f" ({', '.join(left_out)}, not scored)" * bool(left_out))
    if tokens:
        nats = -log_prob / tokens
        line += (
            f", {tokens:,} target tokens: {nats:.4f} nats a token, "
            f"perplexity {perplexity(nats):.2f}"
        )
    return line


Chunk = tuple[list[str], list[str], set[int]]  # sources, targets, the pairs not to score


def _file_chunks(src_file: Path, tgt_file: Path) -> tuple[Iterator[Chunk], int]:
    """Both files read (UTF-8, checked) and line-aligned, cut into chunks; and the line count."""
    sources, targets = read_aligned(src_file, tgt_file, "score")
    chunks = (
        (sources[start : start + CHUNK_LINES], targets[start : start + CHUNK_LINES], set())
        for start in range(0, len(sources), CHUNK_LINES)
    )
    return chunks, len(sources)


def _tsv_chunks(stream: TextIO) -> Iterator[Chunk]:
    """`source<TAB>target` lines from a stream, in chunks. An empty line is an empty pair (as an
    empty line of both files is). A line with more than one TAB (a TAB inside a sentence, common
    in crawled text) cannot be split: a warning names it and it is not scored (nan), so a long
    stream goes on aligned. A line without a TAB is not TSV at all: an error naming it, raised
    after the lines before it have been yielded (so they are scored and written)."""

    def chunk(count: int, sources: list[str], targets: list[str], ambiguous: set[int]) -> Chunk:
        if ambiguous:
            where = line_list(sorted(count + i + 1 for i in ambiguous))
            warn_stderr(
                f"stdin {where}: more than one TAB, so source and target cannot be told apart; "
                "not scored (nan)"
            )
        return sources, targets, ambiguous

    count = 0
    for lines in read_chunks(stream, CHUNK_LINES, warn=warn_stderr):
        sources, targets, ambiguous = [], [], set()
        for i, line in enumerate(lines):
            source, tab, target = line.partition("\t")
            if tab or not line.strip():
                if "\t" in target:
                    source, target = "", ""
                    ambiguous.add(i)
                sources.append(source)
                targets.append(target)
                continue
            if sources:
                yield chunk(count, sources, targets, ambiguous)
            raise TranslatorError(
                "no TAB between source and target",
                f"stdin line {count + i + 1}",
                "give one `source<TAB>target` pair a line (paste src.txt tgt.txt), "
                "or --src/--tgt files",
            )
        yield chunk(count, sources, targets, ambiguous)
        count += len(lines)
