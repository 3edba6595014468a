"""Completing a partly typed word: after its forced prefix, an output's text must go on with given
characters.

A translator who has typed "Ein Ma" wants the model's "Mann", "Mantel" or "Markt", whichever piece
sequence spells it: forcing the pieces of "Ma" alone ("▁Ma") would make the model continue a
segmentation it never saw in training. So the typed characters are matched as text: at each step
a row may only take the pieces whose text agrees with what is left of its typed characters, that
is the pieces that are a start of it, or that it is a start of (interactive translation
prediction, Knowles & Koehn 2016). What is left is read from the row's own outputs since its
prefix, so beams that reorder, and sentences that leave the batch, need no state kept here but
the rows' order.
"""

from __future__ import annotations

import torch

from translator.data.join import no_word_spaces


class Spelling:
    """A vocabulary's piece texts (SentencePiece's, with ▁ for a space; "" for ids never
    generated: PAD, BOS, EOS, <unk>), indexed by first character, and for each text left to spell
    the ids that agree with it, remembered: one per translate call, shared by its batches."""

    def __init__(self, pieces: list[str]) -> None:
        self.pieces = pieces
        self._by_first: dict[str, list[int]] = {}  # a piece agrees only with texts of its first
        for i, piece in enumerate(pieces):
            if piece:
                self._by_first.setdefault(piece[0], []).append(i)
        self._allowed: dict[str, torch.Tensor] = {}

    def allowed(self, left: str) -> torch.Tensor:
        """The ids whose text is a start of `left`, or that `left` is a start of."""
        if left not in self._allowed:
            self._allowed[left] = torch.tensor(
                [
                    i
                    for i in self._by_first.get(left[0], [])
                    if left.startswith(self.pieces[i]) or self.pieces[i].startswith(left)
                ],
                dtype=torch.long,
            )
        return self._allowed[left]


class WordCompletion:
    """Per row, the text its output must go on with from output position `starts[row]` on ("":
    none), in the vocabulary's piece spelling."""

    def __init__(self, spelling: Spelling, typed: list[str], starts: list[int]) -> None:
        self.spelling, self.typed, self.starts = spelling, typed, starts

    def rows(self, index: list[int]) -> WordCompletion:
        """The completion of rows `index` (a beam's copies of each sentence, the rows kept)."""
        return WordCompletion(
            self.spelling, [self.typed[i] for i in index], [self.starts[i] for i in index]
        )

    def lengths(self) -> torch.Tensor:
        """(N,) the most output positions each row's typed text can take: one character a piece."""
        return torch.tensor([s + len(t) for s, t in zip(self.starts, self.typed)])

    def left(self, row: int, outputs: list[int]) -> str:
        """What `row` must still spell, given its outputs so far (no BOS)."""
        text = "".join(self.spelling.pieces[t] for t in outputs[self.starts[row] :])
        return self.typed[row][len(text) :] if len(text) < len(self.typed[row]) else ""

    def ban_(self, log_probs: torch.Tensor, tokens: torch.Tensor, step: int) -> torch.Tensor:
        """log_probs (N, V), in place: a row that has not yet spelled its typed text may only
        take the pieces that agree with what is left of it (EOS is not among them).

        tokens (N, T): BOS and then the outputs so far, tokens[:, 1 : step + 1].
        """
        # a piece spells one character or more: past starts + len(typed) outputs a row is done
        rows = [
            r
            for r, (typed, start) in enumerate(zip(self.typed, self.starts))
            if start <= step < start + len(typed)
        ]
        if not rows:
            return log_probs
        outputs = tokens[rows, 1 : step + 1].tolist()
        for row, out in zip(rows, outputs):
            if left := self.left(row, out):
                ids = self.spelling.allowed(left).to(log_probs.device)
                kept = log_probs[row, ids]
                log_probs[row] = float("-inf")
                log_probs[row, ids] = kept
        return log_probs


def piece_texts(sp) -> list[str]:
    """Each id's text in a SentencePiece processor: its piece, "" for control ids (PAD, BOS, EOS)
    and <unk>, which no typed text spells."""
    return [
        "" if sp.is_control(i) or sp.is_unknown(i) else sp.id_to_piece(i)
        for i in range(sp.get_piece_size())
    ]


def inside_word(pieces: list[str]) -> torch.Tensor:
    """(V,) bool: the ids whose piece goes on inside a word (no ▁, a letter or digit first), in
    scripts that put spaces between words; in the others (Chinese, Thai, ...) no piece does."""
    return torch.tensor([bool(p) and p[0].isalnum() and not no_word_spaces(p[0]) for p in pieces])
