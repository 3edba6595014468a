"""One training process's objects (model, optimizer, scaler, state, process group), how its model
and optimizer are built, and what acts on them between updates: checkpoint, validation. Setting
them up is train/startup.py's job, resuming train/resume.py's."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from translator.config import Config, ModelConfig, TrainConfig
from translator.data.tokenizer import Tokenizer
from translator.model.transformer import Transformer
from translator.train.allocator import keep_freed_memory
from translator.train.attention import AttentionMonitor
from translator.train.distributed import Dist, gather, sum_all
from translator.train.dropout import use_bits_dropout
from translator.train.linear import onednn_fp32_pays, use_onednn_linears
from translator.train.metrics import Metrics, literal
from translator.train.state import TrainState, refuse_non_finite, rng_state, save_checkpoints
from translator.train.validate import Validation, too_long_pairs, validate


@dataclass(kw_only=True)
class Session:
    """What one training process holds: a plain record; the loop itself is `run`."""

    cfg: Config
    model: Transformer  # the parameters: checkpoints and validation use it directly
    # what training forwards through: the model, or DDP / torch.compile around it
    net: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    tokenizer: Tokenizer
    dist: Dist
    dtype: torch.dtype | None  # autocast dtype, None = fp32
    run_dir: Path
    state: TrainState = field(default_factory=TrainState)
    metrics: Metrics | None = None
    saved_step: int = 0  # the update that run_dir/last.pt holds (a save that failed does not count)
    clock_zero: float = field(default_factory=time.time)  # set by `run`: when state.seconds was 0
    monitor: AttentionMonitor | None = (
        None  # attention diagnostics at each validation (rank 0, when enabled)
    )
    fine_tuning: bool = False  # starts from train.init_from's weights (validated before any update)
    vocab_from: str | None = None  # the checkpoint tokenizer the data were prepared with (sha256)
    ema: AveragedModel | None = None  # train.ema_decay's moving average of `model`'s weights
    # on a resume, the settings changed since last.pt was saved: dotted name -> (old, new)
    changed: dict[str, tuple] | None = None
    warned_blow_up: bool = False  # the loss went far above a uniform guess's (said once a session)

    def decoding_model(self) -> Transformer:
        """The weights that validation, checkpoints and `translate` use: the moving average when
        train.ema_decay is set, else the trained weights themselves."""
        return self.ema.module if self.ema is not None else self.model


def parameter_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """AdamW's groups: weight decay on the matrices of linear layers only, never on LayerNorm gains,
    biases or embeddings (nor the output projection tied to them). Without decay, one group (as
    checkpoints written before the split hold)."""
    if not weight_decay:
        return [{"params": list(model.parameters())}]
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    decayed = [p for p in model.parameters() if p.dim() >= 2 and id(p) not in embeddings]
    rest = [p for p in model.parameters() if p.dim() < 2 or id(p) in embeddings]
    return [
        {"params": decayed, "weight_decay": weight_decay},
        {"params": rest, "weight_decay": 0.0},
    ]


def training_model(cfg: ModelConfig, device: torch.device, compiled: bool = False) -> Transformer:
    """The model as training runs it; on CPU its dropout draws 16-bit numbers (train/dropout.py),
    its fp32 linears run through oneDNN where that is faster (train/linear.py; not when
    torch.compile generates the kernels) and the process keeps freed memory for reuse
    (train/allocator.py)."""
    model = Transformer(cfg).to(device)
    if device.type == "cpu":  # CUDA's fused dropout is fast, and its allocator caches
        use_bits_dropout(model)
        if not compiled and onednn_fp32_pays():
            use_onednn_linears(model)
        keep_freed_memory()
    return model


def moving_average(model: Transformer, decay: float) -> AveragedModel | None:
    """A copy of `model` whose weights follow ema = decay * ema + (1 - decay) * weights on every
    `update_parameters(model)` (the first call copies them); None when decay is 0."""
    if not decay:
        return None
    return AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(decay))


def make_optimizer(model: torch.nn.Module, t: TrainConfig, fused: bool = True) -> torch.optim.AdamW:
    """AdamW with the config's settings, fused: one kernel over all parameters (CPU and CUDA);
    `fused=False` is the plain per-parameter loop (bench/train_ablation.py's reference)."""
    return torch.optim.AdamW(
        parameter_groups(model, t.weight_decay),
        lr=t.lr,
        betas=(t.adam_beta1, t.adam_beta2),
        eps=t.adam_eps,
        fused=fused,
    )


def save(s: Session, best: bool, validated: bool = True) -> None:
    """Checkpoint from rank 0, with every process's RNG states (a collective: all processes call
    it). Not `validated` (an interrupted run's, fine-tuning's update 0): last.pt (and best.pt)
    alone, no step-N.pt. Weights that are not finite are refused on every process (DDP keeps them
    equal), before anything is written or pruned."""
    refuse_non_finite(s.state.step, s.run_dir, s.model, s.decoding_model())
    rngs = gather(s.dist, rng_state())
    if not s.dist.main:
        # what rank 0 saves: a stop's advice ("last.pt keeps update N") is then alike everywhere
        s.saved_step = s.state.step
        return
    s.state.rng, s.state.world_size = rngs, s.dist.world_size
    if best:  # checked against best.pt on a resume: a kill before its link leaves it stale
        s.state.best_step = s.state.step
    s.state.seconds = time.time() - s.clock_zero
    payload = {
        "optimizer": s.optimizer.state_dict(),
        "scaler": s.scaler.state_dict(),
        # the schedule is a function of the update number (and of train.warmup_end_seconds)
        "scheduler": {"schedule": s.cfg.train.schedule, "step": s.state.step},
        "train": s.state.state_dict(),
    }
    if s.ema is not None:  # the checkpoint's "model" is the average; training resumes from these
        payload["train_weights"] = s.model.state_dict()
    save_checkpoints(
        s.run_dir, s.decoding_model(), s.cfg, s.tokenizer, payload, s.state.step, best, validated
    )
    s.saved_step = s.state.step


def improves(state: TrainState, bleu: float, loss: float) -> bool:
    """Whether a validation's BLEU and loss make a better best.pt. BLEU decides; at equal BLEU
    (0.00 for every validation while outputs have no 4-gram in common with the references, or
    are single tokens) the lower valid loss does."""
    if bleu != state.best_bleu:
        return bleu > state.best_bleu
    return state.best_loss < 0 or loss < state.best_loss


def _finite_loss(result: Validation, cfg: Config) -> bool:
    """The validation loss is finite, or NaN only because no pair fits model.max_positions."""
    if math.isfinite(result.loss):
        return True
    return math.isnan(result.loss) and result.too_long == too_long_pairs(cfg)[1]


def evaluate_and_save(s: Session, stop: Callable[[], bool] = lambda: False) -> str | None:
    """Validate on rank 0, log, checkpoint. Returns, alike on every process, why the run ends:
    "early stopping"; "interrupted" when `stop()` (a stop request) turned true during the
    validation, which is then abandoned, nothing saved (the caller saves last.pt at once: torchrun
    kills its processes 30 s after its SIGTERM); None to go on."""
    state, main = s.state, s.dist.main
    improved, stop_now, abandoned, finite = False, 0.0, 0.0, 0.0
    if main:
        s.metrics.advance(state.step, "validating")
        began = time.time()
        result = validate(s.decoding_model(), s.tokenizer, s.cfg, s.dtype, stop=stop)
        if result is None:
            abandoned = 1.0
        else:
            improved = _log_validation(s, result, began)
            finite = float(_finite_loss(result, s.cfg))
            patience = s.cfg.train.patience
            stop_now = float(bool(patience and state.bad_evals >= patience))
    # rank 0's verdict and early stopping's counters, on every process (the others add 0): a
    # process that kept its own would disagree on limit_reached (fine-tuning's update 0)
    stop_now, abandoned, finite, bad_evals, best_bleu, best_loss = sum_all(
        s.dist,
        [
            stop_now,
            abandoned,
            finite,
            state.bad_evals * main,
            state.best_bleu * main,
            state.best_loss * main,
        ],
    )
    if abandoned:
        return "interrupted"
    state.bad_evals, state.best_bleu, state.best_loss = int(bad_evals), best_bleu, best_loss
    state.last_valid_step = state.step
    # update 0 (fine-tuning's start) is train.init_from's model: best.pt may hold it, but a step
    # file would put the unchanged model into `average --last N`; so would weights whose valid
    # loss is not finite (last.pt keeps them, to resume)
    save(s, best=improved, validated=state.step > 0 and bool(finite))
    return "early stopping" if stop_now else None


def _log_validation(s: Session, result: Validation, began: float) -> bool:
    """Log a validation (begun at time `began`) and count it for early stopping; True when its BLEU
    is the best so far."""
    state = s.state
    trained_s = began - s.clock_zero  # when training reached this update
    took = time.time() - began  # the validation's own time (the diagnostics' is logged apart)
    # its cost is logged: docs/benchmarks.md holds it to 5% of a validation
    if s.monitor is not None:
        validation_s = time.time() - began
        seconds = s.monitor.log(s.decoding_model(), state.step, s.metrics)
        s.metrics.line(
            f"attention diagnostics: {seconds:.2f} s, {100 * seconds / validation_s:.1f}% of "
            f"the validation's {validation_s:.1f} s"
        )
    # a model whose loss overflows is no candidate, whatever its BLEU (best_bleu starts at -1)
    finite = _finite_loss(result, s.cfg)
    improved = finite and improves(state, result.bleu, result.loss)
    if improved:
        state.best_bleu, state.best_loss = result.bleu, result.loss
    state.bad_evals = 0 if improved else state.bad_evals + 1
    s.metrics.scalars(state.step, result.scalars(), "valid")
    # against training wall-clock too: the step of this tag is seconds, not updates
    s.metrics.scalar_vs_seconds(trained_s, "valid/bleu_vs_seconds", result.bleu)
    s.metrics.text(
        state.step,
        "valid/samples",
        "\n\n".join(
            f"**source:** {literal(src)}  \n**output:** {literal(hyp)}  \n"
            f"**reference:** {literal(ref)}"
            for src, hyp, ref in result.samples
        ),
    )
    decoded = f" on {result.decoded}" if result.decoded else ""  # what BLEU and chrF scored
    s.metrics.line(
        f"validation at update {state.step}: loss {result.loss:.3f}, ppl {result.ppl:.4g}, "
        f"BLEU {result.bleu:.2f}, chrF {result.chrf:.2f}{decoded}, {took:.1f} s"
        f"{' (best)' if improved else ''} "
        f"[{result.signature}]"
        + (
            f"; {result.too_long} pairs over model.max_positions not in the loss"
            if result.too_long
            else ""
        )
        + ("; a non-finite loss: never best.pt" if not finite else "")
    )
    return improved
