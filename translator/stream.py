"""The `translate` command's streams: stdin read as it arrives (input_lines.py), each chunk's
translations written and flushed at once, a progress bar and warnings on stderr (console.py). The
translating is `translate.py`'s.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TextIO

from translator.config import DataConfig, DecodeConfig
from translator.console import advice_once, log, sentence_progress, show_progress, warn_stderr
from translator.data.clean import source_text
from translator.data.tokenizer import UNK_ID, Tokenizer
from translator.decode.sampling import Sampling
from translator.device import describe
from translator.errors import TranslatorError
from translator.files import write_errors
from translator.input_lines import lines_left, read_chunks
from translator.loading import Checkpoints, load_channel, load_models
from translator.model.ensemble import Ensemble
from translator.model.inference import is_int8
from translator.model.transformer import Transformer
from translator.rerank import Channel
from translator.terminology import Terms, load_terms
from translator.translate import (
    translate_lines,
    with_overrides,
)


def run(
    ckpt: Checkpoints,
    *,
    nbest: int | None = None,
    beam: int | None = None,
    max_len_a: float | None = None,
    max_len_b: int | None = None,
    min_len: int | None = None,
    no_repeat_ngram_size: int | None = None,
    unk_penalty: float | None = None,
    length_penalty: float | None = None,
    batch_tokens: int | None = None,
    cuda_graphs: bool | None = None,
    device: str | None = None,
    dtype: str | None = None,
    alignment_layer: int | None = None,
    channel: Checkpoints | None = None,
    channel_weight: float | None = None,
    channel_candidates: int | None = None,
    sampling: Sampling | None = None,
    prefix: bool = False,
    constraints: bool = False,
    terminology: Path | None = None,
    quiet: bool = False,
) -> int:
    """The `translate` command: stdin to stdout through a checkpoint (several: an ensemble);
    returns the line count.

    Flags left None take the checkpoint's decode.* values. `channel`: checkpoint(s) of the reverse
    direction that rerank each n-best (translator/rerank.py). `sampling`: draw each token
    (decode/sampling.py) instead of searching. `prefix`: each line is SOURCE<TAB>PREFIX;
    `constraints`: SOURCE<TAB>PHRASE<TAB>...; `terminology`: a term list whose target terms
    become the constraints of the lines holding their source terms (translate_chunks). Unless
    quiet, one log line on stderr says which device and dtype were chosen.
    """
    if sys.stdin is None or sys.stdout is None:
        raise TranslatorError(
            "stdin or stdout is closed", "translate", "give input on stdin and somewhere for stdout"
        )
    # read before minutes of loading
    pairs = load_terms(terminology) if terminology is not None else None
    model, cfg, tokenizer = load_models(ckpt, device, dtype)
    terms = compile_terms(pairs, terminology, tokenizer, cfg.data) if pairs is not None else None
    decode = with_overrides(
        cfg.decode,
        beam_size=beam,
        max_len_a=max_len_a,
        max_len_b=max_len_b,
        min_len=min_len,
        no_repeat_ngram_size=no_repeat_ngram_size,
        unk_penalty=unk_penalty,
        length_penalty=length_penalty,
        batch_tokens=batch_tokens,
        cuda_graphs=cuda_graphs,
        channel_weight=channel_weight,
        channel_candidates=channel_candidates,
    )
    reranker = None
    if channel is not None:
        reranker = load_channel(channel, cfg.data, decode, device, dtype)
    if not quiet:
        log(f"translate: {model_precision(model, dtype or cfg.decode.dtype)}")
    show = show_progress(quiet, sys.stdin, sys.stdout, sys.stderr)
    expected = lines_left(sys.stdin) if show else None  # a file on stdin: its size is known
    with sentence_progress("translate", not show, "lines" if expected else "sentences") as progress:
        chunks = read_chunks(sys.stdin, warn=warn_stderr)
        return translate_chunks(
            model,
            tokenizer,
            decode,
            chunks,
            sys.stdout,
            nbest,
            progress=progress,
            alignment_layer=alignment_layer,
            channel=reranker,
            data=cfg.data,
            sampling=sampling,
            lines_expected=expected,
            prefix=prefix,
            constraints=constraints,
            terms=terms,
        )


def compile_terms(
    pairs: list[tuple[str, str]], path: Path, tokenizer: Tokenizer, data: DataConfig
) -> Terms:
    """A term list matched against lines cleaned as sources are; a target term the model cannot
    spell is refused here, not at the first line that holds its source term."""
    targets = [target for _, target in pairs]
    for target, ids in zip(targets, tokenizer.target_sp.encode(targets)):
        if UNK_ID in ids:
            raise TranslatorError(
                f"the target term {target!r} holds characters the model's vocabulary lacks (<unk>)",
                str(path),
                "remove it, or train the model with data.byte_fallback",
            )
    return Terms(pairs, clean=lambda text: source_text(text, data))


def model_precision(model: Transformer | Ensemble, asked: str) -> str:
    """The device and dtype the model is on, and why (see device.describe)."""
    weight = next(model.parameters())
    return describe(weight.device, weight.dtype, "int8" if is_int8(model) else asked)


def translate_chunks(
    model: Transformer | Ensemble,
    tokenizer: Tokenizer,
    decode: DecodeConfig,
    lines_in: Iterable[list[str]],
    out: TextIO,
    nbest: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    alignment_layer: int | None = None,
    channel: Channel | None = None,
    data: DataConfig | None = None,
    sampling: Sampling | None = None,
    lines_expected: int | None = None,
    prefix: bool = False,
    constraints: bool = False,
    terms: Terms | None = None,
) -> int:
    """Translate chunks of lines, writing each chunk as soon as it is done; returns the line count.

    Each input line gives its best translation; with `nbest` (1 too) up to nbest TSV rows
    `line<TAB>text<TAB>score` (line from 0): one for an empty or over-long line, fewer when the
    search finds fewer distinct hypotheses.
    With `alignment_layer`, each line (or row) ends in a TAB and its Pharaoh word alignment.
    `progress(done, total)` counts sentences over all chunks; total is what has been read so far.
    With `lines_expected` (the input's line count, when known) it counts lines of that total
    instead, so a bar does not read "done" at the end of each chunk.
    With `prefix` each line is SOURCE<TAB>PREFIX, split at its first TAB, and its translations
    start with PREFIX (translate_lines); a line without a TAB has no prefix.
    With `constraints` each line is SOURCE<TAB>PHRASE<TAB>PHRASE..., fairseq's format: its
    translations hold every PHRASE (translate_lines); a line without a TAB has none. With
    `terms` (compile_terms) the target terms of the source terms a line holds are added to its
    constraints.
    """
    count, decoded = 0, 0  # lines written; sentences decoded in earlier chunks
    output = getattr(out, "name", "the output")  # <stdout>, as a failed write names it
    warn = advice_once(warn_stderr)  # each chunk warns anew; its advice is said once a run
    for chunk in lines_in:
        chunk_total = [0]  # this chunk's sentences, once its first batch is done

        def report(
            done: int,
            total: int,
            before: int = decoded,
            lines_before: int = count,
            lines: int = len(chunk),
            chunk_total: list[int] = chunk_total,
        ) -> None:
            chunk_total[0] = total
            if lines_expected is None:
                progress(before + done, before + total)
            else:  # a long line's pieces are sentences of their own: done / total of the chunk
                progress(lines_before + lines * done // max(total, 1), lines_expected)

        chunk, prefixes, required = _fields(chunk, prefix, constraints)
        if terms is not None:
            required = terms.added_to(required, chunk)
        for hyps in translate_lines(
            model,
            tokenizer,
            chunk,
            decode,
            nbest or 1,
            warn=warn,
            first_line=count + 1,
            progress=report if progress is not None else None,
            alignment_layer=alignment_layer,
            channel=channel,
            data=data,
            sampling=sampling,
            prefixes=prefixes,
            constraints=required,
        ):
            with write_errors(output, "cannot write the translations"):
                out.write(_rows(hyps, count, nbest is not None, alignment_layer is not None))
            count += 1
        with write_errors(output, "cannot write the translations"):
            out.flush()
        decoded += chunk_total[0]
    return count


def _fields(
    chunk: list[str], prefix: bool, constraints: bool
) -> tuple[list[str], list[str] | None, list[list[str]] | None]:
    """A chunk's lines -> their sources and, with `prefix`, each line's prefix (SOURCE<TAB>PREFIX,
    split at the first TAB) or, with `constraints`, its phrases (SOURCE<TAB>PHRASE<TAB>...)."""
    if prefix:
        split = [line.partition("\t") for line in chunk]
        return [source for source, _, _ in split], [text for _, _, text in split], None
    if constraints:
        fields = [line.split("\t") for line in chunk]
        return [f[0] for f in fields], None, [f[1:] for f in fields]
    return chunk, None, None


def _rows(hyps: list[tuple], number: int, nbest: bool, aligned: bool) -> str:
    """One line's output: its best text (TAB alignment) or, with `nbest`, a TSV row per hypothesis,
    `number<TAB>text<TAB>score[<TAB>alignment]`. In the TSV forms a TAB inside a text becomes a
    space; the plain text is written as it is."""
    if not nbest and not aligned:
        return hyps[0][0] + "\n"
    if not nbest:
        return f"{hyps[0][0].replace(chr(9), ' ')}{_tail(hyps[0])}\n"
    return "".join(f"{number}\t{h[0].replace(chr(9), ' ')}\t{h[1]:.4f}{_tail(h)}\n" for h in hyps)


def _tail(translation: tuple) -> str:
    """`<TAB>alignment` when the translation carries one, else nothing."""
    return f"\t{translation[2]}" if len(translation) > 2 else ""
