"""The prepared directory of a data config: where it is, what identifies it (the config hash),
and its manifest, which `prepare` writes and training reads (and refuses when its settings differ).
What the manifest holds is written in prepare_record.py; the files' sizes and checksums are
checked in prepared_files.py.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from contextlib import suppress
from pathlib import Path

from translator import __version__
from translator.config import DataConfig, to_dict
from translator.data import clean
from translator.data.corpus import is_hub, source_files
from translator.data.shards import PREPARE_AGAIN
from translator.data.tokenizer import Tokenizer
from translator.errors import TranslatorError
from translator.prepared_files import check_files, checksum_damage, file_damage

FORMAT = 2  # layout of the prepared directory; part of the config hash
# Settings of SentencePiece training, which given models (init_from's, spm_model's) make moot
SPM_SETTINGS = (
    "vocab_size",
    "spm_model_type",
    "character_coverage",
    "byte_fallback",
    "input_sentence_size",
    "spm_normalization",
    "spm_threads",
    "user_symbols",
)
GIVEN_MODELS = ("spm_model", "tgt_spm_model")
# Settings recorded only when not at their default (-> that default): data prepared before they
# existed keeps its config hash and is not refused
ONLY_WHEN_SET = {
    "spm_normalization": DataConfig.spm_normalization,
    "spm_threads": DataConfig.spm_threads,
    "user_symbols": [],
}


def prepared_dir(data: DataConfig) -> Path:
    return Path(data.data_dir) / data.name


def vocab_files(data: DataConfig) -> dict[str, str]:
    """Side -> SentencePiece model file name in the prepared directory."""
    if data.joint_vocab:
        return {"src": "spm.model", "tgt": "spm.model"}
    return {"src": "spm.src.model", "tgt": "spm.tgt.model"}


def source_fingerprint(data: DataConfig) -> list:
    """Name, size and mtime of the files a local source's splits are read from (of every file of
    a save_to_disk dataset), so edited data is prepared again, and a README beside them is not
    (hub: none)."""
    root = Path(data.source)
    if is_hub(data.source) or not root.is_dir():
        return []
    if (root / "dataset_dict.json").is_file():
        files = [p for p in root.iterdir() if p.is_file()]
        files += [p for d in root.iterdir() if d.is_dir() for p in d.iterdir() if p.is_file()]
    else:
        files = [path for split in data.splits for path in source_files(data, split)]
    return sorted(
        [str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns] for p in set(files)
    )


def shaping_settings(data: DataConfig, vocab_from: str | None = None) -> dict:
    """The data settings that shape the prepared files (not where they are written); `vocab_from`:
    the sha256 of the given tokenizer that encodes them (train.init_from's, data.spm_model's), which
    replaces SentencePiece's settings."""
    # the given models' paths: their checksum, vocab_from, stands for what they hold
    moot = ("data_dir", "name", *GIVEN_MODELS, *(SPM_SETTINGS if vocab_from else ()))
    settings = {
        k: v
        for k, v in to_dict(data).items()
        if k not in moot and not (k in ONLY_WHEN_SET and v == ONLY_WHEN_SET[k])
    }
    # only when set: data prepared before this setting existed keeps its hash
    return {**settings, "vocab_from": vocab_from} if vocab_from else settings


def config_hash(data: DataConfig, vocab_from: str | None = None) -> str:
    """Identifies everything that shapes the prepared files (not where they are written)."""
    identity = [__version__, FORMAT, shaping_settings(data, vocab_from), source_fingerprint(data)]
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


def out_of_date(data: DataConfig, vocab_from: str | None = None) -> str:
    """Why `prepare` may not skip (empty: it may): no data yet, other settings or source files
    (the config hash), text cleaned by other rules, or a file not as prepare wrote it (size and
    sha256), so that a rerun repairs what training refuses as damaged."""
    folder = prepared_dir(data)
    if not (folder / "manifest.json").is_file():
        return "no prepared data yet"
    try:
        manifest = read_manifest(folder)
    except TranslatorError as err:
        return err.what
    if manifest.get("config_hash") != config_hash(data, vocab_from):
        made = manifest.get("settings", {}).get("vocab_from")
        if "settings" in manifest and made != vocab_from:
            return f"it was encoded with {_vocab_origin(made, manifest.get('vocab_from'))}"
        # settings first: other split names also read other files
        diff = setting_changes(manifest.get("settings") or {}, shaping_settings(data, vocab_from))
        if diff:
            return f"other data settings: {diff}"
        return source_change(data, manifest) or "other data settings"
    if change := cleaning_change(data, manifest):
        return change
    return file_damage(folder, manifest) or checksum_damage(folder, manifest)


def cleaning_change(data: DataConfig, manifest: dict) -> str:
    """Whether the prepared text was cleaned by other rules than this version's (clean.rules_digest;
    data prepared before the digest was recorded counts as other); empty when not."""
    made = manifest.get("cleaning")
    if made == clean.rules_digest(data.nfc, data.normalize_spaces):
        return ""
    if made is None:
        older = "an older translator, which kept no record of its text cleaning"
        return f"{prepared_dir(data)} was prepared by {older}"
    return f"{prepared_dir(data)} was cleaned by other text rules than this version's"


def read_manifest(folder: Path) -> dict:
    """`folder/manifest.json`; one line naming it when it is not readable JSON (a truncated
    copy)."""
    path = folder / "manifest.json"
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:  # JSONDecodeError is a ValueError
        raise TranslatorError(f"damaged manifest.json ({err})", str(path), PREPARE_AGAIN) from None
    if not isinstance(manifest, dict):
        raise TranslatorError("damaged manifest.json (not an object)", str(path), PREPARE_AGAIN)
    for key in ("files", "file_sizes"):
        # prepare lists the files it wrote by name: a path would be read outside the directory
        for name in manifest.get(key) or {}:
            if name in ("", ".", "..") or Path(name).name != name:
                raise TranslatorError(
                    f"damaged manifest.json ({key} names {name!r}, not a file of the directory)",
                    str(path),
                    PREPARE_AGAIN,
                )
    return manifest


def holds_prepared_data(folder: Path) -> bool:
    """Whether `folder` is an earlier prepare's output: its manifest lists prepared files, or
    (the manifest damaged) a SentencePiece model is there. A training run directory has a
    manifest.json too, of another kind, and never a SentencePiece model file."""
    with suppress(OSError, TranslatorError):  # TranslatorError: damaged
        if "files" in read_manifest(folder):
            return True
    return any(folder.glob("spm*.model"))


def source_change(data: DataConfig, manifest: dict) -> str:
    """What differs between the source the prepared data were made from and `data.source` now
    (another source, or its files edited since); empty when nothing does. Training reads the
    prepared copy either way: data settings are checked, the source is not (load_manifest)."""
    spec = manifest.get("source_spec", {})
    made = spec.get("source", manifest.get("source"))
    if made is None:
        return ""
    if not _same_source(made, data.source):
        return f"{prepared_dir(data)} was prepared from {made}, not {data.source}"
    now = source_fingerprint(data)
    then = spec.get("fingerprint")
    if then is None:  # written before the fingerprint was kept: sizes only
        now, then = {n: size for n, size, _ in now}, spec.get("file_sizes", {})
    if now != then:
        return f"the files of {data.source} changed after {prepared_dir(data)} was prepared"
    return ""


def _same_source(a: str, b: str) -> bool:
    if is_hub(a) or is_hub(b):
        return a == b
    return Path(a).resolve() == Path(b).resolve()


def tokenizer_of(folder: Path, manifest: dict) -> Tokenizer:
    """The tokenizer of the prepared data in `folder`, from the files its manifest names."""
    src, tgt = (folder / manifest["vocab"][side]["file"] for side in ("src", "tgt"))
    return Tokenizer(src) if src == tgt else Tokenizer(src, tgt)


def data_vocab_from(data: DataConfig, vocab_from: str | None) -> tuple[str | None, DataConfig]:
    """The `vocab_from` that `data`'s prepared files go by, with `data` as they were made.

    When prepare trained their SentencePiece model(s) itself and they are byte for byte the
    checkpoint's (tokenizer sha256 `vocab_from`), as when training goes on from a model made on
    these very data: (None, `data` with the SentencePiece settings the files were made with). The
    ids are the same either way, the checkpoint's vocabulary makes those settings moot, and
    preparing again would only make the parent's own run refuse the data. Otherwise `vocab_from`
    and `data` as given."""
    folder = prepared_dir(data)
    if vocab_from is None or not (folder / "manifest.json").is_file():
        return vocab_from, data
    try:
        manifest = read_manifest(folder)
        made = manifest.get("settings", {})
        if made.get("vocab_from") is not None:
            return vocab_from, data
        tokenizer = tokenizer_of(folder, manifest)
    except (TranslatorError, KeyError, OSError, RuntimeError):  # damaged: the usual checks say so
        return vocab_from, data
    if tokenizer.checksum() != vocab_from:
        return vocab_from, data
    made = {**ONLY_WHEN_SET, **made}
    return None, dataclasses.replace(data, **{k: made[k] for k in SPM_SETTINGS if k in made})


def _vocab_origin(vocab_from: str | None, record: dict | None = None) -> str:
    """Which SentencePiece model(s) encoded data, by their checksum `vocab_from` (None: trained on
    them) and, for data already prepared, the manifest's record of where they came from."""
    if vocab_from is None:
        return "a SentencePiece model trained on the data"
    record = record or {}
    if "spm_model" in record:
        return f"data.spm_model {record['spm_model']} (tokenizer sha256 {vocab_from[:12]})"
    if "checkpoint" in record:
        return f"the checkpoint {record['checkpoint']}'s vocabulary (sha256 {vocab_from[:12]})"
    return f"given SentencePiece model(s) (tokenizer sha256 {vocab_from[:12]})"


def setting_changes(made: dict, wanted: dict, skip: tuple[str, ...] = ()) -> str:
    """'data.k: X there, Y here, ...' for the shaping settings that differ (empty: none)."""
    # a setting recorded only when set is at its default where it is missing
    made, wanted = {**ONLY_WHEN_SET, **made}, {**ONLY_WHEN_SET, **wanted}
    changed = sorted(k for k in wanted if k not in skip and made.get(k) != wanted[k])
    return ", ".join(f"data.{k}: {made.get(k)!r} there, {wanted[k]!r} here" for k in changed)


def load_manifest(
    data: DataConfig, vocab_from: str | None = None, given: dict | None = None
) -> dict:
    """The prepare manifest of `data`, which training reads; refused if prepared with other
    settings.

    Where the data came from (source, split names) may differ: `prepare --data PATH` need not be
    repeated for `train`. Anything else (vocabulary, cleaning, max_train_pairs...) must match, or
    the run would train on other data than its config (and checkpoints) say. `vocab_from`: the
    sha256 of the checkpoint tokenizer the data must be encoded with (train.init_from), None for
    SentencePiece trained by prepare; `given`: where that tokenizer comes from
    (vocab_source.vocab_record), for a refusal to name it.
    """
    path = prepared_dir(data) / "manifest.json"
    if not path.is_file():
        raise TranslatorError(
            "prepared data not found",
            str(prepared_dir(data)),
            "run `translator prepare CONFIG` first (torchrun on several machines: on each one, "
            "or share data.data_dir)",
        )
    manifest = read_manifest(prepared_dir(data))
    made, wanted = manifest.get("settings"), shaping_settings(data, vocab_from)
    if made is None:  # written by an older prepare: nothing to compare
        check_files(prepared_dir(data), manifest)
        return manifest
    if made.get("vocab_from") != vocab_from:
        raise TranslatorError(
            f"prepared with {_vocab_origin(made.get('vocab_from'), manifest.get('vocab_from'))}, "
            f"but this run needs {_vocab_origin(vocab_from, given)}",
            str(prepared_dir(data)),
            "to replace it, run `translator prepare` with this config (and the same --set/--data); "
            "to keep it, set another data.name",
        )
    if diff := setting_changes(made, wanted, skip=("source", "splits")):
        raise TranslatorError(
            f"prepared with other data settings ({diff})",
            str(prepared_dir(data)),
            "to replace it, run `translator prepare` with this config (and the same --set/--data); "
            "to keep it, set another data.name",
        )
    check_files(prepared_dir(data), manifest)
    return manifest
