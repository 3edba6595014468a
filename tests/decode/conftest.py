"""Tiny random Transformers, padded source batches and a toy scorer with a known best output."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from tests.model.conftest import VOCAB, tiny_config
from translator.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from translator.model.transformer import Transformer


@pytest.fixture
def make_model():
    """make_model(**ModelConfig changes) -> a random 2+2-layer, d_model 32 Transformer in eval
    mode."""

    def build(**changes) -> Transformer:
        model = Transformer(tiny_config(**{"tie_embeddings": False, **changes})).eval()
        # Untied, so the output is not just "repeat the input token" (beams then really swap
        # places); sharper logits (fewer near-ties); a random boost of the EOS row, so hypotheses
        # end at varied steps and finished beams meet open ones.
        with torch.no_grad():
            weight = model.out_proj.weight  # (V, D)
            weight.mul_(2.0)
            weight[EOS_ID] += (
                weight.norm(dim=1).mean() * torch.randn(weight.shape[1]) / weight.shape[1] ** 0.5
            )
        return model

    return build


@pytest.fixture
def src_batch():
    """(src (4, 9), src_mask (4, 1, 1, 9)): 8, 5, 2 and 3 tokens + EOS, then PAD."""
    lengths = [8, 5, 2, 3]
    src = torch.full((len(lengths), max(lengths) + 1), PAD_ID)
    for row, n in enumerate(lengths):
        src[row, :n] = torch.randint(4, VOCAB, (n,))
        src[row, n] = EOS_ID
    return src, (src != PAD_ID)[:, None, None, :]


class ToyCache:
    """Remembers each row's prefix, so `reorder` mistakes in the search show up as wrong outputs."""

    def __init__(self, rows: int, max_len: int) -> None:
        self.prefix = torch.full((rows, max_len), PAD_ID)
        self.length = 0
        self.fixed_shapes = False  # never replayed as a CUDA graph

    def advance(self, T: int) -> None:
        self.length += T

    def reorder(self, rows: torch.Tensor, sentences: torch.Tensor | None = None) -> None:
        self.prefix = self.prefix.index_select(0, rows)


class ToyScorer:
    """A 'model' whose next-token distribution is a table keyed by the output prefix (without BOS).

    Unknown prefixes end at once (EOS); `default` replaces that distribution. Tokens not listed
    get probability `floor`. Counts decode calls.
    """

    def __init__(
        self,
        table: dict[tuple[int, ...], dict[int, float]],
        default: dict[int, float] | None = None,
        vocab: int = 8,
        max_positions: int = 64,
        floor: float = 1e-6,
    ) -> None:
        self.table, self.default, self.vocab = table, default or {EOS_ID: 1.0}, vocab
        self.floor = math.log(floor) if floor > 0 else float("-inf")
        self.cfg = SimpleNamespace(max_positions=max_positions, vocab_size=vocab)
        self.calls = 0

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        return torch.zeros(src.shape[0], src.shape[1], 1)  # (B, S, 1)

    def new_cache(
        self,
        rows: int,
        max_len: int,
        dtype: torch.dtype,
        device: torch.device,
        fixed_shapes: bool = False,
        beams: int = 1,
    ) -> ToyCache:
        return ToyCache(rows, max_len)

    def decode(
        self, tokens: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor, cache: ToyCache
    ):
        """tokens (N, 1) -> logits (N, 1, vocab) from each row's remembered prefix."""
        self.calls += 1
        cache.prefix[:, cache.length] = tokens[:, 0]
        rows = cache.prefix[:, : cache.length + 1].tolist()
        logits = torch.full((len(rows), 1, self.vocab), self.floor)
        for n, row in enumerate(rows):
            assert row[0] == BOS_ID
            for token, p in self.table.get(tuple(row[1:]), self.default).items():
                logits[n, 0, token] = math.log(p)
        return logits


@pytest.fixture
def toy():
    """The ToyScorer class: toy(table, default=None, vocab=8, max_positions=64, floor=1e-6)."""
    return ToyScorer
