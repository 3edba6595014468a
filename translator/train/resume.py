"""Resuming a run from run_dir/last.pt: the checks that refuse a checkpoint the config cannot
continue, and loading its weights, optimizer, counters and RNG states into the session."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import torch

from translator import checkpoint
from translator.config import Config, architecture_changes, to_dict
from translator.data.tokenizer import Tokenizer
from translator.errors import TranslatorError
from translator.train.distributed import Dist, EveryRankError, gather
from translator.train.session import Session
from translator.train.state import restore_best, seed_all, set_rng_state
from translator.versions import made_by


def unreadable_last(path: Path) -> str:
    """What to do about a last.pt that cannot be read, naming the newest checkpoint of the run that
    is a file of its own. Deleting last.pt alone would leave the run's other checkpoints, which a
    fresh start refuses (state.refuse_earlier_checkpoints); copying over it would write into its
    hard links (best.pt, the newest step-N.pt), which share its damage."""
    apart, linked = checkpoint.separate_checkpoints(path)
    if apart:
        return (
            f"remove it, then copy {apart[0]} (a file of its own) to last.pt to resume from "
            "there, or start over in a new train.run_dir"
        )
    shared = f"its hard links ({', '.join(linked)}) share the damage: " if linked else ""
    return f"{shared}start over in a new train.run_dir"


def refused_last(err: TranslatorError, path: Path) -> TranslatorError:
    """`read`'s refusal of last.pt, said as a refused resume: a damaged file gets unreadable_last's
    advice, one from a newer translator its own (the file is fine)."""
    fix = err.fix if err.what.startswith(checkpoint.NEWER) else unreadable_last(path)
    return TranslatorError(f"cannot resume: {err.what}", err.where, fix)


def agree_to_resume(d: Dist, last: Path) -> bool:
    """Whether the run resumes from `last`, alike on every process. Each process says which
    checkpoint it sees there; one that does not see rank 0's refuses the run on all of them. (Each
    deciding from its own disk, with a run_dir local to each machine, rank 0 would resume while
    another started afresh: they would train apart, then wait for each other at the first save.)"""
    if d.world_size == 1:
        return last.is_file()
    seen = gather(d, _identity(last))
    if all(x == seen[0] for x in seen):
        return seen[0] is not None
    others = ", ".join(f"rank {r} {_seen(x)}" for r, x in enumerate(seen) if x != seen[0])
    raise EveryRankError(
        f"the processes see different checkpoints: rank 0 {_seen(seen[0])}, {others}",
        str(last),
        "put train.run_dir on storage that every machine shares, as data.data_dir",
    )


def _identity(path: Path) -> tuple[int, str] | str | None:
    """(update, checksum) of the checkpoint at `path`, read without its weights; None when there is
    none, "unreadable" when it cannot be read (read_resumable then says why)."""
    if not path.is_file():
        return None
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        # the checksums `checkpoint.save` stores (format 3: one per part, 2: of the weights)
        sums = payload.get("sha256") or payload.get("weights_sha256") or ""
        return payload["state"]["train"]["step"], hashlib.sha256(repr(sums).encode()).hexdigest()
    except Exception:  # cut short, damaged, not a checkpoint of training
        return "unreadable"


def _seen(identity: tuple[int, str] | str | None) -> str:
    if identity is None:
        return "sees no last.pt"
    if isinstance(identity, str):
        return "cannot read last.pt"
    step, sums = identity
    return f"sees update {step} (sha256 {sums[:12]})"


def read_resumable(path: Path, cfg: Config, tokenizer: Tokenizer) -> dict[str, Any]:
    """The checkpoint to continue from; refuses a different tokenizer or architecture."""
    try:
        payload = checkpoint.read(path)
    except TranslatorError as err:  # e.g. cut short by a full disk
        raise refused_last(err, path) from None
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
    from `path` by `read_resumable`; log the settings changed since it was saved."""
    _load_training_objects(s, payload)
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
    s.metrics.line(
        f"resumed from {path} at update {state.step} "
        f"(epoch {state.epoch}, batch {state.batch_index})"
    )
    if payload["format"] < checkpoint.FORMAT:
        s.metrics.line(
            f"{path.name} predates whole-checkpoint checksums (format {payload['format']}): only "
            "its weights and tokenizer were verified, not its optimizer and training state"
        )
    if other := other_code(payload.get("made_by")):
        s.metrics.line(
            f"{path.name} was written by {other}: the run continues, equal to an uninterrupted "
            "run bit for bit only if the code between did not change what training computes"
        )
    if s.dist.main and (stale := restore_best(s.run_dir, state.best_step)):
        s.metrics.warning(stale)
    s.changed = setting_changes(payload["config"], s.cfg)
    if s.changed:
        _log_changes(s, path)


def other_code(saved: dict | None) -> str:
    """The code that wrote a checkpoint when it differs from the code that runs (another version or
    commit) or was not recorded; empty when it is the same, or no commit tells them apart."""
    now = made_by()
    if saved is None:
        return "a translator that did not record its version"
    if saved["translator"] != now["translator"]:
        return f"translator {saved['translator']} (this is {now['translator']})"
    if saved.get("commit") and now["commit"] and saved["commit"] != now["commit"]:
        return f"commit {saved['commit'][:12]} (this is {now['commit'][:12]})"
    return ""


def _load_training_objects(s: Session, payload: dict) -> None:
    """Weights (trained and averaged), optimizer and loss-scaler state."""
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


# the epoch's batches are cut and shuffled by these: the saved position no longer means the same
# pairs
BATCH_ORDER = ("train.max_tokens", "train.seed")
# what validation BLEU is measured with (validate.py) besides its beam, train.valid_beam_size or
# decode.beam_size
BLEU_MEASURE = (
    "data.splits.valid",
    "train.valid_bleu_sentences",
    "decode.length_penalty",
    "decode.max_len_a",
    "decode.max_len_b",
    "decode.min_len",
    "decode.no_repeat_ngram_size",
    "decode.unk_penalty",
)


def setting_changes(saved: dict[str, Any], cfg: Config) -> dict[str, tuple[Any, Any]]:
    """Every setting of `cfg` whose value differs from the checkpoint's config `saved` -> (old,
    new), by dotted name in the config's order. A setting the checkpoint predates had its default
    value (as architecture_changes assumes)."""
    defaults = to_dict(Config())
    before = _dotted(
        {name: {**section, **saved.get(name, {})} for name, section in defaults.items()}
    )
    after = _dotted(to_dict(cfg))
    fields = {_field(name) for name in after}
    names = [*after, *(k for k in before if k not in after and _field(k) in fields)]
    return {k: (before.get(k), after.get(k)) for k in names if before.get(k) != after.get(k)}


def _dotted(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts -> {"section.key": value}; a dict-valued field by its keys
    (data.splits.valid)."""
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(_dotted(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _field(name: str) -> str:
    """data.splits.valid -> data.splits: the config field a dotted name belongs to."""
    return ".".join(name.split(".")[:2])


def _log_changes(s: Session, path: Path) -> None:
    """One line naming every changed setting, and what the changes mean for the rest of the epoch
    and for the stored best BLEU; a warning (stderr under --quiet) when validation BLEU is no
    longer measured as the stored one was."""
    changed, state = s.changed, s.state
    line = f"resuming with settings changed since {path.name} was saved: " + ", ".join(
        f"{name}: {old!r} -> {new!r}" for name, (old, new) in changed.items()
    )
    order = [name for name in BATCH_ORDER if name in changed]
    if order:
        line += (
            f"; {' and '.join(order)} {_verb(order, 'cut')} and {_verb(order, 'shuffle')} the "
            "epoch's batches: the rest of this epoch's batches differ from the uninterrupted run's "
            "(not bit-exact)"
        )
    measure = [name for name in BLEU_MEASURE if name in changed] + _beam_change(changed, s.cfg)
    if not measure or state.best_bleu < 0:  # no validation yet: nothing measured the old way
        s.metrics.line(line)
        return
    s.metrics.warning(
        f"{line}; {' and '.join(measure)} {_verb(measure, 'change')} how validation BLEU is "
        f"measured: the best BLEU so far ({state.best_bleu:.2f}, best.pt's) and early stopping's "
        f"count of validations without gain ({state.bad_evals}) were measured the old way and "
        "are kept, so the next validations compare with them"
    )


def _beam_change(changed: dict[str, tuple[Any, Any]], cfg: Config) -> list[str]:
    """The beam settings that changed validation's beam (train.valid_beam_size, or
    decode.beam_size when that is 0); none when validation decodes with the same beam."""
    old_valid = changed.get("train.valid_beam_size", (cfg.train.valid_beam_size,))[0]
    old_decode = changed.get("decode.beam_size", (cfg.decode.beam_size,))[0]
    if (old_valid or old_decode) == (cfg.train.valid_beam_size or cfg.decode.beam_size):
        return []
    return [name for name in ("train.valid_beam_size", "decode.beam_size") if name in changed]


def _verb(subjects: list[str], verb: str) -> str:
    return verb if len(subjects) > 1 else verb + "s"
