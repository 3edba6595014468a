"""A training process's start: process group, prepared data and tokenizer, seeded model,
optimizer and scaler, the log opened; resumed from run_dir/last.pt when it exists."""

from __future__ import annotations

from pathlib import Path

import torch

from translator import prepare
from translator.bleu import bleu_metric
from translator.checkpoint import fit_weights
from translator.config import Config, ModelConfig
from translator.data.tokenizer import Tokenizer
from translator.errors import TranslatorError
from translator.model.transformer import Transformer
from translator.prepared import (
    data_vocab_from,
    holds_prepared_data,
    load_manifest,
    prepared_dir,
    tokenizer_of,
)
from translator.train import distributed, finetune
from translator.train.attention import AttentionMonitor
from translator.train.distributed import Dist
from translator.train.metrics import Metrics
from translator.train.precision import amp_dtype, grad_scaler
from translator.train.resume import agree_to_resume, read_resumable, resume
from translator.train.session import Session, make_optimizer, moving_average, training_model
from translator.train.state import (
    check_run_dir,
    claim_run_dir,
    refuse_earlier_checkpoints,
    seed_all,
)
from translator.vocab_source import spm_model_vocab, vocab_record


def setup(cfg: Config, quiet: bool) -> Session:
    """Process group, prepared data and tokenizer, seeded model, optimizer and scaler; resumed when
    run_dir/last.pt exists."""
    _refuse_a_data_directory(Path(cfg.train.run_dir), cfg)
    # a missing MeCab (ja, ko) fails now, not at the validation
    bleu_metric(cfg.data.tgt_lang, cfg.train.valid_bleu_tokenize)
    t, d = cfg.train, distributed.init(cfg.train.device)
    last = Path(t.run_dir) / "last.pt"
    try:
        start, tokenizer, model, payload = _inputs(cfg, d, quiet, last)
    except BaseException:
        distributed.close(d)
        raise
    s = _session(cfg, d, start, tokenizer, model)
    try:
        claimed = _claim_run_dir(s)
    except BaseException:
        distributed.close(d)
        raise
    s.run_dir.mkdir(parents=True, exist_ok=True)
    # `seconds` came in format 1's lifetime: a checkpoint saved before it had trained unclocked
    saved = (
        None
        if payload is None
        else (payload["state"]["train"]["step"], payload["state"]["train"].get("seconds", 0.0))
    )
    s.metrics = Metrics(s.run_dir, t.max_updates, 0, quiet, enabled=d.main, saved=saved)
    for line in [*claimed, *start.notes]:
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


def _refuse_a_data_directory(run_dir: Path, cfg: Config) -> None:
    """A run directory that is prepared data's (this config's, or any with prepare's manifest)
    is refused before anything is written: the run's manifest.json would take the place of
    prepare's, and the data would be lost to both."""
    ours = run_dir.resolve() == prepared_dir(cfg.data).resolve()
    # a damaged manifest.json without SentencePiece models is the run's own (train/manifest.py)
    if ours or holds_prepared_data(run_dir):
        raise TranslatorError(
            "train.run_dir is a directory of prepared data: training's files would replace "
            "prepare's",
            str(run_dir),
            "give train.run_dir a directory of its own, e.g. runs/NAME",
        )


def _claim_run_dir(s: Session) -> list[str]:
    """Rank 0 checks that run_dir has room, locks it and sweeps it (claim_run_dir) while the other
    processes wait: a refusal ends them all at once. Returns rank 0's lines to log."""
    lines: list[str] = []

    def claim() -> None:
        check_run_dir(s.run_dir, s.model, s.cfg.train.keep_last, s.ema is not None)
        lines.extend(claim_run_dir(s.run_dir))

    distributed.main_first(s.dist, claim, "claiming the run directory")
    return lines


def _inputs(
    cfg: Config, d: Dist, quiet: bool, last: Path
) -> tuple[finetune.Start, Tokenizer, Transformer, dict | None]:
    """How the run starts, the tokenizer, the seeded model and the checkpoint to resume (None: a
    fresh start)."""
    # rank 0's decision, which every process must be able to follow (the same last.pt)
    resuming = agree_to_resume(d, last)
    if not resuming:
        refuse_earlier_checkpoints(last.parent)
    start = finetune.plan(cfg, last)
    if cfg.data.spm_model:  # a vocabulary made elsewhere encodes the data
        start.vocab_from = spm_model_vocab(cfg).checksum()
    # data prepared with SentencePiece of their own that is the checkpoint's: taken as they are,
    # with the SentencePiece settings they were made with (the run's record of them)
    start.vocab_from, cfg.data = data_vocab_from(cfg.data, start.vocab_from)
    tokenizer = prepared_tokenizer(cfg, d, quiet, start.vocab_from)
    _set_vocab_sizes(cfg.model, tokenizer)
    model = initial_model(cfg, d, start)
    # read before train.log and the events are opened: a refused resume leaves neither behind
    payload = read_resumable(last, cfg, tokenizer) if resuming else None
    return start, tokenizer, model, payload


def _session(
    cfg: Config, d: Dist, start: finetune.Start, tokenizer: Tokenizer, model: Transformer
) -> Session:
    """The session around `model`: what training forwards through, optimizer, scaler, moving
    average."""
    t = cfg.train
    seed_all(t.seed + d.rank)  # a different dropout stream per process
    net = distributed.wrap(model, d)
    if t.compile:
        net = torch.compile(net)
    dtype = amp_dtype(t.precision, d.device)
    optimizer = make_optimizer(model, t)
    return Session(
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
    wait). `vocab_from`: the sha256 of the given tokenizer the data must be encoded with."""
    distributed.main_first(d, lambda: prepare.ensure(cfg, quiet, vocab_from), "preparing the data")
    # every rank checks the settings
    folder = prepared_dir(cfg.data)
    given = vocab_record(cfg, vocab_from) if vocab_from else None
    tokenizer = tokenizer_of(folder, load_manifest(cfg.data, vocab_from, given))
    if vocab_from and tokenizer.checksum() != vocab_from:  # files replaced after prepare
        raise TranslatorError(
            "the prepared SentencePiece model(s) are not the ones this run names "
            "(train.init_from's or data.spm_model)",
            str(folder),
            "prepare again with --force, or set another data.name",
        )
    return tokenizer


def initial_model(cfg: Config, d: Dist, start: finetune.Start) -> Transformer:
    """The seeded model, with train.init_from's weights when the run starts from them."""
    seed_all(cfg.train.seed)  # the same initial weights on every process
    model = training_model(cfg.model, d.device, compiled=cfg.train.compile)
    if start.weights is not None:
        # names and shapes that its own model section does not build: one line
        fit_weights(model, start.weights, f"train.init_from: {cfg.train.init_from}")
    return model
