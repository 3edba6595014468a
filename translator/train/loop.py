"""`translator train`: a straight-line loop of updates with validation, BLEU and atomic checkpoints.

An update is `grad_accum_steps` token batches per process. Its loss is summed over target tokens
and divided by the update's target tokens over all processes, so one process accumulating two
batches and two processes with one batch each compute the same gradient. A run resumes from
`run_dir/last.pt` when it exists and continues exactly where it stopped (see train/state.py).
"""

from __future__ import annotations

import math
import signal
import sys
import time
from contextlib import nullcontext, suppress

import torch

from translator.config import Config
from translator.data.batching import Batch
from translator.errors import TranslatorError, error_line
from translator.model.transformer import Transformer
from translator.train import distributed, oom
from translator.train.batches import TrainBatches
from translator.train.distributed import no_sync, sum_all
from translator.train.divergence import Divergence
from translator.train.loss import chunked_token_loss, token_loss
from translator.train.manifest import RunManifest
from translator.train.precision import autocast
from translator.train.report import Throughput, log_last_window, log_update, start_logging
from translator.train.schedule import budget_progress, learning_rate
from translator.train.session import Session, evaluate_and_save, save
from translator.train.startup import setup
from translator.train.stopping import (
    StopRequest,
    limit_reached,
    signal_received,
    stopped_line,
    unsaved,
)


def loss_sums(
    net: torch.nn.Module, batch: Batch, label_smoothing: float, rows: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Label-smoothed cross-entropy summed over target tokens (padding ignored), and the NLL sum.

    rows: `batch.target_rows()` on the batch's device, made before the batch was moved there
    (on CUDA, made from the moved batch, they would wait for the GPU). Only those positions go
    through the output projection and the loss: a padding position's logits have no gradient.
    On CPU the chunked form of the loss (train/loss.py), elsewhere the plain one.
    """
    if rows is None:
        rows = batch.target_rows()
    logits = net(batch.src, batch.tgt_in, batch.src_mask, rows)  # (n, V)
    loss = chunked_token_loss if logits.device.type == "cpu" else token_loss
    return loss(logits, batch.tgt_out.flatten()[rows], label_smoothing)


def train_step(
    s: Session, batches: list[Batch], total_tokens: float
) -> tuple[float, float, float, bool]:
    """One update -> (loss sum, NLL sum over all processes, gradient norm, applied?).

    The norm is taken on unscaled gradients; an update whose loss or norm is not finite is not
    applied (under fp16 the scaler then lowers its scale).
    """
    device, t = s.dist.device, s.cfg.train
    factor = s.dist.world_size / total_tokens  # DDP averages gradients over processes

    def backward(batch: Batch, last: bool) -> torch.Tensor:
        with no_sync(s.net, sync=last):
            longest = max(batch.src.shape[1], batch.tgt_in.shape[1])
            with autocast(device, s.dtype, longest):
                rows = batch.target_rows().to(device, non_blocking=True)
                loss, nll = loss_sums(s.net, batch.to(device), t.label_smoothing, rows)
            s.scaler.scale(loss * factor).backward()
        return torch.stack([loss.detach(), nll])

    # loss, NLL; read once per update (no GPU sync per batch)
    sums = oom.accumulate(s, batches, backward)
    loss_total, nll_total = sum_all(s.dist, sums.tolist())  # every process decides alike
    s.scaler.unscale_(s.optimizer)
    params = [p for p in s.model.parameters() if p.grad is not None]
    norm = torch.nn.utils.get_total_norm([p.grad for p in params])
    # read once, here: read after the step is queued, CUDA would make the host wait for the step
    grad_norm = float(norm)
    ok = math.isfinite(loss_total) and math.isfinite(grad_norm)
    if ok:
        if t.clip_grad_norm:
            torch.nn.utils.clip_grads_with_norm_(params, t.clip_grad_norm, norm)
        s.scaler.step(s.optimizer)
        if s.ema is not None:
            s.ema.update_parameters(s.model)
    s.scaler.update()
    s.optimizer.zero_grad(set_to_none=True)
    return loss_total, nll_total, grad_norm, ok


def _update(
    s: Session,
    group: list[Batch],
    seconds: float,
    deadline: float,
    window: Throughput,
    divergence: Divergence,
) -> None:
    """One update over `group` at the schedule's learning rate for training time `seconds`."""
    state, t = s.state, s.cfg.train
    if state.warmup_end_seconds < 0 and state.step + 1 >= t.warmup_steps:
        state.warmup_end_seconds = seconds
    progress = budget_progress(seconds, state.warmup_end_seconds, deadline)
    lr = learning_rate(state.step + 1, t, progress)
    for param_group in s.optimizer.param_groups:
        param_group["lr"] = lr
    (tokens,) = sum_all(s.dist, [float(sum(b.n_tgt_tokens for b in group))])
    loss, nll, grad_norm, ok = train_step(s, group, tokens)
    state.step += 1
    window.tokens += tokens
    log_update(s, loss, nll, tokens, grad_norm, ok, lr, window)
    divergence.after_update(s, ok)


def run(cfg: Config, quiet: bool = False) -> Transformer:
    """Train until max_updates, max_epochs, max_minutes or early stopping; resume from
    run_dir/last.pt. Ctrl-C or SIGTERM saves last.pt, then raises SystemExit(130 or 143): the
    process ends as an interrupted program does.

    Returns the trained model (its moving average with train.ema_decay); checkpoints,
    config.yaml, train.log, manifest.json and TensorBoard events are in train.run_dir (written by
    rank 0 only).
    """
    with distributed.peer_failures():
        return _run(cfg, quiet)


def _run(cfg: Config, quiet: bool) -> Transformer:
    s = setup(cfg, quiet)
    state = s.state
    manifest = (
        RunManifest(s.run_dir, cfg, s.dist.world_size, state.step, s.vocab_from, s.changed)
        if s.dist.main
        else None
    )
    stop, reason, error = StopRequest(), "error", None
    try:  # from here an error that ends the run is kept in train.log and the manifest too
        data = TrainBatches(cfg, s.dist)
        start_logging(s, data)
        s.clock_zero = time.time() - state.seconds  # training wall-clock goes on where it was saved
        reason = _train(s, data, stop, manifest)
        if reason != "interrupted" and state.last_valid_step != state.step:
            # a limit's reason stands (its verdict on early stopping comes too late to matter)
            if evaluate_and_save(s, stop.seen) == "interrupted":
                reason = "interrupted"
        if reason == "interrupted":
            stop.signum = signal_received(s, stop)
            save(s, best=False, validated=False)  # last.pt: no step-N.pt for averaging
            s.metrics.line(f"interrupted: saved {s.run_dir / 'last.pt'} at update {state.step}")
        s.metrics.line(stopped_line(state, reason))
    except KeyboardInterrupt:  # a second Ctrl-C, mid-update or mid-save: nothing more is saved
        reason = "interrupted"
        if s.dist.main:
            s.metrics.last_word(f"stopped at once by a second Ctrl-C: {unsaved(s)}")
        # said: the exit code of an interrupted program, not a KeyboardInterrupt the command line
        # would announce again
        raise SystemExit(128 + signal.SIGINT) from None
    except (TranslatorError, OSError) as err:
        # the command prints it on stderr; train.log and the manifest keep it for whoever reads
        # the run later (a full disk may refuse the line too)
        error = error_line(err)
        with suppress(OSError):
            s.metrics.record(f"error: {error}")
        raise
    finally:
        stop.restore()
        if manifest:
            # a run already failing (a full disk) keeps its own error: the record's cannot hide it
            with suppress(OSError) if sys.exc_info()[1] else nullcontext():
                manifest.finish(state.step, reason, s.saved_step, error)
        s.metrics.close()
        distributed.close(s.dist)
    if reason == "interrupted":  # saved, but not done: `train ... && eval ...` must not go on
        raise SystemExit(128 + stop.signum)
    return s.decoding_model()


def _train(s: Session, data: TrainBatches, stop: StopRequest, manifest: RunManifest | None) -> str:
    """Updates and validations until a limit, early stopping or a stop request: returns which (the
    same on every process). Nothing non-finite is left to save."""
    t, state = s.cfg.train, s.state
    # in training seconds, as state.seconds counts them: summed over the run's sessions, so a
    # resumed run stops (and its schedule decays) where the uninterrupted one would
    deadline = 60 * t.max_minutes if t.max_minutes else math.inf
    seconds = state.seconds  # as every process measured it, averaged (so their lr agree)
    session_start = (state.step, state.seconds)  # for the bar's end under max_minutes
    window, divergence = Throughput(start=time.time()), Divergence(state.step)
    if due := _validation_owed(s):
        s.metrics.line(due)
        # its verdict counts: a patience of 1 stops here when the start's loss is not finite
        if ended := evaluate_and_save(s, stop.seen):
            return ended
        window.start = time.time()
    while True:
        data.roll(state)
        if limit := limit_reached(state, t, seconds, deadline):
            break
        group = data.take(state, t.grad_accum_steps)
        _update(s, group, seconds, deadline, window, divergence)
        now = time.time() - s.clock_zero
        interrupted, late, seconds = sum_all(
            s.dist, [float(stop.requested), float(now > deadline), now]
        )
        seconds /= s.dist.world_size
        if deadline < math.inf and seconds > session_start[1]:  # the bar ends with the budget
            done, spent = state.step - session_start[0], seconds - session_start[1]
            left = int((deadline - seconds) * done / spent)
            s.metrics.expect_total(min(t.max_updates, state.step + max(left, 0)))
        if interrupted or late:
            limit = "interrupted" if interrupted else "max_minutes"
            break
        if state.step % t.eval_every == 0:
            divergence.check(s)
            began = time.time()
            limit = evaluate_and_save(s, stop.seen)
            if manifest:  # so that a killed session is still on record to its last save
                manifest.saved(state.step, s.saved_step)
            if limit:
                break
            window.start += time.time() - began  # throughput counts training time only
        elif t.save_every and state.step % t.save_every == 0:  # last.pt alone, not validated
            divergence.check(s)
            began = time.time()
            save(s, best=False, validated=False)
            if manifest:
                manifest.saved(state.step, s.saved_step)
            window.start += time.time() - began
    divergence.check(s)  # nothing non-finite is saved
    if limit != "interrupted":
        log_last_window(s, window)
    return limit


def _validation_owed(s: Session) -> str:
    """What to say of the validation a session owes before its first update, if any: that of the
    model fine-tuning starts from (the one to beat), or the one a stop skipped or cut short at the
    update last.pt holds (a resume then validates where the uninterrupted run did)."""
    state, t = s.state, s.cfg.train
    if state.last_valid_step == state.step:
        return ""
    if state.step == 0:
        started_from = s.fine_tuning or t.init_from
        return "validating train.init_from's model before any update" if started_from else ""
    if state.step % t.eval_every == 0:
        return f"validating update {state.step}, which a stop left unvalidated"
    return ""
