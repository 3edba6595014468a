"""What a training run tells: config.yaml and the opening lines, then each update's progress bar,
scalars and log line (rank 0 writes; train/metrics.py is where they go)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

from translator.bleu import unspaced_warning
from translator.config import dump, to_dict
from translator.decode.forced import perplexity
from translator.files import atomic_write, read_lines
from translator.model.transformer import count_parameters
from translator.prepared import cleaning_change, load_manifest, prepared_dir, source_change
from translator.train.batches import TrainBatches
from translator.train.linear import OneDNNTrainingLinear
from translator.train.session import Session
from translator.train.validate import too_long_pairs


@dataclass
class Throughput:
    """Target tokens per second over the current logging window (all processes)."""

    tokens: float = 0.0
    start: float = 0.0
    lr: float = 0.0  # the last update's
    grad_norm: float = 0.0  # the last update's

    def rate(self) -> float:
        return self.tokens / max(time.time() - self.start, 1e-9)


def start_logging(s: Session, data: TrainBatches) -> None:
    """config.yaml, the hyperparameters for TensorBoard, and the log lines that describe the run
    (rank 0)."""
    cfg, state, n_pairs = s.cfg, s.state, len(data.src)
    if s.dist.main:
        with atomic_write(s.run_dir / "config.yaml", follow_link=False) as handle:
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
    if s.dist.main:
        _prepared_data_warnings(s)
        _valid_bleu_warning(s)
    _over_max_tokens(s, data)
    over, total = too_long_pairs(cfg)  # said now, not after eval_every updates
    if over:
        s.metrics.line(
            f"valid: {over} of {total} pairs take more than "
            f"model.max_positions={cfg.model.max_positions} positions; validation leaves them out "
            "of its loss (BLEU translates their sources in pieces)"
        )


def _prepared_data_warnings(s: Session) -> None:
    """Where the prepared data, reused by their settings, are not what the config's source or
    this version's cleaning would make now; the run goes on with the data it started with."""
    cfg = s.cfg
    manifest = load_manifest(cfg.data, s.vocab_from)
    if change := source_change(cfg.data, manifest):
        s.metrics.warning(
            f"{change}; training reads the prepared copy (to prepare the source again: "
            "`translator prepare` with this config, --data and --force; or set another data.name)"
        )
    if cleaned := cleaning_change(cfg.data, manifest):
        s.metrics.warning(
            f"{cleaned}; translate and eval clean their input by this version's rules, training "
            "reads the prepared copy (`translator prepare` with this config prepares it again: "
            "a new run then, as its vocabulary may change)"
        )


def _valid_bleu_warning(s: Session) -> None:
    """The warning `eval` gives for a target written without spaces that BLEU would tokenize at
    spaces: in training it matters more, since that BLEU chooses best.pt."""
    cfg = s.cfg
    references = prepared_dir(cfg.data) / f"valid.{cfg.data.tgt_lang}"
    if not references.is_file():
        return
    lines = read_lines(references)
    if warning := unspaced_warning(lines, cfg.data.tgt_lang, cfg.train.valid_bleu_tokenize):
        s.metrics.warning(f"{warning}; validation BLEU chooses best.pt")


def _over_max_tokens(s: Session, data: TrainBatches) -> None:
    """A warning when train.max_tokens is less than some pairs take: batching puts each of them
    alone in a batch over the limit, which would go unseen (and may not fit in memory)."""
    over, widest = data.over_max_tokens()
    if over:
        max_tokens = s.cfg.train.max_tokens
        s.metrics.warning(
            f"{over:,} of {len(data.src):,} training pairs take more than "
            f"train.max_tokens={max_tokens} tokens (the widest {widest}): each is a batch of its "
            "own, over the limit (raise train.max_tokens, or prepare with a smaller "
            "data.max_tokens_per_side)"
        )


def _non_finite(loss: float, grad_norm: float) -> str:
    """Which of a skipped update's loss and gradient norm were not finite, and the other's value."""
    values = {"loss": loss, "gradient norm": grad_norm}
    bad = [f"{name} ({value:.3g})" for name, value in values.items() if not math.isfinite(value)]
    good = [f"{name} {value:.3g}" for name, value in values.items() if math.isfinite(value)]
    return "non-finite " + " and ".join(bad) + "".join(f", {g}" for g in good)


def _warn_if_worse_than_uniform(s: Session, nll: float) -> None:
    """Once a session: a loss far above a uniform guess's ln(V) is a divergence that stayed finite
    (the non-finite guards never see it); the run goes on, as fairseq's would, but says so."""
    uniform = math.log(s.model.cfg.vocab_size)
    if nll > 2 * uniform and not s.warned_blow_up:
        s.warned_blow_up = True
        s.metrics.warning(
            f"update {s.state.step}: the training loss ({nll:.3g} nats a token) is over twice a "
            f"uniform guess's ln(vocabulary) = {uniform:.2f}: the training is diverging (lower "
            "train.lr or raise train.warmup_steps, and start over in a new run_dir)"
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
            f"update {state.step}: {_non_finite(loss, grad_norm)}; not applied "
            f"({state.skipped_steps} skipped so far)"
        )
    s.metrics.advance(
        state.step, f"loss {loss / max(tokens, 1):.3f}  lr {lr:.2e}  {window.rate():,.0f} tok/s"
    )
    window.lr, window.grad_norm = lr, grad_norm
    if state.step % t.log_every == 0:
        log_window(s, window)


def log_last_window(s: Session, window: Throughput) -> None:
    """At the end of a run, the updates since the last log line (a run ending between two
    log_every points, as max_minutes' runs do, showed none of them)."""
    if s.state.step % s.cfg.train.log_every and s.state.window_tokens:
        log_window(s, window)


def log_window(s: Session, window: Throughput) -> None:
    """Scalars and a log line for the updates since the last (the window), then a new window."""
    state = s.state
    values = {
        "lr": window.lr,
        "grad_norm": window.grad_norm,
        "tokens_per_s": window.rate(),
        "skipped_steps": state.skipped_steps,
        "oom_splits": state.oom_splits,
        "oom_skipped": state.oom_skipped,
    }
    if state.window_tokens:
        values["loss"] = state.window_loss / state.window_tokens
        values["nll_loss"] = state.window_nll / state.window_tokens
        values["ppl"] = perplexity(values["nll_loss"])
        _warn_if_worse_than_uniform(s, values["nll_loss"])
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
