"""bench/train_peer.py and bench/hf_marian.py: the Hugging Face peer has our model's shape, its
step trains it, and a step in the per-round ratio is named."""

from __future__ import annotations

import pytest
import torch

from translator import config
from translator.data.batching import make_batch
from translator.model.transformer import Transformer, count_parameters
from translator.train.loss import token_loss

pytest.importorskip("transformers")
train_peer = pytest.importorskip("bench.train_peer")
hf_marian = pytest.importorskip("bench.hf_marian")


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
    peer = hf_marian.build_peer(cfg, torch.device("cpu"), None).model
    shapes = lambda m: sorted(tuple(p.shape) for p in m.parameters() if p.requires_grad)  # noqa: E731
    assert count_parameters(ours) == count_parameters(peer)
    assert shapes(ours) == shapes(peer)


def test_peer_step_lowers_the_loss_on_a_repeated_batch():
    cfg = tiny("model.dropout=0.0")
    p = hf_marian.build_peer(cfg, torch.device("cpu"), None)
    batch = make_batch([[5, 6, 7], [8, 9]], [[10, 11], [12, 13, 14]])

    def loss() -> float:
        with torch.no_grad():
            logits = p.model(
                input_ids=batch.src,
                attention_mask=batch.src_mask[:, 0, 0].long(),
                decoder_input_ids=batch.tgt_in,
                use_cache=False,
            ).logits
        return float(token_loss(logits, batch.tgt_out, 0.1)[0])

    first = loss()
    for _ in range(5):
        assert hf_marian.peer_step(p, batch, float(batch.n_tgt_tokens)) > 0  # gradient norm
    assert loss() < first


def rounds_of(ours: list[float], hf: list[float]) -> list[dict]:
    return [{"ours": o, "hf": h, "ratio": o / h} for o, h in zip(ours, hf, strict=True)]


def test_a_peer_slowing_on_its_own_midway_is_named_with_both_levels():
    """The pass of 2026-12-07 afternoon: HF fell from ~290 to ~170 tok/s at round 3, ours held."""
    rounds = rounds_of([290, 305, 280, 300, 295, 285], [282, 293, 168, 172, 170, 175])
    shift = train_peer.ratio_shift(rounds)
    # ratios 290/282, 305/293 (median 1.03), then 280/168 ... 285/175 (median 1.70)
    assert "from 1.03 (rounds 1-2) to 1.70 (rounds 3-6)" in shift
    assert "ours 298 -> 290" in shift and "HF 288 -> 171" in shift
    memory = {"ours": {"peak_mib": 1.0}, "hf": {"peak_mib": 2.0}}
    row = {"config": "base", "precision": "fp32", "max_tokens": 4096}
    lines = train_peer.table([row | {"rounds": rounds, "memory": memory}], False)
    assert any(line.startswith("\n**base fp32**: ours / HF stepped from 1.03") for line in lines)


@pytest.mark.parametrize(
    "ours, hf",
    [
        # both slowed alike halfway (the machine's drift): the ratio holds
        ([2000, 2100, 2050, 1500, 1550, 1520], [1600, 1650, 1620, 1200, 1230, 1210]),
        # noisy single rounds without a level (multi30k and base, 2026-12-07)
        (
            [2040, 2110, 1795, 2009, 2019, 2054, 1895, 2194],
            [1294, 1529, 1290, 1592, 1538, 1807, 1457, 1521],
        ),
        ([229, 341, 288, 304, 278, 337], [232, 225, 229, 205, 216, 193]),
        # halves apart but closer than each one's spread: noise of this machine's size
        ([1000, 1300, 1100, 1350, 1600, 1400], [1000] * 6),
        # a clean step, but a small one
        ([1000, 1010, 1000, 1000, 1005, 1000], [1000, 1000, 1000, 950, 955, 950]),
        # too few rounds to split
        ([2000, 2000, 2000], [1000, 2000, 2000]),
    ],
)
def test_a_steady_noisy_small_or_short_run_is_not_flagged(ours, hf):
    assert train_peer.ratio_shift(rounds_of(ours, hf)) == ""
