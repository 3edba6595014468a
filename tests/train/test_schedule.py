"""The learning rate as a pure function of the update number."""

from __future__ import annotations

import math

import pytest

from translator.config import TrainConfig
from translator.train.schedule import learning_rate


def test_inverse_sqrt_warms_up_linearly_then_decays_as_one_over_sqrt_step():
    cfg = TrainConfig(lr=1e-3, warmup_steps=100, schedule="inverse_sqrt")
    assert learning_rate(1, cfg) == pytest.approx(1e-5)
    assert learning_rate(50, cfg) == pytest.approx(5e-4)
    assert learning_rate(100, cfg) == pytest.approx(1e-3)  # the peak is lr itself
    assert learning_rate(400, cfg) == pytest.approx(5e-4)
    lrs = [learning_rate(step, cfg) for step in range(1, 1000)]
    assert max(lrs) == pytest.approx(1e-3) and lrs.index(max(lrs)) == 99


def test_cosine_ends_at_min_lr_and_passes_the_midpoint():
    cfg = TrainConfig(lr=1e-3, min_lr=1e-5, warmup_steps=10, max_updates=110, schedule="cosine")
    assert learning_rate(10, cfg) == pytest.approx(1e-3)
    assert learning_rate(60, cfg) == pytest.approx((1e-3 + 1e-5) / 2)
    assert learning_rate(110, cfg) == pytest.approx(1e-5) and learning_rate(
        500, cfg
    ) == pytest.approx(1e-5)
    lrs = [learning_rate(step, cfg) for step in range(10, 111)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))


def test_no_warmup_starts_at_the_peak():
    cfg = TrainConfig(lr=2e-3, warmup_steps=0)
    assert learning_rate(1, cfg) == 2e-3 and learning_rate(4, cfg) == pytest.approx(1e-3)
    assert math.isfinite(learning_rate(0, cfg))
