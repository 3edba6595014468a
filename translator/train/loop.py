"""`translator train`: a straight-line loop of updates with validation, BLEU and atomic checkpoints."""

from __future__ import annotations

import math
import random
import signal
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from translator import checkpoint
from translator.config import Config, dump, to_dict
from translator.data.batching import Batch, make_batch, token_batches
from translator.data.shards import TokenArray
from translator.data.tokenizer import PAD_ID, Tokenizer
from translator.errors import TranslatorError
from translator.evaluate import score
from translator.files import atomic_write, read_lines
from translator.model.transformer import Transformer, count_parameters
from translator.prepare import load_manifest, prepared_dir
from translator.train.metrics import Metrics
from translator.train.schedule import learning_rate
from translator.translate import resolve_device, translate_lines


@dataclass
class TrainState:
    """Everything besides model and optimizer that an exact resume needs."""

    step: int = 0
    epoch: int = 0
    batch_index: int = 0  # next batch within the epoch
    best_bleu: float = -1.0
    bad_evals: int = 0
    skipped_steps: int = 0
    rng: dict = field(default_factory=dict)

    def state_dict(self) -> dict:
        self.rng = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
                    "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}
        return asdict(self)

    def load_state_dict(self, state: dict) -> None:
        for key, value in state.items():
            setattr(self, key, value)
        if self.rng:
            random.setstate(self.rng["python"])
            np.random.set_state(self.rng["numpy"])
            torch.set_rng_state(self.rng["torch"])
            if self.rng["cuda"] and torch.cuda.is_available():
                torch.cuda.set_rng_state_all(self.rng["cuda"])


def amp_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """Autocast dtype, or None for plain fp32."""
    if precision == "auto":
        if device.type != "cuda":
            return None
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


@contextmanager
def autocast(device: torch.device, dtype: torch.dtype | None):
    """Mixed precision for the enclosed forward passes (no-op for fp32).

    On CPU in bf16, PyTorch's fused flash-attention backward is several times slower than the
    math path (measured 2x slower per update on a 2-core machine), so the math path is chosen there.
    """
    if dtype is None:
        yield
        return
    with torch.autocast(device.type, dtype=dtype):
        if device.type == "cpu":
            with sdpa_kernel([SDPBackend.MATH]):
                yield
        else:
            yield


def loss_sum(model: Transformer, batch: Batch, label_smoothing: float) -> torch.Tensor:
    """Summed token cross-entropy of one batch (padding ignored)."""
    logits = model(batch.src, batch.tgt_in, batch.src_mask)  # (B, T, V)
    return F.cross_entropy(logits.flatten(0, 1).float(), batch.tgt_out.flatten(), ignore_index=PAD_ID,
                           label_smoothing=label_smoothing, reduction="sum")


def train_step(model, optimizer, scaler, batches: list[Batch], cfg: Config, device, dtype) -> tuple[float, float, bool]:
    """One update over accumulated batches -> (loss per token, grad norm, applied?)."""
    tokens = sum(b.n_tgt_tokens for b in batches)
    total = 0.0
    for batch in batches:
        with autocast(device, dtype):
            loss = loss_sum(model, batch.to(device), cfg.train.label_smoothing) / tokens
        scaler.scale(loss).backward()
        total += loss.item()
    scaler.unscale_(optimizer)  # norms and clipping see true gradients
    max_norm = cfg.train.clip_grad_norm or float("inf")
    grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm))
    ok = math.isfinite(total) and math.isfinite(grad_norm)
    if ok or scaler.is_enabled():  # with fp16 the scaler itself skips non-finite steps
        scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return total, grad_norm, ok


@torch.no_grad()
def validate(model, tokenizer: Tokenizer, cfg: Config, device, dtype) -> dict[str, float | list[str]]:
    """Valid loss and perplexity (no label smoothing), then BLEU/chrF of decoded valid sources."""
    model.eval()
    folder = prepared_dir(cfg.data)
    src, tgt = TokenArray(folder / "valid.src"), TokenArray(folder / "valid.tgt")
    loss, tokens = 0.0, 0
    for rows in token_batches(src.lengths, tgt.lengths, cfg.train.max_tokens, seed=0, epoch=0):
        batch = make_batch([src[i] for i in rows], [tgt[i] for i in rows])
        with autocast(device, dtype):
            loss += loss_sum(model, batch.to(device), 0.0).item()
        tokens += batch.n_tgt_tokens
    sources = read_lines(folder / f"valid.{cfg.data.src_lang}")
    refs = read_lines(folder / f"valid.{cfg.data.tgt_lang}")
    limit = cfg.train.valid_bleu_sentences or len(sources)
    with autocast(device, dtype):
        hyps = [h[0][0] for h in translate_lines(model, tokenizer, sources[:limit], cfg.decode)]
    scores = score(hyps, refs[:limit])
    model.train()
    return {"loss": loss / tokens, "ppl": math.exp(min(loss / tokens, 50)), "bleu": scores.bleu,
            "chrf": scores.chrf, "signature": scores.bleu_signature, "samples": hyps[:3]}


def setup(cfg: Config) -> tuple[Transformer, Tokenizer, torch.device]:
    """Tokenizer from the prepared data, the model on its device, seeded."""
    load_manifest(cfg.data)
    tokenizer = Tokenizer(prepared_dir(cfg.data) / "spm.model")
    if cfg.model.vocab_size == 0:
        cfg.model.vocab_size = tokenizer.vocab_size
    elif cfg.model.vocab_size != tokenizer.vocab_size:
        raise TranslatorError(f"model.vocab_size={cfg.model.vocab_size} but the tokenizer has "
                              f"{tokenizer.vocab_size} pieces", "model.vocab_size", "set it to 0 (automatic)")
    random.seed(cfg.train.seed)
    np.random.seed(cfg.train.seed)
    torch.manual_seed(cfg.train.seed)
    device = resolve_device(cfg.train.device)
    return Transformer(cfg.model).to(device), tokenizer, device


def resume(path: Path, model, optimizer, scaler, state: TrainState, cfg: Config, tokenizer: Tokenizer) -> None:
    """Continue from `path`; refuse a different tokenizer or architecture."""
    payload = checkpoint.read(path)
    if payload["tokenizer"]["sha256"] != tokenizer.checksum():
        raise TranslatorError("checkpoint was trained with a different tokenizer", str(path),
                              "use a new train.run_dir or the original prepared data")
    if payload["config"]["model"] != to_dict(cfg.model):
        raise TranslatorError("checkpoint has a different model architecture", str(path),
                              "use a new train.run_dir or the checkpoint's model settings")
    model.load_state_dict(payload["model"])
    optimizer.load_state_dict(payload["state"]["optimizer"])
    scaler.load_state_dict(payload["state"]["scaler"])
    state.load_state_dict(payload["state"]["train"])


class StopRequest:
    """Ctrl-C / SIGTERM set a flag; the loop saves at the end of the current update and exits."""

    def __init__(self) -> None:
        self.requested = False
        self.previous = {sig: signal.signal(sig, self._handle) for sig in (signal.SIGINT, signal.SIGTERM)}

    def _handle(self, signum, frame) -> None:
        self.requested = True

    def restore(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def save_checkpoints(run_dir: Path, model, cfg, tokenizer, optimizer, scaler, state: TrainState, best: bool) -> None:
    """last.pt always; best.pt when validation improved; step-N.pt with only the newest keep_last kept."""
    payload = {"optimizer": optimizer.state_dict(), "scaler": scaler.state_dict(), "train": state.state_dict()}
    checkpoint.save(run_dir / "last.pt", model, cfg, tokenizer, payload)
    if best:
        checkpoint.save(run_dir / "best.pt", model, cfg, tokenizer, payload)
    if cfg.train.keep_last:
        checkpoint.save(run_dir / f"step-{state.step}.pt", model, cfg, tokenizer, payload)
        numbered = sorted(run_dir.glob("step-*.pt"), key=lambda p: int(p.stem.split("-")[1]))
        for old in numbered[: -cfg.train.keep_last]:
            old.unlink()


def run(cfg: Config, quiet: bool = False) -> Path:
    """Train until max_updates / max_epochs / patience; resumes from run_dir/last.pt when present."""
    model, tokenizer, device = setup(cfg)
    t = cfg.train
    run_dir = Path(t.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    dtype = amp_dtype(t.precision, device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=t.lr, betas=(t.adam_beta1, t.adam_beta2), eps=t.adam_eps,
                                  weight_decay=t.weight_decay, fused=device.type == "cuda")
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
    state = TrainState()
    if (run_dir / "last.pt").is_file():
        resume(run_dir / "last.pt", model, optimizer, scaler, state, cfg, tokenizer)
    with atomic_write(run_dir / "config.yaml") as handle:
        handle.write(dump(cfg))

    folder = prepared_dir(cfg.data)
    src, tgt = TokenArray(folder / "train.src"), TokenArray(folder / "train.tgt")
    metrics = Metrics(run_dir, t.max_updates, state.step, quiet)
    metrics.line(f"model: {count_parameters(model):,} parameters; device {device}, "
                 f"precision {dtype or torch.float32}; {len(src):,} training pairs; starting at update {state.step}")
    stop = StopRequest()
    model.train()
    batches = token_batches(src.lengths, tgt.lengths, t.max_tokens, t.seed, state.epoch)
    window_tokens, window_start, log_loss = 0, time.time(), 0.0
    try:
        while state.step < t.max_updates and not stop.requested:
            group = []
            while len(group) < t.grad_accum_steps:
                if state.batch_index >= len(batches):
                    state.epoch, state.batch_index = state.epoch + 1, 0
                    batches = token_batches(src.lengths, tgt.lengths, t.max_tokens, t.seed, state.epoch)
                rows = batches[state.batch_index]
                group.append(make_batch([src[i] for i in rows], [tgt[i] for i in rows]))
                state.batch_index += 1
            if t.max_epochs and state.epoch >= t.max_epochs:
                break
            lr = learning_rate(state.step + 1, t)
            for param_group in optimizer.param_groups:
                param_group["lr"] = lr
            loss, grad_norm, ok = train_step(model, optimizer, scaler, group, cfg, device, dtype)
            state.step += 1
            state.skipped_steps += not ok
            window_tokens += sum(b.n_tgt_tokens for b in group)
            log_loss += loss if ok else 0.0
            metrics.advance(state.step, f"loss {loss:.3f} lr {lr:.2e}")
            if state.step % t.log_every == 0:
                elapsed = time.time() - window_start
                values = {"loss": log_loss / t.log_every, "lr": lr, "grad_norm": grad_norm,
                          "tokens_per_s": window_tokens / elapsed, "skipped_steps": state.skipped_steps}
                if device.type == "cuda":
                    values["gpu_mem_gb"] = torch.cuda.max_memory_allocated(device) / 2**30
                metrics.scalars(state.step, values, "train")
                metrics.line(f"update {state.step}: loss {values['loss']:.3f}, lr {lr:.2e}, "
                             f"{values['tokens_per_s']:.0f} tgt tok/s, epoch {state.epoch}")
                window_tokens, window_start, log_loss = 0, time.time(), 0.0
            if state.step % t.eval_every == 0:
                if evaluate_and_save(model, tokenizer, cfg, device, dtype, optimizer, scaler, state, metrics, run_dir):
                    break
        else:  # ended by max_updates or a stop request, not by early stopping
            if not stop.requested and state.step % t.eval_every:
                evaluate_and_save(model, tokenizer, cfg, device, dtype, optimizer, scaler, state, metrics, run_dir)
    finally:
        stop.restore()
        if stop.requested:
            save_checkpoints(run_dir, model, cfg, tokenizer, optimizer, scaler, state, best=False)
            metrics.line(f"interrupted: saved {run_dir / 'last.pt'} at update {state.step}")
        metrics.close()
    return run_dir


def evaluate_and_save(model, tokenizer, cfg, device, dtype, optimizer, scaler, state, metrics, run_dir) -> bool:
    """Validate, log, checkpoint; returns True when early stopping says to stop."""
    result = validate(model, tokenizer, cfg, device, dtype)
    improved = result["bleu"] > state.best_bleu
    state.best_bleu = max(state.best_bleu, result["bleu"])
    state.bad_evals = 0 if improved else state.bad_evals + 1
    metrics.scalars(state.step, {k: result[k] for k in ("loss", "ppl", "bleu", "chrf")}, "valid")
    metrics.text(state.step, "valid/samples", "\n\n".join(result["samples"]))
    metrics.line(f"validation at update {state.step}: loss {result['loss']:.3f}, ppl {result['ppl']:.2f}, "
                 f"BLEU {result['bleu']:.2f}, chrF {result['chrf']:.2f}{' (best)' if improved else ''}")
    save_checkpoints(run_dir, model, cfg, tokenizer, optimizer, scaler, state, best=improved)
    return bool(cfg.train.patience and state.bad_evals >= cfg.train.patience)
