"""One training process's objects (model, optimizer, scaler, state, process group) and what acts on
them between updates: setup, resume, checkpoint, validation."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from translator import prepare
from translator.config import Config, ModelConfig, TrainConfig
from translator.data.tokenizer import Tokenizer
from translator.errors import TranslatorError
from translator.model.transformer import Transformer
from translator.prepared import load_manifest, prepared_dir
from translator.train import distributed, finetune
from translator.train.allocator import keep_freed_memory
from translator.train.attention import AttentionMonitor
from translator.train.distributed import Dist, gather, sum_all
from translator.train.dropout import use_bits_dropout
from translator.train.linear import onednn_fp32_pays, use_onednn_linears
from translator.train.metrics import Metrics
from translator.train.precision import amp_dtype, grad_scaler
from translator.train.state import (
    TrainState,
    check_run_dir,
    read_resumable,
    refuse_earlier_checkpoints,
    rng_state,
    save_checkpoints,
    seed_all,
    set_rng_state,
)
from translator.train.validate import validate


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

    def decoding_model(self) -> Transformer:
        """The weights that validation, checkpoints and `translate` use: the moving average when
        train.ema_decay is set, else the trained weights themselves."""
        return self.ema.module if self.ema is not None else self.model


def _set_vocab_sizes(model: ModelConfig, tokenizer: Tokenizer) -> None:
    """Fill vocab_size / src_vocab_size from the tokenizer (0 = automatic), or check the values
    given."""
    sizes = {
        "vocab_size": tokenizer.target_vocab_size,
        "src_vocab_size": 0 if tokenizer.joint else tokenizer.vocab_size,
    }
    for name, size in sizes.items():
        given = getattr(model, name)
        if given == 0:
            setattr(model, name, size)
        elif given != size:
            found = f"has {size} pieces" if size else "is joint (one vocabulary)"
            raise TranslatorError(
                f"model.{name}={given} but the prepared data's vocabulary {found}",
                f"model.{name}",
                "set it to 0 (automatic)",
            )


def prepared_tokenizer(cfg: Config, d: Dist, quiet: bool, vocab_from: str | None) -> Tokenizer:
    """The prepared data's tokenizer; rank 0 prepares the data first when there is none (the others
    wait). `vocab_from`: the sha256 of the checkpoint tokenizer the data must be encoded with."""
    distributed.main_first(d, lambda: prepare.ensure(cfg, quiet, vocab_from), "preparing the data")
    # every rank checks the settings
    vocab, folder = (
        load_manifest(cfg.data, vocab_from)["vocab"],
        prepared_dir(cfg.data),
    )
    src, tgt = folder / vocab["src"]["file"], folder / vocab["tgt"]["file"]
    tokenizer = Tokenizer(src) if src == tgt else Tokenizer(src, tgt)
    if vocab_from and tokenizer.checksum() != vocab_from:  # files replaced after prepare
        raise TranslatorError(
            "the prepared SentencePiece model(s) are not the checkpoint's (train.init_from)",
            str(folder),
            "prepare again with --force, or set another data.name",
        )
    return tokenizer


def initial_model(cfg: Config, d: Dist, start: finetune.Start) -> Transformer:
    """The seeded model, with train.init_from's weights when the run starts from them."""
    seed_all(cfg.train.seed)  # the same initial weights on every process
    model = training_model(cfg.model, d.device, compiled=cfg.train.compile)
    if start.weights is not None:
        try:
            model.load_state_dict(start.weights)
        except RuntimeError as err:  # names and shapes that its own model section does not build
            first = str(err).splitlines()[1:2] or ["mismatched parameters"]
            raise TranslatorError(
                f"its weights do not fit its model settings ({first[0].strip()})",
                f"train.init_from: {cfg.train.init_from}",
                "use a checkpoint written by `translator train` or `translator import-hf`",
            ) from None
    return model


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


def setup(cfg: Config, quiet: bool) -> Session:
    """Process group, prepared data and tokenizer, seeded model, optimizer and scaler; resumed when
    run_dir/last.pt exists."""
    t, d = cfg.train, distributed.init(cfg.train.device)
    last = Path(t.run_dir) / "last.pt"
    try:
        if not last.is_file():
            refuse_earlier_checkpoints(last.parent)
        start = finetune.plan(cfg, last)
        tokenizer = prepared_tokenizer(cfg, d, quiet, start.vocab_from)
        _set_vocab_sizes(cfg.model, tokenizer)
        model = initial_model(cfg, d, start)
        # read before train.log and the events are opened: a refused resume leaves neither behind
        payload = read_resumable(last, cfg, tokenizer) if last.is_file() else None
    except BaseException:
        distributed.close(d)
        raise
    seed_all(t.seed + d.rank)  # a different dropout stream per process
    net = distributed.wrap(model, d)
    if t.compile:
        net = torch.compile(net)
    dtype = amp_dtype(t.precision, d.device)
    optimizer = make_optimizer(model, t)
    s = Session(
        cfg=cfg,
        model=model,
        net=net,
        optimizer=optimizer,
        scaler=grad_scaler(d.device, dtype),
        tokenizer=tokenizer,
        dist=d,
        dtype=dtype,
        run_dir=Path(t.run_dir),
        fine_tuning=start.weights is not None,
        vocab_from=start.vocab_from,
        ema=moving_average(model, t.ema_decay),
    )
    averaged = s.ema is not None
    leftovers = check_run_dir(s.run_dir, model, t.keep_last, averaged) if d.main else 0  # at start
    s.run_dir.mkdir(parents=True, exist_ok=True)
    saved = (
        None
        if payload is None
        else (payload["state"]["train"]["step"], payload["state"]["train"]["seconds"])
    )
    s.metrics = Metrics(s.run_dir, t.max_updates, 0, quiet, enabled=d.main, saved=saved)
    if leftovers:
        s.metrics.line(f"removed {leftovers} temporary files of saves that were cut short")
    for line in start.notes:
        s.metrics.line(line)
    if payload is not None:
        try:
            resume(s, payload, last)
        except BaseException:  # e.g. a refused resume: release the log file and the process group
            s.metrics.close()
            distributed.close(d)
            raise
    if d.main and cfg.diagnostics.enabled:
        s.monitor = AttentionMonitor(cfg, tokenizer)
        s.monitor.check_scales(model, s.metrics)
        s.monitor.describe(s.metrics)
    return s


def resume(s: Session, payload: dict, path: Path) -> None:
    """Load model, optimizer, scaler, counters and this process's RNG states from `payload`, read
    from `path` by `read_resumable`."""
    # with a moving average, "model" holds the average and the trained weights are kept apart
    trained = payload["state"].get("train_weights")
    s.model.load_state_dict(payload["model"] if trained is None else trained)
    if s.ema is not None:
        s.ema.module.load_state_dict(payload["model"])
        if trained is not None:
            s.ema.n_averaged.fill_(1)  # continue the average (0 would restart it from the weights)
        else:
            s.metrics.line("train.ema_decay set on resume: the moving average starts here")
    elif trained is not None:
        s.metrics.line("train.ema_decay is 0 on resume: the checkpoint's moving average is dropped")
    s.optimizer.load_state_dict(payload["state"]["optimizer"])
    if s.scaler.is_enabled() and payload["state"]["scaler"]:
        s.scaler.load_state_dict(payload["state"]["scaler"])
    state, d = s.state, s.dist
    state.load_state_dict(payload["state"]["train"])
    s.saved_step = state.step
    if state.world_size == d.world_size:
        set_rng_state(state.rng[d.rank])
    else:
        # another process count splits the epoch differently: keep the fraction of it already seen
        state.batch_index = state.batch_index * state.world_size // d.world_size
        seed_all(s.cfg.train.seed + d.rank + state.step)
        s.metrics.line(
            f"resuming with {d.world_size} processes instead of {state.world_size}: the same share "
            "of the epoch is skipped, but batch order and dropout streams differ (not bit-exact); "
            f"an update now holds {d.world_size}/{state.world_size} of the tokens it held "
            "(train.max_tokens and train.grad_accum_steps are per process)"
        )
    saved_train = payload["config"].get("train", {})
    order = [
        k
        for k in ("max_tokens", "seed")
        if k in saved_train and saved_train[k] != getattr(s.cfg.train, k)
    ]
    # the epoch's batches are cut and shuffled by these: the position no longer means the same pairs
    if order:
        s.metrics.line(
            "resuming with "
            + ", ".join(f"train.{k} {saved_train[k]} -> {getattr(s.cfg.train, k)}" for k in order)
            + ": the rest of this epoch's batches differ from the uninterrupted run's "
            "(not bit-exact)"
        )
    s.metrics.line(
        f"resumed from {path} at update {state.step} "
        f"(epoch {state.epoch}, batch {state.batch_index})"
    )


def save(s: Session, best: bool, validated: bool = True) -> None:
    """Checkpoint from rank 0, with every process's RNG states (a collective: all processes call
    it). Not `validated` (an interrupted run's, fine-tuning's update 0): last.pt (and best.pt)
    alone, no step-N.pt."""
    rngs = gather(s.dist, rng_state())
    if not s.dist.main:
        return
    s.state.rng, s.state.world_size = rngs, s.dist.world_size
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


def evaluate_and_save(s: Session) -> bool:
    """Validate on rank 0, log, checkpoint; returns True (on every process) when early stopping says
    stop."""
    state, t, stop = s.state, s.cfg.train, 0.0
    improved = False
    if s.dist.main:
        began = time.time()
        trained_s = began - s.clock_zero  # when training reached this update
        result = validate(s.decoding_model(), s.tokenizer, s.cfg, s.dtype)
        # its cost is logged: docs/benchmarks.md holds it to 5% of a validation
        if s.monitor is not None:
            validation_s = time.time() - began
            seconds = s.monitor.log(s.decoding_model(), state.step, s.metrics)
            s.metrics.line(
                f"attention diagnostics: {seconds:.2f} s, {100 * seconds / validation_s:.1f}% of "
                f"the validation's {validation_s:.1f} s"
            )
        improved = result.bleu > state.best_bleu
        state.best_bleu = max(state.best_bleu, result.bleu)
        state.bad_evals = 0 if improved else state.bad_evals + 1
        s.metrics.scalars(state.step, result.scalars(), "valid")
        # against training wall-clock too: the step of this tag is seconds, not updates
        s.metrics.scalar_vs_seconds(trained_s, "valid/bleu_vs_seconds", result.bleu)
        s.metrics.text(
            state.step,
            "valid/samples",
            "\n\n".join(
                f"**source:** {src}  \n**output:** {hyp}  \n**reference:** {ref}"
                for src, hyp, ref in result.samples
            ),
        )
        s.metrics.line(
            f"validation at update {state.step}: loss {result.loss:.3f}, ppl {result.ppl:.2f}, "
            f"BLEU {result.bleu:.2f}, chrF {result.chrf:.2f}{' (best)' if improved else ''} "
            f"[{result.signature}]"
            + (
                f"; {result.too_long} pairs over model.max_positions not in the loss"
                if result.too_long
                else ""
            )
        )
        stop = float(bool(t.patience and state.bad_evals >= t.patience))
    state.last_valid_step = state.step
    (stop,) = sum_all(s.dist, [stop])
    # update 0 (fine-tuning's start) is train.init_from's model: best.pt may hold it, but a step
    # file would put the unchanged model into `average --last N`
    save(s, best=improved, validated=state.step > 0)
    return bool(stop)
