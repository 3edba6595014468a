"""Atomic writes: a finished block replaces the target, a failed one leaves the old target and no
debris."""

from __future__ import annotations

import errno
import os
import stat
import tempfile
import threading
from pathlib import Path

import pytest

from translator.errors import TranslatorError
from translator.files import atomic_dir, atomic_write


def test_atomic_dir_replaces_the_old_directory_only_when_the_new_one_is_complete(tmp_path):
    target = tmp_path / "prepared"
    target.mkdir()
    (target / "old.txt").write_text("old")
    with pytest.raises(RuntimeError), atomic_dir(target) as tmp:
        (tmp / "new.txt").write_text("half")
        raise RuntimeError("interrupted")
    assert [p.name for p in tmp_path.iterdir()] == ["prepared"] and (
        target / "old.txt"
    ).read_text() == "old"
    with atomic_dir(target) as tmp:
        (tmp / "new.txt").write_text("new")
    assert [p.name for p in tmp_path.iterdir()] == ["prepared"]
    assert [p.name for p in target.iterdir()] == ["new.txt"]


def test_atomic_write_keeps_the_old_file_on_failure_and_refuses_a_directory(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_write(target) as handle:
        handle.write("half")
        raise RuntimeError("interrupted")
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"] and target.read_text() == "old"
    with pytest.raises(TranslatorError, match="is a directory"), atomic_write(tmp_path):
        pass
    with (
        pytest.raises(TranslatorError, match="cannot write"),
        atomic_write(target / "below_a_file.txt"),
    ):
        pass


def test_atomic_write_gives_an_ordinary_file_and_no_debris(tmp_path):
    with atomic_write(tmp_path / "out.txt") as handle:
        handle.write("new")
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"] and (
        tmp_path / "out.txt"
    ).read_text() == "new"
    assert (tmp_path / "out.txt").stat().st_mode & 0o777 == 0o644  # not mkstemp's 0600


@pytest.mark.parametrize("stop", [KeyboardInterrupt(), SystemExit(143)])
def test_a_stop_that_a_writer_turned_into_its_own_error_is_still_that_stop(tmp_path, stop):
    """torch.save's zip writer, closed while a Ctrl-C (KeyboardInterrupt) or SIGTERM (SystemExit
    143) unwinds, raises a RuntimeError over it; the command must still see the stop (exit 130 or
    143, one line), not a failed write."""
    path = tmp_path / "avg.pt"
    path.write_bytes(b"old")
    with pytest.raises(type(stop)) as raised:
        with atomic_write(path, "wb") as handle:
            handle.write(b"half")
            try:
                raise stop
            finally:
                raise RuntimeError("unexpected pos 20348928 vs 20348816")
    assert getattr(raised.value, "code", None) == getattr(stop, "code", None)
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["avg.pt"]
    with pytest.raises(RuntimeError):  # an error of its own stays what it is
        with atomic_write(path, "wb"):
            raise RuntimeError("disk")


def test_read_lines_drops_a_byte_order_mark_opening_the_file_only(tmp_path):
    from translator.files import read_lines

    (tmp_path / "ref.de").write_bytes("\ufeffEin Hund.\n\ufeffZwei.\n".encode())
    assert read_lines(tmp_path / "ref.de") == ["Ein Hund.", "\ufeffZwei."]


def test_read_lines_names_a_gzip_file(tmp_path):
    import gzip

    from translator.files import read_lines

    (tmp_path / "ref.de.gz").write_bytes(gzip.compress(b"Ein Hund.\n"))
    with pytest.raises(TranslatorError, match=r"ref\.de\.gz: a gzip file, not text.*gunzip"):
        read_lines(tmp_path / "ref.de.gz")


def test_read_lines_drops_crlf_line_endings(tmp_path):
    from translator.files import read_lines

    (tmp_path / "ref.de").write_bytes(b"Ein Hund.\r\nZwei Hunde.\r\n")
    assert read_lines(tmp_path / "ref.de") == ["Ein Hund.", "Zwei Hunde."]


def test_atomic_dir_sweeps_what_a_killed_run_left_and_keeps_a_live_runs(tmp_path):
    """A SIGKILLed prepare leaves its hidden temporary directory; the next one removes it, but not
    the directory of a run still going (its owner process is alive)."""
    import os
    import subprocess
    import sys

    target = tmp_path / "prepared"
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead_pid = int(gone.stdout)
    killed = tmp_path / f".prepared.{dead_pid}.abc123.tmp"
    old_format = tmp_path / ".prepared.k2j4h5g6.tmp"  # before the pid was in the name
    live = tmp_path / f".prepared.{os.getppid()}.xyz789.tmp"
    other = tmp_path / f".other.{dead_pid}.abc123.tmp"  # another directory's: not ours to remove
    dotted = tmp_path / f".prepared.bak.{dead_pid}.abc123.tmp"  # prepared.bak's, not ours either
    for leftover in (killed, old_format, live, other, dotted):
        leftover.mkdir()
        (leftover / "half.npy").write_bytes(b"half")
    with atomic_dir(target) as tmp:
        (tmp / "new.txt").write_text("new")
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted(["prepared", live.name, other.name, dotted.name]), left


def test_atomic_dir_refuses_a_file_and_keeps_it(tmp_path):
    target = tmp_path / "notes.txt"
    target.write_text("mine")
    with pytest.raises(TranslatorError, match="is a file, not a directory"):
        with atomic_dir(target):
            pass
    assert target.read_text() == "mine" and [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_atomic_write_replaces_the_file_a_symlink_names_and_keeps_the_link(tmp_path):
    (tmp_path / "models").mkdir()
    real = tmp_path / "models" / "avg.pt"
    real.write_text("old")
    link = tmp_path / "avg.pt"
    link.symlink_to(real)
    dangling = tmp_path / "next.pt"
    dangling.symlink_to(tmp_path / "models" / "next.pt")
    for path in (link, dangling):
        with atomic_write(path) as handle:
            handle.write("new")
        assert path.is_symlink() and path.read_text() == "new"
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["avg.pt", "next.pt"]


def test_atomic_write_writes_through_a_pipe_and_leaves_it_a_pipe(tmp_path):
    # as -o /dev/null or /dev/stdout: a special file is written to, never replaced by a file
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()), daemon=True)
    reader.start()
    with atomic_write(fifo) as handle:
        handle.write("through\n")
    reader.join(timeout=10)
    assert received == ["through\n"] and stat.S_ISFIFO(fifo.stat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo"]


@pytest.mark.parametrize("wrapped", [False, True])
def test_a_full_disk_is_one_error_naming_the_path_and_leaves_the_old_file(tmp_path, wrapped):
    target = tmp_path / "avg.pt"
    target.write_text("old")
    full = OSError(errno.ENOSPC, "No space left on device")
    with (
        pytest.raises(TranslatorError, match="No space left on device") as err,
        atomic_write(target) as handle,
    ):
        handle.write("half")
        if not wrapped:
            raise full
        try:  # torch.save's zip writer raises a RuntimeError while handling the OSError
            raise full
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc] unexpected pos") from None
    assert err.value.where == str(target) and "free some space" in err.value.fix
    assert sorted(p.name for p in tmp_path.iterdir()) == ["avg.pt"] and target.read_text() == "old"


def test_atomic_dir_replaces_the_directory_a_symlink_names_and_keeps_the_link(tmp_path):
    (tmp_path / "volume" / "models").mkdir(parents=True)
    (tmp_path / "volume" / "models" / "old.txt").write_text("old")
    link = tmp_path / "deploy"
    link.symlink_to(tmp_path / "volume" / "models")
    with atomic_dir(link) as tmp:
        (tmp / "model.bin").write_text("new")
    assert link.is_symlink() and sorted(p.name for p in link.iterdir()) == ["model.bin"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deploy", "volume"]
    assert sorted(p.name for p in (tmp_path / "volume").iterdir()) == ["models"]


def test_atomic_dir_fills_a_mount_point_in_place(tmp_path, monkeypatch):
    # a mount point cannot be renamed (EBUSY): its new contents are built inside it
    volume = tmp_path / "volume"
    volume.mkdir()
    (volume / "old.txt").write_text("old")
    real_ismount = os.path.ismount
    monkeypatch.setattr(os.path, "ismount", lambda p: Path(p) == volume or real_ismount(p))
    renamed = []
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: renamed.append(Path(a)) or real_replace(a, b))
    with pytest.raises(RuntimeError), atomic_dir(volume) as tmp:
        (tmp / "half.bin").write_text("half")
        raise RuntimeError("interrupted")
    assert sorted(p.name for p in volume.iterdir()) == ["old.txt"]  # nothing of the failed run
    with atomic_dir(volume) as tmp:
        assert tmp.parent == volume
        (tmp / "model.bin").write_text("new")
    assert sorted(p.name for p in volume.iterdir()) == ["model.bin"]
    assert volume not in renamed and sorted(p.name for p in tmp_path.iterdir()) == ["volume"]


def test_atomic_dir_in_a_read_only_directory_names_the_path_asked_for(tmp_path, monkeypatch):
    def read_only(*args, **kwargs):  # as mkdtemp fails there (root itself may write anywhere)
        raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path / ".ct2.1.x.tmp"))

    monkeypatch.setattr(tempfile, "mkdtemp", read_only)
    with pytest.raises(TranslatorError, match="cannot write there: Permission denied") as err:
        with atomic_dir(tmp_path / "ct2"):
            pass
    assert err.value.where == str(tmp_path / "ct2")  # not the temporary directory's name


def test_a_mount_point_loses_its_manifest_first_and_gets_the_new_one_last(tmp_path, monkeypatch):
    """A kill while contents move into a mount point must not leave a manifest.json beside a
    partial set of files (prepare would take the directory as up to date)."""
    volume = tmp_path / "volume"
    volume.mkdir()
    for name in ("a.npy", "manifest.json", "z.npy"):
        (volume / name).write_text("old")
    real_ismount, real_iterdir = os.path.ismount, Path.iterdir
    monkeypatch.setattr(os.path, "ismount", lambda p: Path(p) == volume or real_ismount(p))
    # in name order, where the manifest is neither first nor last
    monkeypatch.setattr(Path, "iterdir", lambda self: iter(sorted(real_iterdir(self))))
    events = []
    real_unlink, real_replace = Path.unlink, os.replace
    monkeypatch.setattr(
        Path, "unlink", lambda p, **k: events.append(("-", p.name)) or real_unlink(p, **k)
    )
    monkeypatch.setattr(
        os, "replace", lambda a, b: events.append(("+", Path(b).name)) or real_replace(a, b)
    )
    with atomic_dir(volume) as tmp:
        for name in ("a.npy", "manifest.json", "z.npy"):
            (tmp / name).write_text("new")
    assert events[0] == ("-", "manifest.json") and events[-1] == ("+", "manifest.json"), events
    assert sorted(p.name for p in volume.iterdir()) == ["a.npy", "manifest.json", "z.npy"]


def _dead_pid() -> int:
    import subprocess
    import sys

    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    return int(gone.stdout)


def test_atomic_write_sweeps_its_targets_killed_temps_and_keeps_a_live_writers(tmp_path):
    """A killed `average` or `eval -o` outside a run directory leaves its temporary file; the next
    write of the same file removes it, but not one whose writer still runs, nor another file's."""
    dead = _dead_pid()
    killed = tmp_path / f".avg.pt.{dead}.k2j4h5g6.tmp"
    old_format = tmp_path / ".avg.pt.k2j4h5g6.tmp"  # before the pid was in the name
    live = tmp_path / f".avg.pt.{os.getppid()}.xyz78901.tmp"
    other = tmp_path / f".other.pt.{dead}.abc12345.tmp"
    for leftover in (killed, old_format, live, other):
        leftover.write_bytes(b"half")
    with atomic_write(tmp_path / "avg.pt", "wb") as handle:
        assert f".avg.pt.{os.getpid()}." in handle.name  # its own pid: a sweep can tell it is live
        handle.write(b"new")
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted(["avg.pt", live.name, other.name]), left


def test_a_directory_sweep_removes_dead_owners_temps_only(tmp_path):
    from translator.files import sweep_dead_temps

    dead = _dead_pid()
    gone = [f".last.pt.{dead}.k2j4h5g6.tmp", ".last.pt.tmp", f".best.pt.{dead}.link.tmp"]
    kept = [f".hyp.txt.{os.getppid()}.abcd1234.tmp", "notes.tmp.txt", ".lock"]
    for name in gone + kept:
        (tmp_path / name).write_bytes(b"x")
    assert sweep_dead_temps(tmp_path) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(kept)


def test_atomic_write_not_following_a_link_replaces_the_link_and_spares_its_target(tmp_path):
    """For a name the command picks in a directory it was given (a downloaded run or model
    directory): a link planted there must not aim the write at a file elsewhere."""
    elsewhere = tmp_path / "home" / ".bashrc"
    elsewhere.parent.mkdir()
    elsewhere.write_text("precious")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for name, target in (("config.yaml", elsewhere), ("to-dir", elsewhere.parent)):
        (run_dir / name).symlink_to(target)
        with atomic_write(run_dir / name, follow_link=False) as handle:
            handle.write("ours")
        assert not (run_dir / name).is_symlink() and (run_dir / name).read_text() == "ours"
    assert elsewhere.read_text() == "precious"
    assert sorted(p.name for p in elsewhere.parent.iterdir()) == [".bashrc"]


@pytest.mark.parametrize("under", ["out.txt", "sub/out.txt"])
def test_atomic_write_under_a_file_names_that_file(tmp_path, under):
    """mkdir says "File exists" for a name under a file: the error names the file in the way."""
    taken = tmp_path / "notes"
    taken.write_text("kept\n")
    with pytest.raises(TranslatorError, match=f"{taken} is a file, not a directory") as err:
        with atomic_write(taken / under) as handle:
            handle.write("x")
    assert err.value.where == str(taken / under) and taken.read_text() == "kept\n"
