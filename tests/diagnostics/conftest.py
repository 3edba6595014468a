"""A tiny model trained in seconds to copy its input, with a real SentencePiece model of 16
words."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from translator import checkpoint, config
from translator.data.batching import make_batch
from translator.data.tokenizer import PAD_ID, Tokenizer, train_sentencepiece
from translator.diagnostics.capture import forced_attention
from translator.diagnostics.stats import allowed_keys, head_entropy
from translator.model.transformer import Transformer

WORDS = [
    "ka",
    "lo",
    "mi",
    "nu",
    "pe",
    "ri",
    "so",
    "tu",
    "va",
    "we",
    "xi",
    "yo",
    "za",
    "bo",
    "de",
    "fu",
]


def sentences(count: int, seed: int, lengths: tuple[int, int] = (3, 6)) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(*lengths))) for _ in range(count)]


def cross_entropy_now(model: Transformer, ids: list[list[int]]) -> float:
    """Mean normalised entropy of the last layer's cross-attention on a copy of `ids`."""
    forced = forced_attention(model, ids, ids)
    allowed, _ = allowed_keys("cross", forced.src_valid, forced.tgt_valid)
    return head_entropy(forced.maps["cross"][-1], allowed)[1].mean().item()


@pytest.fixture(scope="session")
def copy_model(tmp_path_factory):
    """1+1 layers, d_model 32, 400 Adam updates of 16 sentences: copies, with a clear diagonal.

    The learning rate decays linearly to 0: at a constant one the last updates' loss spikes
    decided how diagonal the alignments were, and that moved with the CPU's kernels (61 of 69
    words on the diagonal with AVX2's, 67 with AVX-512's, after 300 updates)."""
    root = tmp_path_factory.mktemp("copy")
    spm_path = train_sentencepiece(sentences(2000, seed=0), root / "spm", vocab_size=40)
    tokenizer = Tokenizer(spm_path)
    cfg = config.load(
        None,
        [
            f"model.vocab_size={tokenizer.vocab_size}",
            "model.d_model=32",
            "model.n_heads=4",
            "model.n_encoder_layers=1",
            "model.n_decoder_layers=1",
            "model.d_ff=64",
            "model.dropout=0.0",
            "model.max_positions=32",
            "decode.device=cpu",
            "decode.dtype=fp32",
            "decode.beam_size=1",
        ],
    )
    torch.manual_seed(0)
    model = Transformer(cfg.model)
    probe = tokenizer.encode(sentences(16, seed=99))
    before = cross_entropy_now(model.eval(), probe)
    steps = 400
    optimizer = torch.optim.Adam(model.train().parameters(), lr=5e-3)
    decay = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 - step / steps)
    for step in range(steps):
        ids = tokenizer.encode(sentences(16, seed=1000 + step))
        batch = make_batch(ids, ids)
        logits = model(batch.src, batch.tgt_in, batch.src_mask)
        loss = F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=PAD_ID)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        decay.step()
    model.eval()
    path = root / "copy.pt"
    checkpoint.save(path, model, cfg, tokenizer)
    return SimpleNamespace(
        model=model,
        tokenizer=tokenizer,
        cfg=cfg,
        path=path,
        probe=probe,
        entropy_before=before,
        entropy_after=cross_entropy_now(model, probe),
    )
