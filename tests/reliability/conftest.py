"""Reliability helpers: a very small model on the session's prepared slice, and a saved checkpoint of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.train.conftest import variant
from translator import config

SMALL = ("model.d_model=32", "model.d_ff=64", "model.n_heads=2", "model.n_encoder_layers=1",
         "model.n_decoder_layers=1", "model.max_positions=128", "train.max_tokens=512", "train.warmup_steps=2",
         "train.valid_bleu_sentences=4", "decode.max_len_b=8", "train.device=cpu")


def small(prepared: config.Config, run_dir: Path, *overrides: str) -> config.Config:
    """The prepared tiny slice with a ~50k-parameter model: an update takes milliseconds."""
    return variant(prepared, run_dir, *SMALL, *overrides)


@pytest.fixture(scope="session")
def checkpoint_file(prepared, tmp_path_factory) -> Path:
    """A format-2 checkpoint of an untrained small model (what `translate` and `eval` read)."""
    from translator import checkpoint
    from translator.data.tokenizer import Tokenizer
    from translator.model.transformer import Transformer
    from translator.prepare import prepared_dir

    cfg = small(prepared, tmp_path_factory.mktemp("ckpt") / "run")
    tokenizer = Tokenizer(prepared_dir(cfg.data) / "spm.model")
    cfg.model.vocab_size = tokenizer.vocab_size
    path = Path(cfg.train.run_dir) / "model.pt"
    checkpoint.save(path, Transformer(cfg.model), cfg, tokenizer)
    return path
