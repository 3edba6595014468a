"""From SentencePiece pieces to words: grouping, merging attention maps, and word alignments.

A word starts at a piece that begins with U+2581 (SentencePiece's mark for a preceding space) and
takes the pieces up to the next such piece; special tokens (`<s>`, `</s>`) are words of their own.
`<unk>` is not: it stands for characters inside a word (a "☺" or "<" the vocabulary lacks). A
piece that is only U+2581 (a space SentencePiece writes alone, before a piece without its own
mark, or a model's stray one) starts no word: the piece after it does, and it joins that word (at
the end, the one before). Words counted this way are the whitespace-separated words of the text.
"""

from __future__ import annotations

import torch

WORD_START = "\u2581"
SPECIALS = ("<s>", "</s>", "<pad>")


def word_ids(pieces: list[str]) -> list[int]:
    """The word index of each piece."""
    out, word, spaces = [], -1, []  # spaces: the bare-space pieces since the last word's start
    for i, piece in enumerate(pieces):
        after_special = i > 0 and pieces[i - 1] in SPECIALS
        if piece not in SPECIALS and not piece.strip(WORD_START):
            spaces.append(i)
            out.append(-1)  # the next word's, filled in below
            continue
        if word < 0 or piece.startswith(WORD_START) or spaces or piece in SPECIALS or after_special:
            word += 1
        for j in spaces:
            out[j] = word
        spaces = []
        out.append(word)
    for j in spaces:  # bare spaces at the end: the last word's
        out[j] = max(word, 0)
    return out


def word_labels(pieces: list[str]) -> list[str]:
    """Each word's text: its pieces joined, without the U+2581 marks."""
    words: list[str] = []
    for piece, word in zip(pieces, word_ids(pieces)):
        if word == len(words):
            words.append("")
        words[word] += piece if piece in SPECIALS else piece.replace(WORD_START, "")
    return words


def _grouping(ids: list[int], dtype: torch.dtype, mean: bool) -> torch.Tensor:
    """(words, pieces) matrix that sums (or averages) the pieces of each word."""
    index = torch.tensor(ids)
    m = torch.zeros(int(index.max()) + 1 if ids else 0, len(ids), dtype=dtype)
    m[index, torch.arange(len(ids))] = 1.0
    return m / m.sum(dim=1, keepdim=True).clamp(min=1) if mean else m


def merge_words(
    weights: torch.Tensor, row_pieces: list[str], col_pieces: list[str]
) -> torch.Tensor:
    """(..., T, L) piece-level weights -> (..., T_words, L_words).

    A key word's weight is the sum over its pieces (the attention mass it receives); a query word's
    row is the mean of its pieces' rows (so each row still sums to what a piece row sums to).
    """
    rows = _grouping(word_ids(row_pieces), weights.dtype, mean=True).to(weights.device)  # (Tw, T)
    cols = _grouping(word_ids(col_pieces), weights.dtype, mean=False).to(weights.device)  # (Lw, L)
    return rows @ weights @ cols.T


def alignment(
    cross: torch.Tensor, src_pieces: list[str], tgt_pieces: list[str]
) -> list[tuple[int, int]]:
    """One sentence's cross-attention (T, S) over target and source pieces (no EOS) -> Pharaoh
    pairs.

    Rows are the target pieces (row t: the decoder position that produced piece t), columns the
    source pieces. Each target word gets the source word receiving most attention mass from its
    pieces (fairseq's `--print-alignment` rule, at word level). Returns (source word, target word)
    pairs in target order.
    """
    if not src_pieces or not tgt_pieces:
        return []
    # (Tw, Sw)
    words = merge_words(cross[: len(tgt_pieces), : len(src_pieces)], tgt_pieces, src_pieces)
    return [(int(s), t) for t, s in enumerate(words.argmax(dim=-1).tolist())]


def pharaoh(pairs: list[tuple[int, int]]) -> str:
    """`0-0 1-2 ...` (source-target)."""
    return " ".join(f"{s}-{t}" for s, t in pairs)
