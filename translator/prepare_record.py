"""What `prepare` records of the directory it made (manifest.json: settings, source, counts,
vocabularies, checksums, versions) and the summary table it shows of it."""

from __future__ import annotations

import os
from pathlib import Path

from translator.config import DataConfig
from translator.data import clean, coverage
from translator.data.shards import id_dtype
from translator.data.tokenizer import Tokenizer, sha256_file, size_note
from translator.prepared import (
    FORMAT,
    config_hash,
    shaping_settings,
    source_fingerprint,
    vocab_files,
)
from translator.versions import installed


def build_manifest(
    data: DataConfig,
    cleaner: clean.Cleaner,
    counts: dict,
    tokenizers: dict[str, Tokenizer],
    tmp: Path,
    vocab_from: str | None,
) -> dict:
    """manifest.json of the data prepared into `tmp` (renamed into place once complete)."""
    files = vocab_files(data)
    vocab = {
        side: {
            "file": files[side],
            "size": tok.vocab_size,
            "sha256": tok.checksum(),
            "id_dtype": id_dtype(tok.vocab_size).name,
        }
        for side, tok in tokenizers.items()
    }
    return {
        "format": FORMAT,
        "config_hash": config_hash(data, vocab_from),
        "settings": shaping_settings(data, vocab_from),
        "source": data.source,
        "cleaning": clean.rules_digest(data.nfc, data.normalize_spaces),
        "source_spec": {
            "source": data.source,
            "splits": data.splits,
            "src_lang": data.src_lang,
            "tgt_lang": data.tgt_lang,
            "file_sizes": {name: size for name, size, _ in source_fingerprint(data)},
            "fingerprint": source_fingerprint(data),
        },
        "src_lang": data.src_lang,
        "tgt_lang": data.tgt_lang,
        "pairs_in": cleaner.pairs_in,
        "dropped": dict(cleaner.drops),
        "pairs": {split: c["pairs"] for split, c in counts.items()},
        "tokens": {
            split: {"src": c["src_tokens"], "tgt": c["tgt_tokens"]} for split, c in counts.items()
        },
        # of the training text as encoded, before the length rules
        "unk": counts["train"]["unk"],
        "spm_round_trip": _round_trips(counts),
        "joint_vocab": data.joint_vocab,
        "vocab_from": None,  # or the checkpoint whose tokenizer encoded the data (run() fills it)
        "vocab": vocab,
        "vocab_size": tokenizers["tgt"].vocab_size,
        "spm_sha256": tokenizers["tgt"].checksum(),
        "files": {
            p.name: sha256_file(p) for p in sorted(tmp.iterdir()) if p.suffix in (".npy", ".model")
        },
        # every file (the text of valid/test too), checked at each open (check_files)
        "file_sizes": {p.name: p.stat().st_size for p in sorted(tmp.iterdir()) if p.is_file()},
        "versions": installed("datasets", "pyarrow", "sentencepiece", "numpy", "torch"),
        # SentencePiece's result depends on it: data.spm_threads reproduces it elsewhere
        "spm_threads": None if vocab_from else data.spm_threads or os.cpu_count(),
    }


def _round_trips(counts: dict) -> dict:
    """What SentencePiece changes of the valid and test references, and one example of it."""
    trips = {split: counts[split]["round_trip"] for split in ("valid", "test")}
    first = next((t for t in trips.values() if t["example"]), trips["valid"])
    return {
        **{split: {k: t[k] for k in ("lines", "changed")} for split, t in trips.items()},
        "example": first["example"],
        "cause": first["cause"],
    }


def summary_rows(manifest: dict) -> list[tuple[str, str]]:
    """What the final table shows: pairs in, dropped per rule, pairs out, tokens, vocabulary,
    time."""
    pairs, tokens, vocab = manifest["pairs"], manifest["tokens"], manifest["vocab"]
    rows = [("source", manifest["source"]), ("train pairs in", f"{manifest['pairs_in']:,}")]
    rows += [(f"  dropped: {rule}", f"{n:,}") for rule, n in manifest["dropped"].items()]
    rows += [
        ("train pairs out", f"{pairs['train']:,}"),
        ("valid / test pairs", f"{pairs['valid']:,} / {pairs['test']:,}"),
        ("train tokens src / tgt", f"{tokens['train']['src']:,} / {tokens['train']['tgt']:,}"),
    ]
    if given := manifest.get("vocab_from"):
        rows.append(("vocabulary from", given.get("checkpoint") or given.get("spm_model", "")))
    # with a vocabulary given (the manifest's vocab_from), vocab_size is the given model's, not a
    # request (no "settings" before)
    wanted = None if manifest.get("vocab_from") else manifest.get("settings", {}).get("vocab_size")
    src, tgt = vocab["src"]["size"], vocab["tgt"]["size"]
    if manifest["joint_vocab"]:
        rows.append(
            (
                "vocabulary (joint)",
                f"{src:,} ({vocab['src']['id_dtype']}){size_note(wanted, src)}",
            )
        )
    else:
        # the note beside the side SentencePiece made smaller; once, at the end, when both are
        if size_note(wanted, src) and size_note(wanted, tgt):
            sizes = f"{src:,} / {tgt:,}{size_note(wanted, min(src, tgt))}"
        else:
            sizes = f"{src:,}{size_note(wanted, src)} / {tgt:,}{size_note(wanted, tgt)}"
        rows.append(("vocabularies src / tgt", sizes))
    rows += coverage.summary_rows(manifest)
    rows.append(("time", f"{manifest['seconds']} s"))
    return rows
