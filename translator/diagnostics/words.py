"""From SentencePiece pieces to words: grouping, merging attention maps, and word alignments.

A word starts at a piece that begins with U+2581 (SentencePiece's mark for a preceding space) and
takes the pieces up to the next such piece; special tokens (`<s>`, `</s>`) are words of their own.
`<unk>` is not: it stands for characters inside a word (a "☺" or "<" the vocabulary lacks). Words
counted this way are the whitespace-separated words of the text.
"""

from __future__ import annotations

import torch

WORD_START = "\u2581"
SPECIALS = ("<s>", "</s>", "<pad>")


def word_ids(pieces: list[str]) -> list[int]:
    """The word index of each piece."""
    out, word = [], -1
    for i, piece in enumerate(pieces):
        if i == 0 or piece.startswith(WORD_START) or piece in SPECIALS or pieces[i - 1] in SPECIALS:
            word += 1
        out.append(word)
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
