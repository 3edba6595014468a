"""The training batches of this process, epoch after epoch, from the position in TrainState.

Each epoch is a new shuffle of length-bucketed token batches (data/batching.py); with subword
sampling each epoch also gets its own segmentation. `take` advances the state, so a resumed run
reads the same batches as one that did not stop.
"""

from __future__ import annotations

import numpy as np

from translator.config import Config
from translator.data.batching import Batch, make_batch, token_batches
from translator.data.sampling import SubwordSampler
from translator.data.shards import TokenArray
from translator.errors import TranslatorError
from translator.prepared import prepared_dir, vocab_files
from translator.train.distributed import Dist
from translator.train.state import TrainState


class TrainBatches:
    """This process's training batches, epoch after epoch, read from the position in TrainState."""

    def __init__(self, cfg: Config, d: Dist) -> None:
        folder = prepared_dir(cfg.data)
        self.src, self.tgt = TokenArray(folder / "train.src"), TokenArray(folder / "train.tgt")
        # + EOS / BOS
        longest = int(max(self.src.lengths.max(initial=0), self.tgt.lengths.max(initial=0))) + 1
        if longest > cfg.model.max_positions:  # found now, not at the first long batch
            raise _too_long(cfg, longest)
        self.args = (cfg.train.max_tokens, cfg.train.seed)
        self.max_epochs = cfg.train.max_epochs
        self.rank, self.world_size = d.rank, d.world_size
        self.samplers: list[SubwordSampler] = []
        if cfg.train.subword_alpha:  # + EOS / BOS: rows of at most max_positions - 1 tokens
            files, alpha = vocab_files(cfg.data), cfg.train.subword_alpha
            self.samplers = [
                SubwordSampler(str(folder / files[side]), rows, alpha, cfg.model.max_positions - 1)
                for side, rows in (("src", self.src), ("tgt", self.tgt))
            ]
        # (epoch, its batches of row indices, its source rows, its target rows)
        Cached = tuple[int, list[np.ndarray], TokenArray, TokenArray]
        self.cached: Cached = (-1, [], self.src, self.tgt)

    def epoch(self, epoch: int) -> list[np.ndarray]:
        if self.cached[0] != epoch:
            src, tgt = self.src, self.tgt
            if self.samplers:  # this epoch's segmentation; batches are cut on its lengths
                seed = self.args[1]
                src, tgt = (s.epoch(seed, epoch, side) for side, s in enumerate(self.samplers))
            order = token_batches(
                src.lengths, tgt.lengths, *self.args, epoch, self.rank, self.world_size
            )
            if not order:
                raise TranslatorError(
                    f"the training split has fewer batches than the {self.world_size} processes",
                    "train",
                    "use fewer processes or a smaller train.max_tokens",
                )
            self.cached = (epoch, order, src, tgt)
        return self.cached[1]

    def roll(self, state: TrainState) -> None:
        """Move to the next epoch (a new shuffle) once this one is used up."""
        if state.batch_index >= len(self.epoch(state.epoch)):
            state.epoch, state.batch_index = state.epoch + 1, 0

    def take(self, state: TrainState, count: int) -> list[Batch]:
        """The next `count` batches, fewer when train.max_epochs ends before them: an update with
        gradient accumulation does not run into the epochs past the limit."""
        out = []
        for _ in range(count):
            self.roll(state)
            if out and self.max_epochs and state.epoch >= self.max_epochs:
                break
            rows = self.epoch(state.epoch)[state.batch_index]
            src, tgt = self.cached[2:]
            state.batch_index += 1
            out.append(make_batch([src[i] for i in rows], [tgt[i] for i in rows]))
        return out

    def over_max_tokens(self) -> tuple[int, int]:
        """(pairs wider than train.max_tokens, the widest one's tokens): each such pair is a batch
        of its own, over the limit (data/batching.py). Widths as prepared (+ EOS / BOS)."""
        width = np.maximum(self.src.lengths, self.tgt.lengths) + 1
        return int((width > self.args[0]).sum()), int(width.max(initial=0))


def _too_long(cfg: Config, longest: int) -> TranslatorError:
    """Training pairs longer than the model's positions; under train.init_from the checkpoint fixes
    model.max_positions, so the data must be cut instead."""
    what = (
        f"training sequences take up to {longest} positions, more than "
        f"max_positions={cfg.model.max_positions}"
    )
    if cfg.train.init_from:
        return TranslatorError(
            what + " (train.init_from's checkpoint fixes model.max_positions)",
            "data.max_tokens_per_side",
            f"prepare with data.max_tokens_per_side={cfg.model.max_positions - 1} or less, under "
            "another data.name or with `translator prepare --force`",
        )
    return TranslatorError(
        what,
        "model.max_positions",
        f"use at least {longest}, or prepare with a smaller data.max_tokens_per_side",
    )
