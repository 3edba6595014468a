"""Damaged prepared data (a truncated copy, a deleted file, edited bytes): refused in one line
that names the file and says to prepare again, and `prepare` prepares it again instead of calling
it up to date."""

from __future__ import annotations

import errno
import json
import tempfile

import numpy as np
import pytest

from tests.data.conftest import tiny_config
from translator import prepare, prepared_files
from translator.data.shards import TokenArray
from translator.errors import TranslatorError
from translator.prepared import load_manifest, out_of_date, prepared_dir
from translator.prepared_files import VERIFIED


@pytest.fixture
def cfg(tmp_path, corpus):
    cfg = tiny_config(corpus, tmp_path / "data")
    prepare.run(cfg, quiet=True)
    return cfg


def truncate(path, keep: int = 100) -> None:
    path.write_bytes(path.read_bytes()[:keep])


def list_file(folder, key: str, name: str) -> None:
    """An edited manifest.json that lists a path outside the directory: it would be read there."""
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest[key][name] = manifest[key]["valid.de" if key == "file_sizes" else "spm.model"]
    (folder / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda d: truncate(d / "train.tgt.ids.npy"), r"train\.tgt\.ids\.npy has 100 bytes, not"),
        (lambda d: truncate(d / "train.src.offsets.npy"), r"train\.src\.offsets\.npy has 100"),
        (lambda d: (d / "spm.model").unlink(), r"spm\.model is missing"),
        (lambda d: (d / "valid.de").unlink(), r"valid\.de is missing"),
        (lambda d: truncate(d / "manifest.json"), r"damaged manifest\.json \(.*"),
        (lambda d: list_file(d, "file_sizes", "../outside.txt"), r"file_sizes names '\.\./out"),
        (lambda d: list_file(d, "files", "/etc/hostname"), r"files names '/etc/hostname'"),
    ],
)
def test_damaged_data_is_refused_in_one_line_and_prepare_repairs_it(cfg, damage, message):
    folder = prepared_dir(cfg.data)
    damage(folder)
    with pytest.raises(TranslatorError, match=message) as refused:
        load_manifest(cfg.data)  # what train and its run manifest read
    assert "translator prepare" in str(refused.value) and "\n" not in str(refused.value)
    assert out_of_date(cfg.data)  # not "up to date; use --force": a loop for the user
    prepare.run(cfg, quiet=True)
    assert not out_of_date(cfg.data) and load_manifest(cfg.data)["pairs"]["train"] > 0


def test_bytes_changed_after_prepare_are_refused_when_training_starts(cfg):
    folder = prepared_dir(cfg.data)
    ids = np.load(folder / "train.tgt.ids.npy", mmap_mode="r+")
    ids[5] += 1  # same size: only the sha256 tells
    ids.flush()
    del ids
    load_manifest(cfg.data)  # the cheap check (sizes) passes
    with pytest.raises(TranslatorError, match=r"train\.tgt\.ids\.npy changed after prepare"):
        prepare.ensure(cfg, quiet=True)  # train's first step, on rank 0
    assert out_of_date(cfg.data)
    prepare.run(cfg, quiet=True)
    prepare.ensure(cfg, quiet=True)


def test_a_start_hashes_again_only_what_was_written_since_it_last_matched(cfg, monkeypatch):
    folder, hashed = prepared_dir(cfg.data), []
    real = prepared_files.sha256_file
    monkeypatch.setattr(
        prepared_files, "sha256_file", lambda path: hashed.append(path.name) or real(path)
    )
    prepare.ensure(cfg, quiet=True)
    assert "train.tgt.ids.npy" in hashed  # the first start hashes every file
    hashed.clear()
    prepare.ensure(cfg, quiet=True)
    assert hashed == []  # nothing written since
    ids = np.load(folder / "train.tgt.ids.npy", mmap_mode="r+")
    ids[5] += 1  # an edit after the check: a new mtime
    ids.flush()
    del ids
    with pytest.raises(TranslatorError, match=r"train\.tgt\.ids\.npy changed after prepare"):
        prepare.ensure(cfg, quiet=True)
    assert hashed == ["train.tgt.ids.npy"]


def test_the_manifest_records_every_file_s_size(cfg):
    folder = prepared_dir(cfg.data)
    sizes = json.loads((folder / "manifest.json").read_text())["file_sizes"]
    on_disk = {p.name for p in folder.iterdir()} - {"manifest.json", "config.yaml", VERIFIED}
    assert set(sizes) == on_disk
    assert all((folder / name).stat().st_size == size for name, size in sizes.items())


@pytest.mark.parametrize(
    "name, message",
    [
        ("valid.tgt.ids.npy", r"valid\.tgt\.ids\.npy: damaged token ids \(.*\) \(prepare it again"),
        ("valid.tgt.offsets.npy", r"valid\.tgt\.offsets\.npy: damaged token ids"),
    ],
)
def test_a_truncated_id_array_is_one_line_naming_it(cfg, name, message):
    """Without a manifest's sizes to check first (data of an older prepare), numpy's error."""
    folder = prepared_dir(cfg.data)
    truncate(folder / name, 200)
    with pytest.raises(TranslatorError, match=message):
        TokenArray(folder / "valid.tgt")


def test_a_missing_id_array_is_one_line_naming_it(cfg):
    folder = prepared_dir(cfg.data)
    (folder / "test.src.ids.npy").unlink()
    with pytest.raises(TranslatorError, match=r"test\.src\.ids\.npy: missing"):
        TokenArray(folder / "test.src")


def test_eval_refuses_a_truncated_reference_file(cfg):
    from translator.evaluate import _split_files

    truncate(prepared_dir(cfg.data) / "test.de", 50)
    with pytest.raises(TranslatorError, match=r"test\.de has 50 bytes, not the"):
        _split_files(cfg.data, "test")


def test_prepared_data_on_a_read_only_file_system_are_checked_and_used(cfg, monkeypatch):
    """Prepared on one machine, trained on another from a read-only mount: the checksums'
    cache cannot be written there, and that is no reason to refuse the data."""

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    folder = prepared_dir(cfg.data)
    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    prepare.ensure(cfg, quiet=True)  # the first start: every file hashed, nothing cached
    assert not (folder / VERIFIED).exists()
