"""Reliability helpers: 300 Multi30k pairs prepared once (a 200-piece vocabulary, 40 valid pairs)
and a very small model, so that a whole training run takes about a second."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.data.conftest import small_splits, write_text_corpus
from translator import config

SMALL = (
    "model.d_model=32",
    "model.d_ff=64",
    "model.n_heads=2",
    "model.n_encoder_layers=1",
    "model.n_decoder_layers=1",
    "model.max_positions=128",
    "train.max_tokens=1024",
    "train.warmup_steps=2",
    "train.max_updates=4",
    "train.eval_every=2",
    "train.log_every=1",
    "train.valid_bleu_sentences=4",
    "train.precision=fp32",
    "train.device=cpu",
    "decode.max_len_a=0",
    "decode.max_len_b=4",
)


def data_overrides(corpus: Path, data_dir: Path) -> list[str]:
    return [
        f"data.source={corpus}",
        f"data.data_dir={data_dir}",
        "data.name=small",
        "data.splits.valid=valid",
        "data.vocab_size=200",
    ]


@pytest.fixture(scope="session")
def small_data(tmp_path_factory) -> list[str]:
    """The data overrides of a prepared 300-pair corpus."""
    from translator import prepare

    root = tmp_path_factory.mktemp("small")
    overrides = data_overrides(write_text_corpus(root / "corpus", small_splits(300)), root / "data")
    prepare.run(config.load(None, overrides), quiet=True)
    return overrides


def small(small_data: list[str], run_dir: Path, *overrides: str) -> config.Config:
    """The prepared small corpus, a ~30k-parameter model and a 4-update run in `run_dir`."""
    return config.load(None, [*small_data, *SMALL, f"train.run_dir={run_dir}", *overrides])


@pytest.fixture(scope="session")
def checkpoint_file(small_data, tmp_path_factory) -> Path:
    """A checkpoint of an untrained small model (what `translate` and `eval` read)."""
    from translator import checkpoint
    from translator.data.tokenizer import Tokenizer
    from translator.model.transformer import Transformer
    from translator.prepared import prepared_dir

    cfg = small(small_data, tmp_path_factory.mktemp("ckpt") / "run")
    tokenizer = Tokenizer(prepared_dir(cfg.data) / "spm.model")
    cfg.model.vocab_size = tokenizer.vocab_size
    path = Path(cfg.train.run_dir) / "model.pt"
    checkpoint.save(path, Transformer(cfg.model), cfg, tokenizer)
    return path


@pytest.fixture(scope="session")
def trained_run(small_data, tmp_path_factory) -> Path:
    """The run directory of a finished 4-update run (last.pt with its optimizer state); copy what
    a test changes."""
    from translator.train import loop

    run_dir = tmp_path_factory.mktemp("trained") / "run"
    loop.run(small(small_data, run_dir, "train.keep_last=2"), quiet=True)
    return run_dir
