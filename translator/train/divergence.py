"""Ending a training run that cannot recover: an optimizer step that made the weights
non-finite, or a run of skipped updates (train/loop.py calls it after every update)."""

from __future__ import annotations

import math

import torch

from translator.train.distributed import EveryRankError
from translator.train.session import Session

# Skipped updates in a row that end the run. A skipped update leaves the weights and the optimizer
# as they were, so skips in a row are the same weights failing on other batches: one or two can be
# outliers (a rare long pair), ten say that the weights themselves overflow, and no later update
# can change them.
MAX_SKIPS_IN_A_ROW = 10


@torch.no_grad()
def weights_norm(model: torch.nn.Module) -> torch.Tensor:
    """() sum of the parameters' 2-norms, one fused reduction: not finite when a weight is not,
    nor when a norm overflows float32 (weights above ~1e19), which `weights_finite` then tells."""
    return torch.stack(torch._foreach_norm(list(model.parameters()))).sum()


@torch.no_grad()
def weights_finite(model: torch.nn.Module) -> bool:
    """Every parameter is finite (exact, and slower than `weights_norm`: a pass per parameter)."""
    return bool(torch.stack([p.isfinite().all() for p in model.parameters()]).all())


class Divergence:
    """Ends a run that cannot recover: an applied update whose optimizer step made a weight
    non-finite (train_step's check sees only the loss and the gradient norm, before the step), or
    MAX_SKIPS_IN_A_ROW skipped updates in a row.

    Update N's check is its weights' norm, a device tensor read after update N+1's loss (or before
    a save), so CUDA does not wait for the optimizer step: train_step too reads its loss and
    gradient norm before it queues its step, never after.
    """

    def __init__(self, start: int = 0) -> None:
        """start: the update the session starts from (its weights are that update's)."""
        self.pending: tuple[int, torch.Tensor] | None = None  # (update, weights_norm after it)
        self.skips = 0  # skipped updates in a row that count
        self.applied = start  # the last applied update: the weights the skips failed with are its

    def after_update(self, s: Session, ok: bool) -> None:
        """Called after update s.state.step (applied or not)."""
        self.check(s)
        if ok:
            self.pending, self.skips = (s.state.step, weights_norm(s.model)), 0
            self.applied = s.state.step
            return
        # under fp16 the scaler skips by design while it lowers its scale; below 1 it no longer
        # scales gradients up, so an overflow there is the model's own
        if not s.scaler.is_enabled() or s.scaler.get_scale() < 1.0:
            self.skips += 1
        if self.skips >= MAX_SKIPS_IN_A_ROW:
            step = s.state.step
            # on every process alike: `ok` comes of the all-reduced loss and gradient norm
            raise EveryRankError(
                f"updates {step - self.skips + 1}-{step} all had a non-finite loss or gradient "
                "norm and were not applied: the training has diverged",
                "train.lr",
                f"lower train.lr or raise train.warmup_steps; {_kept(s, self.applied)}",
            )

    def check(self, s: Session) -> None:
        """Raises if the last applied update left a non-finite weight (so it is never saved)."""
        if self.pending is None:
            return
        (step, norm), self.pending = self.pending, None
        if not math.isfinite(float(norm)) and not weights_finite(s.model):
            raise EveryRankError(
                f"the optimizer step of update {step} made the weights non-finite",
                "train.lr",
                f"lower train.lr or raise train.warmup_steps; {_kept(s)}",
            )


def _kept(s: Session, failing: int | None = None) -> str:
    """What a run stopped by Divergence leaves to resume from. `failing`: the update whose weights
    the skipped updates failed with (finite, but overflowing every batch)."""
    last = s.run_dir / "last.pt"
    if not last.is_file():
        return "no checkpoint saved yet: a rerun starts over"
    if failing is not None and s.saved_step >= failing:
        # weights unchanged since `failing`: a resume meets the same overflow on every batch
        return (
            f"{last} (update {s.saved_step}) holds the weights that failed, unchanged since "
            f"update {failing}, so resuming cannot help: start over in a new run_dir"
        )
    return f"{last} keeps update {s.saved_step}: resume from it, or start over in a new run_dir"
