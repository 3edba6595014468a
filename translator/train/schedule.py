"""Learning rate as a function of the update number (and, for a cosine run with a wall-clock
budget, of the time left)."""

from __future__ import annotations

import math

from translator.config import TrainConfig


def learning_rate(step: int, cfg: TrainConfig, time_progress: float = 0.0) -> float:
    """Linear warm-up to `cfg.lr` over `warmup_steps`, then inverse-sqrt or cosine decay, or none.

    inverse_sqrt: lr * sqrt(warmup / step) after warm-up (Vaswani et al., with the peak set
    directly). cosine: from lr down to min_lr at max_updates, or sooner when `time_progress` (the
    share of the decay's wall-clock spent, `budget_progress`) is further along than the updates.
    """
    step = max(step, 1)
    warmup = max(cfg.warmup_steps, 1)
    if step < warmup:
        return cfg.lr * step / warmup
    if cfg.schedule == "inverse_sqrt":
        return cfg.lr * math.sqrt(warmup / step)
    if cfg.schedule == "constant":
        return cfg.lr
    progress = min(1.0, max((step - warmup) / max(1, cfg.max_updates - warmup), time_progress))
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1 + math.cos(math.pi * progress))


def budget_progress(seconds: float, warmup_end: float, deadline: float) -> float:
    """Share of the time from the end of warm-up to the deadline that has passed at `seconds`
    (training seconds, as TrainState.seconds counts them); 0 while warming up (warmup_end < 0) or
    without a deadline. A run trained for a wall-clock budget does not know how many updates it
    will get: this lets its cosine reach min_lr when the budget runs out."""
    if warmup_end < 0 or not math.isfinite(deadline) or deadline <= warmup_end:
        return 0.0
    return min(1.0, max(0.0, (seconds - warmup_end) / (deadline - warmup_end)))
