"""`translator prepare`: corpus -> cleaning -> SentencePiece -> memory-mapped id arrays in data/<name>/.

The directory is written under a temporary name and renamed when complete, so an interrupted
prepare leaves nothing that looks finished. A rerun with the same data config is a cache hit.
"""

from __future__ import annotations

import hashlib
import json
import platform
import time
from pathlib import Path

from translator import __version__
from translator.config import Config, DataConfig, dump, to_dict
from translator.data.clean import clean_pairs, length_filter, normalize
from translator.data.corpus import Pairs, load_split
from translator.data.shards import write_ids
from translator.data.tokenizer import Tokenizer, train_sentencepiece
from translator.errors import TranslatorError
from translator.files import atomic_dir

SPLITS = ("train", "valid", "test")


def prepared_dir(data: DataConfig) -> Path:
    return Path(data.data_dir) / data.name


def config_hash(data: DataConfig) -> str:
    """Identifies everything that shapes the prepared files (not where they are written)."""
    fields = {k: v for k, v in to_dict(data).items() if k not in ("data_dir", "name")}
    return hashlib.sha256(json.dumps([__version__, fields], sort_keys=True).encode()).hexdigest()[:16]


def run(cfg: Config, force: bool = False, log=print) -> Path:
    """Prepare the data set described by `cfg.data`; returns its directory."""
    data, out = cfg.data, prepared_dir(cfg.data)
    manifest_path = out / "manifest.json"
    if not force and manifest_path.is_file():
        if json.loads(manifest_path.read_text()).get("config_hash") == config_hash(data):
            log(f"{out} is up to date (same data config); use --force to prepare again")
            return out
    started = time.time()
    splits = {}
    for split in SPLITS:
        log(f"loading {split} ({data.splits.get(split, split)}) from {data.source}")
        splits[split] = load_split(data, split)
    if data.max_train_pairs:
        train = splits["train"]
        splits["train"] = Pairs(train.src[: data.max_train_pairs], train.tgt[: data.max_train_pairs])

    held_out = {normalize(s) for split in ("valid", "test") for side in (splits[split].src, splits[split].tgt)
                for s in side}
    train_src, train_tgt, drops = clean_pairs(splits["train"].src, splits["train"].tgt, held_out)
    if not train_src:
        raise TranslatorError("no training pairs left after cleaning", data.source,
                              "check the languages and the split mapping")

    with atomic_dir(out) as tmp:
        log(f"training SentencePiece ({data.spm_model_type}, {data.vocab_size} pieces) on {2 * len(train_src)} sentences")
        model_file = train_sentencepiece(
            train_src + train_tgt, tmp / "spm", vocab_size=data.vocab_size, model_type=data.spm_model_type,
            character_coverage=data.character_coverage, byte_fallback=data.byte_fallback,
            input_sentence_size=data.input_sentence_size, seed=cfg.train.seed)
        tokenizer = Tokenizer(model_file)
        src_ids, tgt_ids = tokenizer.encode(train_src), tokenizer.encode(train_tgt)
        keep, length_drops = length_filter(src_ids, tgt_ids, data.max_tokens_per_side, data.max_length_ratio)
        drops += length_drops
        counts = {"train": len(keep)}
        write_ids(tmp / "train.src", [src_ids[i] for i in keep], tokenizer.vocab_size)
        write_ids(tmp / "train.tgt", [tgt_ids[i] for i in keep], tokenizer.vocab_size)
        for split in ("valid", "test"):
            pairs = splits[split]
            write_ids(tmp / f"{split}.src", tokenizer.encode([normalize(s) for s in pairs.src]), tokenizer.vocab_size)
            write_ids(tmp / f"{split}.tgt", tokenizer.encode([normalize(t) for t in pairs.tgt]), tokenizer.vocab_size)
            # raw text stays as given: sources for decoding, references for sacreBLEU
            (tmp / f"{split}.{data.src_lang}").write_text("".join(s + "\n" for s in pairs.src), encoding="utf-8")
            (tmp / f"{split}.{data.tgt_lang}").write_text("".join(t + "\n" for t in pairs.tgt), encoding="utf-8")
            counts[split] = len(pairs)
        manifest = {
            "source": data.source, "config_hash": config_hash(data), "src_lang": data.src_lang,
            "tgt_lang": data.tgt_lang, "pairs_in": len(splits["train"]), "dropped": dict(drops),
            "pairs": counts, "vocab_size": tokenizer.vocab_size, "spm_sha256": tokenizer.checksum(),
            "versions": _versions(), "seconds": round(time.time() - started, 1),
        }
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        (tmp / "config.yaml").write_text(dump(cfg))
    _report(manifest, log)
    return out


def _versions() -> dict[str, str]:
    import sentencepiece
    import torch

    return {"translator": __version__, "python": platform.python_version(), "torch": torch.__version__,
            "sentencepiece": sentencepiece.__version__}


def _report(manifest: dict, log) -> None:
    dropped = ", ".join(f"{rule} {n}" for rule, n in sorted(manifest["dropped"].items())) or "none"
    pairs = manifest["pairs"]
    log(f"train: {manifest['pairs_in']} pairs in, dropped: {dropped}; {pairs['train']} out")
    log(f"valid {pairs['valid']}, test {pairs['test']} pairs; vocabulary {manifest['vocab_size']}; "
        f"{manifest['seconds']} s")


def load_manifest(data: DataConfig) -> dict:
    path = prepared_dir(data) / "manifest.json"
    if not path.is_file():
        raise TranslatorError("prepared data not found", str(prepared_dir(data)),
                              "run `translator prepare CONFIG` first")
    return json.loads(path.read_text())
