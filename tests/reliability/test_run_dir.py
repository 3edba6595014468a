"""One trainer per run directory, and what a start finds there: temporary files, a stale best.pt,
a damaged last.pt; no checkpoint of weights that are not finite."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tests.reliability.conftest import small
from translator import checkpoint
from translator.errors import TranslatorError
from translator.train import loop, session, state


def _copy(trained_run: Path, tmp_path: Path) -> Path:
    """A copy of the trained run with its hard links as training makes them (to the copy's last.pt:
    a test may damage it in place)."""
    run_dir = tmp_path / "run"
    shutil.copytree(trained_run, run_dir)
    for name in ("step-4.pt", "best.pt"):  # best.pt: update 2's, or update 4's
        if os.path.samefile(trained_run / name, trained_run / "last.pt"):
            (run_dir / name).unlink()
            (run_dir / name).hardlink_to(run_dir / "last.pt")
    return run_dir


def test_a_second_trainer_in_the_same_run_dir_is_refused_naming_the_first(
    small_data, trained_run, tmp_path
):
    run_dir = _copy(trained_run, tmp_path)
    holder = subprocess.Popen(  # holds the lock as a running trainer does
        [sys.executable, "-c", HOLD, str(run_dir)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        before = (run_dir / "train.log").read_text()
        with pytest.raises(TranslatorError) as refused:
            loop.run(small(small_data, run_dir, "train.max_updates=6"), quiet=True)
        assert refused.value.what.startswith("another `translator train` is running in it (pid ")
        assert f"pid {holder.pid} on " in refused.value.what
        assert refused.value.where == str(run_dir)
        # nothing written: no log line, no checkpoint
        assert (run_dir / "train.log").read_text() == before
        assert checkpoint.read(run_dir / "last.pt")["state"]["train"]["step"] == 4
    finally:
        holder.kill()
        holder.wait()
    loop.run(small(small_data, run_dir, "train.max_updates=6"), quiet=True)  # its turn now
    assert checkpoint.read(run_dir / "last.pt")["state"]["train"]["step"] == 6


HOLD = """
import sys, time
from pathlib import Path
from translator.train import state
state.claim_run_dir(Path(sys.argv[1]))
print("locked", flush=True)
time.sleep(600)
"""


def test_a_start_sweeps_only_the_temporary_files_of_dead_processes(trained_run, tmp_path):
    run_dir = _copy(trained_run, tmp_path)
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], text=True, capture_output=True
    )
    dead = int(gone.stdout)
    killed = run_dir / f".last.pt.{dead}.abcd1234.tmp"
    live = run_dir / f".hyp.txt.{os.getppid()}.abcd1234.tmp"  # an `eval -o` still writing there
    for path in (killed, live):
        path.write_bytes(b"half")
    assert state.claim_run_dir(run_dir) == [
        "removed 1 temporary files of saves that were cut short"
    ]
    assert live.exists() and not killed.exists()


def test_the_disk_space_refusal_never_reads_as_enough(tmp_path, monkeypatch):
    """One byte short of a 1 MiB checkpoint: "1 MiB needed, 1 MiB free" would read as enough."""
    model = torch.nn.Linear(1, 1, bias=False)  # 3 x 4 bytes + 1 MiB
    need = 12 + 2**20
    usage = type("Usage", (), {"free": need - 1})
    monkeypatch.setattr(state.shutil, "disk_usage", lambda path: usage)
    with pytest.raises(TranslatorError) as refused:
        state.check_run_dir(tmp_path, model, 0)
    assert ": 1.000011 MiB needed (about 1 MiB each), 1.000010 MiB free" in refused.value.what


def test_weights_that_are_not_finite_are_never_saved_and_prune_nothing(
    small_data, tmp_path, monkeypatch
):
    real = loop.train_step

    def nan_at_update_4(s, batches, total_tokens):
        out = real(s, batches, total_tokens)
        if s.state.step == 3:  # the update being made is the 4th
            with torch.no_grad():
                next(s.model.parameters()).view(-1)[0] = float("nan")
        return out

    monkeypatch.setattr(loop, "train_step", nan_at_update_4)
    # the save's own refusal, behind the loop's Divergence (which would stop the run first)
    unwatched = SimpleNamespace(after_update=lambda s, ok: None, check=lambda s: None)
    monkeypatch.setattr(loop, "Divergence", lambda start=0: unwatched)
    run_dir = tmp_path / "run"
    with pytest.raises(TranslatorError) as refused:
        loop.run(small(small_data, run_dir, "train.keep_last=1"), quiet=True)
    assert refused.value.what == (
        "the weights after update 4 are not finite (NaN or inf): not saved"
    )
    assert refused.value.where == str(run_dir / "last.pt")
    assert refused.value.fix.startswith("it keeps the last checkpoint saved")
    assert sorted(p.name for p in run_dir.glob("*.pt")) == ["best.pt", "last.pt", "step-2.pt"]
    assert checkpoint.read(run_dir / "last.pt")["state"]["train"]["step"] == 2


def test_a_kill_before_the_best_link_is_mended_on_resume(small_data, tmp_path, monkeypatch):
    """Killed between last.pt's rename and best.pt's link: best.pt would stay update 2's for the
    rest of the run, as later validations must beat update 4's BLEU."""
    real_validate, real_link = session.validate, state._link
    monkeypatch.setattr(  # every validation better than the last
        session,
        "validate",
        lambda *args, **kwargs: replace(real_validate(*args, **kwargs), bleu=float(len(calls))),
    )
    calls = []

    def killed_at_update_4s_best(src, dst):
        calls.append(dst.name)
        if dst.name == "best.pt" and checkpoint.saved_update(src) == 4:
            raise KeyboardInterrupt  # as SIGKILL would: nothing after it runs
        real_link(src, dst)

    monkeypatch.setattr(state, "_link", killed_at_update_4s_best)
    run_dir = tmp_path / "run"
    with pytest.raises(SystemExit):  # the loop's answer to a Ctrl-C it did not ask for: 130
        loop.run(small(small_data, run_dir), quiet=True)
    assert checkpoint.saved_update(run_dir / "best.pt") == 2
    monkeypatch.setattr(state, "_link", real_link)
    loop.run(small(small_data, run_dir), quiet=True)  # resumes at update 4: nothing to train
    assert os.path.samefile(run_dir / "best.pt", run_dir / "last.pt")
    log = (run_dir / "train.log").read_text()
    assert "best.pt was holding update 2, not update 4's (a save was cut short): linked" in log


def test_a_stale_best_pt_whose_checkpoint_is_gone_is_reported(trained_run, tmp_path):
    run_dir = _copy(trained_run, tmp_path)
    (run_dir / "best.pt").unlink()
    shutil.copyfile(run_dir / "step-2.pt", run_dir / "best.pt")
    assert state.restore_best(run_dir, 2) is None  # right
    assert state.restore_best(run_dir, -1) is None  # saved before best_step was recorded
    line = state.restore_best(run_dir, 3)  # no checkpoint of update 3 is left
    assert line.startswith("best.pt is holding update 2, not update 3's, the best validation")
    assert checkpoint.saved_update(run_dir / "best.pt") == 2


def test_an_unreadable_last_pt_names_a_separate_checkpoint_to_resume_from(
    small_data, trained_run, tmp_path
):
    """last.pt, best.pt and the newest step-N.pt are one file: the advice names another."""
    run_dir = _copy(trained_run, tmp_path)
    with zipfile.ZipFile(run_dir / "last.pt") as archive:
        entry = archive.getinfo(next(n for n in archive.namelist() if "/data/" in n))
    data = bytearray((run_dir / "last.pt").read_bytes())
    start = entry.header_offset + 30 + len(entry.filename.encode()) + len(entry.extra)
    data[start + entry.file_size // 2] ^= 0x40
    (run_dir / "last.pt").write_bytes(bytes(data))  # in place: step-4.pt too
    cfg = small(small_data, run_dir, "train.max_updates=6")
    with pytest.raises(TranslatorError) as refused:
        loop.run(cfg, quiet=True)
    assert refused.value.what.startswith("cannot resume: its ")
    assert refused.value.fix.startswith("remove it, then copy step-2.pt (a file of its own)")
    (run_dir / "last.pt").write_bytes(bytes(data[: len(data) // 2]))  # cut short: not opened
    with pytest.raises(TranslatorError) as refused:
        loop.run(cfg, quiet=True)
    assert refused.value.fix.startswith("remove it, then copy step-2.pt (a file of its own)")


def test_links_in_a_copied_run_dir_are_replaced_not_written_through(
    small_data, trained_run, tmp_path
):
    """A downloaded or copied run directory whose files are symlinks: resuming there writes the
    run directory's own files and leaves what the links named as it was."""
    run_dir = _copy(trained_run, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for name in ("config.yaml", "manifest.json", ".lock", "last.pt", "train.log"):
        if (run_dir / name).exists():
            shutil.copy(run_dir / name, elsewhere / name)
        else:
            (elsewhere / name).write_text("precious")
        (run_dir / name).unlink(missing_ok=True)
        (run_dir / name).symlink_to(elsewhere / name)
    before = {p.name: p.read_bytes() for p in elsewhere.iterdir()}
    loop.run(small(small_data, run_dir, "train.max_updates=6"), quiet=True)
    assert {p.name: p.read_bytes() for p in elsewhere.iterdir()} == before
    assert checkpoint.read(run_dir / "last.pt")["state"]["train"]["step"] == 6
    assert not any(
        (run_dir / name).is_symlink() for name in ("config.yaml", "manifest.json", "train.log")
    )
