"""A line's pieces: the token sequences searched for one input line, and its text made of theirs.

A line over `piece_limit` tokens is split into several pieces (data/split.py) and its output joins
theirs (data/join.py); an empty line has none. translate.py searches the pieces, batch by batch.
"""

from __future__ import annotations

from collections.abc import Callable

from translator.data.join import join_pieces
from translator.data.split import split_long
from translator.data.tokenizer import UNK_ID, Tokenizer
from translator.decode import Hypothesis
from translator.diagnostics.alignment import join_alignments
from translator.diagnostics.words import pharaoh
from translator.line_warnings import source_unk_message

# an output is one line: a line break a model spells in bytes (byte fallback's <0x0A>, <0x0D>)
# would split it and shift every later line; these are all that str.splitlines breaks at
ONE_LINE = str.maketrans(dict.fromkeys("\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029", " "))


def source_pieces(
    tokenizer: Tokenizer,
    sources: list[str],
    limit: int,
    max_positions: int,
    warn: Callable[[str], None] | None,
    first_line: int,
) -> tuple[list[list[int]], list[int]]:
    """Encode `sources` into the token sequences to decode, and the line each one belongs to.

    A line longer than `limit` tokens (piece_limit) is split (split_long); an empty line gives no
    sequence. Source pieces outside the vocabulary (<unk>) are counted in one warning.
    """
    pieces: list[list[int]] = []
    owner: list[int] = []
    unknown: dict[int, int] = {}
    for number, ids in enumerate(tokenizer.encode(sources)):
        if n := ids.count(UNK_ID):
            unknown[first_line + number] = n
        if len(ids) > limit:
            parts = split_long(ids, limit, tokenizer.sp.id_to_piece(ids))
            if warn is not None:
                warn(
                    f"line {first_line + number}: {len(ids)} tokens, over the {limit} translated "
                    f"at once (max_positions {max_positions}, decode.max_len_a/b); translated in "
                    f"{len(parts)} pieces (one or more per sentence), joined"
                )
        else:
            parts = [ids] if ids else []
        pieces += parts
        owner += [number] * len(parts)
    if unknown and warn is not None:
        warn(source_unk_message(unknown))
    return pieces, owner


def detokenize(
    tokenizer: Tokenizer, pieces_hyps: list[list[Hypothesis]], blank: float
) -> list[tuple[str, float]]:
    """One line's hypotheses (one list per piece) -> [(text, score)] best first; an empty line's
    is [("", blank)]."""
    if not pieces_hyps:  # empty line
        return [("", blank)]
    if len(pieces_hyps) == 1:
        texts = tokenizer.decode([h.tokens for h in pieces_hyps[0]])
        return [(_one_line(text), h.score) for text, h in zip(texts, pieces_hyps[0])]
    # over-long: join the best of each
    texts = tokenizer.decode([hyps[0].tokens for hyps in pieces_hyps])
    return [(_one_line(join_pieces(texts)), sum(hyps[0].score for hyps in pieces_hyps))]


def _one_line(text: str) -> str:
    """A decoded text as one output line: its line breaks (ONE_LINE) and the double or trailing
    spaces a stray U+2581 piece leaves become single spaces, trimmed (as fairseq's SentencePiece
    post-processing does); other spaces (no-break, ideographic) stay."""
    return " ".join(filter(None, text.translate(ONE_LINE).split(" ")))


def unk_count(pieces_hyps: list[list[Hypothesis]]) -> int:
    """<unk> tokens in what `detokenize` makes text of (all hypotheses of a line, the best of each
    piece)."""
    shown = pieces_hyps[0] if len(pieces_hyps) == 1 else [hyps[0] for hyps in pieces_hyps]
    return sum(h.tokens.count(UNK_ID) for h in shown)


def with_alignments(
    tokenizer: Tokenizer,
    translations: list[tuple[str, float]],
    src_parts: list[list[int]],
    hyps: list[list[Hypothesis]],
    aligned: list[list[list[tuple[int, int]]]],
) -> list[tuple[str, float, str]]:
    """One line's (text, score) list and its pieces' sources, hypotheses and alignments -> (text,
    score, alignment)."""
    if not src_parts:  # an empty line
        return [(text, score, "") for text, score in translations]
    if len(src_parts) == 1:
        return [
            (text, score, pharaoh(pairs)) for (text, score), pairs in zip(translations, aligned[0])
        ]
    # over-long: the best of each piece, joined
    texts = tokenizer.decode([found[0].tokens for found in hyps])
    joined = join_alignments(src_parts, texts, [pairs[0] for pairs in aligned], tokenizer)
    return [(*translations[0], pharaoh(joined))]
