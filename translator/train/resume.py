"""Resuming a run from run_dir/last.pt: the checks that refuse a checkpoint the config cannot
continue, and loading its weights, optimizer, counters and RNG states into the session."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from translator import checkpoint
from translator.config import Config, architecture_changes, to_dict
from translator.data.tokenizer import Tokenizer
from translator.errors import TranslatorError
from translator.train.session import Session
from translator.train.state import seed_all, set_rng_state

# what to do about a last.pt that cannot be read (finetune.py says it too). Deleting it alone would
# leave the run's other checkpoints, which a fresh start refuses (state.refuse_earlier_checkpoints)
UNREADABLE_LAST = (
    "copy a step-N.pt over it to resume from there, or start over in a new train.run_dir"
)


def read_resumable(path: Path, cfg: Config, tokenizer: Tokenizer) -> dict[str, Any]:
    """The checkpoint to continue from; refuses a different tokenizer or architecture."""
    try:
        payload = checkpoint.read(path)
    except TranslatorError as err:  # e.g. cut short by a full disk
        raise TranslatorError(f"cannot resume: {err.what}", err.where, UNREADABLE_LAST) from None
    if payload["tokenizer"]["sha256"] != tokenizer.checksum():
        raise TranslatorError(
            "cannot resume: the checkpoint was trained with a different tokenizer",
            str(path),
            "use a new train.run_dir, or the prepared data the run started with",
        )
    diff = architecture_changes(payload["config"]["model"], to_dict(cfg.model))
    if diff:
        raise TranslatorError(
            f"cannot resume: the architecture differs from the checkpoint's ({diff})",
            str(path),
            "use a new train.run_dir, or the checkpoint's model settings",
        )
    if "optimizer" not in payload["state"]:
        raise TranslatorError(
            "cannot resume: the checkpoint holds no training state",
            str(path),
            "resume from a last.pt or step-N.pt written by `translator train`",
        )
    return payload


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
