"""A full disk or an unwritable run directory: refused before training where it can be known, and
never a half-written file under a name that looks complete."""

from __future__ import annotations

import errno
import io
import json
import sys
from collections import namedtuple

import pytest
import torch

from tests.reliability.conftest import small
from translator import checkpoint, cli
from translator.errors import TranslatorError
from translator.files import atomic_write
from translator.train import loop, state
from translator.train.manifest import RunManifest

Usage = namedtuple("Usage", "total used free")


def test_too_little_free_space_for_a_checkpoint_is_refused_before_training(
    small_data, tmp_path, monkeypatch
):
    monkeypatch.setattr(
        state.shutil, "disk_usage", lambda path: Usage(10**9, 10**9 - 50_000, 50_000)
    )
    with pytest.raises(
        TranslatorError, match=r"not enough free space for checkpoints: .* MiB needed .* MiB free"
    ):
        loop.run(small(small_data, tmp_path / "run"), quiet=True)
    # not a log line, not a checkpoint: nothing was trained
    assert not list((tmp_path / "run").iterdir())


@pytest.mark.parametrize(
    "keep_last, existing, checkpoints", [(0, 0, 1), (1, 0, 2), (3, 0, 4), (3, 2, 2), (3, 5, 1)]
)
def test_the_space_needed_is_that_of_the_checkpoints_still_to_come(
    tmp_path, monkeypatch, keep_last, existing, checkpoints
):
    """keep_last numbered checkpoints stay and one more is written before the oldest goes; those
    already there take no new space. One checkpoint: weights and AdamW's two moments (12 MiB here),
    plus 1 MiB."""
    for step in range(existing):
        (tmp_path / f"step-{step}.pt").write_bytes(b"x")
    monkeypatch.setattr(state.shutil, "disk_usage", lambda path: Usage(0, 0, 0))
    with pytest.raises(
        TranslatorError, match=rf": {13 * checkpoints} MiB needed \(about 13 MiB each\), 0 MiB free"
    ):
        state.check_run_dir(tmp_path, torch.nn.Linear(1024, 1024, bias=False), keep_last)


def test_an_unwritable_run_directory_is_refused_before_training(small_data, tmp_path, monkeypatch):
    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(state.tempfile, "TemporaryFile", read_only)
    with pytest.raises(
        TranslatorError, match="cannot write to the run directory: Read-only file system"
    ):
        loop.run(small(small_data, tmp_path / "run"), quiet=True)
    assert not (tmp_path / "run" / "train.log").exists()


def test_a_disk_that_fills_during_a_save_leaves_the_last_complete_checkpoint(
    small_data, tmp_path, monkeypatch, capsys
):
    real, calls = torch.save, []

    def full_disk(obj, handle, *args, **kwargs):
        calls.append(1)
        if len(calls) < 2:
            return real(obj, handle, *args, **kwargs)
        buffer = io.BytesIO()
        real(obj, buffer, *args, **kwargs)
        handle.write(buffer.getvalue()[: len(buffer.getvalue()) // 2])  # what fitted
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full_disk)
    run_dir = tmp_path / "run"
    cfg = small(small_data, run_dir)
    monkeypatch.setattr(sys, "argv", ["translator", "train", "-", "--quiet"])
    monkeypatch.setattr(cli.training, "load_config", lambda *args: cfg)
    with pytest.raises(SystemExit) as exit_code:
        cli.main()
    err = capsys.readouterr().err
    assert exit_code.value.code == 1 and err.count("\n") == 1 and "No space left on device" in err
    # no step-4.pt, not even cut
    assert sorted(p.name for p in run_dir.glob("*.pt")) == ["best.pt", "last.pt", "step-2.pt"]
    assert checkpoint.read(run_dir / "last.pt")["state"]["train"]["step"] == 2
    assert not list(run_dir.glob(".*.tmp"))
    session = json.loads((run_dir / "manifest.json").read_text())["sessions"][-1]
    assert (session["last_update"], session["saved_update"]) == (4, 2)


def test_a_full_disk_names_the_checkpoint_not_the_run_record_that_fails_after_it(
    small_data, tmp_path, monkeypatch, capsys
):
    """The save fails first; manifest.json's closing write then fails too, and must not hide it."""

    def full_disk(obj, handle, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    def record_fails(self, *args):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "run" / "x.json"))

    monkeypatch.setattr(torch, "save", full_disk)
    monkeypatch.setattr(RunManifest, "finish", record_fails)
    cfg = small(small_data, tmp_path / "run")
    monkeypatch.setattr(sys, "argv", ["translator", "train", "-", "--quiet"])
    monkeypatch.setattr(cli.training, "load_config", lambda *args: cfg)
    with pytest.raises(SystemExit) as exit_code:
        cli.main()
    err = capsys.readouterr().err
    assert exit_code.value.code == 1 and err.count("\n") == 1
    assert "last.pt" in err and "x.json" not in err


@pytest.mark.parametrize("fail_after", [0, 1, 5])
def test_a_failed_atomic_write_keeps_the_old_file_whole(tmp_path, fail_after):
    path = tmp_path / "hyps.txt"
    path.write_text("old\n")
    with pytest.raises(TranslatorError, match="No space left on device") as err:
        with atomic_write(path) as handle:
            handle.write("new line\n" * fail_after)
            raise OSError(errno.ENOSPC, "No space left on device")
    assert err.value.where == str(path)  # the file asked for, not the temporary one
    assert path.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["hyps.txt"]
