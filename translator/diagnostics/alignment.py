"""Word alignments of finished translations, read from one decoder layer's cross-attention.

The hypotheses a search returns are forced-decoded once more, in one batch: that gives exactly
the attention of the returned hypothesis (a beam's weights would have to be reordered at every
step to follow it), at the cost of one teacher-forced pass.
"""

from __future__ import annotations

from translator.data.join import first_words
from translator.data.tokenizer import UNK_ID, Tokenizer
from translator.decode import Hypothesis
from translator.diagnostics.capture import forced_attention
from translator.diagnostics.words import WORD_START, alignment, word_ids
from translator.errors import TranslatorError
from translator.model.transformer import Transformer


def check_layer(model: Transformer, layer: int) -> int:
    """A decoder layer number (negative counts from the last) -> its index; out of range is a user
    error."""
    n = model.cfg.n_decoder_layers
    if not -n <= layer < n:
        raise TranslatorError(
            f"alignment layer {layer} does not exist: the model has {n} decoder layers",
            "--alignment-layer",
            f"use 0 to {n - 1}, or -1 for the last",
        )
    return layer % n


def align(
    model: Transformer,
    tokenizer: Tokenizer,
    src_ids: list[list[int]],
    tgt_ids: list[list[int]],
    layer: int = -1,
) -> list[list[tuple[int, int]]]:
    """(source word, target word) pairs for each (source, translation) id-list pair (no EOS / BOS).

    Cross-attention of decoder `layer`, averaged over heads; words as in `diagnostics.words`.
    """
    if not src_ids:
        return []
    cross = forced_attention(model, src_ids, tgt_ids).maps["cross"][check_layer(model, layer)]
    cross = cross.mean(dim=1)  # (B, T, S): the heads read together
    out = []
    for b, (src, tgt) in enumerate(zip(src_ids, tgt_ids)):
        pieces = tokenizer.target_sp.id_to_piece(tgt)
        pairs = alignment(cross[b], tokenizer.sp.id_to_piece(src), pieces)
        out.append(printed(pairs, pieces, tgt))
    return out


def printed(
    pairs: list[tuple[int, int]], pieces: list[str], ids: list[int]
) -> list[tuple[int, int]]:
    """`pairs` over the target words the text shows: Tokenizer.decode drops <unk>, so a word of
    <unk> (and bare-space) pieces alone is not in it; its pairs go, the words after it move up."""
    words = word_ids(pieces)
    shown = sorted(
        {w for w, p, i in zip(words, pieces, ids) if i != UNK_ID and p.strip(WORD_START)}
    )
    number = {word: n for n, word in enumerate(shown)}
    return [(s, number[t]) for s, t in pairs if t in number]


def align_hypotheses(
    model: Transformer,
    tokenizer: Tokenizer,
    src_ids: list[list[int]],
    hyps: list[list[Hypothesis]],
    layer: int = -1,
) -> list[list[list[tuple[int, int]]]]:
    """Alignments of every hypothesis of every source (a search's n-best lists), in one forced
    pass."""
    flat_src = [src for src, found in zip(src_ids, hyps) for _ in found]
    flat = iter(
        align(model, tokenizer, flat_src, [h.tokens for found in hyps for h in found], layer)
    )
    return [[next(flat) for _ in found] for found in hyps]


def join_alignments(
    src_parts: list[list[int]],
    texts: list[str],
    parts: list[list[tuple[int, int]]],
    tokenizer: Tokenizer,
) -> list[tuple[int, int]]:
    """Alignments of consecutive pieces of one over-long line -> the alignment of the whole line.

    `src_parts` are the pieces' source ids (cut from the line's ids in order), `texts` their
    translations, which `join_pieces` joins into the line. A source cut inside a word continues
    that word; so does a target joined without a space (Chinese, Japanese).
    """
    starts = word_ids(tokenizer.sp.id_to_piece([i for part in src_parts for i in part]))
    out, src_offset = [], 0
    for part, tgt_offset, pairs in zip(src_parts, first_words(texts), parts):
        first_word = starts[src_offset] if part else 0
        out += [(s + first_word, t + tgt_offset) for s, t in pairs]
        src_offset += len(part)
    return out
