"""Where the SentencePiece model(s) that encode the data come from, when prepare does not train
them: a checkpoint's (train.init_from: fine-tuning keeps the vocabulary its embeddings were
trained for), or given files (data.spm_model, data.tgt_spm_model: a vocabulary made elsewhere,
data/spm_files.py). prepare encodes with them and records their checksum as `vocab_from`."""

from __future__ import annotations

from pathlib import Path

from translator import checkpoint
from translator.config import Config, DataConfig
from translator.data.spm_files import given_tokenizer
from translator.data.tokenizer import Tokenizer
from translator.errors import TranslatorError
from translator.prepared import load_manifest, prepared_dir, read_manifest, tokenizer_of


def given_vocab(cfg: Config) -> tuple[Tokenizer | None, str]:
    """The SentencePiece model(s) to encode with instead of training new ones, and the setting
    that gave them: train.init_from's (checkpoint_vocab) or data.spm_model's; (None, "") when
    prepare trains its own."""
    if cfg.data.spm_model:
        return spm_model_vocab(cfg), "data.spm_model"
    vocab = checkpoint_vocab(cfg)
    return vocab, "train.init_from" if vocab else ""


def vocab_record(cfg: Config, vocab_from: str) -> dict[str, str]:
    """Where the given vocabulary (tokenizer sha256 `vocab_from`) comes from, as prepare's
    manifest records it and refusals name it: train.init_from's checkpoint or data.spm_model."""
    if cfg.train.init_from:
        return {"checkpoint": cfg.train.init_from, "sha256": vocab_from}
    files = [f for f in (cfg.data.spm_model, cfg.data.tgt_spm_model) if f]
    return {"spm_model": ", ".join(files), "sha256": vocab_from}


def spm_model_vocab(cfg: Config) -> Tokenizer:
    """data.spm_model (and data.tgt_spm_model) with our special ids. Where the files are gone, the
    copy that a last.pt made with them holds, or the data prepared with them (a resume, or
    training on a machine the data were prepared for, needs no files). Not with
    train.init_from, whose own vocabulary its embeddings need."""
    if cfg.train.init_from:
        raise TranslatorError(
            "data.spm_model is set, but fine-tuning (train.init_from) encodes the data with the "
            "checkpoint's SentencePiece model(s)",
            "data.spm_model",
            "leave data.spm_model empty to fine-tune, or train.init_from empty to train anew",
        )
    data = cfg.data
    if all(Path(f).is_file() for f in (data.spm_model, data.tgt_spm_model) if f):
        given = given_tokenizer(data)
        if (copy := _run_vocab(cfg)) is not None and copy.checksum() != given.checksum():
            raise TranslatorError(
                f"is not the SentencePiece model {cfg.train.run_dir}/last.pt was trained with",
                f"data.spm_model: {data.spm_model}",
                "give the run's own model, or another train.run_dir to start anew",
            )
        return given
    return _run_vocab(cfg) or _prepared_vocab(data) or given_tokenizer(data)  # the last: not found


def _run_vocab(cfg: Config) -> Tokenizer | None:
    """The tokenizer of run_dir/last.pt when its run encoded with data.spm_model, else None."""
    last = Path(cfg.train.run_dir) / "last.pt"
    if not last.is_file():
        return None
    tokenizer, saved = _read_tokenizer(last, "train.run_dir")
    return tokenizer if saved.get("data", {}).get("spm_model") else None


def _read_tokenizer(path: Path, setting: str) -> tuple[Tokenizer, dict]:
    """checkpoint.read_tokenizer, its errors naming the setting that gave `path`."""
    try:
        return checkpoint.read_tokenizer(path)
    except TranslatorError as err:
        raise TranslatorError(err.what, f"{setting}: {err.where}", err.fix) from None


def _prepared_vocab(data: DataConfig) -> Tokenizer | None:
    """The tokenizer of data prepared with a data.spm_model (the manifest's vocab_from), else
    None."""
    folder = prepared_dir(data)
    try:
        record = read_manifest(folder).get("vocab_from") or {}
        if "spm_model" not in record:
            return None
        return tokenizer_of(folder, load_manifest(data, record["sha256"]))
    except (TranslatorError, OSError, KeyError):  # none there, or not these settings'
        return None


def checkpoint_vocab(cfg: Config) -> Tokenizer | None:
    """train.init_from's tokenizer (None without one); sets data.joint_vocab to match it.

    Where the run has a last.pt, `train` resumes from it, as finetune.plan says: its tokenizer is
    the one read (the same as init_from's, and the init_from file need not still exist: data
    prepared again for a resume, on another machine or after data/ was cleaned), and a last.pt
    of a run that did not start from a checkpoint means no checkpoint vocabulary (None)."""
    if not cfg.train.init_from:
        return None
    last = Path(cfg.train.run_dir) / "last.pt"
    if last.is_file():
        source, setting = last, "train.run_dir"
    else:
        source, setting = Path(cfg.train.init_from), "train.init_from"
    tokenizer, saved = _read_tokenizer(source, setting)
    if source == last and not saved.get("train", {}).get("init_from"):
        return None
    # data prepared for the wrong direction is refused here, not first by `train` (prepared on
    # one machine, trained on another)
    languages = saved.get("data", {})
    if "src_lang" in languages and "tgt_lang" in languages:
        direction_note(cfg, (languages["src_lang"], languages["tgt_lang"]), f"{setting}: {source}")
    cfg.data.joint_vocab = tokenizer.joint
    return tokenizer


def direction_note(cfg: Config, theirs: tuple[str, str], where: str) -> str:
    """A checkpoint made for `theirs` (source, target) languages: refused when it translates the
    other way round; a note when its codes differ otherwise (`eng` and `en` may be one language),
    empty when they agree."""
    ours = (cfg.data.src_lang, cfg.data.tgt_lang)
    if theirs == ours:
        return ""
    if theirs == ours[::-1]:
        raise TranslatorError(
            f"the checkpoint translates {theirs[0]}->{theirs[1]}, the data is {ours[0]}->{ours[1]}",
            where,
            "fine-tune a checkpoint of this direction, or swap data.src_lang and data.tgt_lang",
        )
    return (
        f"init_from: the checkpoint was made for {theirs[0]}->{theirs[1]}, the data is "
        f"{ours[0]}->{ours[1]}; go on only if these name the same languages"
    )
