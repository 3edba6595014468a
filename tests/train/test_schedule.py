"""The learning rate as a function of the update number and, for a cosine run with a wall-clock
budget, of the share of its time spent."""

from __future__ import annotations

import math

import pytest

from translator.config import TrainConfig
from translator.train.schedule import budget_progress, learning_rate


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


def test_constant_warms_up_linearly_then_stays_at_lr_whatever_the_time_budget():
    cfg = TrainConfig(lr=2e-3, warmup_steps=100, max_updates=300, schedule="constant")
    assert learning_rate(50, cfg) == pytest.approx(1e-3)
    assert [learning_rate(step, cfg) for step in (100, 101, 300, 10_000)] == [2e-3] * 4
    assert learning_rate(200, cfg, time_progress=0.9) == 2e-3


def test_no_warmup_starts_at_the_peak():
    cfg = TrainConfig(lr=2e-3, warmup_steps=0)
    assert learning_rate(1, cfg) == 2e-3 and learning_rate(4, cfg) == pytest.approx(1e-3)
    assert math.isfinite(learning_rate(0, cfg))


def test_cosine_follows_the_time_budget_when_it_is_further_along_than_the_updates():
    cfg = TrainConfig(lr=1e-3, warmup_steps=10, max_updates=1_000_000, schedule="cosine")
    assert learning_rate(20, cfg, time_progress=0.5) == pytest.approx(0.5e-3)
    assert learning_rate(20, cfg, time_progress=1.0) == pytest.approx(0.0, abs=1e-12)
    assert learning_rate(5, cfg, time_progress=0.9) == pytest.approx(0.5e-3)  # warm-up first
    # the updates still end it when they run out first
    short = TrainConfig(lr=1e-3, warmup_steps=10, max_updates=110, schedule="cosine")
    assert learning_rate(110, short, time_progress=0.1) == pytest.approx(0.0, abs=1e-12)
    # inverse_sqrt has no end to reach
    inv = TrainConfig(lr=1e-3, warmup_steps=100, schedule="inverse_sqrt")
    assert learning_rate(400, inv, time_progress=0.9) == pytest.approx(5e-4)


def test_budget_progress_runs_from_the_end_of_warm_up_to_the_deadline():
    assert budget_progress(seconds=40, warmup_end=-1, deadline=100) == 0  # still warming up
    assert budget_progress(seconds=40, warmup_end=20, deadline=math.inf) == 0  # no budget
    assert budget_progress(seconds=20, warmup_end=20, deadline=100) == 0
    assert budget_progress(seconds=60, warmup_end=20, deadline=100) == pytest.approx(0.5)
    assert budget_progress(seconds=130, warmup_end=20, deadline=100) == 1
