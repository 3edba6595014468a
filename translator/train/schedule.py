"""Learning rate as a pure function of the update number."""

from __future__ import annotations

import math

from translator.config import TrainConfig


def learning_rate(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up to `cfg.lr` over `warmup_steps`, then inverse-sqrt or cosine decay.

    inverse_sqrt: lr * sqrt(warmup / step) after warm-up (Vaswani et al., with the peak set
    directly). cosine: from lr down to min_lr at max_updates.
    """
    step = max(step, 1)
    warmup = max(cfg.warmup_steps, 1)
    if step < warmup:
        return cfg.lr * step / warmup
    if cfg.schedule == "inverse_sqrt":
        return cfg.lr * math.sqrt(warmup / step)
    progress = min(1.0, (step - warmup) / max(1, cfg.max_updates - warmup))
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1 + math.cos(math.pi * progress))
