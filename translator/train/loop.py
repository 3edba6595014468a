"""`translator train`: a straight-line loop of updates with validation, BLEU and atomic checkpoints.

An update is `grad_accum_steps` token batches per process. Its loss is summed over target tokens
and divided by the update's target tokens over all processes, so one process accumulating two
batches and two processes with one batch each compute the same gradient. A run resumes from
`run_dir/last.pt` when it exists and continues exactly where it stopped (see train/state.py).
"""

from __future__ import annotations

import math
import signal
import threading
import time
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import torch

from translator.config import Config, dump, to_dict
from translator.data.batching import Batch, make_batch, token_batches
from translator.data.sampling import SubwordSampler
from translator.data.shards import TokenArray
from translator.errors import TranslatorError
from translator.files import atomic_write
from translator.model.transformer import Transformer, count_parameters
from translator.prepared import load_manifest, prepared_dir, source_change, vocab_files
from translator.train import distributed, oom
from translator.train.distributed import Dist, no_sync, sum_all
from translator.train.linear import OneDNNTrainingLinear
from translator.train.loss import chunked_token_loss, token_loss
from translator.train.manifest import RunManifest
from translator.train.precision import autocast
from translator.train.schedule import budget_progress, learning_rate
from translator.train.session import Session, evaluate_and_save, save, setup
from translator.train.state import TrainState
from translator.train.validate import too_long_pairs


class TrainBatches:
    """This process's training batches, epoch after epoch, read from the position in TrainState."""

    def __init__(self, cfg: Config, d: Dist) -> None:
        folder = prepared_dir(cfg.data)
        self.src, self.tgt = TokenArray(folder / "train.src"), TokenArray(folder / "train.tgt")
        # + EOS / BOS
        longest = int(max(self.src.lengths.max(initial=0), self.tgt.lengths.max(initial=0))) + 1
        if longest > cfg.model.max_positions:  # found now, not at the first long batch
            raise TranslatorError(
                f"training sequences take up to {longest} positions, more than "
                f"max_positions={cfg.model.max_positions}",
                "model.max_positions",
                f"use at least {longest}, or prepare with a smaller data.max_tokens_per_side",
            )
        self.args = (cfg.train.max_tokens, cfg.train.seed)
        self.rank, self.world_size = d.rank, d.world_size
        self.samplers: list[SubwordSampler] = []
        if cfg.train.subword_alpha:  # + EOS / BOS: rows of at most max_positions - 1 tokens
            files, alpha = vocab_files(cfg.data), cfg.train.subword_alpha
            self.samplers = [
                SubwordSampler(str(folder / files[side]), rows, alpha, cfg.model.max_positions - 1)
                for side, rows in (("src", self.src), ("tgt", self.tgt))
            ]
        # (epoch, its batches of row indices, its source rows, its target rows)
        Cached = tuple[int, list[np.ndarray], TokenArray, TokenArray]
        self.cached: Cached = (-1, [], self.src, self.tgt)

    def epoch(self, epoch: int) -> list[np.ndarray]:
        if self.cached[0] != epoch:
            src, tgt = self.src, self.tgt
            if self.samplers:  # this epoch's segmentation; batches are cut on its lengths
                seed = self.args[1]
                src, tgt = (s.epoch(seed, epoch, side) for side, s in enumerate(self.samplers))
            order = token_batches(
                src.lengths, tgt.lengths, *self.args, epoch, self.rank, self.world_size
            )
            if not order:
                raise TranslatorError(
                    f"the training split has fewer batches than the {self.world_size} processes",
                    "train",
                    "use fewer processes or a smaller train.max_tokens",
                )
            self.cached = (epoch, order, src, tgt)
        return self.cached[1]

    def roll(self, state: TrainState) -> None:
        """Move to the next epoch (a new shuffle) once this one is used up."""
        if state.batch_index >= len(self.epoch(state.epoch)):
            state.epoch, state.batch_index = state.epoch + 1, 0

    def take(self, state: TrainState, count: int) -> list[Batch]:
        out = []
        for _ in range(count):
            self.roll(state)
            rows = self.epoch(state.epoch)[state.batch_index]
            src, tgt = self.cached[2:]
            state.batch_index += 1
            out.append(make_batch([src[i] for i in rows], [tgt[i] for i in rows]))
        return out


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
    ok = math.isfinite(loss_total) and math.isfinite(float(norm))
    if ok:
        if t.clip_grad_norm:
            torch.nn.utils.clip_grads_with_norm_(params, t.clip_grad_norm, norm)
        s.scaler.step(s.optimizer)
        if s.ema is not None:
            s.ema.update_parameters(s.model)
    s.scaler.update()
    s.optimizer.zero_grad(set_to_none=True)
    return loss_total, nll_total, float(norm), ok


class StopRequest:
    """Ctrl-C / SIGTERM set a flag; the loop saves after the current update and exits.

    A second Ctrl-C raises KeyboardInterrupt at once (nothing saved).
    """

    def __init__(self) -> None:
        self.requested = False
        self.signum = signal.SIGINT  # the one received (another process's under DDP: Ctrl-C's)
        self.previous = {}
        # signal handlers live in the main thread
        if threading.current_thread() is threading.main_thread():
            self.previous = {
                sig: signal.signal(sig, self._handle) for sig in (signal.SIGINT, signal.SIGTERM)
            }

    def _handle(self, signum, frame) -> None:
        if self.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.requested, self.signum = True, signum

    def restore(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


@dataclass
class Throughput:
    """Target tokens per second over the current logging window (all processes)."""

    tokens: float = 0.0
    start: float = 0.0

    def rate(self) -> float:
        return self.tokens / max(time.time() - self.start, 1e-9)


def run(cfg: Config, quiet: bool = False) -> Transformer:
    """Train until max_updates, max_epochs, max_minutes or early stopping; resume from
    run_dir/last.pt. Ctrl-C or SIGTERM saves last.pt, then raises SystemExit(130 or 143): the
    process ends as an interrupted program does.

    Returns the trained model (its moving average with train.ema_decay); checkpoints,
    config.yaml, train.log, manifest.json and TensorBoard events are in train.run_dir (written by
    rank 0 only).
    """
    s = setup(cfg, quiet)
    t, state = cfg.train, s.state
    data = TrainBatches(cfg, s.dist)
    manifest = (
        RunManifest(s.run_dir, cfg, s.dist.world_size, state.step, s.vocab_from)
        if s.dist.main
        else None
    )
    start_logging(s, len(data.src))
    stop, reason = StopRequest(), "error"
    s.clock_zero = time.time() - state.seconds  # training wall-clock continues where it was saved
    # in training seconds, as state.seconds counts them
    deadline = state.seconds + 60 * t.max_minutes if t.max_minutes else math.inf
    seconds = state.seconds  # as every process measured it, averaged (so their lr agree)
    session_start = (state.step, state.seconds)  # for the bar's end under max_minutes
    window = Throughput(start=time.time())
    try:
        if s.fine_tuning:  # the starting point, which the fine-tuned model is to beat
            s.metrics.line("validating train.init_from's model before any update")
            evaluate_and_save(s)
            window.start = time.time()
        while True:
            data.roll(state)
            if state.step >= t.max_updates or (t.max_epochs and state.epoch >= t.max_epochs):
                reason = "max_updates" if state.step >= t.max_updates else "max_epochs"
                break
            if t.patience and state.bad_evals >= t.patience:  # a rerun of a run that stopped early
                reason = "early stopping"
                break
            group = data.take(state, t.grad_accum_steps)
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
                reason = "interrupted" if interrupted else "max_minutes"
                break
            if state.step % t.eval_every == 0:
                began = time.time()
                stopping = evaluate_and_save(s)
                if manifest:  # so that a killed session is still on record to its last save
                    manifest.saved(state.step, s.saved_step)
                if stopping:
                    reason = "early stopping"
                    break
                window.start += time.time() - began  # throughput counts training time only
        if reason == "interrupted":
            save(s, best=False, validated=False)  # last.pt: no step-N.pt for averaging
            s.metrics.line(f"interrupted: saved {s.run_dir / 'last.pt'} at update {state.step}")
        elif state.last_valid_step != state.step:
            evaluate_and_save(s)
        s.metrics.line(
            f"stopped at update {state.step} ({reason}); {state.skipped_steps} updates skipped"
            + (
                f"; out of memory: {state.oom_splits} batches split, {state.oom_skipped} sentences "
                "skipped"
                if state.oom_splits or state.oom_skipped
                else ""
            )
        )
    finally:
        stop.restore()
        if manifest:
            manifest.finish(state.step, reason, s.saved_step)
        s.metrics.close()
        distributed.close(s.dist)
    if reason == "interrupted":  # saved, but not done: `train ... && eval ...` must not go on
        raise SystemExit(128 + stop.signum)
    return s.decoding_model()


def start_logging(s: Session, n_pairs: int) -> None:
    """config.yaml, the hyperparameters for TensorBoard, and the opening log line (rank 0)."""
    cfg, state = s.cfg, s.state
    if s.dist.main:
        with atomic_write(s.run_dir / "config.yaml") as handle:
            handle.write(dump(cfg))
    s.metrics.advance(state.step, "")
    s.metrics.text(state.step, "config", "```yaml\n" + dump(cfg) + "```")
    flat = {
        f"{section}.{key}": value
        for section in ("model", "train", "decode")
        for key, value in to_dict(getattr(cfg, section)).items()
    }
    s.metrics.hparams(state.step, flat, ["valid/bleu", "valid/chrf", "valid/loss", "train/loss"])
    on_off = {True: "on", False: "off"}
    # each session's times count from its start: this line tells the sessions apart
    s.metrics.line(f"session started {datetime.now().astimezone():%Y-%m-%d %H:%M:%S %z}")
    s.metrics.line(
        f"model: {count_parameters(s.model):,} parameters; {s.dist.world_size} x {s.dist.device}, "
        f"precision {s.dtype or torch.float32}, gradient checkpointing "
        f"{on_off[cfg.model.gradient_checkpointing]}, compile {on_off[cfg.train.compile]}; "
        f"{n_pairs:,} training pairs; starting at update {state.step}"
    )
    if s.dist.device.type == "cpu":  # the choices session.training_model made
        onednn = s.dtype is None and any(
            isinstance(m, OneDNNTrainingLinear) for m in s.model.modules()
        )
        linears = ", fp32 linears through " + ("oneDNN" if onednn else "PyTorch's own kernels")
        s.metrics.line(
            "CPU training: dropout from 16-bit draws, the loss in chunks of rows, freed memory "
            "kept for reuse" + (linears if s.dtype is None else "")
        )
    change = source_change(cfg.data, load_manifest(cfg.data, s.vocab_from)) if s.dist.main else ""
    if change:  # prepared data are reused by their settings, wherever they came from
        s.metrics.warning(
            f"{change}; training reads the prepared copy (to prepare the source again: "
            "`translator prepare` with this config, --data and --force; or set another data.name)"
        )
    over, total = too_long_pairs(cfg)  # said now, not after eval_every updates
    if over:
        s.metrics.line(
            f"valid: {over} of {total} pairs take more than "
            f"model.max_positions={cfg.model.max_positions} positions; validation leaves them out "
            "of its loss (BLEU translates their sources in pieces)"
        )


def log_update(
    s: Session,
    loss: float,
    nll: float,
    tokens: float,
    grad_norm: float,
    ok: bool,
    lr: float,
    window: Throughput,
) -> None:
    """Progress bar every update; scalars and a log line every log_every updates; skipped updates
    reported."""
    state, t = s.state, s.cfg.train
    if ok:
        state.window_loss += loss
        state.window_nll += nll
        state.window_tokens += int(tokens)
    else:
        state.skipped_steps += 1
        s.metrics.line(
            f"update {state.step}: non-finite loss ({loss:.3g}) or gradient norm "
            f"({grad_norm:.3g}); not applied ({state.skipped_steps} skipped so far)"
        )
    s.metrics.advance(
        state.step, f"loss {loss / max(tokens, 1):.3f}  lr {lr:.2e}  {window.rate():,.0f} tok/s"
    )
    if state.step % t.log_every:
        return
    values = {
        "lr": lr,
        "grad_norm": grad_norm,
        "tokens_per_s": window.rate(),
        "skipped_steps": state.skipped_steps,
        "oom_splits": state.oom_splits,
        "oom_skipped": state.oom_skipped,
    }
    if state.window_tokens:
        values["loss"] = state.window_loss / state.window_tokens
        values["nll_loss"] = state.window_nll / state.window_tokens
        values["ppl"] = math.exp(min(values["nll_loss"], 50.0))
    if s.scaler.is_enabled():
        values["loss_scale"] = s.scaler.get_scale()
    if s.dist.device.type == "cuda":
        values["gpu_mem_gb"] = torch.cuda.max_memory_allocated(s.dist.device) / 2**30
    s.metrics.scalars(state.step, values, "train")
    s.metrics.line(
        f"update {state.step}: "
        + ", ".join(f"{k} {v:.4g}" for k, v in values.items())
        + f", epoch {state.epoch}"
    )
    state.window_loss = state.window_nll = 0.0
    state.window_tokens = 0
    window.tokens, window.start = 0.0, time.time()
