"""Training on CUDA learns what training on CPU learns.

Each device trains through its own path (CPU: 16-bit-draw dropout modules, oneDNN fp32 linears,
the chunked loss, the math attention kernel; CUDA: the fused SDPA kernels and the plain loss; both:
fused AdamW with its two weight-decay groups and the moving average). With dropout off, the same
initial weights and batches must give the same losses and weights on both, so a difference between
the paths (a mask, a kernel's backward, the optimizer) shows in the first updates.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from translator import config
from translator.data.batching import make_batch
from translator.train.distributed import Dist
from translator.train.loop import train_step
from translator.train.precision import amp_dtype, grad_scaler
from translator.train.session import Session, make_optimizer, moving_average, training_model
from translator.train.state import seed_all

VOCAB = 64
UPDATES = 24


def batches(n: int, size: int, seed: int) -> list:
    """n batches of `size` pairs of random lengths 1-20: padding in every batch."""
    g = torch.Generator().manual_seed(seed)

    def sentence() -> list[int]:
        length = int(torch.randint(1, 21, (1,), generator=g))
        return torch.randint(4, VOCAB, (length,), generator=g).tolist()

    return [
        make_batch([sentence() for _ in range(size)], [sentence() for _ in range(size)])
        for _ in range(n)
    ]


BATCHES = batches(4, 8, seed=3)


def trajectory(device: torch.device, precision: str) -> tuple[list[float], dict, dict]:
    """Losses of UPDATES updates, the trained weights and their moving average (on the CPU)."""
    cfg = config.load(
        None,
        [
            f"model.vocab_size={VOCAB}",
            "model.d_model=64",
            "model.n_heads=8",
            "model.d_ff=128",
            "model.n_encoder_layers=2",
            "model.n_decoder_layers=2",
            "model.positions=rope",
            "model.dropout=0.0",
            "model.attention_dropout=0.0",
            "train.lr=2e-3",
            "train.weight_decay=0.2",
            "train.label_smoothing=0.1",
            f"train.precision={precision}",
        ],
    )
    seed_all(0)
    model = training_model(cfg.model, device)
    dtype = amp_dtype(cfg.train.precision, device)
    s = Session(
        cfg=cfg,
        model=model,
        net=model,
        optimizer=make_optimizer(model, cfg.train),
        scaler=grad_scaler(device, dtype),
        tokenizer=None,
        dist=Dist(device),
        dtype=dtype,
        run_dir=Path("unused"),
        ema=moving_average(model, 0.9),
    )
    losses = []
    for i in range(UPDATES):
        batch = BATCHES[i % len(BATCHES)]
        loss, _, _, ok = train_step(s, [batch], batch.n_tgt_tokens)
        assert ok
        losses.append(loss / batch.n_tgt_tokens)

    def on_cpu(m: torch.nn.Module) -> dict:
        return {k: v.detach().float().cpu() for k, v in m.state_dict().items()}

    return losses, on_cpu(model), on_cpu(s.ema.module)


def relative_difference(a: dict, b: dict) -> float:
    num = sum(float((a[k] - b[k]).pow(2).sum()) for k in a)
    return (num / sum(float(b[k].pow(2).sum()) for k in b)) ** 0.5


def test_trajectory_is_deterministic_on_cpu():
    """The reference itself: two CPU runs agree exactly (else the comparison below means nothing),
    and the model learns (the loss falls)."""
    losses, weights, _ = trajectory(torch.device("cpu"), "fp32")
    again, weights_again, _ = trajectory(torch.device("cpu"), "fp32")
    assert losses == again and relative_difference(weights, weights_again) == 0
    assert sum(losses[-4:]) < 0.9 * sum(losses[:4])


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_fp32_training_matches_cpu():
    cpu_losses, cpu_weights, cpu_ema = trajectory(torch.device("cpu"), "fp32")
    cuda_losses, cuda_weights, cuda_ema = trajectory(torch.device("cuda"), "fp32")
    assert cuda_losses == pytest.approx(cpu_losses, rel=1e-3)
    assert relative_difference(cuda_weights, cpu_weights) < 1e-2
    assert relative_difference(cuda_ema, cpu_ema) < 1e-2


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_bf16_training_follows_cpu_fp32():
    """bf16 autocast rounds every product's operands, so only close (on CPU, bf16 against fp32 stays
    within 0.05% here); a path that computes another function is off by more (with the padding mask
    left out, by up to 4.7%)."""
    cpu_losses, _, _ = trajectory(torch.device("cpu"), "fp32")
    cuda_losses, _, _ = trajectory(torch.device("cuda"), "bf16")
    assert cuda_losses == pytest.approx(cpu_losses, rel=1e-2)
