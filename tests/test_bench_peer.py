"""bench/train_peer.py: the Hugging Face peer has our model's shape, and its step trains it."""

from __future__ import annotations

import pytest
import torch

from translator import config
from translator.data.batching import make_batch
from translator.model.transformer import Transformer, count_parameters

pytest.importorskip("transformers")
train_peer = pytest.importorskip("bench.train_peer")


def tiny(*overrides: str):
    return config.load(
        None,
        [
            "model.vocab_size=40",
            "model.d_model=32",
            "model.n_heads=4",
            "model.d_ff=64",
            "model.n_encoder_layers=2",
            "model.n_decoder_layers=1",
            "train.lr=1e-2",
            "train.warmup_steps=1",
            *overrides,
        ],
    )


def test_marian_peer_has_our_post_ln_models_trainable_parameters():
    """Marian is post-LN, tied, with fixed sinusoids: then every trainable tensor has a twin."""
    cfg = tiny("model.norm=post")
    ours = Transformer(cfg.model)
    peer = train_peer.build_peer(cfg, torch.device("cpu"), None).model
    shapes = lambda m: sorted(tuple(p.shape) for p in m.parameters() if p.requires_grad)  # noqa: E731
    assert count_parameters(ours) == count_parameters(peer)
    assert shapes(ours) == shapes(peer)


def test_peer_step_lowers_the_loss_on_a_repeated_batch():
    cfg = tiny("model.dropout=0.0")
    p = train_peer.build_peer(cfg, torch.device("cpu"), None)
    batch = make_batch([[5, 6, 7], [8, 9]], [[10, 11], [12, 13, 14]])

    def loss() -> float:
        with torch.no_grad():
            logits = p.model(
                input_ids=batch.src,
                attention_mask=batch.src_mask[:, 0, 0].long(),
                decoder_input_ids=batch.tgt_in,
                use_cache=False,
            ).logits
        return float(train_peer.token_loss(logits, batch.tgt_out, 0.1)[0])

    first = loss()
    for _ in range(5):
        assert train_peer.peer_step(p, batch, float(batch.n_tgt_tokens)) > 0  # gradient norm
    assert loss() < first
