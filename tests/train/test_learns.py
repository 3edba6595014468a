"""The whole pipeline learns: prepare -> `translator train`'s loop -> greedy and beam search.

A synthetic task whose answer is known without the code under test: the target is a copy of the
source. A tiny model trained for a few hundred updates through `loop.run` (the
batches, schedule, `train_step` with its loss, AdamW and clipping, that `translator train` runs)
must then copy held-out sentences exactly, with greedy and with beam search. A broken causal
mask (the decoder reads the token it should predict), a target shifted wrongly or a loss on the
wrong tokens leaves it far from that. Copying rather than reversing: it learns in fewer updates.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

from translator import config
from translator.data.tokenizer import Tokenizer
from translator.prepared import prepared_dir
from translator.train import loop
from translator.translate import translate_lines

WORDS = "ka lo mi nu pe ri so tu va we xi yo".split()


def sentences(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(2, 7))) for _ in range(count)]


def write_corpus(folder: Path) -> dict[str, list[str]]:
    """train/valid/test `{split}.en` and the same lines as `{split}.de`; test lines not in train."""
    folder.mkdir()
    test = sorted(set(sentences(60, seed=2)))[:24]
    train = [s for s in sentences(3000, seed=1) if s not in test]
    splits = {"train": train, "valid": sentences(16, seed=3), "test": test}
    for split, lines in splits.items():
        (folder / f"{split}.en").write_text("".join(s + "\n" for s in lines))
        (folder / f"{split}.de").write_text("".join(s + "\n" for s in lines))
    return splits


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("learns")
    splits = write_corpus(root / "corpus")
    cfg = config.load(
        None,
        [
            f"data.source={root / 'corpus'}",
            f"data.data_dir={root / 'data'}",
            "data.name=copy",
            "data.splits={train: train, valid: valid, test: test}",
            "data.vocab_size=40",
            "model.d_model=32",
            "model.n_heads=4",
            "model.n_encoder_layers=1",
            "model.n_decoder_layers=1",
            "model.d_ff=64",
            "model.dropout=0.0",
            "model.max_positions=24",
            f"train.run_dir={root / 'run'}",
            "train.device=cpu",
            "train.precision=fp32",
            "train.max_tokens=320",
            "train.max_updates=600",
            "train.lr=1e-2",
            "train.warmup_steps=50",
            "train.clip_grad_norm=1.0",
            "train.eval_every=600",
            "train.log_every=100",
            "train.valid_bleu_sentences=16",
            "train.keep_last=1",
            "decode.device=cpu",
            "decode.dtype=fp32",
            "diagnostics.enabled=false",
        ],
    )
    model = loop.run(cfg, quiet=True).eval()
    tokenizer = Tokenizer(prepared_dir(cfg.data) / "spm.model")
    return model, tokenizer, cfg, splits["test"]


@pytest.mark.parametrize("beam_size", [1, 4], ids=["greedy", "beam"])
def test_trained_model_copies_held_out_sentences(trained, beam_size):
    model, tokenizer, cfg, test = trained
    decode = dataclasses.replace(cfg.decode, beam_size=beam_size)
    outputs = [hyps[0][0] for hyps in translate_lines(model, tokenizer, test, decode)]
    wrong = [(src, out) for src, out in zip(test, outputs) if out != src]
    assert not wrong, f"{len(wrong)} of {len(test)} held-out sentences not copied: {wrong[:3]}"
