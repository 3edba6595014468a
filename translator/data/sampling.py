"""Subword regularisation (Kudo 2018): every epoch sees its training pairs segmented anew.

The prepared ids are decoded once to their (normalised) text; each epoch SentencePiece encodes
that text again with sampling: a unigram model draws one of all segmentations with probability
proportional to P(segmentation)^alpha (smaller alpha: more varied, longer), a BPE model drops
merges with probability alpha (BPE-dropout). The seed, drawn from (train seed, epoch, side),
makes an epoch's segmentations the same in every process and after a resume.
"""

from __future__ import annotations

import numpy as np
import sentencepiece as spm

from translator.data.shards import TokenArray


class SubwordSampler:
    """One side's prepared rows, segmented again by sampling for each epoch."""

    def __init__(self, model_file: str, rows: TokenArray, alpha: float, longest: int) -> None:
        self.sp = spm.SentencePieceProcessor(model_file=model_file)
        self.rows, self.alpha, self.longest = rows, alpha, longest
        self.texts = self.sp.decode([rows[i] for i in range(len(rows))])

    def epoch(self, seed: int, epoch: int, side: int) -> TokenArray:
        """This epoch's rows; a sample longer than `longest` tokens keeps the prepared one."""
        state = np.random.SeedSequence([seed, epoch, side]).generate_state(1)  # (1,) uint32
        spm.set_random_generator_seed(int(state[0]))
        # one thread: SentencePiece seeds each worker thread's generator, so more threads would
        # hand sentences to generators in a different order on every run
        sampled = self.sp.encode(
            self.texts, enable_sampling=True, alpha=self.alpha, nbest_size=-1, num_threads=1
        )
        fits = (s if len(s) <= self.longest else self.rows[i] for i, s in enumerate(sampled))
        return TokenArray.from_rows(list(fits))
