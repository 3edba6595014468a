"""Tiny models and padded batches for the model tests (fp32, CPU unless a test asks for CUDA)."""

from __future__ import annotations

import pytest
import torch

from translator.config import ModelConfig
from translator.model.transformer import Transformer

PAD = 0
VOCAB = 40


def tiny_config(**changes) -> ModelConfig:
    """A 2+2-layer, d_model 32 model; `changes` override any ModelConfig field."""
    fields = dict(
        vocab_size=VOCAB,
        d_model=32,
        n_heads=4,
        n_encoder_layers=2,
        n_decoder_layers=2,
        d_ff=64,
        dropout=0.0,
        max_positions=64,
    )
    return ModelConfig(**{**fields, **changes})


@pytest.fixture
def make_model():
    """make_model(**ModelConfig changes) -> a freshly initialised Transformer in eval mode."""

    def build(**changes) -> Transformer:
        return Transformer(tiny_config(**changes)).eval()

    return build


@pytest.fixture
def src_batch():
    """(src (3, 7), src_mask (3, 1, 1, 7)): lengths 7, 4 and 2; PAD after the end."""
    lengths = torch.tensor([7, 4, 2])
    src = torch.randint(4, VOCAB, (3, 7))
    src[torch.arange(7)[None, :] >= lengths[:, None]] = PAD
    return src, (src != PAD)[:, None, None, :]
