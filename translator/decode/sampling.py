"""Sampling: draw each next token from the model's distribution instead of taking the most likely.

What back-translation wants: synthetic sources drawn from p(x|y) are more varied than beam
search's, and train a better forward model (Edunov et al. 2018). The distribution can be
sharpened or flattened (`temperature`), cut to its k most likely tokens (`top_k`, Fan et al.
2018) or to the smallest set holding probability `top_p` (nucleus sampling, Holtzman et al.
2020), then renormalised.

Each sentence draws from a generator of its own, seeded from the seed and its line number, so a
line's translation does not depend on which other lines share its batch or how the input was
cut into chunks: the same seed and input give the same output (on one kind of device: the
generators live on the model's).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from translator.data.tokenizer import EOS_ID
from translator.errors import TranslatorError

# beyond these the tempered distribution over- or underflows to nothing to draw from
TEMPERATURES = (0.01, 100.0)


@dataclass
class Sampling:
    """How to draw; `rows` makes the per-sentence draws for one batch."""

    temperature: float = 1.0
    top_k: int = 0  # 0: the whole vocabulary
    top_p: float = 1.0  # 1: no nucleus cut
    seed: int = 0

    def __post_init__(self) -> None:
        low, high = TEMPERATURES
        if not low <= self.temperature <= high:  # NaN too
            raise TranslatorError(
                f"temperature {self.temperature} is outside {low}-{high}",
                "--temperature",
                "give one in that range (greedy search, without --sampling, for the most likely)",
            )
        if not 0 <= self.top_p <= 1:  # 0: the most likely token alone (the first always stays)
            raise TranslatorError(
                f"top-p {self.top_p} is outside 0-1", "--sampling-topp", "give one in range"
            )
        if self.top_k < 0 or self.seed < 0:
            raise TranslatorError(
                "top-k and seed are counts", "--sampling-topk/--seed", "give 0 or more"
            )

    def rows(self, keys: list[tuple[int, ...]], device: torch.device) -> RowSampler:
        """A sampler for a batch whose rows are `keys` (line, piece of the line, draw), on
        `device`."""
        generators = []
        for key in keys:
            # NumPy's SeedSequence mixes the numbers: no two keys share a stream
            state = np.random.SeedSequence((self.seed, *key)).generate_state(1, np.uint64)
            generators.append(torch.Generator(device).manual_seed(int(state[0]) % 2**63))
        return RowSampler(self, generators)


def piece_keys(owner: list[int], first_line: int) -> list[tuple[int, int]]:
    """Per piece of text to decode, (its line's number, its place among the line's pieces):
    `owner` gives each piece's line (0-based; a line's pieces are consecutive)."""
    keys: list[tuple[int, int]] = []
    for k, line in enumerate(owner):
        place = keys[-1][1] + 1 if k and owner[k - 1] == line else 0
        keys.append((first_line + line, place))
    return keys


class RowSampler:
    """Draws one token per row, each row from its own generator; follows the rows as a search
    drops finished ones (`keep`)."""

    def __init__(self, settings: Sampling, generators: list[torch.Generator]) -> None:
        self.settings = settings
        self.generators = generators

    def draw(self, log_probs: torch.Tensor) -> torch.Tensor:
        """log_probs (N, V) fp32, one row per generator -> (N,) drawn token ids.

        One multinomial draw a row, each from its row's generator. PyTorch draws it as an
        exponential race (the token maximising p / noise), which a tiny change of p (bf16
        arithmetic in a batch of another shape) rarely turns; inverse transform sampling from one
        uniform a row, tried instead, is cheaper but turned many more draws there (README).
        """
        probs = truncated(log_probs, self.settings).softmax(dim=-1)  # (N, V)
        # a row past its dtype's range (fp16) has nothing to draw from: EOS ends the line, its
        # score NaN (warned); a where, not a branch, so a step waits on no device-to-host copy
        overflowed = ~probs.isfinite().all(dim=-1, keepdim=True)
        eos = F.one_hot(torch.tensor(EOS_ID, device=probs.device), probs.shape[-1]).to(probs)
        probs = torch.where(overflowed, eos, probs)
        return torch.cat(
            [torch.multinomial(p, 1, generator=g) for p, g in zip(probs, self.generators)]
        )

    def keep(self, rows: torch.Tensor) -> None:
        """The generators of the rows (indices) that stay in the batch."""
        self.generators = [self.generators[i] for i in rows.tolist()]


def truncated(log_probs: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """log_probs (N, V) -> logits (N, V) divided by the temperature, -inf outside the top k and
    outside the nucleus: the smallest set of most likely tokens whose probability reaches top_p."""
    logits = log_probs / sampling.temperature
    if sampling.top_k and sampling.top_k < logits.shape[-1]:
        # exactly k, also where bf16 logits tie with the k-th
        values, index = logits.topk(sampling.top_k, dim=-1)  # (N, k)
        logits = torch.full_like(logits, float("-inf")).scatter_(-1, index, values)
    if sampling.top_p < 1.0:
        ordered, order = logits.sort(dim=-1, descending=True)  # (N, V)
        probs = ordered.softmax(dim=-1)
        before = probs.cumsum(dim=-1) - probs  # (N, V) the more likely tokens' probability
        # a token stays while the ones before it hold less than top_p; the first always stays
        # (top_p 0: the most likely alone)
        beyond = before >= sampling.top_p
        beyond[:, 0] = False
        drop = torch.zeros_like(before, dtype=torch.bool).scatter_(-1, order, beyond)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits
