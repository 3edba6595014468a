"""`train.init_from`: start a run from a checkpoint's weights (fine-tuning), or see that it resumes.

As Hugging Face's `from_pretrained` does, the checkpoint decides the architecture: its model
section replaces the config's (each field that differs is logged), except the training-only
settings (dropout, gradient checkpointing), which stay the config's. Its tokenizer encodes the data
(prepare.py). As fairseq's `--restore-file --reset-optimizer --reset-lr-scheduler` does, optimizer,
schedule and update counter start fresh. A run directory holding last.pt resumes instead: the
checkpoint that started the run is then not read at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from translator import checkpoint
from translator.config import (
    TRAINING_ONLY,
    Config,
    ModelConfig,
    from_dict,
    to_dict,
    with_training_settings,
)
from translator.errors import TranslatorError
from translator.train.resume import refused_last
from translator.vocab_source import direction_note


@dataclass
class Start:
    """How a run starts: the weights to load (None: random, or resumed later), the tokenizer the
    prepared data must have been encoded with (None: SentencePiece trained by prepare), log
    lines."""

    weights: dict[str, Any] | None = None
    vocab_from: str | None = None
    notes: list[str] = field(default_factory=list)


def plan(cfg: Config, last: Path) -> Start:
    """Resolve train.init_from against run_dir/last.pt (the checkpoint's architecture into cfg)."""
    if last.is_file():
        return _resuming(cfg, last)
    if not cfg.train.init_from:
        return Start()
    where = f"train.init_from: {cfg.train.init_from}"
    try:
        payload = checkpoint.read(cfg.train.init_from)  # weights verified: they are used
    except TranslatorError as err:
        raise TranslatorError(err.what, f"train.init_from: {err.where}", err.fix) from None
    saved = from_dict(payload["config"], where)
    notes = [
        f"init_from: starting from the weights of {cfg.train.init_from} with a fresh optimizer, "
        "schedule and update counter (fine-tuning)",
        *_languages(cfg, saved, where),
    ]
    notes += _dropout_changes(cfg, saved)
    notes += adopt(cfg, saved.model, payload["tokenizer"].get("target_proto") is None)
    notes += _decoding_changes(cfg, saved)
    return Start(payload["model"], payload["tokenizer"]["sha256"], notes)


def _dropout_changes(cfg: Config, saved: Config) -> list[str]:
    """The dropouts fine-tuning takes from this config, not from the checkpoint (Hugging Face's
    from_pretrained keeps the checkpoint's): said, as a model trained at 0.3 fine-tuned at 0 may
    overfit a small corpus at once."""
    changed = [
        f"model.{k}: {getattr(saved.model, k)!r} -> {getattr(cfg.model, k)!r}"
        for k in ("dropout", "attention_dropout", "activation_dropout")
        if getattr(saved.model, k) != getattr(cfg.model, k)
    ]
    if not changed:
        return []
    return [
        "init_from: the dropouts are this config's, not the checkpoint's: " + ", ".join(changed)
    ]


def _decoding_changes(cfg: Config, saved: Config) -> list[str]:
    """The decode settings that the fine-tuned checkpoints take from this config, not from the
    checkpoint started from: a comparison of the two with their defaults compares two searches."""
    ours, theirs = to_dict(cfg.decode), to_dict(saved.decode)
    changed = [
        f"decode.{k}: {theirs[k]!r} -> {ours[k]!r}" for k in ours if ours[k] != theirs.get(k)
    ]
    if not changed:
        return []
    return [
        "init_from: the fine-tuned checkpoints decode with this config's settings, not the "
        "checkpoint's (compare the two with the same flags): " + ", ".join(changed)
    ]


def _resuming(cfg: Config, last: Path) -> Start:
    """Resuming: train.init_from as the run started (last.pt's config says), not as given now."""
    try:
        tokenizer, saved_dict = checkpoint.read_tokenizer(last)
    except TranslatorError as err:  # as resume.read_resumable says it
        raise refused_last(err, last) from None
    started_from = saved_dict.get("train", {}).get("init_from", "")
    if cfg.train.init_from and not started_from:  # before anything is prepared or trained
        raise TranslatorError(
            f"train.run_dir holds a run that started from random weights ({last.name}): it "
            f"would resume, and train.init_from ({cfg.train.init_from}) would not be loaded",
            str(last.parent),
            "give a new train.run_dir to fine-tune from the checkpoint, or drop train.init_from "
            "to resume the run",
        )
    notes = []
    if cfg.train.init_from:
        notes.append(
            f"{last} exists: the run resumes from it, train.init_from ({cfg.train.init_from}) "
            "is not loaded"
        )
    cfg.train.init_from = started_from  # what the run's checkpoints keep saying
    if not started_from:  # a run from random weights: the usual resume checks apply
        return Start(notes=notes)
    saved = from_dict(saved_dict, str(last))
    notes += adopt(cfg, saved.model, tokenizer.joint)  # the run's architecture since its start
    return Start(vocab_from=tokenizer.checksum(), notes=notes)


def adopt(cfg: Config, saved: ModelConfig, joint: bool) -> list[str]:
    """cfg.model becomes `saved` but for the training-only fields; data.joint_vocab follows the
    checkpoint's tokenizer. Returns a log line naming every overridden setting (none if alike)."""
    ours, theirs = to_dict(cfg.model), to_dict(saved)
    changed = [
        f"model.{k}: {ours[k]!r} -> {theirs[k]!r}"
        for k in theirs
        if k not in TRAINING_ONLY
        and ours.get(k) != theirs[k]
        and not (k.endswith("vocab_size") and ours.get(k) == 0)  # 0 = automatic
    ]
    if cfg.data.joint_vocab != joint:
        changed.append(f"data.joint_vocab: {cfg.data.joint_vocab!r} -> {joint!r}")
    cfg.model = with_training_settings(saved, cfg.model)
    cfg.data.joint_vocab = joint
    if not changed:
        return []
    return [
        "init_from: the architecture and vocabulary are the checkpoint's; overriding the config's "
        + ", ".join(changed)
    ]


def _languages(cfg: Config, saved: Config, where: str) -> list[str]:
    """A checkpoint translating the other way round is refused; other language codes than the
    data's get a log line (they may name the same languages: `eng`, `en`)."""
    note = direction_note(cfg, (saved.data.src_lang, saved.data.tgt_lang), where)
    return [note] if note else []
