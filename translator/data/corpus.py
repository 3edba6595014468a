"""Parallel sentence pairs from a Hugging Face hub dataset or a local directory, both via `datasets`.

A source is `hf:NAME[:CONFIG]` (e.g. `hf:wmt14:de-en`, `hf:bentrevett/multi30k`) or a directory of
line-aligned files `{split}.{lang}` (optionally `.gz`). Hub records may be WMT-style
(`translation: {en: .., de: ..}`) or flat (`en`, `de` columns).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from translator.config import DataConfig
from translator.errors import TranslatorError


@dataclass
class Pairs:
    """Line-aligned source and target sentences of one split."""

    src: list[str]
    tgt: list[str]

    def __len__(self) -> int:
        return len(self.src)


def is_hub(source: str) -> bool:
    return source.startswith("hf:")


def load_split(data: DataConfig, split: str) -> Pairs:
    """Load our split `split` (train/valid/test) through the config's split-name mapping."""
    name = data.splits.get(split, split)
    if is_hub(data.source):
        return _load_hub(data.source, name, data.src_lang, data.tgt_lang)
    return _load_local(Path(data.source), name, data.src_lang, data.tgt_lang)


def _load_hub(source: str, split: str, src_lang: str, tgt_lang: str) -> Pairs:
    import datasets

    repo, _, subset = source[3:].partition(":")
    try:
        table = datasets.load_dataset(repo, subset or None, split=split)
    except (ConnectionError, OSError, ValueError, FileNotFoundError) as err:
        offline = os.environ.get("HF_DATASETS_OFFLINE") == "1" or "offline" in str(err).lower()
        reason = "the hub cannot be reached" if offline or "connect" in str(err).lower() else str(err).splitlines()[0]
        raise TranslatorError(
            f"cannot load hub dataset {repo!r} split {split!r}: {reason}",
            source, "this source needs internet; or pass a local directory with --data PATH",
        ) from None
    return _pairs_from_table(table, src_lang, tgt_lang, source)


def _load_local(root: Path, split: str, src_lang: str, tgt_lang: str) -> Pairs:
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import datasets

    if not root.is_dir():
        raise TranslatorError("data source is neither `hf:NAME` nor a directory", str(root),
                              "give a directory of {split}.{lang} files or hf:NAME[:CONFIG]")
    files = {lang: _find(root, split, lang) for lang in (src_lang, tgt_lang)}
    sides = {}
    for lang, path in files.items():
        table = datasets.load_dataset("text", data_files=str(path), split="train", keep_in_memory=True)
        sides[lang] = table["text"]
    if len(sides[src_lang]) != len(sides[tgt_lang]):
        raise TranslatorError(
            f"line counts differ: {files[src_lang]} has {len(sides[src_lang])}, "
            f"{files[tgt_lang]} has {len(sides[tgt_lang])}", str(root), "the files of a pair must be line-aligned",
        )
    return Pairs(sides[src_lang], sides[tgt_lang])


def _find(root: Path, split: str, lang: str) -> Path:
    for candidate in (root / f"{split}.{lang}", root / f"{split}.{lang}.gz"):
        if candidate.is_file():
            return candidate
    found = sorted({p.name.split(".")[0] for p in root.iterdir() if p.is_file() and not p.name.startswith(".")})
    raise TranslatorError(
        f"missing file {split}.{lang}", str(root),
        f"splits found: {', '.join(found) or 'none'}; map ours with --set data.splits.NAME=FOUND",
    )


def _pairs_from_table(table, src_lang: str, tgt_lang: str, where: str) -> Pairs:
    columns = table.column_names
    if "translation" in columns:
        records = table["translation"]
        missing = [lang for lang in (src_lang, tgt_lang) if lang not in records[0]]
        if missing:
            raise TranslatorError(f"language {missing[0]!r} not in translation records "
                                  f"(has {', '.join(records[0])})", where, "set data.src_lang/tgt_lang")
        return Pairs([r[src_lang] for r in records], [r[tgt_lang] for r in records])
    for lang in (src_lang, tgt_lang):
        if lang not in columns:
            raise TranslatorError(f"no column {lang!r} (columns: {', '.join(columns)})", where,
                                  "set data.src_lang/tgt_lang")
    return Pairs(list(table[src_lang]), list(table[tgt_lang]))
