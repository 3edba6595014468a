"""Whether a prepared directory is intact: every file at the size prepare wrote (checked at each
open, a stat per file) and at the sha256 it recorded (checked when training starts and when prepare
runs again, rehashing only what was written since the last match)."""

from __future__ import annotations

import json
from contextlib import suppress
from pathlib import Path

from translator.data.shards import PREPARE_AGAIN
from translator.data.tokenizer import sha256_file
from translator.errors import TranslatorError
from translator.files import atomic_write


def file_damage(folder: Path, manifest: dict, names: set[str] | None = None) -> str:
    """The first prepared file (of `names`, default all) that is missing or not the size prepare
    wrote; empty when none. A stat per file: cheap enough for every open."""
    # an older prepare kept no sizes: the names of its checksummed files only
    sizes = manifest.get("file_sizes") or dict.fromkeys(manifest.get("files", {}))
    for name, size in sizes.items():
        if names is not None and name not in names:
            continue
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if size is not None and path.stat().st_size != size:
            return f"{name} has {path.stat().st_size:,} bytes, not the {size:,} prepare wrote"
    return ""


# beside the prepared files: (size, mtime) of each file when its sha256 last matched, so a start
# hashes again only what was written since (hashing a WMT-size directory takes a while)
VERIFIED = ".verified.json"


def checksum_damage(folder: Path, manifest: dict) -> str:
    """The first prepared file whose sha256 is not the one prepare recorded; empty when none.
    Reads the files written since they last matched (all of them the first time)."""
    try:
        seen = json.loads((folder / VERIFIED).read_text())
    except (OSError, ValueError):
        seen = {}
    now = {}
    for name, digest in manifest.get("files", {}).items():
        path = folder / name
        if not path.is_file():
            continue
        stat = path.stat()
        now[name] = [stat.st_size, stat.st_mtime_ns]
        if seen.get(name) != now[name] and sha256_file(path) != digest:
            return f"{name} changed after prepare (its sha256 is not manifest.json's)"
    if now != seen:
        # read-only prepared data (atomic_write words its OSError as a TranslatorError): hashed
        # again next time
        with suppress(OSError, TranslatorError):
            with atomic_write(folder / VERIFIED) as handle:
                json.dump(now, handle)
    return ""


def check_files(folder: Path, manifest: dict, names: set[str] | None = None) -> None:
    """Refuses prepared data with a missing or truncated file (see file_damage)."""
    if damage := file_damage(folder, manifest, names):
        raise TranslatorError(f"damaged prepared data: {damage}", str(folder), PREPARE_AGAIN)


def check_checksums(folder: Path, manifest: dict) -> None:
    """Refuses prepared data whose content changed after prepare (see checksum_damage)."""
    if damage := checksum_damage(folder, manifest):
        raise TranslatorError(f"damaged prepared data: {damage}", str(folder), PREPARE_AGAIN)
