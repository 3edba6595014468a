"""Lines in, lines out: encode, sort by length, batch by tokens, search, restore order, detokenize.

Rule for over-long input: a line of more than `piece_limit` subword tokens (beyond it, the
output that decode.max_len_a/b allow would not fit the model's positions) is cut after every
sentence end (. ! ?), as single-sentence models translate one sentence at a time best; a sentence
still over the limit is cut at the last clause end (; :) that fits, else at the last word start,
else mid-word. Every piece is translated and the outputs are joined with a space, or with nothing
where the text on either side of the join is in a script written without spaces (Chinese,
Japanese). A warning on stderr names the line, and another names the lines whose output reached
the length limit (the search, not the model, ended it). (With --nbest a split line gets one
hypothesis, the joined best.) The `<unk>` tokens a model emits are dropped from the text, with a
warning that counts them; another counts the source pieces outside its vocabulary.

Searching one batch (greedy, beam, sampling) is `decode/search.py`; a line's pieces and their
text `line_pieces.py`; the warnings on the search's outputs `search_warnings.py`; loading
checkpoints (device, dtype, ensembles) `loading.py`; reading stdin and the progress bar
`stream.py`; device and dtype names `device.py`.
"""

from __future__ import annotations

import dataclasses
import sys
import warnings
from collections.abc import Callable, Iterator

from translator.config import DataConfig, DecodeConfig
from translator.data.clean import source_text
from translator.data.split import piece_limit
from translator.data.tokenizer import Tokenizer
from translator.decode import Hypothesis, in_eval_mode
from translator.decode.forced import target_log_probs
from translator.decode.sampling import Sampling, piece_keys
from translator.decode.search import sample, search
from translator.diagnostics.alignment import align_hypotheses, check_layer
from translator.errors import TranslatorError, counted
from translator.guided import Guides, holding, line_guides
from translator.line_pieces import detokenize, source_pieces, with_alignments
from translator.model.ensemble import Ensemble
from translator.model.transformer import Transformer
from translator.rerank import Channel
from translator.search_warnings import warn_of_lines


def with_overrides(decode: DecodeConfig, **values) -> DecodeConfig:
    """`decode` with the values that are not None put in (command-line flags), checked again by
    DecodeConfig."""
    return dataclasses.replace(decode, **{k: v for k, v in values.items() if v is not None})


def length_batches(lengths: list[int], batch_tokens: int) -> Iterator[list[int]]:
    """Indices sorted by length (longest first, so memory peaks at once),
    cut so rows * (longest + EOS) <= batch_tokens."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batch: list[int] = []
    for i in order:
        if batch and (len(batch) + 1) * (lengths[batch[0]] + 1) > batch_tokens:
            yield batch
            batch = []
        batch.append(i)
    if batch:
        yield batch


def refuse_non_text(function: str, name: str, lines: list[str]) -> None:
    """A Python caller's list of lines, checked: one string would be read a character a line, and
    a line that is not text (None, bytes) would fail deep inside, as an AttributeError."""
    if isinstance(lines, str):
        raise TypeError(f"{function} takes a list of lines, not one string: [line]")
    for number, line in enumerate(lines):
        if not isinstance(line, str):
            raise TypeError(f"{function}: {name}[{number}] is {type(line).__name__}, not str")


def search_beam(beam_size: int, nbest: int = 1, channel: Channel | None = None) -> int:
    """The beam a search runs at: the widest of --beam, --nbest and a channel's candidates."""
    return max(beam_size, nbest, channel.candidates if channel else 0)


def python_warning(message: str) -> None:
    """translate_lines' warnings for a Python caller: UserWarnings, which the caller's filters
    govern (the commands print them as `warning:` lines instead), pointing at the caller's line
    however deep in this package the warning was raised."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_globals.get("__name__", "").startswith("translator."):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, stacklevel=level + 1)


@in_eval_mode
def translate_lines(
    model: Transformer | Ensemble,
    tokenizer: Tokenizer,
    lines: list[str],
    decode: DecodeConfig,
    nbest: int = 1,
    warn: Callable[[str], None] | None = python_warning,
    progress: Callable[[int, int], None] | None = None,
    first_line: int = 1,
    alignment_layer: int | None = None,
    channel: Channel | None = None,
    data: DataConfig | None = None,
    sampling: Sampling | None = None,
    prefixes: list[str] | None = None,
    constraints: list[list[str]] | None = None,
) -> list[list[tuple]]:
    """Translate `lines`; returns, per input line and in input order, (text, score) best first.

    `prefixes` (one per line, "" for none): the text each line's translations start with
    (interactive translation, a translator's first words kept); the search continues it, and its
    tokens count in the score. Its whole words are forced, its last word spelled as the model
    likes (split_prefix), so a prefix that ends inside a word is completed. A line split for its
    length has the prefix on its first part; an empty line still gives an empty translation.

    `constraints` (one list per line, [] for none): phrases each line's translations must hold
    (terminology; decode/constrained.py), encoded as the target side; the beam search then places
    them, at any --beam, but a beam wider than a line's constraint tokens places them better. Not
    with prefixes or sampling; a line split for its length is translated without them, with a
    warning (guided.constraint_pieces).

    `data`: the model's data settings; each line is then normalised as its training sources were
    (data/clean.py: control characters, whitespace runs, NFC), so a character the cleaner took
    out of the training text is not an `<unk>` here. None: lines are only stripped.

    With a `channel` model the search finds `channel.candidates` hypotheses per line and they are
    reranked with it (translator/rerank.py); scores are then the combined ones.

    With `sampling` each output token is drawn from the model's distribution (decode/sampling.py),
    reproducible per line from the seed and the line's number (first_line on); `nbest` draws a
    line, best first (repeats kept); beam size does not apply, a channel is refused.

    With `alignment_layer` each tuple is (text, score, alignment): Pharaoh `src-tgt` word pairs read
    from that decoder layer's cross-attention (diagnostics/alignment.py).

    An empty (or whitespace-only) line gives one empty translation, not searched, with the score
    the search would give it: log p(EOS | empty source). `progress(done, total)` is called after
    each batch, counting sentences (pieces of over-long lines count apart).
    Warnings (a line split, <unk> tokens in the source or dropped from the output, outputs ended
    by the length limit) number lines from `first_line` and go to `warn` (None: dropped).
    """
    refuse_non_text("translate_lines", "lines", lines)
    _check_lists(len(lines), nbest, prefixes, constraints)
    _check_request(model, decode.beam_size, nbest, alignment_layer, channel, sampling)
    shown, nbest = nbest, max(nbest, channel.candidates) if channel else nbest
    sources = [source_text(line, data) for line in lines]
    limit = piece_limit(model.cfg.max_positions, decode)
    pieces, owner = source_pieces(
        tokenizer, sources, limit, model.cfg.max_positions, warn, first_line
    )
    guides = line_guides(
        tokenizer,
        prefixes,
        constraints,
        lines,
        owner,
        data,
        model.cfg.max_positions - 1,
        search_beam(decode.beam_size, nbest),
        sampling is not None,
        warn,
        first_line,
    )
    results, aligned = _search_batches(
        model,
        tokenizer,
        pieces,
        owner,
        decode,
        nbest,
        guides,
        sampling,
        first_line,
        alignment_layer,
        progress,
    )
    by_line: list[list[int]] = [[] for _ in lines]  # each line's pieces, in order
    for k, line in enumerate(owner):
        by_line[line].append(k)
    if warn is not None:
        warn_of_lines(
            results,
            by_line,
            pieces,
            owner,
            guides,
            decode,
            model.cfg.max_positions - 1,
            warn,
            first_line,
        )
    # an empty line is not searched, but its empty translation gets the score the search would
    # give it, log p(EOS | empty source) (as `translator score` scores the empty pair): not 0, a
    # probability of 1 that would rank it above every real translation
    blank = target_log_probs(model, [[]], [[]])[0] if [] in by_line else 0.0
    out = [detokenize(tokenizer, [results[k] for k in ks], blank) for ks in by_line]
    if channel is not None:
        out = channel.rerank(sources, out)
    if alignment_layer is None:
        return [candidates[:shown] for candidates in out]
    return [
        with_alignments(
            tokenizer,
            translations,
            [pieces[k] for k in ks],
            [results[k] for k in ks],
            [aligned[k] for k in ks],
        )
        for translations, ks in zip(out, by_line)
    ]


def _search_batches(
    model: Transformer | Ensemble,
    tokenizer: Tokenizer,
    pieces: list[list[int]],
    owner: list[int],
    decode: DecodeConfig,
    nbest: int,
    guides: Guides,
    sampling: Sampling | None,
    first_line: int,
    alignment_layer: int | None,
    progress: Callable[[int, int], None] | None,
) -> tuple[list[list[Hypothesis]], list[list[list[tuple[int, int]]]]]:
    """Each piece's hypotheses (searched or sampled, batch by batch, longest first) and, with
    `alignment_layer`, each hypothesis's word alignment; in the pieces' order."""
    results: list[list[Hypothesis]] = [[] for _ in pieces]
    aligned: list[list[list[tuple[int, int]]]] = [[] for _ in pieces]  # per piece, per hypothesis
    done = 0
    # seed each piece's draws (only when sampling: searches need no keys)
    keys = piece_keys(owner, first_line) if sampling is not None else []
    # sampling decodes each piece nbest times: batches of fewer pieces keep to batch_tokens
    budget = decode.batch_tokens if sampling is None else max(1, decode.batch_tokens // nbest)
    for batch in length_batches([len(p) for p in pieces], budget):
        batch_prefixes, completion, batch_required = guides.for_batch(batch)
        if sampling is None:
            found = search(
                model,
                [pieces[i] for i in batch],
                decode,
                nbest,
                prefixes=batch_prefixes,
                constraints=batch_required,
                completion=completion,
                word_inner=guides.word_inner,
            )
        else:
            batch_keys = [keys[i] for i in batch]
            found = sample(
                model,
                [pieces[i] for i in batch],
                batch_keys,
                decode,
                sampling,
                nbest,
                prefixes=batch_prefixes,
                completion=completion,
            )
        if guides.required:  # an n-best (a channel's candidates too) keeps those that hold them
            found = [holding(hyps, guides.required[i]) for i, hyps in zip(batch, found)]
        for i, hyps in zip(batch, found):
            results[i] = hyps
        if alignment_layer is not None:
            batch_pieces = [pieces[i] for i in batch]
            pairs = align_hypotheses(model, tokenizer, batch_pieces, found, alignment_layer)
            for i, piece_pairs in zip(batch, pairs):
                aligned[i] = piece_pairs
        done += len(batch)
        if progress is not None:
            progress(done, len(pieces))
    return results, aligned


def _check_lists(n_lines: int, nbest: int, prefixes: list | None, constraints: list | None) -> None:
    """A Python caller's arguments that the command line cannot get wrong."""
    if nbest < 1:
        raise TranslatorError(f"nbest={nbest}", "nbest", "ask for 1 or more translations a line")
    for name, per_line, none in (("prefixes", prefixes, '""'), ("constraints", constraints, "[]")):
        if per_line is not None and len(per_line) != n_lines:
            raise TranslatorError(
                f"{len(per_line)} given for {counted(n_lines, 'line')}",
                name,
                f"give one a line ({none} for none)",
            )


def _check_request(
    model: Transformer | Ensemble,
    beam_size: int,
    nbest: int,
    alignment_layer: int | None,
    channel: Channel | None,
    sampling: Sampling | None = None,
) -> None:
    """Refuse, before any decoding, what translate_lines cannot do."""
    if sampling is not None:
        check_sampling(channel is not None)
    if channel is not None and alignment_layer is not None:
        raise TranslatorError(
            "alignments come from one search's attention, not from a reranked n-best",
            "--alignments",
            "leave out --channel to print alignments",
        )
    width = 1 if sampling else search_beam(beam_size, nbest, channel)
    if width > model.cfg.vocab_size:
        raise TranslatorError(
            f"a beam of {width} is wider than the vocabulary ({model.cfg.vocab_size} tokens)",
            "--beam/--nbest",
            "use a smaller beam",
        )
    if alignment_layer is not None and isinstance(model, Ensemble):
        raise TranslatorError(
            "alignments are read from one model's cross-attention, not an ensemble's",
            "--alignments",
            "give one checkpoint",
        )
    if alignment_layer is not None:
        check_layer(model, alignment_layer)


def check_sampling(channel: bool) -> None:
    """A channel reranks a search's n-best, not drawn translations: refused beside sampling."""
    if channel:
        raise TranslatorError(
            "--channel reranks a beam's n-best, not sampled translations",
            "--sampling",
            "leave out --channel (or --sampling)",
        )
